"""The Ray executor on a two-node Ray cluster started on this machine (``ray.cluster_utils.Cluster``,
4 device slots per node, no dashboard), in the ``ray`` resolve: an 8-rank case placed 4 + 4 across
the nodes gives the same verdict and records as on one node of 8; a rank that dies on node 1 is
named with its node; a node lost mid-launch ends the launch long before the case's deadline, the
case ``error`` naming the node, no process of the launch left on any node, every slot back in
the cluster, and the run goes on (fixture: cases/faults/case_faults_nodes.py). ~1 min."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import ray
from ray.cluster_utils import Cluster

import meshtest
from meshtest.parent.ray_executor import SLOT_RESOURCE, node_processes, wait_until_free

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
FIXTURE = os.path.join("cases", "faults", "case_faults_nodes.py")


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of 4 slots; the test process joins as a driver to watch the cluster's resources."""
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=2, resources={SLOT_RESOURCE: 4},
                                                           include_dashboard=False))
    worker = c.add_node(num_cpus=2, resources={SLOT_RESOURCE: 4})
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    yield c, worker
    ray.shutdown()
    c.shutdown()


def _run(tmp_path, name, cases, executor, slots=8, wait=True):
    out = tmp_path / name
    cmd = [sys.executable, "-m", "meshtest", "run", *(f"{FIXTURE}::{c}" for c in cases), "--tag", "cpu_faults",
           "--executor", executor, "--slots", str(slots), "--artifacts-dir", str(out),
           "--slot-dir", str(tmp_path / f"slots-{name}")]
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    if not wait:
        return out, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    return out, proc.stdout + proc.stderr


def _results(out):
    return {o["case"]: o for o in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def _records(out, case):
    """Every rank's record of ``case`` without its node and duration: (rank, status, step, detail)."""
    found = []
    for path in sorted(out.glob("ranks/*/rank*.jsonl")):
        for doc in map(json.loads, path.read_text().splitlines()):
            if doc["event"] == "result" and doc["case"].endswith(f"::{case}"):
                found.append((doc["rank"], doc["status"], doc["step"], doc["detail"]))
    return sorted(found)


def test_an_8_rank_case_placed_4_plus_4_equals_the_same_case_on_one_node(tmp_path, cluster):
    c, _ = cluster
    spread, told = _run(tmp_path, "spread", ["nodes_all_reduce_8"], f"ray:{c.address}")
    one, told_local = _run(tmp_path, "one-node", ["nodes_all_reduce_8"], "local")
    placed, local = _results(spread)["nodes_all_reduce_8"], _results(one)["nodes_all_reduce_8"]
    assert placed["status"] == local["status"] == "pass", told + told_local
    assert _records(spread, "nodes_all_reduce_8") == _records(one, "nodes_all_reduce_8")
    assert all(r[3] == "the 8 ranks all-reduced their ones to 8" for r in _records(spread, "nodes_all_reduce_8"))
    nodes = placed["nodes"]
    assert [n.split(":")[0] for n in nodes] == ["0"] * 4 + ["1"] * 4 and len(set(nodes)) == 2, nodes
    assert local["nodes"] == []  # this machine's own launch: no placement to tell
    log = (spread / "ranks" / "w8" / "launcher.log").read_text()
    assert log.count("--nnodes=2") == 2 and "--node-rank=0" in log and "--node-rank=1" in log
    assert wait_until_free({SLOT_RESOURCE: 8})[SLOT_RESOURCE] == 8  # the placement group is gone


def test_a_rank_that_dies_on_node_1_is_named_with_its_node(tmp_path, cluster):
    c, _ = cluster
    out, told = _run(tmp_path, "death", ["nodes_rank5_dies"], f"ray:{c.address}")
    outcome = _results(out)["nodes_rank5_dies"]
    assert outcome["status"] == "crash", told
    lead = outcome["failures"][0]
    assert (lead["rank"], lead["status"], lead["step"]) == (5, "crash", "die") and lead["node"].startswith("1:")
    assert f"rank(s) 5 on node {lead['node']}: crash at step die" in told
    # node 1's other ranks, blocked in the barrier, end on the launcher's SIGTERM (a forked rank
    # once kept torch's Python handler, which a rank inside a collective never runs, and was
    # SIGKILLed after torch's 30 s grace: torch then logs "Unable to shutdown process")
    log = (out / "ranks" / "w8-solo-nodes_rank5_dies" / "launcher.log").read_text()
    assert "Unable to shutdown process" not in log, log[-3000:]
    started = [json.loads(line)["t"] for line in (out / "ranks" / "w8-solo-nodes_rank5_dies" / "rank5.jsonl")
               .read_text().splitlines() if json.loads(line)["event"] == "start"]
    assert time.time() - started[0] < 25, "the launch outlived rank 5 by torch's 30 s SIGTERM grace"
    assert wait_until_free({SLOT_RESOURCE: 8})[SLOT_RESOURCE] == 8


def test_a_node_lost_mid_launch_is_the_case_error_with_nothing_left_running(tmp_path, cluster):
    c, worker = cluster
    out, proc = _run(tmp_path, "loss", ["nodes_wait_for_node_loss", "nodes_after_4"], f"ray:{c.address}",
                     wait=False)
    rank0 = out / "ranks" / "w8-solo-nodes_wait_for_node_loss" / "rank0.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (rank0.exists() and '"step": "wait"' in rank0.read_text()):
        if proc.poll() is not None:
            pytest.fail(f"the run ended before the drill: {proc.stdout.read()}")
        time.sleep(0.2)
    assert rank0.exists(), "the 8-rank case never reached its step"
    lost_at = time.monotonic()
    c.remove_node(worker)  # node 1's raylet and every process it started
    told, _ = proc.communicate(timeout=180)
    ended_after = time.monotonic() - lost_at
    found = _results(out)
    lost = found["nodes_wait_for_node_loss"]
    assert lost["status"] == "error", told
    assert ended_after < 45, f"the run took {ended_after:.0f} s after the node loss; the case's deadline is 90 s"
    errors = "\n".join(f["error"] for f in lost["failures"])
    # the removed node held one of the launch's two bundles (which one is Ray's choice): named with its ranks
    assert f"Ray node {worker.node_id[:8]}, ranks " in errors and "left the cluster mid-launch" in errors, errors
    assert found["nodes_after_4"]["status"] == "pass", told  # the run went on, on the node that is left
    assert not node_processes([str(out)]), "a process of the run outlived it"
    assert wait_until_free({SLOT_RESOURCE: 4})[SLOT_RESOURCE] == 4  # every slot of the remaining node is free
