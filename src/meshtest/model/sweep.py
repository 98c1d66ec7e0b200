"""Placement sweeps: one case per placement combination of an op's inputs on a mesh.

Used by :func:`meshtest.model.registry.register_sweep` at run time and by the static scan
(:mod:`meshtest.model.scan`) when it reads a ``register_sweep(...)`` call, so both derive the same
case names. Stdlib only (the Pants plugin imports it through the scan).

Per input and mesh dimension the choices are ``Replicate()``, ``Shard(d)`` for every tensor
dimension ``d``, and ``Partial(op)`` for each op in ``partial_ops``. Combinations that cannot
be valid are skipped and counted by reason (never silently):

* ``Partial`` on an input not listed in ``partial_inputs`` (when the case restricts them,
  e.g. to keep a level0 sweep small, or because the platform under test expects callers to
  redistribute first);
* more ``Partial`` inputs than ``max_partial_inputs``;
* one input ``Partial`` with different reduce ops on different mesh dimensions (torch's
  ``distribute_tensor`` rejects mixed Partial types).

Case names: ``<name>[<input 0>,<input 1>,...]`` where an input is its per-mesh-dimension
placements joined by ``-``, e.g. ``mm[S0-R,R-S1]`` (``S<d>`` Shard, ``R`` Replicate, ``P``
Partial sum, ``P<op>`` other Partial ops).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .placement import Partial, Placement, Replicate, Shard

SKIP_NOT_LINEAR = "Partial not enabled for this input (partial_inputs)"
SKIP_TOO_MANY_PARTIAL = "more Partial inputs than max_partial_inputs"
SKIP_MIXED_PARTIAL = "mixed Partial reduce ops within one input"


@dataclass(frozen=True)
class SweepPlan:
    """The cases a sweep registers, in order, and what it skipped.

    :ivar cases: ``(case name, placements)`` with one placement tuple per input.
    :ivar skipped: reason → number of combinations skipped for it.
    """

    cases: Tuple[Tuple[str, Tuple[Tuple[Placement, ...], ...]], ...]
    skipped: Dict[str, int] = field(default_factory=dict)

    def summary(self, name: str) -> str:
        """One line: ``sweep mm: 20 case(s); skipped 5 (more Partial inputs ...: 5)``."""
        text = f"sweep {name}: {len(self.cases)} case(s)"
        if self.skipped:
            total = sum(self.skipped.values())
            text += f"; skipped {total} (" + ", ".join(f"{r}: {n}" for r, n in sorted(self.skipped.items())) + ")"
        return text


def _choices(ndim: int, partial_ops: Sequence[str]) -> List[Placement]:
    return [Replicate()] + [Shard(d) for d in range(ndim)] + [Partial(op) for op in partial_ops]


def case_name(name: str, placements: Sequence[Sequence[Placement]]) -> str:
    """``name[...]`` as described in the module docstring."""
    return f"{name}[" + ",".join("-".join(p.short() for p in per) for per in placements) + "]"


def plan_sweep(
    name: str,
    shapes: Sequence[Sequence[int]],
    mesh_ndim: int,
    partial_inputs: Optional[Sequence[int]] = None,
    partial_ops: Sequence[str] = ("sum",),
    max_partial_inputs: Optional[int] = None,
) -> SweepPlan:
    """Enumerate the valid placement combinations, in a fixed order.

    :param shapes: full shape of each input (their ranks decide the Shard choices).
    :param mesh_ndim: number of mesh dimensions (one placement per dimension per input).
    :param partial_inputs: indices of the inputs that may be Partial (``None``: all).
    :param partial_ops: Partial reduce ops to try (``()``: no Partial at all).
    :param max_partial_inputs: most inputs that may be Partial at once (``None``: no limit).
    """
    if partial_inputs is None:
        partial_inputs = range(len(shapes))
    per_input = [
        list(itertools.product(_choices(len(shape), partial_ops), repeat=mesh_ndim)) for shape in shapes
    ]
    cases = []
    skipped: Dict[str, int] = {}
    for combo in itertools.product(*per_input):
        reason = None
        partial_idx = [i for i, per in enumerate(combo) if any(isinstance(p, Partial) for p in per)]
        if any(i not in partial_inputs for i in partial_idx):
            reason = SKIP_NOT_LINEAR
        elif max_partial_inputs is not None and len(partial_idx) > max_partial_inputs:
            reason = SKIP_TOO_MANY_PARTIAL
        elif any(len({p.reduce_op for p in per if isinstance(p, Partial)}) > 1 for per in combo):
            reason = SKIP_MIXED_PARTIAL
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        cases.append((case_name(name, combo), tuple(tuple(per) for per in combo)))
    return SweepPlan(tuple(cases), skipped)
