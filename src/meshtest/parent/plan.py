"""The run plan: everything a run will do, decided in one call before anything starts.

:func:`make_plan` takes the scanned cases and the :class:`~meshtest.parent.options.RunOptions`
and returns a :class:`RunPlan`: the selected cases (gates and tag filters, names, ``-k``,
``--lf``/``--ff``), the cases refused because no slot pool holds their mesh, the launch groups
(merged, split, or the one-process lane's), the device slots the run holds and what each launch
is expected to cost. The runner (:mod:`meshtest.parent.runner`) runs the plan and reports; the
dry run (``$MESHTEST_DRY_RUN``) prints it. The building blocks are :mod:`meshtest.parent.planner`'s
(groups, splits, the launch schedule) and :mod:`meshtest.parent.selection`'s (``-k``, last failed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Sequence, Tuple

from ..contract import CaseOutcome
from ..errors import SelectionError
from ..model import rules
from ..model.rules import LOCAL_LANE_TAG
from ..model.scan import ScannedCase
from ..platforms.registry import backend_info
from ..report.results import recorded_durations
from . import outcomes
from .options import RunOptions
from .planner import (
    Group,
    LaunchSchedule,
    lane_of,
    launch_cost,
    merge_small_groups,
    plan_groups,
    plan_local_groups,
    select_cases,
    split_groups,
    startup_s,
)
from .selection import narrow
from .slots import SlotRequestError


@dataclass(frozen=True)
class RunPlan:
    """What a run does, decided before it starts.

    :ivar options: the run's options, ``first`` holding the cases ``--ff`` puts first.
    :ivar selected: the cases that run, in scan order.
    :ivar refused: an ``unsupported`` outcome (step ``slots``) per selected case whose mesh no
        node of the run's pool or cluster holds (:func:`meshtest.parent.outcomes.too_large`).
    :ivar groups: the launch groups, in plan order.
    :ivar need: the device slots the run holds while its launches run (:func:`device_need`).
    :ivar notes: lines that say how the selection was narrowed (``-k``, ``--lf``).
    :ivar cost: a launch group's expected seconds (:func:`meshtest.parent.planner.launch_cost`),
        what the launch schedule weighs.
    """

    options: RunOptions
    selected: Tuple[ScannedCase, ...]
    refused: Tuple[CaseOutcome, ...]
    groups: Tuple[Group, ...]
    need: int
    notes: Tuple[str, ...]
    cost: Callable[[Group], float]

    @property
    def ranks_lane(self) -> bool:
        """Whether the launches start rank processes (not the one-process lane)."""
        return is_ranks_lane(self.options)

    def schedule(self, slots: Sequence[int]) -> LaunchSchedule:
        """The launch schedule of :attr:`groups` on ``slots`` (the run's lease)."""
        return LaunchSchedule(list(self.groups), sorted(slots), self.cost)


def is_ranks_lane(opts: RunOptions) -> bool:
    """Whether ``opts`` ask for launches of rank processes (``--lane``, else the tag filters)."""
    return (opts.lane or lane_of(opts.tag_filters)) != "local"


def make_plan(cases: Sequence[ScannedCase], opts: RunOptions, node_slots: Optional[int] = None,
              where: str = "") -> RunPlan:
    """The run plan of ``cases`` under ``opts``.

    :param node_slots: the slots of the largest node the launches may use (default: the pool's,
        ``opts.slots``; a Ray cluster's largest node otherwise).
    :param where: what the run has, for a refused case's message (default: this machine's pool).
    :raises SelectionError: name patterns match nothing, a ``-k`` expression does not parse, the
        one-process lane on a platform without one or for a case it cannot run.
    :raises SlotRequestError: a group needs more ranks than the target's declared device need.
    """
    node_slots = opts.slots if node_slots is None else node_slots
    selected = select_cases(cases, opts.device_kind, opts.tag_filters, opts.name_patterns, dict(opts.file_patterns),
                            node_slots=node_slots)
    if opts.only_cases:
        selected = [c for c in selected if c.name in set(opts.only_cases)]
    selected, notes, failed_first = narrow(selected, opts.keyword, opts.last_failed, opts.cache_dir)
    if failed_first:
        opts = replace(opts, first=failed_first)
    refused: List[CaseOutcome] = []
    if is_ranks_lane(opts):  # the one-process lane holds no slot per rank
        unplaceable = [c for c in selected if not _placeable(c.device_need, node_slots, opts.slots)]
        refused = [outcomes.too_large(c, node_slots, where) for c in unplaceable]
        selected = [c for c in selected if c not in unplaceable]
    durations = recorded_durations(opts.durations_from) if opts.durations_from else {}
    groups, need = _groups(selected, opts, durations)
    launcher = backend_info(opts.platform).launcher
    return RunPlan(opts, tuple(selected), tuple(refused), tuple(groups), need, tuple(notes),
                   lambda g: launch_cost(g, durations, opts.device_kind, launcher))


def _groups(selected: Sequence[ScannedCase], opts: RunOptions, durations) -> Tuple[List[Group], int]:
    """The launch groups of a run and the device slots it holds: the one-process lane's launch
    and its workers, or one group per world size held at :func:`device_need`, or
    with ``--pack fill`` split groups held at up to every slot."""
    if not is_ranks_lane(opts):
        if not backend_info(opts.platform).local_target:
            raise SelectionError(f"platform {opts.platform!r} has no one-process lane (--tag={LOCAL_LANE_TAG})")
        groups = plan_local_groups(selected, local_processes(opts), set(opts.first))
        return groups, max((g.processes for g in groups), default=1)
    groups = plan_groups(selected, set(opts.first))
    info = backend_info(opts.platform)
    launcher = info.launcher
    if info.submeshes:
        groups = merge_small_groups(groups, lambda w: startup_s(opts.device_kind, w, launcher), durations)
    # a target's declared need may exceed the pool when its largest case does not fit (reported
    # on its own, :func:`meshtest.parent.outcomes.too_large`): hold at most the pool
    need = min(device_need(groups, opts.device_need, opts.slots), opts.slots)
    if opts.pack == "fill":
        # a device slot of its own per rank (NPU, GPU): a start-up on a slot that would idle is free
        groups = split_groups(groups, opts.slots, durations, lambda w: startup_s(opts.device_kind, w, launcher),
                              fill_idle=opts.device_kind != "cpu")
        need = max(need, min(opts.slots, sum(g.processes for g in groups)))
    return groups, need


def _placeable(ranks: int, node_slots: int, total: int) -> bool:
    """Whether a launch of ``ranks`` ranks fits: at most ``total`` slots, on nodes of
    ``node_slots`` slots with the same number of ranks on each (:func:`meshtest.model.rules.nodes_needed`)."""
    nodes = rules.nodes_needed(ranks, node_slots)
    return ranks <= total and ranks % nodes == 0 and ranks // nodes <= node_slots


def local_processes(opts: RunOptions) -> int:
    """Processes the local lane runs at once: ``opts.local_processes``, else one per CPU core
    (the simulation is CPU-bound), never more than the pool's slots."""
    return max(1, min(opts.local_processes or os.cpu_count() or 1, opts.slots))


def device_need(groups: Sequence[Group], declared: Optional[int], slots: Optional[int] = None) -> int:
    """Slots this run holds: ``declared`` (the build target's resource tag); without one (the
    CLI), enough to run its launches at once — the sum of their processes, at most ``slots`` (the
    pool's size) and at least the largest launch — or, with ``slots`` unknown, the largest.

    :raises SlotRequestError: a group needs more ranks than ``declared`` — the target's tag and the
        planned launches disagree, which must never pass silently.
    """
    largest = max((g.world_size for g in groups), default=0)
    if declared is None:
        return largest if slots is None else max(largest, min(slots, sum(g.processes for g in groups)))
    if largest > declared:
        raise SlotRequestError(
            f"launch group {max(groups, key=lambda g: g.world_size).group_id} needs {largest} ranks but the "
            f"target declared a device need of {declared}; its tags are stale or were typed by hand"
        )
    return declared
