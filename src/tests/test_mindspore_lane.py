"""The MindSpore lane on CPU: real msrun launches of real MindSpore workers (resolve `mindspore`).

Runs the fault fixtures of cases/mindspore/faults through `python -m meshtest run --platform
mindspore` and checks what a user reads: the failing rank and its step, a dead worker reported
within seconds (msrun itself exits ~45 s later), the case after it run in a fresh launch, and
no msrun, scheduler or worker process left behind.
"""
import json
import os
import re
import subprocess
import sys

import psutil
import pytest  # pants: no-infer-dep (pytest comes from [pytest], not the mindspore resolve)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAULTS = os.path.join("cases", "mindspore", "faults", "case_ms_faults.py")


def _leftovers(marker: str) -> list:
    """Live processes whose command line mentions ``marker`` (this test's artifacts directory)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if marker in " ".join(p.info["cmdline"] or ()) and p.info["pid"] != os.getpid():
                found.append(f"{p.info['pid']} {' '.join(p.info['cmdline'])}")
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ms-faults"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "meshtest", "run", FAULTS, "--platform=mindspore", "--tag=cpu_faults",
         f"--artifacts-dir={out}", f"--slot-dir={os.path.join(out, 'slots')}", "--case-timeout=120"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    results = {}
    with open(os.path.join(out, "results.jsonl"), encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            results[doc["case"]] = doc
    return done, results, out


def test_failing_rank_is_named_with_its_step(fault_run):
    done, results, _ = fault_run
    r = results["ms_fault_rank1_asserts"]
    assert r["status"] == "fail", done.stdout
    (failure,) = r["failures"]
    assert failure["rank"] == 1 and failure["step"] == "check"
    assert "rank 1 disagrees on purpose" in failure["error"]
    assert done.returncode == 1  # the run failed, as it must


def test_dead_worker_is_reported_within_seconds_with_its_log(fault_run):
    _, results, out = fault_run
    r = results["ms_fault_rank1_dies"]
    assert r["status"] == "crash"
    first = r["failures"][0]
    assert first["rank"] == 1 and first["step"] == "exit"
    # "(exit 7)" when msrun saw the worker fail before the watcher did (its log line names pid and code)
    assert re.search(r"exited( \(exit 7\))? before recording the case", first["error"]), first["error"]
    # its peer did not die by itself (msrun may have killed it first): it was ended with the launch
    assert r["failures"][1]["error"].startswith("after rank 1 died: the launch ended"), r["failures"][1]["error"]
    assert "rank 1 exits with code 7 now" in first["error"]  # the worker's own last words (rank1.log)
    # from the case's start on rank 1 to the launch's end: the watcher, not msrun's node timeout
    launch = os.path.join(out, "ranks", r["launch_dir"])
    started = [json.loads(ln) for ln in open(os.path.join(launch, "rank1.jsonl"), encoding="utf-8")
               if '"start"' in ln]
    t_case = next(e["t"] for e in started if e["case"].endswith("::ms_fault_rank1_dies"))  # the case ID: file::name
    ended = re.search(r"# meshtest: t=([0-9.]+) rank process", open(os.path.join(launch, "launcher.log")).read())
    assert ended, "the launcher log does not say when the watcher ended the launch"
    assert float(ended.group(1)) - t_case < 15.0


def test_case_after_a_crash_runs_in_a_fresh_launch(fault_run):
    _, results, _ = fault_run
    r = results["ms_fault_after_death_runs"]
    assert r["status"] == "pass"
    assert r["launch_dir"] != results["ms_fault_rank1_dies"]["launch_dir"]


def test_each_launch_keeps_msrun_logs_and_no_process_is_left(fault_run):
    _, results, out = fault_run
    for case in ("ms_fault_rank1_dies", "ms_fault_after_death_runs"):
        launch = os.path.join(out, "ranks", results[case]["launch_dir"])
        assert sorted(os.listdir(os.path.join(launch, "msrun"))) == ["scheduler.log", "worker_0.log", "worker_1.log"]
    assert _leftovers(out) == []


def test_npu_gate_on_the_cpu_build_fails_at_once_in_one_line(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "meshtest", "run", os.path.join("cases", "mindspore", "case_comm.py"),
         "--platform=mindspore", "--device-kind=npu", "--tag=npu_level0", f"--artifacts-dir={tmp_path / 'out'}",
         f"--slot-dir={tmp_path / 'slots'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "on device kind 'npu' here: MindSpore 2.10.0 here sees no Ascend device" in line, line
    assert not (tmp_path / "out" / "ranks").exists()
