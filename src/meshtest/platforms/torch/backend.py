"""``TorchBackend``: the torch platform's :class:`~meshtest.platforms.backend.ShardBackend`,
composed of the rooms of this package.

Uses torch's public DTensor API as the system under test: ``init_device_mesh``,
``distribute_tensor`` (default ``src_data_rank=0``) and ``DTensor.full_tensor``. What a device
kind changes (its process group, its fence, its device) is a subclass's: :mod:`.gloo` (CPU),
:mod:`.accel` (NPU, CUDA), :mod:`.local_lane` (every rank in one process).
"""
from __future__ import annotations

import datetime
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor

from ...model.layout import TensorMeta
from ...model.placement import Placement
from ...model.rules import REPLICA_DIM
from ..backend import ShardBackend
from . import api, checkpoint, collectives, isolation, placement, probes, training
from .placement import (
    DTYPE_NAMES,
    DTYPES,
    check_local_shape,
    dtensor_as_given,
    dtensor_from_local,
    from_torch_placement,
    placement_layout,
    tensor_meta,
    to_torch_placement,
)


class TorchBackend(ShardBackend):
    """torch.distributed.tensor as meshtest's ShardBackend: placements, meshes and DTensors here;
    training, checkpoints, feature probes, process state and the scenario api in the modules of
    this package. ``init`` (the process group) is the device kind's subclass's."""

    platform = "torch"

    def rank(self) -> int:
        return dist.get_rank()

    def coordinate(self, mesh: Any, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        return tuple(mesh.get_coordinate())

    def from_local(self, array: np.ndarray, dtype: str, mesh: Any, placements: Sequence[Placement],
                   global_shape: Tuple[int, ...], requires_grad: bool = False, *, checked: bool = True) -> Any:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        tp = [to_torch_placement(p) for p in placements]
        if not checked:
            return dtensor_as_given(self.make_tensor(array, dtype), mesh, tp, global_shape, requires_grad)
        expected, offset = compute_local_shape_and_global_offset(torch.Size(global_shape), mesh, tp)
        laid = placement_layout(global_shape, tuple(mesh.shape), tuple(mesh.get_coordinate()), placements,
                                expected, offset)
        check_local_shape(self.rank(), array.shape, laid.shape, global_shape, placements)
        return dtensor_from_local(self.make_tensor(array, dtype), mesh, tp, global_shape, requires_grad)

    def redistribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        if not isinstance(tensor, DTensor):
            raise TypeError(f"redistribute needs a DTensor; got {type(tensor).__name__}")
        return tensor.redistribute(mesh, [to_torch_placement(p) for p in placements])

    def build_module(self, builder: Callable[..., Any], seed: int) -> Any:
        self.seed(seed)
        return builder(self.scenario_api())

    def parallelize_module(self, module: Any, mesh: Any, plan: Any) -> Any:
        """A dict: ``torch.distributed.tensor.parallel.parallelize_module(module, mesh, plan)``."""
        if isinstance(plan, dict):
            from torch.distributed.tensor.parallel import parallelize_module

            return parallelize_module(module, mesh, plan)
        return plan(module, mesh, self.scenario_api())

    def local_map(self, fn: Callable[..., Any], mesh: Any, args: Sequence[Any],
                  out_placements: Sequence[Sequence[Placement]]) -> Tuple[Any, ...]:
        """:func:`meshtest.platforms.torch.placement.local_map` (torch's ``local_map``)."""
        return placement.local_map(fn, mesh, args, out_placements)

    def placements_of(self, tensor: Any) -> Optional[Tuple[Placement, ...]]:
        return tuple(from_torch_placement(p) for p in tensor.placements) if isinstance(tensor, DTensor) else None

    def metadata_by_rank(self, tensor: Any) -> Optional[Dict[int, Tuple[Any, ...]]]:
        """:func:`meshtest.platforms.torch.placement.metadata_by_rank`."""
        return placement.metadata_by_rank(tensor)

    def tensor_meta(self, tensor: Any) -> Optional[TensorMeta]:
        """A DTensor's global metadata (its spec's shape and stride, ``is_contiguous()`` of the
        wrapper), a plain tensor's own; ``None`` for anything else."""
        return tensor_meta(tensor, self.dtype_name(tensor)) if isinstance(tensor, torch.Tensor) else None

    def library_paths(self) -> Tuple[str, ...]:
        return (os.path.dirname(torch.__file__),)

    def global_state(self) -> Dict[str, Any]:
        return {name: read() for name, (read, _) in isolation.STATE.items()}

    def restore_global_state(self, state: Dict[str, Any]) -> None:
        for name, value in state.items():
            read, restore = isolation.STATE[name]
            if read() != value:
                restore(value)

    def seed(self, seed: int) -> None:
        """``torch.manual_seed(seed)``, and DTensor's RNG tracker dropped so that the next random
        DTensor op builds a fresh one from that seed (torch syncs it from rank 0)."""
        import torch.distributed.tensor._random as dtensor_random

        torch.manual_seed(seed)
        dtensor_random._rng_tracker = None

    def forget_cached_decisions(self) -> None:
        """:func:`meshtest.platforms.torch.isolation.forget_cached_decisions`."""
        isolation.forget_cached_decisions()

    def explain(self, error: BaseException) -> Optional[str]:
        """:func:`meshtest.platforms.torch.collectives.explain_mismatch` (collective checks on)."""
        return collectives.explain_mismatch(error)

    def enable_collective_checks(self) -> bool:
        """``TORCH_DISTRIBUTED_DEBUG=DETAIL``: gloo process groups are wrapped so that each
        collective first compares every rank's fingerprint (op, shapes, dtypes) and raises
        "Detected mismatch between collectives on ranks" naming them."""
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level_from_env()
        return True

    def world_size(self) -> int:
        return dist.get_world_size()

    def make_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...]) -> Any:
        return init_device_mesh("cpu", tuple(shape), mesh_dim_names=tuple(names))

    def make_replicated_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...], replicas: int) -> Any:
        """``make_mesh((replicas, *shape), (REPLICA_DIM, *names))`` sliced to ``names``: torch's
        own sub-mesh of this rank (``DeviceMesh.__getitem__``)."""
        full = self.make_mesh((replicas, *shape), (REPLICA_DIM, *names))
        return full[tuple(names)] if len(names) > 1 else full[names[0]]

    def make_tensor(self, array: np.ndarray, dtype: str, requires_grad: bool = False) -> Any:
        # np.array (not np.ascontiguousarray, which promotes 0-d to 1-d) keeps InputSpec(()) 0-d.
        t = torch.from_numpy(np.array(array, order="C")).to(DTYPES[dtype])
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
        if t._is_zerotensor():  # autograd's all-zero gradient (of sgn, ...) holds no data to read
            t = torch.zeros(t.shape, dtype=t.dtype)
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        return t.contiguous().numpy()

    def dtype_name(self, tensor: Any) -> str:
        return DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype).replace("torch.", ""))

    def backward(self, outputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
        torch.autograd.backward(list(outputs), grad_tensors=list(grad_outputs))

    def differentiable(self, tensor: Any) -> bool:
        return bool(getattr(tensor, "requires_grad", False))

    def grad_of(self, tensor: Any) -> Any:
        return tensor.grad

    def collective_device(self) -> Any:
        """Where the tensors of meshtest's own collectives live: the process group's device (gloo:
        the CPU; hccl / nccl: the rank's device)."""
        return torch.device("cpu")

    def any_rank(self, flag: bool) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def recover_after_failure(self, timeout_s: float) -> bool:
        try:
            work = dist.barrier(async_op=True)
            return bool(work.wait(timeout=datetime.timedelta(seconds=timeout_s)))
        except RuntimeError:
            return False

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def build_info(self) -> Dict[str, str]:
        """torch's version and the CPU kernel path it dispatches to (``AVX2``, ``AVX512``, ...):
        float results of the same program may differ between code paths."""
        return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}

    def sharding_rules(self) -> Dict[str, str]:
        """DTensor's registered rules (:func:`meshtest.platforms.rules.registered_rules`)."""
        from . import rules

        return rules.registered_rules()

    def record_calls(self) -> Any:
        """:class:`meshtest.platforms.rules.CallRecorder` (wraps DTensor's sharding propagator)."""
        from . import rules

        return rules.CallRecorder()

    def record_dispatch(self) -> Any:
        """:class:`meshtest.platforms.torch.dispatch.DispatchRecorder`."""
        from .dispatch import DispatchRecorder

        return DispatchRecorder()

    def faults(self) -> Dict[str, str]:
        from . import rules

        return dict(rules.ALL_FAULTS)

    def fault_sites(self, call: Dict[str, Any]) -> List[str]:
        from . import rules

        return rules.fault_sites(call)

    def activate_mutant(self, mutant: str) -> None:
        from . import rules

        rules.activate(mutant)

    def features(self) -> frozenset:
        """Probed from the installed torch, each by its own probe (:data:`FEATURE_PROBES`), on this
        backend's device type: none is assumed present or absent, so a torch that gains a
        feature (a CPU strategy for flash attention, a CPU RNG tracker) runs its cases."""
        device = self.probe_device()
        return frozenset(name for name, probe in probes.FEATURE_PROBES.items() if probe(device))

    def probe_device(self) -> str:
        """The device type the feature probes ask about (``cpu`` here)."""
        return "cpu"

    def checkpoint_roundtrip(self, tensors: Dict[str, Any], mesh: Any, placements: Dict[str, Sequence[Placement]],
                             directory: str) -> Dict[str, Any]:
        """:func:`meshtest.platforms.torch.checkpoint.roundtrip` (DCP save, then load into zeros)."""
        return checkpoint.roundtrip(self, tensors, mesh, placements, directory)

    def train(self, case: Any, mesh: Any, parallel: bool, notes: Optional[list] = None, *, start: int = 0,
              steps: Optional[int] = None, load: Optional[str] = None, save: Optional[str] = None,
              light: bool = False) -> list:
        """:func:`meshtest.platforms.torch.training.train`; see :meth:`ShardBackend.train`."""
        return training.train(self, case, mesh, parallel, notes, start=start, steps=steps, load=load, save=save,
                              light=light)

    def scenario_api(self) -> Any:
        """:func:`meshtest.platforms.torch.api.scenario_api`."""
        return api.scenario_api()

    def repro_api_source(self) -> str:
        """:func:`meshtest.platforms.torch.api.repro_api_source`.

        :raises ValueError: an entry of the api that no import path gives back."""
        return api.repro_api_source()
