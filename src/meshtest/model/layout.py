"""Each rank's local shape and global offset, from the placement semantics alone.

meshtest checks every local part it builds and every DTensor an op returns against the layout
its placements define. That expected answer must not come from the code under test (torch's
``compute_local_shape_and_global_offset``): a bug there that stays consistent with itself would
pass. This module derives it from the placements' documented semantics, and the platform
adapters compare the platform's own answer with it (a disagreement is the platform's layout
being wrong, not a bad input).

The semantics, per tensor dim ``d``, keeping the list of global indices a rank holds (all of
``range(size)`` to begin with), mesh dims taken left to right:

- ``Shard(d)`` on a mesh dim of ``n`` ranks: the held indices are split as ``torch.chunk``
  splits a dim — pieces of ``ceil(len / n)``, the last ones shorter or empty — and the rank at
  coordinate ``c`` on that mesh dim keeps piece ``c``. Two mesh dims sharding one tensor dim
  nest: the second splits what the first left (torch's docstring: a ``[2, 5]`` tensor placed
  ``(Shard(1), Shard(1))`` on a ``(2, 2)`` mesh gives local shapes ``(2, 2) (2, 1) (2, 1)
  (2, 1)`` at offsets ``(0, 0) (0, 2) (0, 3) (0, 4)``);
- ``StridedShard(d, k)``: the held indices are first split into ``k`` pieces as above, each
  piece is split among the ``n`` ranks, and the rank keeps its part of every piece, in order
  (torch's ``_StridedShard`` docstring: ``[StridedShard(0, 2), Shard(0)]`` on a ``(2, 2)`` mesh
  deals the 8 rows of an ``[8, 8]`` tensor as rows 0-1, 4-5, 2-3, 6-7 to coordinates (0, 0),
  (0, 1), (1, 0), (1, 1));
- ``Replicate()`` and ``Partial(op)``: every rank holds all it held.

The local size of dim ``d`` is how many indices the rank holds; its global offset is the first
of them, or the dim's size when it holds none (an empty shard begins past the end).

Stdlib only, no platform import: both sides and the tests use it as it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

from .placement import Placement, Shard, StridedShard


@dataclass(frozen=True)
class Layout:
    """One rank's part of a tensor: ``shape`` (its local sizes) and ``offset`` (per dim, the
    global index where its data begins), both as long as the global shape."""

    shape: Tuple[int, ...]
    offset: Tuple[int, ...]


#: The fields of a distributed output's metadata compared with the reference's at step
#: ``output-metadata`` (:mod:`meshtest.rank.metadata`), in the order they are reported.
METADATA_FIELDS = ("stride", "contiguous", "requires_grad")


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's global metadata as plain values.

    :ivar shape: global sizes.
    :ivar stride: global strides, in elements, one per dim.
    :ivar contiguous: ``is_contiguous()`` of the (global) tensor.
    :ivar dtype: the platform-agnostic dtype name (``"float32"``).
    :ivar requires_grad: whether autograd records the tensor.
    """

    shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    contiguous: bool
    dtype: str
    requires_grad: bool


def chunk(indices: Sequence[int], n: int) -> List[List[int]]:
    """``indices`` split into ``n`` pieces as ``torch.chunk`` splits a dim: ``ceil(len / n)``
    each, then what is left, then empty pieces (``len`` 4 in 3: 2, 2, 0).

    :raises ValueError: ``n`` < 1."""
    if n < 1:
        raise ValueError(f"a mesh dim of {n} ranks")
    step = -(-len(indices) // n) if indices else 0
    return [list(indices[min(i * step, len(indices)):min((i + 1) * step, len(indices))]) for i in range(n)]


def held_indices(global_shape: Sequence[int], mesh_shape: Sequence[int], coordinate: Sequence[int],
                 placements: Sequence[Placement]) -> List[List[int]]:
    """Per tensor dim, the global indices the rank at ``coordinate`` holds (module docstring).

    :raises ValueError: ``placements``, ``mesh_shape`` and ``coordinate`` differ in length; a
        coordinate outside its mesh dim; a shard of a dim the shape does not have (a negative
        ``dim`` counts from the last)."""
    if not len(placements) == len(mesh_shape) == len(coordinate):
        raise ValueError(f"{len(placements)} placement(s) for a mesh of shape {tuple(mesh_shape)} at coordinate "
                         f"{tuple(coordinate)}: one placement per mesh dim")
    held = [list(range(size)) for size in global_shape]
    for j, (p, n, c) in enumerate(zip(placements, mesh_shape, coordinate)):
        if not 0 <= c < n:
            raise ValueError(f"coordinate {c} on mesh dim {j} of {n} ranks")
        if not isinstance(p, (Shard, StridedShard)):
            continue
        d = p.dim + len(global_shape) if p.dim < 0 else p.dim
        if not 0 <= d < len(global_shape):
            raise ValueError(f"{p!r} on a tensor of {len(global_shape)} dim(s)")
        if isinstance(p, StridedShard):
            held[d] = [i for piece in chunk(held[d], p.split_factor) for i in chunk(piece, n)[c]]
        else:
            held[d] = chunk(held[d], n)[c]
    return held


def local_layout(global_shape: Sequence[int], mesh_shape: Sequence[int], coordinate: Sequence[int],
                 placements: Sequence[Placement]) -> Layout:
    """The local shape and global offset of the rank at ``coordinate`` (module docstring).

    :raises ValueError: as :func:`held_indices`."""
    held = held_indices(global_shape, mesh_shape, coordinate, placements)
    return Layout(tuple(len(h) for h in held),
                  tuple(h[0] if h else size for h, size in zip(held, global_shape)))
