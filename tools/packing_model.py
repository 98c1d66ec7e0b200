#!/usr/bin/env python3
"""A device-time model of a suite run on one machine of P device slots (default: an 8-NPU node).

It replays the real plan of a gate — the case files' static scan, the Pants targets ``--tag``
selects, the batches the meshtest Pants plugin partitions them into
(``meshtest_pants.runner_command.batch_key``), each batch's launch groups
(``meshtest.parent.planner``) and slot need — through an event simulation of Pants' executor
(``[GLOBAL].process_execution_local_parallelism`` test processes at once), the shared slot pool
(first come, first served: the head of the line waits until its whole need is free, later
requests never overtake it; :mod:`meshtest.parent.slots`) and each runner's schedule of its
launches. Costs come from a stated model, not from running anything:

- a launch of ``w`` ranks costs ``startup_s(w)`` before its first case; the ``npu8`` model takes
  26.3 s for every world size: the old framework's measured figure measured the old one-launch-per-case framework at
  158 s for 6 cases on Torch NPU (hccl), i.e. start-up dominates each launch;
- a case costs its recorded duration (``slowest_s`` of the newest ``results.jsonl`` that ran it
  on real ranks, e.g. ``dist/test`` after the main job), else the mean of the recorded ones;
- a test process costs ``process_s`` (Pants sandbox and runner start) before it asks for slots.

Rules compared (:data:`RULES`):

- ``serial``: the plan before this model — a batch holds its largest file's device need and runs
  its launches one after another;
- ``concurrent``: same need, launches started as soon as they fit the batch's slots;
- ``fill``: a batch asks for enough slots to run every launch at once (at most P), and a launch
  group whose case time is long next to a launch's start-up is split into several launches, and
  on a device model (not ``cpu8``) also onto slots that would idle when that ends the predicted
  run no later (:func:`meshtest.parent.planner.split_groups`), the rule ``python -m meshtest run
  --pack fill`` applies.

Figures (:class:`Result`): simulated wall, launches, serial launches (the most launches one
process ran one after another), and slot-time utilization (rank-seconds of launches over
P × wall). Usage: ``python3 tools/bench.py --model npu8 [--tag cpu_level0] [--durations dist/test]``.
Stdlib only.
"""
from __future__ import annotations

import glob
import heapq
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "tools", "pants-plugins"))

from meshtest.model.scan import scan_case_file  # noqa: E402
from meshtest.parent.planner import (  # noqa: E402
    Group,
    case_offsets,
    launch_cost,
    merge_small_groups,
    phase_groups,
    plan_groups,
    select_cases,
    simulate_schedule,
    split_groups,
    startup_s,
    tag_clause_matches,
)
from meshtest.report.results import recorded_durations  # noqa: E402
from meshtest_pants.runner_command import batch_key  # noqa: E402

#: The rules :func:`simulate` knows, the plan before this model first.
RULES = ("before", "launches", "fill")


@dataclass(frozen=True)
class CostModel:
    """What time costs on the modelled machine: ``slots`` devices, launch start-up by
    :func:`meshtest.parent.planner.startup_s` for ``device_kind``, ``process_s`` seconds per
    test process before it asks for slots, ``parallelism`` test processes at once."""

    name: str
    slots: int
    device_kind: str
    process_s: float = 2.0
    parallelism: int = 4

    def startup_s(self, world_size: int) -> float:
        return startup_s(self.device_kind, world_size)


#: Stated models: ``npu8`` (8 Ascend cards, hccl start-up of the old framework's measured figure), ``cpu8`` (this
#: machine's measured torchrun + gloo start-up, as if every rank had a core of its own).
MODELS: Dict[str, CostModel] = {
    "npu8": CostModel("npu8", 8, "npu"),
    "cpu8": CostModel("cpu8", 8, "cpu"),
}


@dataclass
class Batch:
    """One test process: its files' label, its slot need and the cases it runs."""

    label: str
    need: int
    cases: list


@dataclass
class Result:
    rule: str
    wall_s: float
    launches: int
    serial_launches: int
    utilization: float
    batches: int
    peak_ranks: int = 0
    log: List[Tuple[float, float, str, int]] = field(default_factory=list)


def groups_before(cases) -> List[Group]:
    """The launch groups of the plan before this model (commit 118008d): one per mesh shape (and
    solo case), so ``(2, 2)`` and ``(4,)`` cases took a launch each, and every phase of a phased
    case a launch of its own, after the others (:func:`meshtest.parent.planner.phase_groups`)."""
    buckets: Dict[tuple, list] = {}
    for c in cases:
        if not c.phase_meshes:
            buckets.setdefault((c.world_size, c.mesh_shape, c.name if c.solo_launcher else ""), []).append(c)
    out = [Group(f"w{ws}-" + "x".join(map(str, shape)) + (f"-solo-{solo}" if solo else ""), shape,
                 tuple(f"d{i}" for i in range(len(shape))), tuple(sorted(members, key=lambda c: (c.file, c.lineno))))
           for (ws, shape, solo), members in sorted(buckets.items())]
    return out + [g for c in sorted(cases, key=lambda c: (c.file, c.lineno)) if c.phase_meshes
                  for g in phase_groups(c)]


def plan_batches(tag: str, rule: str, files: Optional[Sequence[str]] = None) -> List[Batch]:
    """The batches ``./pants --tag=<tag> test cases::`` runs under ``rule``: the targets whose tags
    match, grouped as the plugin partitions them (:func:`batch_key`; ``fill`` is
    ``[meshtest].pack = "fill"``), each with the cases the runner selects and its slot need."""
    files = files or sorted(glob.glob(os.path.join("cases", "**", "case_*.py"), recursive=True))
    grouping = groups_before if rule == "before" else plan_groups
    by_key: Dict[tuple, List[Tuple[str, object]]] = {}
    for f in files:
        scan = scan_case_file(f)
        if scan.error or not tag_clause_matches(tag, scan.target_tags()):
            continue
        if os.path.join("cases", "faults") in f:
            continue  # not a meshtest_cases target (cases/faults/BUILD)
        key = batch_key("torch", "python-default", [g.group_id for g in grouping(scan.cases)],
                        pack="fill" if rule == "fill" else "launches")
        by_key.setdefault(key, []).append((f, scan))
    return [Batch(f"{members[0][0]} +{len(members) - 1}", max(s.device_need for _, s in members),
                  select_cases([c for _, s in members for c in s.cases], "cpu", [tag]))
            for _, members in sorted(by_key.items())]


def _schedule(groups: List[Group], slots: int, concurrent: bool, cost: Callable[[Group], float],
              phase_at: Callable[[Group], Mapping[str, float]] = lambda g: {}) -> Tuple[
        float, List[Tuple[float, float, Group]], int]:
    """Run ``groups`` on ``slots`` slots from time 0: (end, [(start, end, group)], serial chain).
    Concurrent: the runner's own schedule (:func:`meshtest.parent.planner.simulate_schedule`:
    every phase taken to pass, a phase that shares a launch as soon as its own cases are done,
    ``phase_at(g)`` seconds from the launch's start by case name); else one after another in
    plan order."""
    if not concurrent:
        t, spans = 0.0, []
        for g in groups:
            spans.append((t, t + cost(g), g))
            t += cost(g)
        return t, spans, len(groups)
    spans = simulate_schedule(groups, slots, cost, phase_at)
    return max(e for _, e, _ in spans), spans, _longest_chain(spans)


def _longest_chain(spans: List[Tuple[float, float, Group]]) -> int:
    """The most launches that ran one after another (each starting after the previous ended)."""
    best: Dict[int, int] = {}
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    for i in order:
        best[i] = 1 + max((best[j] for j in order if j in best and spans[j][1] <= spans[i][0] + 1e-9), default=0)
    return max(best.values(), default=0)


def simulate(tag: str, rule: str, model: CostModel, durations: Mapping[str, float]) -> Result:
    """Event simulation of ``./pants --tag=<tag> test cases::`` under ``rule`` (module docstring)."""
    cost = lambda g: launch_cost(g, durations, model.device_kind)  # noqa: E731
    known = list(durations.values())
    mean = sum(known) / len(known) if known else 1.0

    def phase_at(g: Group) -> Dict[str, float]:
        """Seconds from a launch's start until each of its cases is done (start-up, then its
        cases in plan order)."""
        return case_offsets(g, lambda c: durations.get(c.name, mean), model.startup_s(g.world_size))
    plans = []
    for b in plan_batches(tag, rule):
        groups = (groups_before(b.cases) if rule == "before"
                  else merge_small_groups(plan_groups(b.cases), model.startup_s, durations))
        need = min(b.need, model.slots)
        if rule == "fill":
            groups = split_groups(groups, model.slots, durations, model.startup_s,
                                  fill_idle=model.device_kind != "cpu")
            need = max(need, min(model.slots, sum(g.processes for g in groups)))
        plans.append((b, groups, need))
    # Pants' executor: up to `parallelism` processes; each then queues for its slots (FIFO).
    t = 0.0
    queue: List[Tuple[float, int]] = []  # (time the process asks, plan index), in arrival order
    free_slots = model.slots
    workers = model.parallelism
    ends: List[Tuple[float, int, int]] = []  # (end, plan index, slots held)
    started = 0
    launches = serial = 0
    busy = 0.0
    log: List[Tuple[float, float, str, int]] = []
    peak = in_use = 0
    while started < len(plans) or queue or ends:
        while workers and started < len(plans):
            workers -= 1
            queue.append((t + model.process_s, started))
            started += 1
        queue.sort()
        progressed = False
        while queue and queue[0][0] <= t and plans[queue[0][1]][2] <= free_slots:
            _, i = queue.pop(0)
            b, groups, need = plans[i]
            free_slots -= need
            in_use += need
            peak = max(peak, in_use)
            end, spans, chain = _schedule(groups, need, rule != "before", cost, phase_at)
            for s, e, g in spans:
                busy += (e - s) * g.processes
                log.append((t + s, t + e, f"{b.label} {g.group_id}", g.processes))
            launches += len(spans)
            serial = max(serial, chain)
            heapq.heappush(ends, (t + end, i, need))
            progressed = True
        if progressed:
            continue
        nxt = [e for e, _, _ in ends[:1]] + ([queue[0][0]] if queue and queue[0][0] > t else [])
        t = min(nxt)
        while ends and ends[0][0] <= t:
            _, _, held = heapq.heappop(ends)
            free_slots += held
            in_use -= held
            workers += 1
    wall = t
    return Result(rule, wall, launches, serial, busy / (model.slots * wall) if wall else 0.0, len(plans), peak, log)


def report(tag: str, model_name: str, roots: Sequence[str]) -> List[Result]:
    """Simulate every rule; print one line each, side by side with the first."""
    model = MODELS[model_name]
    durations = recorded_durations(roots)
    results = [simulate(tag, rule, model, durations) for rule in RULES]
    cases = len({c.name for b in plan_batches(tag, "launches") for c in b.cases})
    print(f"model {model.name}: {model.slots} slots, launch start-up {model.startup_s(2):.1f} s (2 ranks) / "
          f"{model.startup_s(8):.1f} s (8 ranks), {model.parallelism} test processes at once; "
          f"{tag}: {cases} case(s); {len(durations)} recorded case duration(s) from {', '.join(roots)}")
    base = results[0]
    for r in results:
        print(f"  {r.rule:9} wall {r.wall_s:7.1f} s ({base.wall_s / r.wall_s:4.2f}x)  batches {r.batches:2d}  "
              f"launches {r.launches:3d}  serial launches {r.serial_launches:2d}  "
              f"slot-time utilization {r.utilization:5.3f}  peak ranks {r.peak_ranks}")
    return results


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="npu8", choices=sorted(MODELS))
    ap.add_argument("--tag", default="cpu_level0")
    ap.add_argument("--durations", nargs="*", default=[os.path.join("dist", "test")])
    a = ap.parse_args()
    report(a.tag, a.model, a.durations)
