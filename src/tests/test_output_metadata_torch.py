"""Every op case's outputs are checked for the same global metadata on every rank before the
gather (step output-metadata): a DTensor whose global shape differs per rank fails there, with
each rank's value, on gloo and in the one-process lane — no rank crashes in the collective, and
the next case runs in the same launch."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
FIXTURE = os.path.join("cases", "faults", "case_faults_metadata.py")


@pytest.mark.parametrize("lane", ["ranks", "local"])
def test_a_global_shape_that_differs_per_rank_fails_at_output_metadata_and_no_rank_crashes(tmp_path, lane):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", FIXTURE, "--tag", "cpu_faults", "--lane", lane,
                           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    results = {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    bad, after = results["md_global_shape_per_rank"], results["md_after_it"]
    assert bad["status"] == "fail", proc.stdout + proc.stderr
    assert {f["step"] for f in bad["failures"]} == {"output-metadata"}
    error = bad["failures"][0]["error"]
    assert "rank(s) 0: shape [4, 4]" in error and "rank(s) 1: shape [16, 4]" in error, error
    assert after["status"] == "pass" and after["launch_dir"] == bad["launch_dir"]  # the launch lived on
    assert "crash" not in {r["status"] for r in results.values()}
