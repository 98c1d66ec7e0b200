"""``TorchGlooBackend``: torch.distributed.tensor on CPU with the gloo process group.

Uses torch's public DTensor API as the system under test: ``init_device_mesh``,
``distribute_tensor`` (default ``src_data_rank=0``) and ``DTensor.full_tensor``.
"""
from __future__ import annotations

import datetime
import inspect
import types
from typing import Any, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor import Partial as TPartial
from torch.distributed.tensor import Replicate as TReplicate
from torch.distributed.tensor import Shard as TShard

from ..model.placement import Partial, Placement, Replicate, Shard
from .backend import ShardBackend

_DTYPES = {
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
_NAMES = {v: k for k, v in _DTYPES.items()}


def to_torch_placement(p: Placement):
    """meshtest placement → ``torch.distributed.tensor`` placement."""
    if isinstance(p, Shard):
        return TShard(p.dim)
    if isinstance(p, Replicate):
        return TReplicate()
    if isinstance(p, Partial):
        return TPartial(p.reduce_op)
    raise TypeError(f"unknown placement {p!r}")


class TorchGlooBackend(ShardBackend):
    """Torch on CPU over gloo; the launch is torchrun (RANK/WORLD_SIZE/MASTER_* from its env)."""

    platform = "torch"

    def init(self, device_kind: str, timeout_s: float) -> None:
        if device_kind != "cpu":
            raise RuntimeError(f"TorchGlooBackend runs on device kind 'cpu', not {device_kind!r}")
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))

    def rank(self) -> int:
        return dist.get_rank()

    def world_size(self) -> int:
        return dist.get_world_size()

    def make_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...]) -> Any:
        return init_device_mesh("cpu", tuple(shape), mesh_dim_names=tuple(names))

    def make_tensor(self, array: np.ndarray, dtype: str, requires_grad: bool = False) -> Any:
        # np.array (not np.ascontiguousarray, which promotes 0-d to 1-d) keeps InputSpec(()) 0-d.
        t = torch.from_numpy(np.array(array, order="C")).to(_DTYPES[dtype])
        return t.requires_grad_(True) if requires_grad else t

    def clone(self, tensor: Any) -> Any:
        c = tensor.detach().clone()
        return c.requires_grad_(tensor.requires_grad)

    def distribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        d = distribute_tensor(tensor.detach(), mesh, [to_torch_placement(p) for p in placements])
        return d.requires_grad_(tensor.requires_grad)

    def local_to_global(self, tensor: Any) -> Any:
        return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        t = tensor.detach()
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        return t.contiguous().numpy()

    def dtype_name(self, tensor: Any) -> str:
        return _NAMES.get(tensor.dtype, str(tensor.dtype).replace("torch.", ""))

    def backward(self, outputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
        torch.autograd.backward(list(outputs), grad_tensors=list(grad_outputs))

    def grad_of(self, tensor: Any) -> Any:
        return tensor.grad

    def any_rank(self, flag: bool) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def recover_after_failure(self, timeout_s: float) -> bool:
        try:
            work = dist.barrier(async_op=True)
            return bool(work.wait(timeout=datetime.timedelta(seconds=timeout_s)))
        except RuntimeError:
            return False

    def case_fence(self, timeout_s: float) -> bool:
        """``dist.monitored_barrier`` (gloo): point-to-point with rank 0 on its own tag, so it
        never pairs with a collective a peer is still inside; rank 0's error names the ranks
        that did not arrive (logged). Only rank 0 applies ``timeout_s``; the other ranks wait at
        most the process group's timeout."""
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
            return True
        except Exception as e:  # RuntimeError (timeout, peer gone), ValueError (group destroyed), ...
            print(f"meshtest: case fence failed: {type(e).__name__}: {e}", flush=True)
            return False

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def features(self) -> frozenset:
        """Probed from the installed torch (see :data:`meshtest.model.rules.FEATURES`)."""
        import torch.distributed.tensor.parallel as tp

        found = {"dtensor"}
        styles = ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                  "PrepareModuleOutput", "PrepareModuleInputOutput", "parallelize_module")
        if all(hasattr(tp, n) for n in styles):
            found.add("tp.styles")
        if hasattr(tp, "NoParallel"):
            found.add("tp.no_parallel")
        if all(hasattr(tp, n) and "reduce_dtype" in inspect.signature(getattr(tp, n)).parameters
               for n in ("RowwiseParallel", "PrepareModuleOutput")):
            found.add("tp.reduce_dtype")
        if hasattr(tp, "loss_parallel"):
            found.add("loss_parallel")
        try:
            from torch.distributed.tensor.debug import CommDebugMode  # noqa: F401
            found.add("comm_debug_mode")
        except ImportError:
            pass
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
            found.add("fsdp2")
        except ImportError:
            pass
        return frozenset(found)

    def scenario_api(self) -> Any:
        """torch's names for the spec's concepts; a missing one (e.g. ``NoParallel`` in torch
        2.13) is ``None`` and the features say so."""
        import torch.distributed.tensor as dt
        import torch.distributed.tensor.parallel as tp
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.debug import CommDebugMode

        names = ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                 "PrepareModuleOutput", "PrepareModuleInputOutput", "NoParallel", "ParallelStyle",
                 "parallelize_module", "loss_parallel")
        api = {n: getattr(tp, n, None) for n in names}
        api.update(torch=torch, nn=torch.nn, F=torch.nn.functional, dist=dist, DTensor=dt.DTensor,
                   Shard=dt.Shard, Replicate=dt.Replicate, Partial=dt.Partial,
                   distribute_tensor=dt.distribute_tensor, init_device_mesh=init_device_mesh,
                   CommDebugMode=CommDebugMode, fully_shard=fully_shard,
                   funcol=torch.distributed._functional_collectives,
                   # the keys of CommDebugMode.get_comm_counts(): comm_ops.all_reduce, .reduce_scatter_tensor, ...
                   comm_ops=torch.ops.c10d_functional)
        return types.SimpleNamespace(**api)
