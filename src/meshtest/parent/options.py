"""What a run is asked to do: :class:`RunOptions`, read by the planner (:mod:`meshtest.parent.plan`)
and the runner (:mod:`meshtest.parent.runner`) alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ..contract import DEFAULT_CASE_TIMEOUT_S
from .slots import DEFAULT_SLOTS


@dataclass(frozen=True)
class RunOptions:
    """What to run and where to put the evidence.

    :param tag_filters: Pants ``--tag`` style filters, see :func:`meshtest.parent.planner.select_cases`.
    :param name_patterns: fnmatch patterns on case names, for every file.
    :param file_patterns: ``(file, patterns)`` pairs: patterns for that file only (``FILE::case``).
    :param fail_fast: stop at the first failing case (level0 gates); the cases not run are
        reported ``not_run``. Off: run everything and list every failure (level1).
    :param collective_checks: the platform's collective fingerprint checks (ranks that enter
        different collectives fail at once, named): ``on`` in every launch; ``auto`` (default)
        only to diagnose — a case that timed out, or after which the process group was found
        broken, is re-run alone with them, and what they find becomes the outcome's
        ``diagnosis``; ``off`` never. They cost time in every collective (``tools/bench.py``
        measures it), too much to leave on.
    """

    artifacts_dir: str
    platform: str = "torch"
    device_kind: str = "cpu"
    tag_filters: Tuple[str, ...] = ()
    name_patterns: Tuple[str, ...] = ()
    file_patterns: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    slots: int = DEFAULT_SLOTS
    slot_dir: str = ""
    device_need: Optional[int] = None
    target: str = ""
    fail_fast: bool = False
    collective_checks: str = "auto"
    #: ``"ranks"``, ``"local"`` (:data:`meshtest.parent.planner.LANES`), or ``""``: as the tag
    #: filters say (:func:`meshtest.parent.planner.lane_of`)
    lane: str = ""
    #: processes the local lane runs at once (``0``: one per CPU core, at most the pool's slots)
    local_processes: int = 0
    #: ``"launches"``: hold ``device_need`` slots (without one: enough for every launch at once,
    #: up to the pool; :func:`device_need`) and run the launches as they fit; ``"fill"``: hold up
    #: to every slot of the pool, split long groups (:func:`meshtest.parent.planner.split_groups`)
    #: and run the launches at once
    pack: str = "launches"
    #: ``results.jsonl`` files or directories of earlier runs whose case durations weigh splits
    #: and launch order (:func:`meshtest.report.results.recorded_durations`)
    durations_from: Tuple[str, ...] = ()
    #: record each case's sharding-rule calls (:attr:`meshtest.contract.LaunchPlan.record_ops`)
    record_ops: bool = False
    #: record which module served each operator a case dispatched
    #: (:attr:`meshtest.contract.LaunchPlan.record_dispatch`)
    record_dispatch: bool = False
    #: ``"operator:fault"`` activated in every launch (:attr:`meshtest.contract.LaunchPlan.mutant`)
    mutant: str = ""
    #: when not empty: of the selected cases, only those with these exact names run
    only_cases: Tuple[str, ...] = ()
    #: pytest's ``-k`` expression over each case's keywords (:mod:`meshtest.parent.selection`)
    keyword: str = ""
    #: ``"lf"`` / ``"ff"``: only / first the cases that failed last (``--lf`` / ``--ff``)
    last_failed: str = ""
    #: where the last-failed cases are kept (:func:`meshtest.parent.selection.cache_dir`)
    cache_dir: str = ""
    #: ``-1`` (``-q``): a line only for failing cases; ``0``: a line per case; ``1`` (``-v``): each
    #: line also names the case's file and its launch's rank-log directory
    verbosity: int = 0
    #: ``--durations=N``: list the N slowest cases at the end (``0``: all; ``-1``: none)
    slowest: int = -1
    #: case IDs the planner puts first in their launch, and their launches first (``--ff``)
    first: Tuple[str, ...] = ()
    #: where launches run (:mod:`meshtest.parent.executor`): ``""`` (as ``$MESHTEST_EXECUTOR`` or
    #: the pool's ``executor`` file says, else ``local``), ``local``, ``auto``, ``ray://HOST:PORT``,
    #: ``ray:HOST:PORT``
    executor: str = ""


#: Values of ``RunOptions.collective_checks`` / ``--collective-checks``.
COLLECTIVE_CHECKS = ("auto", "on", "off")
