"""Fault injection through torchrun + gloo, with the package cases/faults/ (tagged
``cpu_faults``, which no gate selects): every fault is reported with its status, ranks and
steps; the cases after it still run; no rank process and no device slot leaks (~1.5 min on 2 cores).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser

import pytest

import meshtest
from tests.helpers import assert_nothing_leaked, ranks_alive

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
FAULTS_DIR = os.path.join("cases", "faults")


def _command(tmp_path, files, extra=()):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "meshtest", *[os.path.join(FAULTS_DIR, f) for f in files], "--tag", "cpu_faults",
           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots"), *extra]
    return cmd, out


def _results(out):
    return {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}


def _run(tmp_path, *files, extra=()):
    cmd, out = _command(tmp_path, files, extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=540)
    return proc, out, _results(out)


def _by_rank(outcome):
    return {f["rank"]: f for f in outcome["failures"]}


def _assert_nothing_leaked(tmp_path, out, killed_holders=0):
    assert_nothing_leaked(str(tmp_path / "slots"), out, killed_holders)


#: The drills of case_faults.py, as four runs started at once on one slot pool (each fault with
#: the case after it, which must pass in the launch that follows): a fault that ends its launch
#: waits out a deadline (4-10 s) and costs a relaunch, so one run of all of them was a chain of
#: nine launches (~80 s); side by side, the longest chain is three. A 4 s timeout's launch needs a
#: process-group timeout of 8 s (half the launch's longest deadline): ``slow_rank0_within_deadline``
#: (16 s) gives it to the hang's run; the skipped collectives' run gets it from ``--case-timeout 16``.
DRILLS = {
    "timeouts": ("fault_before", "fault_hang_loop", "fault_after_hang", "slow_rank0_within_deadline"),
    "skips": ("fault_skip_collective", "fault_after_skip", "fault_skip_collective_rank0", "fault_after_skip_rank0"),
    "crashes": ("fault_exit", "fault_after_exit", "fault_segv", "fault_after_segv", "fault_sigkill",
                "fault_after_sigkill"),
    "errors": ("fault_import_error", "fault_assert", "fault_error_one_rank", "fault_after_error",
               "fault_broken_communicator", "fault_after_broken", "fault_state_leak", "fault_after_leak",
               "fault_mismatched_collective", "fault_after_mismatch", "fault_clean_exit", "fault_after_clean_exit",
               "fault_all_nan_reference", "fault_after_nan"),
}


class FaultRun:
    """The four runs of :data:`DRILLS`: ``runs[drill]`` is ``(tmp_path, returncode, stdout, out,
    results)``; :attr:`results` all cases' outcomes; :meth:`out` the artifacts directory of a
    case's run."""

    def __init__(self, runs):
        self.runs = runs
        self.results = {case: o for *_, results in runs.values() for case, o in results.items()}
        self.stdout = "".join(run[2] for run in runs.values())

    def drill_of(self, case):
        return next(d for d, run in self.runs.items() if case in run[4])

    def out(self, case):
        return self.runs[self.drill_of(case)][3]


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    # Short deadlines the drills keep their meaning with: the faults' own 4-6 s, and 10 s for the
    # cases that must pass (each the first case of a fresh launch: ~2 s on 2 cores; 16 s beside
    # the skipped collectives, above).
    base = tmp_path_factory.mktemp("faults")
    (base / "slots").mkdir()
    started = {}
    for drill, cases in DRILLS.items():
        tmp_path = base / drill
        tmp_path.mkdir()
        (tmp_path / "slots").symlink_to(base / "slots")  # one pool: the runs take its slots side by side
        cmd, out = _command(tmp_path, ("case_faults.py", "case_faults_import.py"),
                            ("--case-timeout", "16" if drill == "skips" else "10",
                             *[a for c in cases for a in ("--case", c)]))
        started[drill] = (tmp_path, out, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": SRC_ROOT}))
    runs = {}
    for drill, (tmp_path, out, proc) in started.items():
        stdout, _ = proc.communicate(timeout=540)
        runs[drill] = (tmp_path, proc.returncode, stdout, out, _results(out))
    return FaultRun(runs)


def test_every_fault_is_reported_and_every_later_case_still_runs(fault_run):
    results = fault_run.results
    for drill, (_, returncode, text, _, _) in fault_run.runs.items():
        assert returncode == 1, drill + ": " + text
    assert {k: v["status"] for k, v in results.items()} == {
        "fault_import_error": "error",
        "fault_before": "pass",
        "fault_hang_loop": "timeout", "fault_after_hang": "pass",
        "fault_skip_collective": "timeout", "fault_after_skip": "pass",
        "fault_skip_collective_rank0": "timeout", "fault_after_skip_rank0": "pass",
        "slow_rank0_within_deadline": "pass",
        "fault_exit": "crash", "fault_after_exit": "pass",
        "fault_segv": "crash", "fault_after_segv": "pass",
        "fault_sigkill": "crash", "fault_after_sigkill": "pass",
        "fault_assert": "fail",
        "fault_error_one_rank": "error", "fault_after_error": "pass",
        "fault_broken_communicator": "error", "fault_after_broken": "pass",
        "fault_state_leak": "error", "fault_after_leak": "pass",
        "fault_mismatched_collective": "error", "fault_after_mismatch": "pass",
        "fault_clean_exit": "error", "fault_after_clean_exit": "pass",
        "fault_all_nan_reference": "fail", "fault_after_nan": "pass",
    }, fault_run.stdout
    for tmp_path, _, _, out, _ in fault_run.runs.values():
        _assert_nothing_leaked(tmp_path, out)


def test_import_error_names_the_file_and_fails_only_its_own_cases(fault_run):
    results = fault_run.results
    errs = results["fault_import_error"]["failures"]
    assert [(f["rank"], f["step"]) for f in errs] == [(0, "load"), (1, "load")]
    assert "cases/faults/case_faults_import.py" in errs[0]["error"] and "meshtest_no_such_module" in errs[0]["error"]
    assert results["fault_before"]["status"] == "pass"


def test_hang_names_the_rank_and_step_and_dumps_its_stack(fault_run):
    results, out = fault_run.results, fault_run.out("fault_hang_loop")
    hang = _by_rank(results["fault_hang_loop"])
    # rank 1 loops inside fn; rank 0 waits for it in the first collective after run (output metadata).
    assert (hang[0]["step"], hang[1]["step"]) == ("output-metadata", "run")
    assert "TIMEOUT fault_hang_loop" in fault_run.stdout and "rank(s) 1: timeout at step run" in fault_run.stdout
    launch = results["fault_hang_loop"]["launch_dir"]
    assert "loop_on_rank1" in (out / "ranks" / launch / "rank1.log").read_text()  # the stack dump at the deadline
    # the report quotes the innermost frames of that dump (where it was), not the log's last lines
    # (the outermost frames: the launcher that forked the rank)
    lines = hang[1]["error"].splitlines()
    at = lines.index("-- rank1.log, its stack (innermost frame first):")
    assert lines[at + 1].startswith("cases/faults/case_faults.py:") and "in loop_on_rank1" in lines[at + 1], lines


def test_skipped_collective_is_a_timeout_in_its_own_case(fault_run):
    results = fault_run.results
    skip = _by_rank(results["fault_skip_collective"])
    assert skip[0]["status"] == "timeout" and skip[0]["step"] == "all_reduce"
    assert skip[1]["status"] == "waited" and skip[1]["step"] == "fence"  # rank 1 finished and waited at the end
    assert results["fault_after_skip"]["status"] == "pass"  # not blamed for rank 0's pending all_reduce
    # Rank 0 coordinates the fence: it outwaits rank 1's deadline, so rank 1 is the one reported.
    skip0 = _by_rank(results["fault_skip_collective_rank0"])
    assert (skip0[1]["status"], skip0[1]["step"]) == ("timeout", "all_reduce")
    assert (skip0[0]["status"], skip0[0]["step"]) == ("waited", "fence")


@pytest.mark.parametrize("case,rank,lead,why", [
    ("fault_exit", 1, "the rank died (exit 7) before recording the case", ""),
    # a dump in the rank's log: its own cause leads, the same text on every run (no pid, sandbox path)
    ("fault_segv", 1, "died (killed by SIGSEGV): Fatal Python error: Segmentation fault; top frame "
                      "cases/faults/case_faults.py:", "the rank died (killed by SIGSEGV) before recording the case"),
    ("fault_sigkill", 0, "the rank died (killed by SIGKILL) before recording the case", ""),
])
def test_crash_names_the_rank_its_exit_and_its_log_tail(fault_run, case, rank, lead, why):
    results = fault_run.results
    f = _by_rank(results[case])[rank]
    assert (f["status"], f["step"]) == ("crash", "compute")
    assert f["error"].startswith(lead) and why in f["error"], f["error"]
    assert f"-- last lines of rank{rank}.log:" in f["error"] or f"-- rank{rank}.log, the failure" in f["error"]
    # the crashed rank's own last words come first, before its peer's "connection reset"
    assert results[case]["failures"][0]["rank"] == rank
    assert all(p["error"].startswith(f"after rank {rank} died: ") for p in results[case]["failures"][1:])


def test_a_leaked_global_setting_is_the_leaking_case_error_and_the_next_case_is_clean(fault_run):
    results = fault_run.results
    leak = _by_rank(results["fault_state_leak"])
    for rank in (0, 1):
        assert leak[rank]["step"] == "isolation"
        assert "default dtype torch.float32 → torch.float64" in leak[rank]["error"]
        assert "grad mode True → False" in leak[rank]["error"]
    assert results["fault_after_leak"]["status"] == "pass"


def test_mismatched_collectives_are_diagnosed_naming_each_rank_collective(fault_run):
    results = fault_run.results
    o = results["fault_mismatched_collective"]
    assert "rank 0 entered ALLREDUCE [4] Float, rank 1 entered ALLGATHER [8] Float" in o["diagnosis"], o
    # the process-group timeout (8 s, half the launch's longest deadline) ended it, not its own 10 s deadline
    assert o["slowest_s"] < 10
    assert "diagnosis: re-run alone with collective checks" in fault_run.stdout
    assert results["fault_after_mismatch"]["status"] == "pass"


def test_sys_exit_inside_a_case_is_named_and_the_rank_goes_on(fault_run):
    results = fault_run.results
    f = _by_rank(results["fault_clean_exit"])
    assert f.keys() == {1}
    assert f[1]["error"].startswith("exited with code 0 inside the case (SystemExit at step compute)")
    assert results["fault_after_clean_exit"]["launch_dir"] == results["fault_clean_exit"]["launch_dir"]


def test_an_all_nan_reference_fails_instead_of_passing(fault_run):
    results = fault_run.results
    f = _by_rank(results["fault_all_nan_reference"])
    assert f[0]["step"] == "compare" and "reference has NaN/Inf (16 of 16 elements" in f[0]["error"]
    assert results["fault_after_nan"]["status"] == "pass"


def test_assertion_failure_does_not_relaunch_but_a_broken_group_does(fault_run):
    results = fault_run.results
    launch = {k: v["launch_dir"] for k, v in results.items()}
    # An assertion failure and an error the health probe survives keep the launch going.
    assert launch["fault_assert"] == launch["fault_error_one_rank"] == launch["fault_after_error"] \
        == launch["fault_broken_communicator"]
    assert _by_rank(results["fault_error_one_rank"]).keys() == {1}
    # A destroyed communicator fails the probe: the next case runs in a fresh launch.
    assert launch["fault_after_broken"] != launch["fault_broken_communicator"]
    errors = fault_run.runs["errors"][2]
    assert "a rank's end-of-case fence failed" in errors
    broken = launch["fault_broken_communicator"]
    broken_log = (fault_run.out("fault_broken_communicator") / "ranks" / broken / "rank1.log").read_text()
    assert "case fence failed: ValueError" in broken_log  # the destroyed group ends the rank cleanly
    done = len(DRILLS["errors"])
    assert f"/case_faults_import.py: {done}/{done} case(s) done, launch w2" in errors  # live progress lines


TEARDOWN = "case_faults_teardown.py"


def test_teardown_abort_keeps_results_but_an_abort_before_recording_is_a_crash(tmp_path):
    proc, out, results = _run(tmp_path, TEARDOWN)
    text = proc.stdout
    assert {k: v["status"] for k, v in results.items()} == {
        "teardown_abort_after_results": "pass", "teardown_fine": "pass",
        "teardown_abort_before_recording": "crash"}, text
    assert "teardown warning: launch w2 ended with exit 1 after every rank recorded every case" in text
    t3 = _by_rank(results["teardown_abort_before_recording"])
    assert t3[1]["error"].startswith("died (killed by SIGABRT): Fatal Python error: Aborted; top frame cases/faults/")
    assert "the rank died (killed by SIGABRT) before recording the case" in t3[1]["error"]
    assert proc.returncode == 1  # only because of the abort before recording
    _assert_nothing_leaked(tmp_path, out)


class _Report(HTMLParser):
    """Collects the case rows of report.html: id → (text, hrefs)."""

    def __init__(self):
        super().__init__()
        self.rows, self._row = {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "case" in (a.get("class") or "").split():
            self._row = a["id"]
            self.rows[self._row] = ["", []]
        elif tag == "a" and self._row:
            self.rows[self._row][1].append(a["href"])

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._row:
            self.rows[self._row][0] += data


def test_html_report_shows_failing_ranks_and_links_resolve(fault_run):
    rows = {}
    for _, _, _, out, results in fault_run.runs.values():
        report = _Report()
        report.feed((out / "report.html").read_text())
        assert set(report.rows) == set(results)
        all_links = [href for _, hrefs in report.rows.values() for href in hrefs]
        assert len(all_links) == len(results) * 2 * 2  # cases x 2 ranks x (log, jsonl)
        assert all((out / href).is_file() for href in all_links)
        rows.update(report.rows)
    text, links = rows["fault_exit"]
    assert "crash @ compute" in text and "the rank died (exit 7)" in text
    assert any(f"{fault_run.results['fault_exit']['launch_dir']}/rank1.log" in href for href in links)
    text, links = rows["fault_hang_loop"]
    assert "timeout @ output-metadata" in text and "timeout @ run" in text


def test_sigterm_keeps_recorded_results_and_leaves_no_rank(tmp_path):
    import signal

    proc, out = _start_and_wait_for_hang(tmp_path)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "run interrupted (SystemExit); results so far are kept" in stdout
    assert [json.loads(line)["case"] for line in (out / "results.jsonl").read_text().splitlines()] == ["fault_before"]
    assert (out / "report.html").is_file() and (out / "junit.xml").is_file()
    assert (out / "ranks" / "w2" / "rank1.log").is_file()  # the rank logs stay
    assert ranks_alive(str(out)) == []


def test_rendezvous_on_a_port_in_use_is_retried_and_the_retry_is_logged(tmp_path):
    import socket

    with socket.socket() as held:  # another process's server on the port meshtest is told to use
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        out = tmp_path / "out"
        proc = subprocess.run(
            [sys.executable, "-m", "meshtest", os.path.join(FAULTS_DIR, "case_faults.py") + "::fault_before",
             "--tag", "cpu_faults", "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": SRC_ROOT, "MESHTEST_MASTER_PORT": str(port)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS    fault_before" in proc.stdout
    assert f"rendezvous retry 1/3: the previous launch failed with address already in use (port {port})" in proc.stdout
    clashed = (out / "ranks" / "w2.addrinuse1" / "launcher.log").read_text()
    assert f"--master-port={port}" in clashed and "EADDRINUSE" in clashed
    retried = (out / "ranks" / "w2" / "launcher.log").read_text()
    assert retried.startswith("# rendezvous retry 1/3") and f"--master-port={port}" not in retried
    _assert_nothing_leaked(tmp_path, out)


def _start_and_wait_for_hang(tmp_path):
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "meshtest", os.path.join(FAULTS_DIR, "case_faults.py"),
                             "--tag", "cpu_faults", "--case", "fault_before", "--case", "fault_hang_loop",
                             "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": SRC_ROOT})
    rank1 = out / "ranks" / "w2" / "rank1.jsonl"
    deadline = time.time() + 120
    in_loop = '::fault_hang_loop", "step": "run"'  # the event names the case file::name
    while time.time() < deadline and not (rank1.exists() and in_loop in rank1.read_text()):
        time.sleep(0.2)  # rank 1 now loops inside fault_hang_loop; rank 0 waits in a collective
    assert len(ranks_alive(str(out))) >= 2, "the ranks should be running"
    return proc, out


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGINT"])
def test_killing_the_runner_leaves_no_rank_and_frees_every_slot(tmp_path, sig):
    """kill -9 of the test process (no handler runs: the kernel's parent-death signal ends the
    launcher and the ranks, and releases the slot locks) and Ctrl-C (the runner kills its
    launch and keeps what was recorded)."""
    import signal
    import time

    proc, out = _start_and_wait_for_hang(tmp_path)
    proc.send_signal(getattr(signal, sig))
    stdout, _ = proc.communicate(timeout=60)
    deadline = time.time() + 15
    while time.time() < deadline and ranks_alive(str(out)):
        time.sleep(0.2)
    _assert_nothing_leaked(tmp_path, out, killed_holders=1 if sig == "SIGKILL" else 0)
    if sig == "SIGINT":
        assert "run interrupted (KeyboardInterrupt); results so far are kept" in stdout
        recorded = [json.loads(line)["case"] for line in (out / "results.jsonl").read_text().splitlines()]
        assert recorded == ["fault_before"]
    else:
        assert proc.returncode == -signal.SIGKILL


def test_the_fork_launchers_report_names_every_rank_that_exited_first_seen_first(tmp_path):
    """The CPU launcher's own report (torchrun's agent with forked ranks names one failed rank):
    every rank's exit, peeked at before the agent reaps it, in torchrun's format."""
    import time

    from meshtest.parent.launcher_log import rank_exit_codes, root_cause_rank
    from meshtest.rank.torch_launcher import RankExits

    exits = RankExits()
    pids = []
    for rank, code in ((5, 7), (4, 3)):  # node 1 of a launch of 2 x 4: rank 5 dies, then rank 4 gives up
        pid = os.fork()
        if pid == 0:
            exits.announce(rank, rank - 4)
            os._exit(code)
        pids.append(pid)
        time.sleep(0.3)
        exits.on_child_exit()  # what SIGCHLD runs
    report = exits.report()
    assert [os.waitpid(pid, 0)[1] >> 8 for pid in pids] == [7, 3]  # still there for the agent to reap
    log = tmp_path / "launcher.log"
    log.write_text(report)
    assert rank_exit_codes(str(log)) == {5: 7, 4: 3} and root_cause_rank(str(log)) == 5  # global ranks
    assert "rank      : 5 (local_rank: 1)" in report


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_both_ways_to_start_cpu_ranks_run_a_launch_and_leave_nothing(tmp_path, start):
    """The 2-rank launch goes through the forking launcher by default — which forks while it is
    single-threaded, before its store exists — and through ``torchrun`` itself with
    ``MESHTEST_RANK_START=spawn`` (each command heads ``launcher.log``); both cases pass, no rank
    is left."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    env.pop("MESHTEST_RANK_START", None)
    if start == "spawn":
        env["MESHTEST_RANK_START"] = "spawn"
    proc = subprocess.run([sys.executable, "-m", "meshtest", "run", os.path.join(FAULTS_DIR, "case_faults.py"),
                           "--tag", "cpu_faults", "--case", "fault_before", "--case", "fault_after_exit",
                           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "meshtest: 2 passed, 0 failed" in proc.stdout, proc.stdout + proc.stderr
    log = (out / "ranks" / "w2" / "launcher.log").read_text()
    first = log.splitlines()[0]
    if start == "fork":
        assert "-m meshtest.rank.torch_launcher --nproc=2 --" in first, first
        assert "forking 2 rank(s) from a process of 1 thread(s)" in log, log
    else:
        assert "-m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 -m meshtest.rank.entry" in first
    assert_nothing_leaked(str(tmp_path / "slots"), out)
