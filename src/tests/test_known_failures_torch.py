"""A known failure passes only the failure it declares (real gloo ranks, cases/faults/case_faults_known.py):
another failure is ``fail`` naming both, a pass is ``xpass``, a declared crash is ``xfail``, and a
crash leads with the dead rank's own native error, free of what varies between runs (~15 s)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from junitparser import JUnitXml

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
FIXTURES = os.path.join("cases", "faults", "case_faults_known.py")


@pytest.fixture(scope="module")
def known_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("known")
    out = tmp / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", FIXTURES, "--tag", "cpu_faults", "--artifacts-dir",
                           str(out), "--slot-dir", str(tmp / "slots")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    results = {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    return proc, out, results


def test_each_mark_passes_only_the_failure_it_declares(known_run):
    proc, _, results = known_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {k: v["status"] for k, v in results.items()} == {
        "kf_typo_before_the_bug": "fail", "kf_reproduced": "xfail", "kf_fixed": "xpass",
        "kf_declared_crash": "xfail", "kf_other_crash": "crash", "kf_near_deadline": "pass"}
    typo = results["kf_typo_before_the_bug"]["failures"][0]
    assert typo["step"] == "reference"
    assert typo["error"].startswith("expected raises at step run matching /NotImplementedError")
    assert "got error at step reference: AttributeError: 'Tensor' object has no attribute 'dobule'" in typo["error"]
    assert "remove the mark" in results["kf_fixed"]["failures"][0]["error"]
    assert results["kf_reproduced"]["known_failure"].startswith("raises at step run matching")
    assert proc.stdout.splitlines()[-2] == "meshtest: 1 passed, 2 xfailed, 3 failed"


def test_a_crash_leads_with_the_dead_ranks_own_native_error(known_run):
    _, _, results = known_run
    declared = results["kf_declared_crash"]["failures"]
    lead = declared[0]["error"].splitlines()[0]
    # the native line only: no signal, pid, frame or build path, which vary between runs and machines
    assert re.fullmatch(r"died: gloo::EnforceNotMet: \[enforce fail at gloo/[\w/]+\.cc:\d+\] .*Received data size "
                        r"doesn't match expected size\..*", lead), lead
    assert "pid" not in lead and "SIG" not in lead and "top frame" not in lead
    assert all(f["error"].startswith(f"after rank {declared[0]['rank']} died: ") for f in declared[1:])
    other = results["kf_other_crash"]["failures"]
    assert other[0]["rank"] is None and other[0]["error"].startswith(
        "expected crash at step run matching /NCCL watchdog timeout/; got rank ")


def test_junit_writes_xfail_as_pytest_does(known_run):
    _, out, _ = known_run
    cases = {c.name: c for suite in JUnitXml.fromfile(str(out / "junit.xml")) for c in suite}
    (skipped,) = cases["kf_reproduced"].result
    assert skipped.type == "pytest.xfail" and skipped.message.startswith("known failure: raises at step run")
    (failure,) = cases["kf_fixed"].result
    assert failure.type == "xpass"


def test_a_case_near_its_deadline_is_reported_with_its_slowest_step_and_where_it_spent_it(known_run):
    proc, _, results = known_run
    note = next(ln for ln in results["kf_near_deadline"]["detail"].splitlines() if ln.startswith("near its deadline"))
    assert re.match(r"near its deadline: \d+\.\d s of its 8 s deadline \(\d+%\); steps build", note), note
    # the slowest step, and the frame it spent its samples in: the case's own function here
    assert "slowest step run: " in note and "case_faults_known.py:" in note and "slow_on_the_distributed_path" in note
    assert "1 case(s) came near their deadline" in proc.stdout  # listed once in the closing summary
