"""End to end through torchrun + gloo: a wrong expectation is reported with case, rank and step.

Needs torch in the test interpreter (the BUILD file declares it); ~10 s on 2 cores.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import meshtest
from tests.helpers import case_file

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))

BODY = """
import torch

def add(x, y):
    return x + y

def wrong_on_rank1(x):
    # Distributed path: rank 1 corrupts its shard, so the gathered output is wrong.
    if hasattr(x, "placements") and torch.distributed.get_rank() == 1:
        return x * 1.01
    return x

register(OpShardCase(name="e2e_add", fn=add, inputs=[InputSpec((6, 4)), InputSpec((6, 4))],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=(2,), tags=("cpu_level0",)))
register(OpShardCase(name="e2e_wrong", fn=wrong_on_rank1, inputs=[InputSpec((6, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level0",)))
register(OpShardCase(name="e2e_after", fn=add, inputs=[InputSpec((4, 4)), InputSpec((4,))],
                     placements=[(Shard(1),), (Shard(0),)], mesh_shape=(2,), tags=("cpu_level0",)))
"""


def test_wrong_expectation_names_case_rank_and_step(tmp_path):
    path = case_file(tmp_path, "case_e2e.py", BODY)
    out_dir = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(out_dir)],
                          capture_output=True, text=True, env=env, timeout=300)
    text = proc.stdout
    assert proc.returncode == 1, text + proc.stderr
    assert "PASS    e2e_add" in text and "PASS    e2e_after" in text
    assert "FAIL    e2e_wrong" in text
    assert "rank(s) 0,1: fail at step compare: output[0]:" in text
    assert "meshtest: 2 passed, 1 failed" in text
    results = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert {r["case"]: r["status"] for r in results} == {"e2e_add": "pass", "e2e_wrong": "fail", "e2e_after": "pass"}
    junit = ET.parse(out_dir / "junit.xml").getroot()
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    assert set(cases) == {"e2e_add", "e2e_wrong", "e2e_after"}
    failure = cases["e2e_wrong"].find("failure")
    assert failure is not None and cases["e2e_add"].find("failure") is None
    assert "rank 0: fail at step compare: output[0]:" in failure.get("message")
    assert "rank 1: fail at step compare" in failure.get("message")
    group = out_dir / "ranks" / "w2"
    for rank in (0, 1):
        assert "case e2e_wrong: fail at step compare" in (group / f"rank{rank}.log").read_text()
        lines = (group / f"rank{rank}.jsonl").read_text().splitlines()
        assert json.loads(lines[-1]) == {"event": "rank_done", "rank": rank}


def test_case_filter_env_and_file_case_spec(tmp_path):
    path = case_file(tmp_path, "case_e2e.py", BODY)
    env = {**os.environ, "PYTHONPATH": SRC_ROOT, "MESHTEST_CASE_FILTER": "nothing_like_this*"}
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(tmp_path / "o1")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "['nothing_like_this*'] matches no selected case" in proc.stderr
    env.pop("MESHTEST_CASE_FILTER")
    proc = subprocess.run([sys.executable, "-m", "meshtest", f"{path}::e2e_add", "--artifacts-dir",
                           str(tmp_path / "o2")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 case(s) selected" in proc.stdout and "meshtest: 1 passed, 0 failed" in proc.stdout


def test_slots_reach_ranks_and_a_need_above_the_pool_is_each_case_unsupported_naming_the_nodes(tmp_path):
    path = case_file(tmp_path, "case_e2e.py", BODY)
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    slot_dir = tmp_path / "slots"
    proc = subprocess.run([sys.executable, "-m", "meshtest", f"{path}::e2e_add", "--artifacts-dir", str(tmp_path / "o"),
                           "--slot-dir", str(slot_dir), "--target", "cases:e2e", "--device-need", "4"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device slots [0, 1, 2, 3] of 8 held" in proc.stdout
    assert "device slots [0, 1]" in (tmp_path / "o" / "ranks" / "w2" / "rank1.log").read_text()
    events = [json.loads(line)["event"] for line in (slot_dir / "audit.jsonl").read_text().splitlines()]
    assert events == ["wait", "acquire", "launch", "launch_end", "release"]
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(tmp_path / "o2"),
                           "--slot-dir", str(slot_dir), "--slots", "1", "--target", "cases:e2e"],
                          capture_output=True, text=True, env=env, timeout=60)
    # every case of this file needs 2 slots: each is unsupported here (a node of 1 slot, no cluster), none is
    # launched, none is skipped in silence
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(line) for line in (tmp_path / "o2" / "results.jsonl").read_text().splitlines()]
    assert results and {(o["status"], o["failures"][0]["step"]) for o in results} == {("unsupported", "slots")}
    assert "unsupported: needs 2 nodes of 1 slots (2 ranks, mesh (2,)); this machine's pool has 1" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(tmp_path / "o3"),
                           "--slot-dir", str(slot_dir), "--device-need", "1"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "declared a device need of 1" in proc.stderr


GRAD_BODY = """
import torch
import torch.nn.functional as F

def linear(x, w):
    return F.linear(x, w)

def grad_cut_when_distributed(x):
    # Same forward values on both paths; the distributed path cuts the graph, so its gradient is 0.
    if hasattr(x, "placements"):
        return (x * 2.0).detach() + x * 0.0
    return x * 2.0

register(OpShardCase(name="grad_linear_rowwise", fn=linear,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((4, 6), requires_grad=True)],
                     placements=[(Shard(1),), (Shard(1),)], mesh_shape=(2,),
                     compare=CompareSpec.allclose(rtol=1e-5, atol=1e-5), tags=("cpu_level0",)))
def scale(x, s):
    return x * s

register(OpShardCase(name="grad_zero_d", fn=scale,
                     inputs=[InputSpec((4, 4), requires_grad=True), InputSpec((), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=(2,), tags=("cpu_level0",)))
register(OpShardCase(name="grad_cut", fn=grad_cut_when_distributed, inputs=[InputSpec((4, 4), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level0",)))
"""


def test_gradients_are_compared_and_a_wrong_one_fails_at_backward(tmp_path):
    path = case_file(tmp_path, "case_grad.py", GRAD_BODY)
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(tmp_path / "o"),
                           "--slot-dir", str(tmp_path / "slots")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "PASS    grad_linear_rowwise" in proc.stdout
    assert "PASS    grad_zero_d" in proc.stdout  # InputSpec(()) stays 0-d, so its gradient matches
    assert "rank(s) 0,1: fail at step backward: grad of input 0:" in proc.stdout


def test_level0_gate_stops_at_the_first_failure_and_says_so(tmp_path):
    path = case_file(tmp_path, "case_e2e.py", BODY)
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--tag", "cpu_level0", "--artifacts-dir",
                           str(tmp_path / "o"), "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "PASS    e2e_add" in proc.stdout and "FAIL    e2e_wrong" in proc.stdout
    assert "NOT_RUN e2e_after" in proc.stdout
    assert "fail-fast: stopped after e2e_wrong failed; 1 case(s) of w2 not run" in proc.stdout
    assert "meshtest: 1 case(s) not run: the fail-fast (level0) gate stopped at the first failure" in proc.stdout
    assert "meshtest: 1 passed, 1 not run, 1 failed" in proc.stdout


def test_fail_fast_is_not_triggered_by_another_files_scan_error_and_reused_dirs_are_kept(tmp_path):
    good = case_file(tmp_path, "case_good.py", BODY.split("register(OpShardCase(name=\"e2e_wrong\"")[0])
    broken = case_file(tmp_path, "case_broken.py", "register(OpShardCase(name='b', mesh_shape=make()))\n")
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    cmd = [sys.executable, "-m", "meshtest", good, broken, "--tag", "cpu_level0", "--artifacts-dir",
           str(tmp_path / "o"), "--slot-dir", str(tmp_path / "slots")]
    for _ in range(2):  # the second run reuses the artifacts directory
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "PASS    e2e_add" in proc.stdout and "NOT_RUN" not in proc.stdout
        assert "case_broken.py: case 'b': rule static-scan" in proc.stdout
    kept = [p.name for p in (tmp_path / "o" / "ranks").iterdir()]
    assert "w2" in kept and any(name.startswith("w2.previous-") for name in kept)


MERGED = """
import torch

def add(x, y):
    return x + y

def small_mesh(x, mesh):
    # the distributed call gets its own 2-rank mesh (one replica of two in the 4-rank launch)
    if mesh is not None:
        assert mesh.size() == 2 and mesh.mesh_dim_names == ("d0",), (mesh.size(), mesh.mesh_dim_names)
    return x + 1

def wrong_on_rank3(x):
    # rank 3 is the second replica's rank 1: only that replica's gathered output is wrong
    if hasattr(x, "placements") and torch.distributed.get_rank() == 3:
        return x * 1.01
    return x

register(OpShardCase(name="m_host", fn=add, inputs=[InputSpec((4, 4)), InputSpec((4, 4))],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=(4,), tags=("cpu_level0",)))
register(OpShardCase(name="m_small", fn=small_mesh, inputs=[InputSpec((6, 4))], placements=[(Shard(0),)],
                     mesh_shape=(2,), needs_mesh=True, tags=("cpu_level0",)))
register(OpShardCase(name="m_small_wrong", fn=wrong_on_rank3, inputs=[InputSpec((6, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level0",)))
"""


def test_a_small_groups_op_cases_run_in_the_larger_launch_on_replicas_of_their_mesh(tmp_path):
    """Two 2-rank op cases (well under a launch's start-up) join the 4-rank launch: every rank
    runs them on its replica's own 2-rank mesh, and a replica that goes wrong is named by its ranks."""
    path = case_file(tmp_path, "case_merged.py", MERGED)
    out, slots = tmp_path / "out", tmp_path / "slots"
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(out),
                           "--slot-dir", str(slots)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    text = proc.stdout
    assert proc.returncode == 1, text + proc.stderr
    assert "PASS    m_host" in text and "PASS    m_small" in text and "FAIL    m_small_wrong" in text
    assert "rank(s) 2,3: fail at step compare: output[0]:" in text  # the second replica only
    assert "rank(s) 0," not in text
    launches = [json.loads(line) for line in (slots / "audit.jsonl").read_text().splitlines()]
    assert [r["group"] for r in launches if r["event"] == "launch"] == ["w4"]
    results = {r["case"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert {r["group"] for r in results.values()} == {"w4"} and results["m_small"]["world_size"] == 4
    assert "meshtest: 1 launch(es)" in text
