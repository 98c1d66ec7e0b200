"""The one-process lane (``--tag=cpu_local``): selection, planning, scheduling and the lane diff
without torch; then real runs of both lanes on one case file (torch; ~40 s on 2 cores)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

import meshtest
from meshtest.contract import CaseOutcome, RankFailure
from meshtest.errors import SelectionError
from meshtest.model import rules
from meshtest.parent.planner import Group, LaunchSchedule, lane_of, plan_local_groups
from meshtest.report.results import write_results
from meshtest.status import Status
from tests.helpers import case_file, scanned

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)
LANE_DIFF = os.path.join(REPO, "tools", "lane_diff.py")


def test_the_lane_tag_alone_selects_the_local_lane():
    assert lane_of(["cpu_local"]) == "local"
    assert lane_of(["+cpu_local", "-mesh:8"]) == "local"
    assert lane_of(["cpu_level0"]) == "ranks"
    assert lane_of(["-cpu_local"]) == "ranks"
    assert lane_of(["cpu_local,cpu_level0"]) == "ranks"  # a mixed clause also selects real-rank cases


def test_the_lane_tag_goes_to_level0_cases_the_lane_can_run():
    op = scanned("a")
    assert rules.LOCAL_LANE_TAG in op.filter_tags()
    assert rules.LOCAL_LANE_TAG not in scanned("b", tags=("cpu_level1",)).filter_tags()
    limited = scanned("c").__class__(**{**scanned("c").__dict__, "simulation_limit": "rank-dependent Python code"})
    assert not limited.runs_locally and rules.LOCAL_LANE_TAG not in limited.filter_tags()
    layer0 = scanned("d").__class__(**{**scanned("d").__dict__, "kind": "scenario", "layer": 0})
    layer2 = scanned("e").__class__(**{**scanned("e").__dict__, "kind": "scenario", "layer": 2})
    assert layer0.runs_locally and not layer2.runs_locally
    phased = scanned("f").__class__(**{**scanned("f").__dict__, "kind": "train", "layer": 4,
                                       "phase_meshes": (((2,), None), ((2,), None))})
    assert not phased.runs_locally


def test_the_local_launch_orders_cases_by_mesh_for_its_workers():
    cases = ([scanned(f"four{i}", (2, 2), lineno=10 + i) for i in range(4)]
             + [scanned(f"two{i}", (2,), lineno=i) for i in range(6)])
    (g,) = plan_local_groups(cases, parts=2)
    assert (g.group_id, g.lane, g.workers, g.processes, g.world_size) == ("local", "local", 2, 2, 4)
    assert [c.world_size for c in g.cases] == [4] * 4 + [2] * 6  # largest first, one switch of world
    assert {g.ranks_of(c) for c in g.cases} == {2, 4}
    assert plan_local_groups(cases[:1], parts=4)[0].workers == 1  # never more workers than cases
    assert plan_local_groups([], parts=2) == []


def test_a_case_the_lane_cannot_run_is_refused_by_name():
    limited = scanned("c").__class__(**{**scanned("c").__dict__, "simulation_limit": "needs a real hang"})
    with pytest.raises(SelectionError,
                       match=r"f.py: case 'c' cannot run in the one-process lane \(needs a real hang\)"):
        plan_local_groups([scanned("a"), limited], parts=2)


def _group(gid, world, phase=None, name=None):
    case = scanned(name or gid, (world,))
    if phase is not None:  # one phase of a phased case, as planner.phase_groups makes it
        case = replace(case, phase=phase[0], phase_meshes=tuple(((world,), None) for _ in range(phase[1])))
    return Group(gid, (world,), ("d0",), (case,), phase=phase)


def test_the_schedule_packs_launches_into_the_slots_held():
    s = LaunchSchedule([_group("a2", 2), _group("b4", 4), _group("c2", 2), _group("d8", 8)], list(range(8)))
    first = s.startable()
    assert first.group_id == "d8"  # the largest that fits goes first
    s.take(first)
    assert s.startable() is None  # nothing fits beside it
    s.give_back("d8")
    started = []
    while (g := s.startable()) is not None:
        s.take(g)
        started.append(g.group_id)
    assert started == ["b4", "a2", "c2"] and s.free == []  # 4 + 2 + 2 ranks at once on 8 slots


def test_a_later_phase_waits_for_the_earlier_one_and_its_pass():
    p1, p2 = _group("p1", 2, (1, 2), "case"), _group("p2", 2, (2, 2), "case")
    s = LaunchSchedule([p2, p1], list(range(8)))
    assert s.startable().group_id == "p1"
    s.take(p1)
    assert s.startable() is None  # phase 2 waits while phase 1 runs
    s.give_back("p1")
    s.phase_passed("f.py::case", 1)  # by case ID
    assert s.startable().group_id == "p2"
    s2 = LaunchSchedule([p2], list(range(8)))
    assert s2.startable() is None and s2.pending == []  # phase 1 did not pass: phase 2 never starts


def _outcome(case, status, group, step="run", error="", file="cases/x.py"):
    failures = (RankFailure(0, status, step, error),) if error else ()
    return CaseOutcome(case, file, group, 2, status, 0.1, 0, failures)


def _lane_diff(tmp_path, real, local):
    for name, outcomes in (("real", real), ("local", local)):
        (tmp_path / name).mkdir(exist_ok=True)
        write_results(str(tmp_path / name / "results.jsonl"), outcomes)
    return subprocess.run([sys.executable, LANE_DIFF, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)


def test_lane_diff_lists_each_disagreement_and_fails(tmp_path):
    real = [_outcome(c, Status.PASS, "w2-2") for c in ("a", "b", "c")]
    proc = _lane_diff(tmp_path, real, [_outcome("a", Status.PASS, "local"),
                                       _outcome("b", Status.FAIL, "local", "compare", "output[0]: 3 of 16 outside"),
                                       _outcome("c", Status.PASS, "local")])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "both ran 3, agree on 2, disagree on 1" in proc.stdout
    assert "DIFFER cases/x.py::b: local fail at compare (mismatch), ranks pass" in proc.stdout
    proc = _lane_diff(tmp_path, real, [_outcome(c, Status.PASS, "local") for c in ("a", "b", "c", "d")])
    assert proc.returncode == 0, proc.stdout
    assert "1 case(s) ran only in the local lane" in proc.stdout


def test_lane_diff_compares_the_failing_step_and_the_error_kind_not_only_the_status(tmp_path):
    real = [_outcome("a", Status.ERROR, "w2-2", "run", "NotImplementedError: no strategy"),
            _outcome("b", Status.ERROR, "w2-2", "run", "NotImplementedError: no strategy")]
    proc = _lane_diff(tmp_path, real, [_outcome("a", Status.ERROR, "local", "run", "TypeError: mixed tensors"),
                                       _outcome("b", Status.ERROR, "local", "gather", "NotImplementedError: x")])
    assert proc.returncode == 1, proc.stdout
    assert "agree on 0, disagree on 2" in proc.stdout
    assert ("DIFFER cases/x.py::a: local error at run (TypeError), ranks error at run (NotImplementedError)"
            in proc.stdout)


def test_lane_diff_fails_when_the_local_lane_skipped_an_eligible_case(tmp_path):
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "case_y.py").write_text(
        "from meshtest import OpShardCase, register\n"
        + "".join(f'register(OpShardCase(name="{n}", fn=f, inputs=[], placements=[], mesh_shape=(2,), '
                  f'tags=("cpu_level0",){extra}))\n'
                  for n, extra in (("e1", ""), ("e2", ""), ("limited", ', simulation_limit="rank-dependent"'))))
    real = [_outcome(n, Status.PASS, "w2", file="cases/case_y.py") for n in ("e1", "e2", "limited")]
    proc = _lane_diff(tmp_path, real, [_outcome("e1", Status.PASS, "local", file="cases/case_y.py")])
    assert proc.returncode == 1, proc.stdout
    assert "the local lane ran 1 of the 2 eligible case(s)" in proc.stdout
    assert "SKIPPED by the local lane (1 eligible): cases/case_y.py::e2" in proc.stdout
    assert "1 case(s) ran only in the real lane" not in proc.stdout  # e2 and limited
    assert "2 case(s) ran only in the real lane" in proc.stdout


# --- real runs (torch) -------------------------------------------------------------------------

BODY = """
import os
import numpy as np
import torch
from meshtest import LocalInput

def add(x, y):
    return x + y

def scale(x):
    return x * 3

def off_when_distributed(x):
    return x * 1.01 if hasattr(x, "placements") else x

def exit_when_distributed(x):
    if hasattr(x, "placements"):
        os._exit(7)
    return x

def rank_dependent(x):
    if hasattr(x, "placements") and torch.distributed.get_rank() == 1:
        return x * 2
    return x

register(OpShardCase(name="ll_add", fn=add, inputs=[InputSpec((6, 4)), InputSpec((6, 4))],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=(2,), tags=("cpu_level0",)))
register(OpShardCase(name="ll_partial", fn=scale, inputs=[InputSpec((4, 4))], placements=[(Partial(),)],
                     mesh_shape=(2,), tags=("cpu_level0",)))
register(OpShardCase(name="ll_locals_2d", fn=scale,
                     inputs=[LocalInput(shape=(4, 4), local=lambda c: np.full((2, 4), c[0] * 2 + c[1]),
                                        dtype="float32")],
                     placements=[(Shard(0), Partial())], mesh_shape=(2, 2), tags=("cpu_level0",)))
register(OpShardCase(name="ll_wrong", fn=off_when_distributed, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0), Replicate())], mesh_shape=(2, 2), tags=("cpu_level0",)))
register(OpShardCase(name="ll_rank_dependent", fn=rank_dependent, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level0",),
                     simulation_limit="the op reads the process rank, which one process simulating every rank cannot "
                                      "give per rank"))
"""

CRASH = """
register(OpShardCase(name="ll_exit", fn=exit_when_distributed, inputs=[InputSpec((4,))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level0",)))
register(OpShardCase(name="ll_after_exit", fn=add, inputs=[InputSpec((4,)), InputSpec((4,))],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=(2,), tags=("cpu_level0",)))
"""


def _run(path, out, *args):
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    return subprocess.run([sys.executable, "-m", "meshtest", "run", path, "--artifacts-dir", str(out),
                           "--slot-dir", str(out) + "-slots", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def _statuses(out):
    return {json.loads(line)["case"]: json.loads(line)["status"]
            for line in (out / "results.jsonl").read_text().splitlines()}


def test_both_lanes_give_the_same_verdicts_and_the_local_one_names_the_rank(tmp_path):
    path = case_file(tmp_path, "case_ll.py", BODY)
    local = _run(path, tmp_path / "runs" / "local", "--tag=cpu_local", "--local-processes=2")
    assert local.returncode == 1, local.stdout + local.stderr
    assert _statuses(tmp_path / "runs" / "local") == {"ll_add": "pass", "ll_partial": "pass",
                                                      "ll_locals_2d": "pass", "ll_wrong": "fail"}
    text = local.stdout
    assert "launch local: 2 process(es) simulating the ranks" in text
    # every simulated rank has its record; the message names the rank the comparison failed on
    assert "rank(s) 0,1,2,3: fail at step compare: on simulated rank(s) 0,1,2,3 of 4 (first, 0): output[0]:" in text
    # the two workers shared the cases out: each case recorded by exactly one of them
    launch = tmp_path / "runs" / "local" / "ranks" / "local"
    taken = [{json.loads(line)["case"].rsplit("::", 1)[1]  # rank events name a case file::name
              for line in (launch / f"rank{w}.jsonl").read_text().splitlines()
              if json.loads(line)["event"] == "result"} for w in (0, 1)]
    assert taken[0] | taken[1] == {"ll_add", "ll_partial", "ll_locals_2d", "ll_wrong"} and not taken[0] & taken[1]
    assert "local lane worker 1 of 2" in (launch / "rank1.log").read_text()
    ranks = _run(path, tmp_path / "runs" / "ranks", "--tag=cpu_level0", "--no-fail-fast")
    assert ranks.returncode == 1
    assert _statuses(tmp_path / "runs" / "ranks")["ll_rank_dependent"] == "fail"  # why it is not simulated
    diff = subprocess.run([sys.executable, LANE_DIFF, str(tmp_path / "runs")], capture_output=True, text=True,
                          cwd="/")
    assert diff.returncode == 0, diff.stdout
    assert "both ran 4, agree on 4, disagree on 0" in diff.stdout
    assert "real ranks only: " in diff.stdout and "ll_rank_dependent: the op reads the process rank" in diff.stdout


def test_a_local_process_that_dies_is_reported_and_the_rest_relaunched(tmp_path):
    path = case_file(tmp_path, "case_ll.py", BODY.split("register(")[0] + CRASH)
    out = tmp_path / "out"
    proc = _run(path, out, "--tag=cpu_local", "--local-processes=1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _statuses(out) == {"ll_exit": "crash", "ll_after_exit": "pass"}
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    crash = next(r for r in results if r["case"] == "ll_exit")
    assert [f["rank"] for f in crash["failures"]] == [0, 1] and crash["failures"][0]["step"] == "run"
    assert "rank0.log" in crash["failures"][0]["error"]
    assert os.path.isdir(out / "ranks" / "local.relaunch1")


SLOW = """
import time

def slow_when_distributed(x):
    if hasattr(x, "placements"):
        time.sleep(60)
    return x

register(OpShardCase(name="slow2", fn=slow_when_distributed, inputs=[InputSpec((4,))], placements=[(Shard(0),)],
                     mesh_shape=(2,), tags=("cpu_level0",)))
register(OpShardCase(name="slow4", fn=slow_when_distributed, inputs=[InputSpec((4,))], placements=[(Shard(0),)],
                     mesh_shape=(4,), tags=("cpu_level0",)))
"""


def test_concurrent_launches_share_the_lease_and_die_together_with_the_runner(tmp_path):
    import signal
    import time

    from meshtest.parent.slots import SlotPool, read_audit
    from tests.helpers import ranks_alive

    path = case_file(tmp_path, "case_slow.py", SLOW)
    out, slots = tmp_path / "out", tmp_path / "slots"
    # slow2 as an earlier run recorded it: 60 s, far over a launch's start-up, so its 2-rank
    # launch runs beside the 4-rank one (not merged into it: planner.merge_small_groups)
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text(json.dumps({"case": "slow2", "file": path, "group": "w2", "world_size": 2, "status": "pass",
                                   "slowest_s": 60.0, "slowest_rank": 0, "failures": [], "known_failure": "",
                                   "launch_dir": "w2", "spec_id": "", "divergence": "", "detail": "",
                                   "diagnosis": ""}) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "meshtest", "run", path, "--artifacts-dir", str(out),
                             "--slot-dir", str(slots), "--pack=fill", "--case-timeout=300",
                             "--durations-from", str(earlier)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": SRC_ROOT})
    deadline = time.time() + 120
    while time.time() < deadline and not all((out / "ranks" / g / "rank0.jsonl").exists()
                                             and '"start"' in (out / "ranks" / g / "rank0.jsonl").read_text()
                                             for g in ("w2", "w4")):
        time.sleep(0.2)  # both launches are inside their slow case, at once
    launches = [r for r in read_audit(str(slots)) if r["event"] == "launch"]
    assert sorted((r["group"], tuple(r["slots"])) for r in launches) == [("w2", (4, 5)), ("w4", (0, 1, 2, 3))]
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stdout
    assert "device slots [0, 1, 2, 3, 4, 5] of 8 held" in stdout
    assert ranks_alive(str(out)) == []
    with SlotPool(str(slots), 8).acquire(8, "after", timeout_s=5):
        pass
