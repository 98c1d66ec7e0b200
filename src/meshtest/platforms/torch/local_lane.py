"""``TorchLocalBackend``: every rank of a mesh simulated in one process (the ``local`` lane).

torch's own simulator of SPMD ranks is used as is: a ``fake`` process group of the mesh's world
size (``dist.init_process_group("fake", rank=0, world_size=n)``) and
``torch.distributed._local_tensor.LocalTensorMode(n)``, under which a DTensor's local part is a
``LocalTensor`` holding one tensor per rank and a collective is carried out on those tensors
(torch's ``LocalDTensorTestBase`` runs its DTensor tests the same way). The case pipeline is
the one the real lane runs (:mod:`meshtest.rank.pipeline`); what differs is answered here:

- a value that differs by rank (a gathered output, a rank's coordinate) is a ``LocalTensor`` /
  ``LocalIntNode``; :meth:`to_numpy_by_rank` splits it, so every simulated rank's result is
  compared with the reference, as each rank does in the real lane;
- an input declared by locals (:class:`meshtest.model.local_input.LocalInput`) becomes one
  ``LocalTensor`` of all ranks' locals (:meth:`from_locals`);
- collectives across processes (``any_rank``, the end-of-case fence) are trivial: there is one.

What the simulation cannot show (process start-up, a hang, a broken communicator, gloo's own
collective implementations) is the real lane's business; ``tools/lane_diff.py`` lists the
cases whose verdicts differ between the two lanes, each with its reason.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalIntNode, LocalTensor, LocalTensorMode, maybe_disable_local_tensor_mode
from torch.distributed.tensor import DTensor, distribute_tensor

from ...model.layout import TensorMeta
from ...model.placement import Partial, Placement
from .backend import TorchBackend
from .placement import (
    check_local_shape,
    dtensor_as_given,
    dtensor_from_local,
    metadata,
    placement_layout,
    tensor_meta,
    to_torch_placement,
)


def _rank_value(value: Any, rank: int) -> Any:
    """``value`` as rank ``rank`` sees it: a ``LocalTensor``'s or ``LocalIntNode``'s entry, or
    ``value`` itself."""
    if isinstance(value, LocalTensor):
        return value._local_tensors[rank]
    if isinstance(value, torch.SymInt) and isinstance(value.node, LocalIntNode):
        return value.node._local_ints[rank]
    if isinstance(value, LocalIntNode):
        return value._local_ints[rank]
    return value


class TorchLocalBackend(TorchBackend):
    """Torch on CPU, all ranks of one mesh in this process (``fake`` process group +
    ``LocalTensorMode``). :meth:`set_world` switches the simulated world size between cases."""

    platform = "torch"

    def __init__(self) -> None:
        self._world = 0
        self._mode: Any = None

    def set_world(self, world_size: int) -> None:
        """Leave the current simulated world (if any) and start one of ``world_size`` ranks."""
        self.shutdown()
        dist.init_process_group("fake", rank=0, world_size=world_size)
        self._mode = LocalTensorMode(world_size)
        self._mode.__enter__()
        self._world = world_size

    def init(self, device_kind: str, timeout_s: float) -> None:
        if device_kind != "cpu":
            raise RuntimeError(f"TorchLocalBackend simulates ranks on device kind 'cpu', not {device_kind!r}")

    def rank(self) -> int:
        return 0

    def world_size(self) -> int:
        return self._world

    def ranks(self) -> Tuple[int, ...]:
        return tuple(range(self._world))

    def from_locals(self, locals_: Dict[Tuple[int, ...], np.ndarray], dtype: str, mesh: Any,
                    mesh_shape: Tuple[int, ...], placements: Sequence[Placement], global_shape: Tuple[int, ...],
                    requires_grad: bool = False, *, checked: bool = True) -> Any:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        tp = [to_torch_placement(p) for p in placements]
        expected, offset = compute_local_shape_and_global_offset(torch.Size(global_shape), mesh, tp)
        coords = mesh.get_coordinate()
        per_rank = {}
        for r in self.ranks():
            coord = tuple(int(_rank_value(c, r)) for c in coords)
            array = locals_[coord]
            laid = placement_layout(global_shape, tuple(mesh_shape), coord, placements,
                                    [_rank_value(s, r) for s in expected], [_rank_value(o, r) for o in offset])
            if checked:
                check_local_shape(r, array.shape, laid.shape, global_shape, placements)
            per_rank[r] = self.make_tensor(array, dtype)
        with maybe_disable_local_tensor_mode():
            local = LocalTensor(per_rank)
        if not checked:
            return dtensor_as_given(local, mesh, tp, global_shape, requires_grad)
        return dtensor_from_local(local, mesh, tp, global_shape, requires_grad)

    def replicated(self, tensor: Any) -> Any:
        """``tensor`` as every simulated rank's copy (a ``LocalTensor``). ``distribute_tensor`` of
        a plain tensor under ``LocalTensorMode`` keeps plain local parts, on which the ``fake``
        group's collectives do nothing (a ``Partial`` input would never be summed)."""
        if isinstance(tensor, LocalTensor):
            return tensor
        with maybe_disable_local_tensor_mode():
            return LocalTensor({r: tensor.detach().clone() for r in self.ranks()})

    def distribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        tp = [to_torch_placement(p) for p in placements]
        # Shard/Replicate of a plain tensor split it once and hand each rank its chunk (a
        # LocalTensor); only a Partial input needs every rank's own copy first
        source = self.replicated(tensor) if any(isinstance(p, Partial) for p in placements) else tensor.detach()
        d = distribute_tensor(source, mesh, tp)
        return d.requires_grad_(tensor.requires_grad)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return next(iter(self.to_numpy_by_rank(tensor).values()))

    def to_numpy_by_rank(self, tensor: Any) -> Dict[int, np.ndarray]:
        """Every simulated rank's value of ``tensor`` (the same array for a plain tensor)."""
        if isinstance(tensor, LocalTensor):
            with maybe_disable_local_tensor_mode():
                return {r: TorchBackend.to_numpy(self, t) for r, t in sorted(tensor._local_tensors.items())}
        with maybe_disable_local_tensor_mode():
            value = TorchBackend.to_numpy(self, tensor)
        return {r: value for r in self.ranks()}

    def prove_mutant(self, mutant: str, calls: Sequence[Dict[str, Any]]) -> Tuple[bool, str]:
        """Replays recorded calls on this simulated world (:func:`meshtest.platforms.torch.witness.prove`)."""
        from . import witness

        return witness.prove(mutant, calls, self)

    def any_rank(self, flag: bool) -> bool:
        return bool(flag)

    def metadata_by_rank(self, tensor: Any) -> Optional[Dict[int, Tuple[Any, ...]]]:
        """Each simulated rank's view of the global metadata (a size that differs by rank is a
        per-rank integer under ``LocalTensorMode``), without the local layout: a simulated gather
        pairs no collectives of different sizes, so locals off the layout gather to a tensor the
        comparison judges (the real lane stops them at ``output-metadata``)."""
        if not isinstance(tensor, DTensor):
            return None
        return {r: metadata(tensor, lambda d, r=r: int(_rank_value(d, r)))[:3] for r in self.ranks()}

    def tensor_meta(self, tensor: Any) -> Optional[TensorMeta]:
        """As on real ranks, read on simulated rank 0 (the ranks' agreement on shape and stride is
        checked before, by :meth:`metadata_by_rank`)."""
        if not isinstance(tensor, torch.Tensor):
            return None
        return tensor_meta(tensor, self.dtype_name(tensor), lambda d: int(_rank_value(d, 0)))

    def recover_after_failure(self, timeout_s: float) -> bool:
        return True

    def case_fence(self, timeout_s: float) -> bool:
        return True

    def enable_collective_checks(self) -> bool:
        return False

    def shutdown(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        if dist.is_initialized():
            dist.destroy_process_group()
        self._world = 0
