"""The relaunch policy on its own: given how a launch ended, what is reported and what runs next."""
from __future__ import annotations

import pytest

from meshtest.parent.relaunch import RENDEZVOUS_RETRIES, LaunchFacts, decide

CASES = ("a", "b", "c", "d")


def facts(recorded=(), started=(), stopped_after=None, clash=False, timed_out=False, rc=0):
    return LaunchFacts(recorded=frozenset(recorded), started=frozenset(started) | frozenset(recorded),
                       stopped_after=stopped_after, rendezvous_clash=clash, timed_out=timed_out, clean=rc == 0,
                       exit_text=f"exit {rc}", launch_name="w2-2", group_id="w2-2")


def test_every_case_recorded_ends_the_group():
    d = decide(CASES, facts(recorded=CASES))
    assert (d.complete, d.interrupted, d.next_cases, d.notes) == (CASES, (), (), ())


def test_teardown_abort_after_every_record_is_a_warning_not_a_failure():
    d = decide(CASES, facts(recorded=CASES, rc=-6))
    assert d.complete == CASES and d.next_cases == ()
    assert d.notes[0].startswith("teardown warning: launch w2-2 ended with exit -6")


def test_a_hang_reports_the_case_it_hung_in_and_relaunches_the_rest():
    d = decide(CASES, facts(recorded=("a",), started=("b",), timed_out=True, rc=-9))
    assert (d.complete, d.interrupted, d.interrupted_status, d.next_cases) == (("a",), ("b",), "timeout", ("c", "d"))
    assert d.notes == ("relaunching 2 case(s) of w2-2: b ended its launch (timeout)",)


def test_a_crash_in_the_last_case_relaunches_nothing():
    d = decide(CASES, facts(recorded=("a", "b", "c"), started=("d",), rc=1))
    assert (d.interrupted, d.interrupted_status, d.next_cases, d.notes) == (("d",), "crash", (), ())


def test_a_failed_fence_between_cases_relaunches_the_rest_without_blaming_one():
    d = decide(CASES, facts(recorded=("a", "b"), rc=1))
    assert (d.complete, d.interrupted, d.next_cases) == (("a", "b"), (), ("c", "d"))
    assert "end-of-case fence failed" in d.notes[0]


def test_a_launch_that_started_nothing_ends_the_group_with_every_case_interrupted():
    d = decide(CASES, facts(rc=1))
    assert (d.complete, d.interrupted, d.interrupted_status, d.next_cases) == ((), CASES, "crash", ())


def test_fail_fast_stop_reports_the_rest_not_run():
    d = decide(CASES, facts(recorded=("a", "b"), stopped_after="b"))
    assert (d.complete, d.not_run, d.next_cases) == (("a", "b"), ("c", "d"), ())
    assert d.notes == ("fail-fast: stopped after b failed; 2 case(s) of w2-2 not run",)


def test_rendezvous_clash_is_retried_a_bounded_number_of_times():
    for done in range(RENDEZVOUS_RETRIES):
        d = decide(CASES, facts(clash=True, rc=1), clashes_so_far=done)
        assert d.retry_rendezvous and d.next_cases == CASES and not d.complete
    d = decide(CASES, facts(clash=True, rc=1), clashes_so_far=RENDEZVOUS_RETRIES)
    assert not d.retry_rendezvous and d.interrupted == CASES and d.next_cases == ()


_REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
meshtest.rank.entry FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_13:04:54
  rank      : 0 (local_rank: 0)
  exitcode  : {rank0} (pid: 20509)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_13:04:54
  rank      : 1 (local_rank: 1)
  exitcode  : 7 (pid: 20510)
============================================================
"""


def test_the_rank_that_died_first_leads_the_report(tmp_path):
    """Both ranks died without recording the case: torchrun's root cause (rank 1, exit 7) comes
    first, also when its peer died too; a peer torchrun stopped with SIGTERM is not "died"."""
    from meshtest.parent.launch import LaunchResult
    from meshtest.parent.launcher_log import root_cause_rank
    from meshtest.parent.outcomes import interrupted
    from meshtest.parent.planner import plan_groups
    from meshtest.status import Status
    from tests.helpers import scanned

    case = scanned("c")
    group = plan_groups([case])[0]
    for rank0_exit in (1, -15):
        (tmp_path / "launcher.log").write_text(_REPORT.format(rank0=rank0_exit))
        assert root_cause_rank(str(tmp_path / "launcher.log")) == 1
        res = LaunchResult(rc=1, timed_out=False, wall_s=1.0, out_dir=str(tmp_path))
        out = interrupted(case, group, res, Status.CRASH)
        assert [f.rank for f in out.failures] == [1, 0], rank0_exit
        assert out.failures[0].error.startswith("the rank died (exit 7) before recording the case")


def test_a_rank_that_gave_up_under_msrun_is_worded_as_giving_up_not_as_dying(tmp_path):
    """msrun reports a worker's exit in its own line (``LaunchResult.dead_exit``): a rank that left
    after its end-of-case fence failed (exit 3) gave up, it did not die; its peer that died leads."""
    from meshtest.contract import GAVE_UP_EXIT
    from meshtest.parent.launch import LaunchResult
    from meshtest.parent.outcomes import interrupted
    from meshtest.parent.planner import plan_groups
    from meshtest.status import Status
    from tests.helpers import scanned

    case = scanned("c")
    group = plan_groups([case])[0]
    (tmp_path / "launcher.log").write_text("$ msrun ...\n")
    res = LaunchResult(rc=1, timed_out=False, wall_s=1.0, out_dir=str(tmp_path), dead={0: 100, 1: 101},
                       dead_exit={0: GAVE_UP_EXIT, 1: 7})
    out = interrupted(case, group, res, Status.CRASH)
    assert [f.rank for f in out.failures] == [1, 0]
    assert out.failures[0].error.startswith("the rank process (pid 101) exited (exit 7) before recording the case")
    assert out.failures[1].error.startswith(f"after rank 1 died: the rank left the launch (exit {GAVE_UP_EXIT}) "
                                            "after its end-of-case "
                                            "fence failed")


def test_cpu_torch_launches_fork_their_ranks_unless_told_not_to_and_everything_else_spawns(monkeypatch):
    from meshtest.parent.launch import RANK_START_ENV, launch_command, rank_start

    monkeypatch.delenv(RANK_START_ENV, raising=False)
    assert rank_start("torch", "cpu") == "fork"  # the CPU default
    assert rank_start("torch", "npu") == "spawn" and rank_start("torch", "cuda") == "spawn"
    assert rank_start("numpy", "cpu") == "spawn"  # another platform gains nothing from torch imported first
    monkeypatch.setenv(RANK_START_ENV, "spawn")
    assert rank_start("torch", "cpu") == "spawn"
    monkeypatch.setenv(RANK_START_ENV, "fork")
    assert rank_start("torch", "cpu") == "fork" and rank_start("torch", "npu") == "spawn"
    monkeypatch.setenv(RANK_START_ENV, "forked")
    with pytest.raises(ValueError, match=r"\$MESHTEST_RANK_START must be 'fork' or 'spawn', not 'forked'"):
        rank_start("torch", "cpu")
    cmd, env = launch_command("torchrun", 4, ["--plan", "p.json"], python="py", start="fork")
    assert cmd == ["py", "-m", "meshtest.rank.torch_launcher", "--nproc=4", "--", "--plan", "p.json"] and env == {}
    cmd, _ = launch_command("torchrun", 4, ["--plan", "p.json"], python="py", master_port=29500, start="fork")
    assert cmd[3:5] == ["--nproc=4", "--master-port=29500"]
    cmd, _ = launch_command("torchrun", 4, ["--plan", "p.json"], python="py")
    assert cmd[:4] == ["py", "-m", "torch.distributed.run", "--standalone"] and cmd[-3:] == [
        "meshtest.rank.entry", "--plan", "p.json"]
