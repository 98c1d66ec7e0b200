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


def normalised_dim_names(ndim: int) -> Tuple[str, ...]:
    """Axis names given to a mesh whose cases use names only as labels: ``("d0", "d1", ...)``."""
    return tuple(f"d{i}" for i in range(ndim))


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

    @property
    def world_size(self) -> int:
        return rules.world_size(self.mesh_shape)


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
