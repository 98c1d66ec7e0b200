"""The warm launcher (:mod:`meshtest.parent.warm`): each CPU launch of a run is forked from a fork
server that imported torch once, and keeps what a launcher started by command line had — its
command heading ``launcher.log``, the rank failure report, the verdicts, the next launch after a
crash, nothing left running — while ``MESHTEST_WARM=0`` starts a new interpreter per launch.
The canary of the leak check: a warm launch's process shows the fork server's command line, and
``tests.helpers.ranks_alive`` still finds it by the files it holds (~30 s on 2 cores)."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time

import meshtest
from meshtest.parent import warm
from tests.helpers import assert_nothing_leaked, ranks_alive

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
FAULTS = os.path.join("cases", "faults", "case_faults.py")
CASES = ("fault_before", "fault_exit", "fault_after_exit")


def _run(tmp_path, label, **env):
    out = tmp_path / label
    cmd = [sys.executable, "-m", "meshtest", "run", FAULTS, "--tag", "cpu_faults",
           *[a for c in CASES for a in ("--case", c)], "--artifacts-dir", str(out),
           "--slot-dir", str(tmp_path / "slots")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": SRC_ROOT, **env})
    results = {json.loads(line)["case"]: json.loads(line)["status"]
               for line in (out / "results.jsonl").read_text().splitlines()}
    logs = {p.parent.name: p.read_text() for p in out.glob("ranks/*/launcher.log")}
    return proc, out, results, logs


def test_every_launch_of_a_run_is_forked_warm_and_keeps_its_verdicts_and_report(tmp_path):
    proc, out, results, logs = _run(tmp_path, "warm")
    assert results == {"fault_before": "pass", "fault_exit": "crash", "fault_after_exit": "pass"}, proc.stdout
    assert set(logs) == {"w2", "w2.relaunch1"}, logs  # the crash ended the first launch; a second one ran
    for log in logs.values():
        first, second = log.splitlines()[:2]
        assert first.startswith(f"$ {sys.executable} -m meshtest.rank.torch_launcher --nproc=2 -- --plan ")
        assert second == "# forked by the warm launcher (imported once per run: meshtest.rank.torch_warm)"
        assert "forking 2 rank(s) from a process of 1 thread(s)" in log
    # the launcher's own report of the dead rank, as torchrun prints it, is still in its log
    assert "rank      : 1 (local_rank: 1)" in logs["w2"] and "exitcode  : 7" in logs["w2"]
    assert_nothing_leaked(str(tmp_path / "slots"), out)


def test_with_warm_off_every_launch_is_a_new_interpreter_with_the_same_verdicts(tmp_path):
    proc, out, results, logs = _run(tmp_path, "cold", **{warm.WARM_ENV: "0"})
    assert results == {"fault_before": "pass", "fault_exit": "crash", "fault_after_exit": "pass"}, proc.stdout
    assert set(logs) == {"w2", "w2.relaunch1"}
    assert all("forked by the warm launcher" not in log for log in logs.values())
    assert_nothing_leaked(str(tmp_path / "slots"), out)


def _hold(path):
    with open(path, "w"):
        time.sleep(120)


def test_the_leak_check_finds_a_process_of_a_warm_launch_by_the_files_it_holds(tmp_path):
    """The canary of ``ranks_alive`` for warm launches: a fork of the fork server holding a file
    in a run's directory is found (its command line is the fork server's); once gone, it is not."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    p = multiprocessing.get_context("forkserver").Process(target=_hold, args=(str(run_dir / "rank0.log"),))
    p.start()
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not ranks_alive(str(run_dir)):
            time.sleep(0.1)
        found = ranks_alive(str(run_dir))
        assert len(found) == 1 and found[0].startswith(f"{p.pid} ") and "multiprocessing.forkserver" in found[0]
    finally:
        p.kill()
        p.join()
    assert ranks_alive(str(run_dir)) == []


def test_a_fork_server_that_did_not_import_its_modules_fails_the_launch_saying_so(tmp_path):
    """The fork server ignores an ImportError of what it preloads; the launch does not: it exits 1
    naming the module (and the way to start cold), before running anything."""
    script = (
        "import sys, time\n"
        "from meshtest.parent import warm\n"
        "warm.prestart(['meshtest.no_such_module'])\n"
        "log = open(sys.argv[1], 'w')\n"
        "launch = warm.WarmLaunch(['meshtest.no_such_module'], 'meshtest.rank.entry', ['--help'], {},\n"
        "                         log.fileno(), [])\n"
        "while launch.poll() is None:\n"
        "    time.sleep(0.05)\n"
        "print('exit', launch.end())\n")
    log = tmp_path / "launcher.log"
    proc = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC_ROOT})
    assert proc.stdout.strip() == "exit 1", proc.stdout + proc.stderr
    assert ("meshtest: the warm launcher's fork server did not import meshtest.no_such_module; run with "
            "MESHTEST_WARM=0 to start each launch in a new interpreter") in log.read_text()
