"""An op case's declared steps between placement and op (``redistribute_inputs``,
``local_fn`` with ``local_output_placements``, ``fn(..., *, local)``, ``module``/``plan``,
``redistribute_outputs``) run on real ranks and
in the one-process lane, and each can turn a case red at its own step
(fixture: cases/faults/case_faults_steps.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
FIXTURE = os.path.join("cases", "faults", "case_faults_steps.py")


@pytest.mark.parametrize("lane", ["ranks", "local"])
def test_each_declared_step_runs_and_fails_at_its_own_step(tmp_path, lane):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", FIXTURE, "--tag", "cpu_faults", "--lane", lane,
                           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    results = {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    told = proc.stdout + proc.stderr

    def verdict(name):
        r = results[name]
        return r["status"], sorted({f["step"] for f in r["failures"]})

    assert verdict("steps_local_fn_allgather") == ("pass", []), told
    assert verdict("steps_redistribute_input_reaches_fn") == ("pass", []), told
    assert verdict("steps_local_fn_wrong_placements") == ("fail", ["compare"]), told
    assert "shape (8, 3)" in results["steps_local_fn_wrong_placements"]["failures"][0]["error"]
    assert verdict("steps_local_fn_output_count") == ("error", ["run"]), told
    assert "local_fn returned 2 output(s); local_output_placements declares 1" in \
        results["steps_local_fn_output_count"]["failures"][0]["error"]
    assert verdict("steps_local_region_shard_local") == ("pass", []), told
    assert verdict("steps_local_region_not_shard_local") == ("fail", ["compare"]), told
    assert verdict("steps_module_plan_replicated") == ("pass", []), told
    assert verdict("steps_module_plan_kept_sharded") == ("fail", ["placement"]), told
    assert verdict("steps_redistribute_output_wrong") == ("fail", ["placement"]), told
    assert "placements (Shard(0),) != expected (Shard(1),)" in \
        results["steps_redistribute_output_wrong"]["failures"][0]["error"]


CHECKPOINT_FIXTURE = os.path.join("cases", "faults", "case_faults_checkpoint.py")


def _run_checkpoint_fixture(tmp_path, fault):
    out = tmp_path / f"out-{fault}"
    env = {**os.environ, "PYTHONPATH": SRC_ROOT, "MESHTEST_FAULT_DCP_OFFSETS": "1" if fault else "0"}
    proc = subprocess.run([sys.executable, "-m", "meshtest", CHECKPOINT_FIXTURE, "--tag", "cpu_faults",
                           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, env=env, timeout=300)
    (line,) = (out / "results.jsonl").read_text().splitlines()
    return json.loads(line), proc.stdout + proc.stderr


def test_the_checkpoint_step_reads_back_what_was_saved_and_wrong_saved_offsets_fail_at_compare(tmp_path):
    """The canary of ``checkpoint_inputs``: the uneven (Shard(0), Shard(0)) round trip passes, and
    passes no more when DCP's save records two ranks' shards at each other's offsets."""
    right, told = _run_checkpoint_fixture(tmp_path, fault=False)
    assert right["status"] == "pass", told
    wrong, told = _run_checkpoint_fixture(tmp_path, fault=True)
    assert wrong["status"] == "fail" and {f["step"] for f in wrong["failures"]} == {"compare"}, told
    assert "12 of 21 elements differ" in wrong["failures"][0]["error"]
