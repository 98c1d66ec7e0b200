"""The placement adapter: meshtest's placements, dtypes and layouts as torch.distributed.tensor's.

A placement maps one to one (:func:`to_torch_placement`, :func:`from_torch_placement`); a rank's
local shape is checked against the layout the placements define (:func:`placement_layout`, the
rule of :mod:`meshtest.model.layout`) before ``DTensor.from_local`` builds a DTensor of it.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor import Partial as TPartial
from torch.distributed.tensor import Replicate as TReplicate
from torch.distributed.tensor import Shard as TShard
from torch.distributed.tensor.placement_types import _StridedShard as TStridedShard

from ...model.layout import Layout, TensorMeta, local_layout
from ...model.placement import Partial, Placement, Replicate, Shard, StridedShard

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def local_of(t: Any) -> Any:
    """A DTensor's local shard (every rank checks its own), or the tensor."""
    return t.to_local() if isinstance(t, DTensor) else t


def full_of(t: Any) -> Any:
    return t.full_tensor() if isinstance(t, DTensor) else t


def full_numpy(t: Any) -> np.ndarray:
    t = full_of(t).detach()
    return (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).cpu().numpy().copy()


class TorchLayoutError(RuntimeError):
    """torch's local layout (``compute_local_shape_and_global_offset``) disagrees with the one
    the placements define (:mod:`meshtest.model.layout`): torch is wrong, not the case."""


def placement_layout(global_shape: Sequence[int], mesh_shape: Sequence[int], coordinate: Sequence[int],
                     placements: Sequence[Any], torch_shape: Sequence[int], torch_offset: Sequence[int]) -> Layout:
    """The layout the placements define for the rank at ``coordinate`` (:func:`meshtest.model.layout.local_layout`),
    checked against torch's answer for it (``torch_shape``, ``torch_offset``; an empty offset:
    torch skipped it). ``placements`` are torch's or meshtest's.

    :raises TorchLayoutError: torch's local shape or global offset differs from the placements';
        the message names the placements, the mesh coordinate and both answers."""
    ours_p = [p if isinstance(p, Placement) else from_torch_placement(p) for p in placements]
    ours = local_layout(tuple(global_shape), tuple(mesh_shape), tuple(coordinate), ours_p)
    shape, offset = tuple(int(s) for s in torch_shape), tuple(int(o) for o in torch_offset)
    if shape != ours.shape or (offset and offset != ours.offset):
        raise TorchLayoutError(
            f"torch's local layout is wrong: global shape {tuple(global_shape)} placed {list(ours_p)} on mesh "
            f"{tuple(mesh_shape)}, mesh coordinate {tuple(coordinate)}: the placements give local shape "
            f"{ours.shape} at global offset {ours.offset} (meshtest.model.layout: torch.chunk per mesh dim, left "
            f"to right); torch's compute_local_shape_and_global_offset gives {shape} at {offset}")
    return ours


def metadata(tensor: Any, value: Callable[[Any], Any] = int) -> Tuple[Any, ...]:
    """A DTensor's global metadata as plain values: ``(shape, stride, placements, layout)``
    (``value`` reads one size: a simulated rank's entry of a per-rank size); ``layout`` is
    ``(local shape, the local shape the placements lay out for the global shape)``
    (:func:`placement_layout`, which also holds torch's own answer to it).

    :raises TorchLayoutError: see :func:`placement_layout`."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    mesh = tensor.device_mesh
    expected, offset = compute_local_shape_and_global_offset(tensor.shape, mesh, tensor.placements)
    global_shape = tuple(value(d) for d in tensor.shape)
    local = tuple(value(d) for d in tensor.to_local().shape)
    try:
        laid = placement_layout(global_shape, tuple(mesh.shape), tuple(value(c) for c in mesh.get_coordinate()),
                                tensor.placements, [value(d) for d in expected], [value(o) for o in offset]).shape
    except TypeError:  # a placement meshtest has no counterpart for: torch's answer is the only one
        laid = tuple(value(d) for d in expected)
    return (global_shape, tuple(value(d) for d in tensor.stride()),
            tuple(str(p) for p in tensor.placements), (local, laid))


def tensor_meta(tensor: Any, dtype: str, value: Callable[[Any], Any] = int) -> TensorMeta:
    """``tensor``'s global metadata (:class:`meshtest.model.layout.TensorMeta`); ``value`` reads
    one size or stride (a simulated rank's entry of a per-rank size)."""
    return TensorMeta(tuple(value(d) for d in tensor.shape), tuple(value(d) for d in tensor.stride()),
                      bool(tensor.is_contiguous()), dtype, bool(tensor.requires_grad))


def to_torch_placement(p: Placement):
    """meshtest placement → ``torch.distributed.tensor`` placement."""
    if isinstance(p, StridedShard):
        return TStridedShard(p.dim, split_factor=p.split_factor)
    if isinstance(p, Shard):
        return TShard(p.dim)
    if isinstance(p, Replicate):
        return TReplicate()
    if isinstance(p, Partial):
        return TPartial(p.reduce_op)
    raise TypeError(f"unknown placement {p!r}")


def from_torch_placement(p: Any) -> Placement:
    """``torch.distributed.tensor`` placement → meshtest placement (for placement checks)."""
    if isinstance(p, TStridedShard):
        return StridedShard(p.dim, p.split_factor)
    if isinstance(p, TShard):
        return Shard(p.dim)
    if isinstance(p, TReplicate):
        return Replicate()
    if isinstance(p, TPartial):
        return Partial(str(p.reduce_op))
    raise TypeError(f"torch placement {p!r} has no meshtest counterpart")


def check_local_shape(rank: int, got: Sequence[int], expected: Sequence[int], global_shape: Sequence[int],
                      placements: Sequence[Placement]) -> None:
    """:raises ValueError: ``rank``'s local shape is not the one its placements lay out for it
    (:func:`placement_layout`; ``DTensor.from_local`` would build an invalid DTensor); the
    message says both."""
    if tuple(int(s) for s in expected) != tuple(got):
        raise ValueError(f"rank {rank}: local shape {tuple(got)}, but the placements lay out global shape "
                         f"{tuple(global_shape)} placed {list(placements)} as local shape "
                         f"{tuple(int(s) for s in expected)} here (DTensor.from_local would build an invalid DTensor)")


def dtensor_from_local(local: Any, mesh: Any, tp: Sequence[Any], global_shape: Sequence[int],
                       requires_grad: bool) -> Any:
    """``DTensor.from_local`` of ``global_shape`` (its contiguous stride), a leaf when ``requires_grad``."""
    d = DTensor.from_local(local, mesh, list(tp), run_check=False, shape=torch.Size(global_shape),
                           stride=torch.empty(global_shape, device="meta").stride())
    return d.detach().requires_grad_(True) if requires_grad else d


def dtensor_as_given(local: Any, mesh: Any, tp: Sequence[Any], global_shape: Sequence[int],
                     requires_grad: bool) -> Any:
    """``DTensor.from_local(local, mesh, tp, run_check=True, shape=..., stride=...)``: the
    declared global shape and torch's own check of the locals against it
    (``LocalInput(checked=False)``), a leaf when ``requires_grad``."""
    d = DTensor.from_local(local, mesh, list(tp), run_check=True, shape=torch.Size(global_shape),
                           stride=torch.empty(global_shape, device="meta").stride())
    return d.detach().requires_grad_(True) if requires_grad else d


def local_map(fn: Callable[..., Any], mesh: Any, args: Sequence[Any],
              out_placements: Sequence[Sequence[Placement]]) -> Tuple[Any, ...]:
    """torch's ``local_map`` (``torch.distributed.tensor.experimental``), no input placements
    given (each DTensor argument is taken as it is placed)."""
    from torch.distributed.tensor.experimental import local_map

    tp = [[to_torch_placement(p) for p in per] for per in out_placements]
    n = len(tp)

    def counted(*local_args: Any) -> Any:
        out = fn(*local_args, mesh=mesh)
        outs = (out,) if isinstance(out, torch.Tensor) else tuple(out) if isinstance(out, (tuple, list)) else None
        if outs is None or len(outs) != n:
            got = type(out).__name__ if outs is None else f"{len(outs)} output(s)"
            raise ValueError(f"local_fn returned {got}; local_output_placements declares {n}")
        return outs[0] if n == 1 else outs

    out = local_map(counted, out_placements=tp[0] if n == 1 else tuple(tp),
                    device_mesh=mesh)(*args)
    return (out,) if n == 1 else tuple(out)


def metadata_by_rank(tensor: Any) -> Optional[Dict[int, Tuple[Any, ...]]]:
    """``dist.all_gather_object`` of this rank's ``(shape, stride, placements)`` over the launch
    (every rank of a launch runs every case)."""
    if not isinstance(tensor, DTensor):
        return None
    mine = metadata(tensor)
    every: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return dict(enumerate(every))
