"""The platform extension point, end to end: the example platform of docs/platforms.md
(examples/numpy_platform) is installed the way pip would install it — a dist-info directory with
its `meshtest.backends` entry point — and its cases run through the CLI without any change to
meshtest: an op case, a scenario case, and a scenario reported unsupported for a missing feature."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
EXAMPLE = os.path.abspath(os.path.join("examples", "numpy_platform"))


def _install_entry_point(site):
    info = site / "meshtest_numpy_platform-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: meshtest-numpy-platform\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[meshtest.backends]\nnumpy-example = meshtest_numpy_platform:NumpyExampleBackend\n")


def _run(tmp_path, *args, installed=True):
    site = tmp_path / "site"
    if installed:
        _install_entry_point(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC_ROOT, EXAMPLE, str(site)])}
    return subprocess.run([sys.executable, "-m", "meshtest", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_an_installed_platform_runs_op_and_scenario_cases(tmp_path):
    out = tmp_path / "out"
    proc = _run(tmp_path, os.path.join(EXAMPLE, "case_numpy_example.py"), "--platform", "numpy-example",
                "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    assert {k: v["status"] for k, v in results.items()} == {
        "np_scaled_sum": "pass", "np_scenario_sum": "pass", "np_needs_tp_styles": "unsupported"}
    assert results["np_scenario_sum"]["detail"] == "mesh (1,) ('tp',)"
    assert "unsupported on platform numpy-example: missing feature(s) tp.styles" in proc.stdout
    assert "meshtest: 2 passed, 1 unsupported, 0 failed" in proc.stdout


def test_an_unknown_platform_is_named_with_the_known_ones(tmp_path):
    proc = _run(tmp_path, os.path.join(EXAMPLE, "case_numpy_example.py"), "--platform", "numpy-example",
                "--artifacts-dir", str(tmp_path / "out"), installed=False)
    assert proc.returncode == 2
    assert "unknown platform 'numpy-example'; known: ['mindspore', 'torch']" in proc.stderr
    assert "docs/platforms.md" in proc.stderr
