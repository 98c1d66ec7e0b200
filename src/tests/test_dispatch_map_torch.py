"""The dispatch map on real torch, in the one-process lane: a stale map fails the case that
reaches past it, naming the case, the module and the command that records the map again
(canaries: a library whose rule moved to a new module the map does not know; a library missing
the rule module the map left out, as a Pants sandbox built from that map would). That the
committed map is current: every case the main job runs is checked against it by its ranks, and
the nightly job runs `python -m meshtest dispatch-map cases/torch/shardops --check`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import meshtest

SRC = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC)
CASES = os.path.join(REPO, "cases", "torch", "shardops")


def _tree(tmp_path, move=None, drop=None):
    """A copy of src/meshtest and src/shardops (its rule module ``move`` renamed ``<move>_v2``,
    ``drop`` deleted) and of the shardops cases, under ``tmp_path``; returns (src, cases)."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "meshtest"), src / "meshtest", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(SRC, "shardops"), src / "shardops", ignore=shutil.ignore_patterns("__pycache__"))
    rules = src / "shardops" / "sharding"
    if move:
        (rules / f"{move}.py").rename(rules / f"{move}_v2.py")
    if drop:
        (rules / f"{drop}.py").unlink()
    cases = tmp_path / "cases" / "torch" / "shardops"
    shutil.copytree(CASES, cases, ignore=shutil.ignore_patterns("__pycache__", "BUILD"))
    return src, cases


def _run(src, cases, tmp_path, *args):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "meshtest", "run", str(cases / "case_row_scale.py"), "--lane", "local",
                           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots"), "-q", *args],
                          env={**os.environ, "PYTHONPATH": str(src)}, cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=240)
    found = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        o = json.loads(line)
        found[o["case"]] = o
    return proc, found


def test_a_case_that_reaches_a_new_rule_module_fails_naming_it(tmp_path):
    src, cases = _tree(tmp_path, move="row_scale")
    _, found = _run(src, cases, tmp_path, "--case", "row_scale_cols_*")
    (only,) = found.values()
    assert only["status"] == "fail" and only["failures"][0]["step"] == "dispatch-map"
    assert "into rule module shardops.sharding.row_scale_v2" in only["failures"][0]["error"]


def test_a_rule_module_missing_from_the_run_is_named_not_a_bare_strategy_error(tmp_path):
    src, cases = _tree(tmp_path, drop="row_scale")
    _, found = _run(src, cases, tmp_path, "--case", "row_scale_partial_*")
    (only,) = found.values()
    assert only["status"] == "fail" and only["failures"][0]["step"] == "dispatch-map"
    error = only["failures"][0]["error"]
    assert "shardops.row_scale.default" in error and "no sharding rule served it" in error
    assert "before that, the case itself: error at step run" in error
