"""Packing launches onto a run's slots: splitting long groups, the launch order, and the
device-time model that replays the real plan (tools/packing_model.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

from meshtest.parent.planner import (
    Group,
    LaunchSchedule,
    case_offsets,
    launch_cost,
    simulate_schedule,
    split_groups,
    startup_s,
)
from tests.helpers import scanned

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))


def _group(gid, n, world=2, phase=None):
    cases = tuple(scanned(f"{gid}_{i}", (world,), lineno=i) for i in range(n))
    if phase is not None:  # one phase of a phased case, as planner.phase_groups makes it
        cases = tuple(replace(c, phase=phase[0], phase_meshes=tuple(((world,), None) for _ in range(phase[1])))
                      for c in cases)
    return Group(gid, (world,), ("d0",), cases, phase=phase)


def test_a_long_group_is_split_into_balanced_parts_that_each_outweigh_a_start_up():
    g = _group("w2", 10)
    durations = {f"w2_{i}": 10.0 for i in range(10)}
    parts = split_groups([g], slots=8, durations=durations, startup_s=lambda w: 20.0)
    # 100 s of cases, 20 s start-up: at most 5 parts, at most 8 // 2 = 4 at once
    assert [p.group_id for p in parts] == [f"w2.part{i}of4" for i in range(1, 5)]
    assert sorted(len(p.cases) for p in parts) == [2, 2, 3, 3]
    assert sorted(c.name for p in parts for c in p.cases) == sorted(c.name for c in g.cases)
    for p in parts:  # plan order kept inside a part
        assert [c.lineno for c in p.cases] == sorted(c.lineno for c in p.cases)
    assert split_groups([g], slots=8, durations=durations, startup_s=lambda w: 60.0) == [g]  # 100 s < 2 start-ups
    assert split_groups([g], slots=3, durations=durations, startup_s=lambda w: 1.0) == [g]  # one launch fits
    assert split_groups([g], slots=8) == [g]  # no start-up to weigh: nothing split
    phase = _group("w2-2-phase1of2-x", 10, phase=(1, 2))
    assert split_groups([phase], slots=8, durations=durations, startup_s=lambda w: 1.0) == [phase]


def test_fill_idle_splits_a_short_group_onto_slots_that_would_idle_when_the_run_ends_sooner():
    one = _group("w1", 4, world=1)
    four = _group("w4", 3, world=4)
    durations = {**{f"w1_{i}": 5.0 for i in range(4)}, **{f"w4_{i}": 20.0 for i in range(3)}}
    start = lambda w: 20.0  # noqa: E731
    # 20 s of w1 cases do not pay for a second 20 s start-up: kept whole without fill_idle
    assert split_groups([one, four], slots=6, durations=durations, startup_s=start) == [one, four]
    parts = split_groups([one, four], slots=6, durations=durations, startup_s=start, fill_idle=True)
    # w4 runs 80 s on 4 slots; the 2 slots left would idle: w1 in two 30 s launches, not one of 40 s
    assert [p.group_id for p in parts] == ["w1.part1of2", "w1.part2of2", "w4"]

    def end(groups):
        cost = lambda g: 20.0 + sum(durations[c.name] for c in g.cases)  # noqa: E731
        return max(e for _, e, _ in simulate_schedule(groups, 6, cost))

    assert end(parts) == 80.0 and end([one, four]) == 80.0  # the run ends no later...
    w1_ends = sorted(e for _, e, g in simulate_schedule(parts, 6, lambda g: 20.0 + 5.0 * len(g.cases))
                     if g.world_size == 1)
    assert w1_ends == [30.0, 30.0]  # ...and the w1 cases are done 10 s sooner
    # with one slot beside w4 the parts would run one after another: the cases done later, kept whole
    assert split_groups([one, four], slots=5, durations=durations, startup_s=start, fill_idle=True) == [one, four]


def test_the_schedule_replay_waits_for_a_phase_to_pass_and_for_free_slots():
    first = _group("w2", 2)
    later = _group("w2-2-phase2of2-x", 1, phase=(2, 2))
    phased = replace(first.cases[0], phase=1, phase_meshes=later.cases[0].phase_meshes, name="w2-2-phase2of2-x_0")
    first = replace(first, cases=(phased, first.cases[1]))
    offsets = case_offsets(first, lambda c: 10.0, 5.0)
    assert offsets == {"w2-2-phase2of2-x_0": 15.0, "w2_1": 25.0}
    spans = simulate_schedule([first, later], 4, lambda g: 25.0 if g is first else 7.0, lambda g: offsets)
    assert [(s, e, g.group_id) for s, e, g in spans] == [(0.0, 25.0, "w2"), (15.0, 22.0, "w2-2-phase2of2-x")]
    # two slots: the later phase waits for phase 1's launch to give its slots back
    spans = simulate_schedule([first, later], 2, lambda g: 25.0 if g is first else 7.0, lambda g: offsets)
    assert [(s, e) for s, e, _ in spans] == [(0.0, 25.0), (25.0, 32.0)]


def test_start_up_costs_by_device_kind_and_the_launch_estimate():
    assert startup_s("cpu", 1) == 4.4 and startup_s("cpu", 4) == 4.6 and startup_s("cpu", 8) == 4.2
    assert round(startup_s("npu", 8), 1) == 26.3 and startup_s("npu", 2) == startup_s("npu", 8)
    g = _group("w2", 3)
    assert launch_cost(g, {"w2_0": 2.0, "w2_1": 4.0}, "cpu") == 4.2 + 2.0 + 4.0 + 3.0  # unrecorded: the mean


def test_the_longest_chain_of_work_starts_first():
    long_chain = _group("p1", 1, phase=(1, 3))
    big = _group("big", 2, world=4)
    s = LaunchSchedule([big, long_chain], list(range(8)), cost=lambda g: 10.0)
    assert s.startable().group_id == "p1"  # 10 s x 3 phases outweighs 10 s
    s2 = LaunchSchedule([big, long_chain], list(range(8)), cost=lambda g: 40.0 if g is big else 10.0)
    assert s2.startable().group_id == "big"


def test_the_model_replays_the_real_level0_plan_and_fill_beats_the_plan_before():
    import packing_model as pm  # pants: no-infer-dep (tools/packing_model.py, a dependency in BUILD)

    durations = {}
    covered = {}
    for rule in pm.RULES:
        r = pm.simulate("cpu_level0", rule, pm.MODELS["npu8"], durations)
        covered[rule] = sorted(name for _, _, label, _ in r.log for name in [label])
        assert r.peak_ranks <= 8 and 0 < r.utilization <= 1
        assert r.launches == len(r.log)
    cases = {rule: sorted(c.name for b in pm.plan_batches("cpu_level0", rule) for c in b.cases) for rule in pm.RULES}
    assert cases["before"] == cases["launches"] == cases["fill"] and len(cases["fill"]) > 500
    before = pm.simulate("cpu_level0", "before", pm.MODELS["npu8"], durations)
    fill = pm.simulate("cpu_level0", "fill", pm.MODELS["npu8"], durations)
    assert fill.wall_s < before.wall_s and fill.launches < before.launches


def test_bench_model_prints_every_rule_side_by_side():
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tools", "bench.py"), "--model", "npu8"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("model npu8: 8 slots, launch start-up 26.3 s")
    assert [ln.split()[0] for ln in lines[1:4]] == ["before", "launches", "fill"]
    assert "slot-time utilization" in lines[3]


def test_an_msrun_launch_costs_its_own_start_up():
    from meshtest.parent.planner import startup_s

    assert startup_s("cpu", 2, "msrun") == 16.0 and startup_s("cpu", 4, "msrun") == 20.0
    assert startup_s("cpu", 2, "msrun") > startup_s("cpu", 2)  # msrun's scheduler + cluster, not torchrun's
    assert startup_s("npu", 8, "msrun") == startup_s("npu", 8)  # Ascend: the old framework's figure


def test_a_run_without_a_declared_need_holds_enough_slots_for_its_launches_at_once():
    import pytest

    from meshtest.parent.plan import device_need
    from meshtest.parent.slots import SlotRequestError

    groups = [_group("w2", 2), _group("w4", 2, world=4)]
    assert device_need(groups, None, slots=8) == 6  # the CLI: both launches at once
    assert device_need(groups, None, slots=5) == 5  # at most the pool...
    assert device_need(groups, None, slots=2) == 4  # ...at least the largest launch (the pool refuses it)
    assert device_need(groups, None) == 4
    assert device_need(groups, 4, slots=8) == 4  # a build target's resource tag decides under Pants
    with pytest.raises(SlotRequestError, match="needs 4 ranks but the target declared a device need of 2"):
        device_need(groups, 2, slots=8)


def test_a_small_groups_op_cases_join_the_smallest_larger_launch_when_cheaper_than_its_start_up():
    from meshtest.parent.planner import merge_small_groups

    small, four, eight = _group("w2", 2), _group("w4", 3, world=4), _group("w8", 1, world=8)
    quick = {"w2_0": 0.3, "w2_1": 0.3}
    merged = merge_small_groups([small, four, eight], lambda w: 4.2, quick)
    # 0.6 s of cases on 2 replicas (1.2 s) < a 4.2 s start-up: into w4 (the smallest host), after its cases
    assert [g.group_id for g in merged] == ["w4", "w8"]
    assert [c.name for c in merged[0].cases] == ["w4_0", "w4_1", "w4_2", "w2_0", "w2_1"]
    # the same cases taking 2 s each: 8 s on 2 replicas outweighs the start-up, kept apart
    slow = {"w2_0": 2.0, "w2_1": 2.0}
    assert merge_small_groups([small, four], lambda w: 4.2, slow) == [small, four]
    # never a scenario or training case (it may use the whole world's process group)...
    scenario = replace(small, cases=(replace(small.cases[0], kind="scenario"), small.cases[1]))
    assert merge_small_groups([scenario, four], lambda w: 4.2, quick) == [scenario, four]
    # ...nor into a launch whose ranks do not divide into its mesh, nor with nothing to weigh
    three = _group("w3", 1, world=3)
    assert merge_small_groups([small, three], lambda w: 4.2, quick) == [small, three]
    assert merge_small_groups([small, four], lambda w: 0.0, quick) == [small, four]
