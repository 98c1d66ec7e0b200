"""Suite planning: select cases and group them into launches (seed 000 §3.4, §8.6).

One group is one launch of ``prod(mesh_shape)`` ranks that runs its cases in a fixed order.
Cases share a group when their meshes have the same shape: the launch's mesh has names
normalised by ndim (``d0, d1, ...``), and a case that declares axis names (an op case, a
scenario, a training case) gets a mesh of the same shape with its own names, made once per
launch by every rank in plan order (:func:`meshtest.rank.entry.run_plan`). So a 2-rank ``tp``
scenario and a 2-rank ``dp`` training case share one launch. ``solo_launcher=True`` cases get
a group of their own.

A training case with phases (``TrainCase(phases=...)``) becomes one group per phase, each a
launch of its own on the phase's mesh, after every other group and in phase order, so that the
processes of a phase exit before the next phase starts (a real stop, not an in-process reload).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..errors import SelectionError
from ..model import rules
from ..model.scan import ScannedCase

normalised_dim_names = rules.normalised_dim_names


@dataclass(frozen=True)
class Group:
    """One launch: a mesh and the cases that run on it, in order.

    :ivar group_id: stable, filesystem-safe id, e.g. ``w4-2x2`` or ``w4-2x2-dp.tp-solo-foo``;
        used for artifact paths (never derived from Python's salted ``hash``).
    """

    group_id: str
    mesh_shape: Tuple[int, ...]
    mesh_dim_names: Tuple[str, ...]
    cases: Tuple[ScannedCase, ...]
    #: ``(phase, phases)`` for a group that runs one phase of a phased case (its only case), else ``None``
    phase: Optional[Tuple[int, int]] = None
    #: ``"ranks"``: one process per rank (torchrun); ``"local"``: one process simulates every rank
    #: of each case's own mesh (:data:`LANES`); its cases may have different meshes
    lane: str = "ranks"

    @property
    def world_size(self) -> int:
        """Ranks of the launch's mesh (a local group: of its largest case)."""
        if self.lane == "local":
            return max((rules.world_size(c.mesh_shape) for c in self.cases), default=1)
        return rules.world_size(self.mesh_shape)

    @property
    def processes(self) -> int:
        """Processes (and device slots) the launch takes: its world size, or 1 in the local lane."""
        return 1 if self.lane == "local" else self.world_size

    def ranks_of(self, case: ScannedCase) -> int:
        """Ranks whose records make ``case`` complete: the group's world size, or the case's own
        in the local lane."""
        return case.world_size if self.lane == "local" else self.world_size


#: The lanes a run can take: real rank processes, or every rank simulated in one process.
LANES = ("ranks", "local")


lane_of = rules.lane_of


def plan_local_groups(cases: Sequence[ScannedCase], parts: int,
                      durations: Optional[Mapping[str, float]] = None) -> List[Group]:
    """Split the cases of the one-process lane into at most ``parts`` launches, run at once on
    ``parts`` slots.

    Balanced by longest-processing-time-first: each case, heaviest first, goes to the lightest
    part so far; a case weighs its recorded duration in ``durations`` (seconds, by case name),
    else the mean of the recorded ones, else 1 (by count: measured on torch 2.13, a simulated
    case costs about the same on 2 and 4 ranks, 0.066 s and 0.079 s on average). Inside a part
    the cases run ordered by (world size, mesh, file, line), so a process switches its simulated
    world as rarely as possible.

    :raises SelectionError: a case the lane cannot run (:attr:`ScannedCase.runs_locally`) was selected.
    """
    refused = [c for c in cases if not c.runs_locally]
    if refused:
        c = refused[0]
        why = c.simulation_limit or f"a {c.kind} case" + (f" of layer {c.layer}" if c.layer is not None else "")
        raise SelectionError(f"{c.file}: case {c.name!r} cannot run in the one-process lane ({why}); "
                             f"{len(refused)} such case(s) selected — select with --tag={rules.LOCAL_LANE_TAG}")
    known = [durations[c.name] for c in cases if durations and c.name in durations]
    default = sum(known) / len(known) if known else 1.0

    def weight(c: ScannedCase) -> float:
        return (durations or {}).get(c.name, default)

    parts = max(1, min(parts, len(cases)))
    loads = [0.0] * parts
    chunks: List[List[ScannedCase]] = [[] for _ in range(parts)]
    for c in sorted(cases, key=lambda c: (-weight(c), c.file, c.lineno)):
        k = loads.index(min(loads))
        chunks[k].append(c)
        loads[k] += weight(c)
    chunks = [sorted(ch, key=lambda c: (_group_key(c), c.file, c.lineno)) for ch in chunks if ch]
    return [Group(f"local-{i}of{len(chunks)}", (1,), ("d0",), tuple(ch), lane="local")
            for i, ch in enumerate(chunks, start=1)]


def _group_key(c: ScannedCase) -> tuple:
    solo = c.name if c.solo_launcher else ""
    return (c.world_size, c.mesh_shape, normalised_dim_names(len(c.mesh_shape)), solo)


def plan_groups(cases: Iterable[ScannedCase]) -> List[Group]:
    """Group ``cases`` into launches.

    Order is deterministic: groups by (world size, mesh shape, solo case name);
    cases inside a group by (file, line). Every rank of a launch reads the same plan file,
    so all ranks run the same cases in the same order (seed 000 C2).
    """
    buckets: Dict[tuple, List[ScannedCase]] = {}
    phased = []
    for c in cases:
        if c.phase_meshes:
            phased.append(c)
            continue
        buckets.setdefault(_group_key(c), []).append(c)
    groups = []
    for key in sorted(buckets):
        ws, shape, names, solo = key
        gid = f"w{ws}-" + "x".join(map(str, shape))
        if names != normalised_dim_names(len(shape)):
            gid += "-" + ".".join(names)
        if solo:
            gid += "-solo-" + "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in solo)
        members = tuple(sorted(buckets[key], key=lambda c: (c.file, c.lineno)))
        groups.append(Group(gid, shape, names, members))
    for c in sorted(phased, key=lambda c: (c.file, c.lineno)):
        groups.extend(phase_groups(c))
    return groups


def phase_groups(case: ScannedCase) -> List[Group]:
    """The launches of a phased case, in phase order: group ``w<n>-<shape>-phase<i>of<k>-<case>``
    runs a copy of the case with ``phase=i`` and the phase's mesh."""
    out = []
    count = len(case.phase_meshes)
    safe = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in case.name)
    for i, (shape, names) in enumerate(case.phase_meshes, start=1):
        unit = replace(case, mesh_shape=tuple(shape), mesh_dim_names=names, phase=i)
        gid = f"w{unit.world_size}-" + "x".join(map(str, shape)) + f"-phase{i}of{count}-{safe}"
        out.append(Group(gid, unit.mesh_shape, names or normalised_dim_names(len(shape)), (unit,), phase=(i, count)))
    return out


def case_tags(c: ScannedCase) -> Tuple[str, ...]:
    """Tags a case answers to in filters (:meth:`ScannedCase.filter_tags`)."""
    return c.filter_tags()


def tag_clause_matches(clause: str, tags: Sequence[str]) -> bool:
    """Pants' ``--tag`` rule for one clause (``pants.util.filtering.create_filter``, 2.17.1):
    comma-separated tags are ORed; a leading ``-`` negates the whole clause; ``+`` is the
    same as no prefix."""
    negate = clause.startswith("-")
    body = clause[1:] if clause[:1] in ("+", "-") else clause
    hit = any(t in tags for t in body.split(",") if t)
    return not hit if negate else hit


def gate_is_fail_fast(tag_filters: Sequence[str]) -> bool:
    """Whether a run selected by these ``--tag`` clauses is a fail-fast gate (seed 000 §8.5:
    ``*_level0`` gates stop at the first failure, ``*_level1`` gates collect every failure):
    true when some positive clause names only level0 gate tags, e.g. ``cpu_level0``."""
    for clause in tag_filters:
        if clause.startswith("-"):
            continue
        tags = [t for t in clause.lstrip("+").split(",") if t]
        if tags and all(t in rules.GATE_TAGS and t.endswith("_level0") for t in tags):
            return True
    return False


def select_cases(
    cases: Sequence[ScannedCase],
    device_kind: str,
    tag_filters: Sequence[str] = (),
    name_patterns: Sequence[str] = (),
    file_patterns: Optional[Mapping[str, Sequence[str]]] = None,
) -> List[ScannedCase]:
    """Pick the cases to run.

    :param device_kind: ``"cpu"`` or ``"npu"``: only cases with a gate tag of this kind run.
    :param tag_filters: Pants ``--tag`` clauses, applied to each case's :func:`case_tags`
        exactly as Pants applies them to targets (see :func:`tag_clause_matches`; clauses
        are ANDed), so a target selected by ``--tag`` runs exactly its matching cases.
    :param name_patterns: ``fnmatch`` patterns on case names, for every file; a case runs if any
        matches (empty: all).
    :param file_patterns: file → patterns that apply to that file only (``A.py B.py::case`` runs
        all of A and only ``case`` of B).
    :raises SelectionError: a pattern matches no selected case.
    """
    out = [
        c for c in cases
        if any(rules.device_kind_of(t) == device_kind for t in c.tags)
        and all(tag_clause_matches(clause, case_tags(c)) for clause in tag_filters)
    ]
    scoped = [("", tuple(name_patterns))] + sorted((f, tuple(p)) for f, p in (file_patterns or {}).items())
    for file, patterns in scoped:
        if not patterns:
            continue
        pool = [c for c in out if not file or c.file == file]
        unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(c.name, p) for c in pool)]
        if unmatched:
            where = f" in {file}" if file else ""
            raise SelectionError(
                f"case filter {unmatched}{where} matches no selected case (device kind {device_kind!r}, "
                f"tags {list(tag_filters) or 'any'}); known cases: {sorted(c.name for c in cases)[:20]}"
            )
        out = [c for c in out if (file and c.file != file) or any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
    return out
