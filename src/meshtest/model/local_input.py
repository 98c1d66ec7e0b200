"""Inputs declared by each rank's local tensor (``DTensor.from_local`` semantics).

An :class:`~meshtest.model.inputs.InputSpec` declares the full tensor and lets the platform split
it (``distribute_tensor``); a ``Partial`` input built that way is always the platform's split
(torch: ``v / n`` on every rank). A :class:`LocalInput` declares what each rank holds instead:
locals that differ by rank, uneven local shapes, partial values that reduce to the global one
(sum, avg, max, min), integer partials. meshtest computes the global tensor from all the locals
(every rank computes every local, so the reference is the same everywhere) and the platform
builds the distributed input from this rank's local.

The rule that turns locals into the global tensor (:func:`assemble`) follows the placements
mesh dimension by mesh dimension, innermost first — the inverse of how ``distribute_tensor``
splits: ``Shard(d)`` concatenates along ``d`` in mesh-coordinate order, ``Replicate()`` requires
equal locals, ``Partial(op)`` reduces them by ``op`` (``avg``: the sum divided by the mesh size,
cast back to the dtype).
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Dict, Sequence, Tuple

import numpy as np

from ..errors import CaseDeclarationError
from .dtypes import DTYPES, FLOAT_DTYPES
from .placement import Partial, Placement, Replicate, Shard

#: A mesh coordinate, one index per mesh dimension (rank ``r`` is ``np.unravel_index(r, mesh_shape)``).
Coord = Tuple[int, ...]


@dataclass(frozen=True)
class LocalInput:
    """A distributed input given by every rank's local tensor.

    :param shape: the global shape the locals assemble to (checked when they are built; needed
        at registration to check ``Shard(d)``).
    :param local: ``local(coord) -> array-like``: the local tensor of the rank at mesh coordinate
        ``coord`` (a tuple, one index per mesh dimension). Must be deterministic: every rank
        calls it for every coordinate.
    :param dtype: one of :data:`meshtest.model.dtypes.DTYPES`; integer dtypes may be ``Partial``.
    :param requires_grad: the distributed input is a leaf that requires grad (float dtypes only);
        its gradient is compared with the reference input's, like an ``InputSpec``'s.
    :param checked: ``True`` (default): meshtest requires the locals to assemble (:func:`assemble`)
        and each local to have the shape the platform lays out for its rank, then builds the input
        with the declared global shape and no check of the platform's own (torch:
        ``DTensor.from_local(..., run_check=False, shape=..., stride=...)``). ``False``: the locals
        go to the platform as given with the declared global shape, and the platform's own check
        is the subject (torch: ``DTensor.from_local(local, mesh, placements, run_check=True,
        shape=shape, stride=<contiguous>)``): feed it a layout it must refuse and declare the
        refusal with ``expect_raises`` at step ``build``; a layout it accepts but cannot gather is
        caught at step ``output-metadata``, before any rank enters the gather. When the locals
        do not assemble there is no reference: a case that gets past ``build`` then fails at
        step ``reference`` saying so.
    """

    shape: Tuple[int, ...]
    local: Callable[[Coord], Any]
    dtype: str = "float32"
    requires_grad: bool = False
    checked: bool = True

    def validate(self, file: str, case: str, index: int) -> "LocalInput":
        """Rules ``input-shape``, ``input-dtype``, ``local-input``; returns a normalised copy."""
        where = f"inputs[{index}]"
        if not isinstance(self.shape, (tuple, list)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in self.shape
        ):
            raise CaseDeclarationError(file, case, "input-shape",
                                       f"{where}.shape must be a tuple of integers >= 0; got {self.shape!r}")
        if not callable(self.local):
            raise CaseDeclarationError(file, case, "local-input",
                                       f"{where}.local must be callable as local(coord) -> array; got {self.local!r}")
        if self.dtype not in DTYPES:
            raise CaseDeclarationError(file, case, "input-dtype",
                                       f"{where}.dtype {self.dtype!r} unknown; use one of {', '.join(DTYPES)}")
        if self.requires_grad and self.dtype not in FLOAT_DTYPES:
            raise CaseDeclarationError(file, case, "input-dtype",
                                       f"{where}: requires_grad needs a float dtype, not {self.dtype!r}")
        if not isinstance(self.checked, bool):
            raise CaseDeclarationError(file, case, "local-input",
                                       f"{where}.checked must be True or False; got {self.checked!r}")
        return dataclasses.replace(self, shape=tuple(self.shape))


def coords(mesh_shape: Sequence[int]) -> Sequence[Coord]:
    """Every mesh coordinate in rank order (row-major)."""
    return list(itertools.product(*(range(n) for n in mesh_shape)))


def assemble(spec: LocalInput, mesh_shape: Sequence[int], placements: Sequence[Placement],
             np_dtype: np.dtype) -> Tuple[np.ndarray, Dict[Coord, np.ndarray]]:
    """Build every rank's local and the global tensor they make.

    :returns: (global array, local array by mesh coordinate), all of ``np_dtype``.
    :raises ValueError: the locals do not assemble (a shape differs along a dimension that is
        not concatenated, locals differ on a ``Replicate()`` mesh dimension, a placement that
        locals cannot declare) or the result is not ``spec.shape``; the message names the mesh
        dimension and the coordinates.
    """
    locals_ = {c: np.asarray(spec.local(c)).astype(np_dtype) for c in coords(mesh_shape)}

    def combine(prefix: Coord) -> np.ndarray:
        k = len(prefix)
        if k == len(mesh_shape):
            return locals_[prefix]
        parts = [combine(prefix + (i,)) for i in range(mesh_shape[k])]
        p = placements[k]
        where = f"mesh dim {k} ({p!r}) at coordinates {prefix + ('*',)}"
        if type(p) is Shard:
            try:
                return np.concatenate(parts, axis=p.dim)
            except ValueError as e:
                raise ValueError(f"locals do not concatenate along dim {p.dim} over {where}: "
                                 f"shapes {[x.shape for x in parts]} ({e})") from None
        shapes = {x.shape for x in parts}
        if len(shapes) != 1:
            raise ValueError(f"locals over {where} have different shapes {[x.shape for x in parts]}")
        if isinstance(p, Replicate):
            if any(not np.array_equal(parts[0], x, equal_nan=True) for x in parts[1:]):
                raise ValueError(f"locals differ over {where}, which is Replicate(): every rank must hold the same")
            return parts[0]
        if isinstance(p, Partial):
            stack = np.stack(parts)
            if p.reduce_op == "sum":
                return stack.sum(axis=0).astype(np_dtype)
            if p.reduce_op == "avg":
                return (stack.sum(axis=0) / len(parts)).astype(np_dtype)
            return (stack.max(axis=0) if p.reduce_op == "max" else stack.min(axis=0)).astype(np_dtype)
        raise ValueError(f"{p!r} cannot be declared by locals (use Shard, Replicate or Partial) at {where}")

    full = combine(())
    if tuple(full.shape) != tuple(spec.shape):
        raise ValueError(f"the locals assemble to shape {tuple(full.shape)}, not the declared {tuple(spec.shape)}")
    return full, locals_
