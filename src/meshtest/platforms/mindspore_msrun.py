"""``MindSporeBackend``: MindSpore ranks started by msrun (the MindSpore deployment of the platform port).

Runs on ``cpu`` (MindSpore's ``mccl`` communication: AllReduce with ``sum``, AllGather and
Broadcast have CPU kernels in MindSpore 2.10; ReduceScatter and AllReduce with another reduce op
do not) and on ``npu`` (Ascend, HCCL; not run here: docs/platforms.md has the checklist).

What runs:

- **scenario cases** (``ScenarioCase``) with ``requires=("collectives",)``: ``ctx.api.comm``
  holds the collectives on each rank's plain tensors (:class:`Collectives`), ``ctx.api.ms`` /
  ``ops`` / ``mint`` / ``Tensor`` the MindSpore namespaces;
- **op cases** (``OpShardCase``) through the DTensor API the framework design names for MindSpore —
  HyperParallel's ``distribute_tensor`` / ``DTensor.full_tensor`` — when ``hyper_parallel``
  imports. MindSpore 2.10 itself has no public DTensor, and HyperParallel is not on PyPI: without
  it an op case is reported ``unsupported on platform mindspore: ...`` at its ``distribute``
  step (counted and listed, never passed).

The rank number comes from msrun's ``RANK_ID`` (:func:`meshtest.rank.entry.rank_from_env`);
msrun gives a single node's workers ``DEVICE_ID`` = local rank, which on Ascend indexes the
devices ``ASCEND_RT_VISIBLE_DEVICES`` leaves visible (the launch's device slots).
"""
from __future__ import annotations

import os
import types
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import communication, mint, ops

from ..errors import Unsupported
from ..model.placement import Partial, Placement, Replicate, Shard
from .backend import ShardBackend

#: meshtest dtype name → NumPy dtype the array is cast to before ``ms.Tensor`` (bfloat16 goes
#: through float32, NumPy has none).
_NP = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8, "int32": np.int32,
       "int64": np.int64, "uint8": np.uint8, "bool": np.bool_, "bfloat16": np.float32}
_MS = {"float16": ms.float16, "bfloat16": ms.bfloat16, "float32": ms.float32, "float64": ms.float64, "int8": ms.int8,
       "int32": ms.int32, "int64": ms.int64, "uint8": ms.uint8, "bool": ms.bool_}
_NAMES = {str(v): k for k, v in _MS.items()}

#: The module the framework design's MindSpore cases import their DTensor API from.
HYPER_PARALLEL = "hyper_parallel"


def _hyper_parallel() -> Tuple[Optional[Any], str]:
    """HyperParallel's DTensor pieces as a namespace, or ``None`` and why it is not importable.

    Written against HyperParallel's public import paths (those its own test files use); not run
    where this was written (HyperParallel is not installable from PyPI): docs/platforms.md,
    "Checklist for real hardware", has the command that exercises it."""
    # optional (not on PyPI): no dependency for the build to infer
    try:
        from hyper_parallel.core.dtensor import distribute_tensor  # pants: no-infer-dep
        from hyper_parallel.core.dtensor import placement_types as pt  # pants: no-infer-dep
        from hyper_parallel.core.dtensor.device_mesh import init_device_mesh  # pants: no-infer-dep
        from hyper_parallel.core.dtensor.dtensor import DTensor  # pants: no-infer-dep
    except ImportError as e:
        return None, f"{HYPER_PARALLEL} is not importable ({e})"
    return types.SimpleNamespace(distribute_tensor=distribute_tensor, init_device_mesh=init_device_mesh,
                                 DTensor=DTensor, pt=pt), ""


@dataclass(frozen=True)
class HostMesh:
    """The launch's mesh where no DeviceMesh type exists: its shape, axis names and ranks
    (row-major, as ``init_device_mesh`` lays them out)."""

    shape: Tuple[int, ...]
    mesh_dim_names: Tuple[str, ...]

    def size(self) -> int:
        return int(np.prod(self.shape))


class Collectives:
    """``ctx.api.comm``: MindSpore's collectives over the world group, on this rank's tensors.

    Each returns a new tensor; an operation the device has no kernel for raises MindSpore's own
    error (on CPU: ``reduce_scatter``, ``all_reduce`` with ``op`` other than ``"sum"`` or on a dtype other than
    float32/float16).
    """

    def all_reduce(self, tensor: Any, op: str = "sum") -> Any:
        """Elementwise reduction over every rank (``op``: sum, max, min, prod); same shape."""
        return ops.AllReduce(op=op)(tensor)

    def all_gather(self, tensor: Any) -> Any:
        """Every rank's tensor concatenated along dimension 0, in rank order."""
        return ops.AllGather()(tensor)

    def broadcast(self, tensor: Any, src: int = 0) -> Any:
        """Rank ``src``'s tensor, on every rank."""
        return ops.Broadcast(src)((tensor,))[0]

    def reduce_scatter(self, tensor: Any, op: str = "sum") -> Any:
        """The reduction over every rank, split along dimension 0: rank ``k`` gets block ``k``."""
        return ops.ReduceScatter(op=op)(tensor)

    def barrier(self) -> None:
        """Returns once every rank has called it (an all-reduce of one element)."""
        ops.AllReduce()(ms.Tensor(np.zeros(1, np.float32))).asnumpy()


def run_scheduler() -> int:
    """msrun's scheduler process (``MS_ROLE=MS_SCHED``): MindSpore's ``init()`` there serves the
    workers' cluster until they finish, then returns (or raises when a worker stops answering)."""
    communication.init()
    return 0


class MindSporeBackend(ShardBackend):
    """MindSpore over msrun (``RANK_ID``, ``DEVICE_ID`` and the scheduler address from its env)."""

    platform = "mindspore"
    #: end the rank process through the interpreter's normal exit: MindSpore tells msrun's
    #: scheduler the worker finished only there (with ``os._exit`` the scheduler waits ~30 s for a
    #: heartbeat, then fails the job)
    hard_exit = False

    def __init__(self) -> None:
        self._hp, self._hp_missing = _hyper_parallel()
        self._comm = Collectives()

    # --- the device and the runtime -------------------------------------------------------

    def device_problem(self, device_kind: str, need: int) -> Optional[str]:
        if device_kind == "cpu":
            return None
        if device_kind != "npu":
            return f"platform 'mindspore' runs on device kinds cpu and npu, not {device_kind!r}"
        try:
            available = ms.hal.is_available("Ascend")
        except Exception as e:  # the CPU build cannot even load its Ascend plugin
            return (f"MindSpore {ms.__version__} here has no Ascend support ({type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}): the npu gates need an Ascend node with CANN and "
                    "MindSpore's Ascend build")
        if not available:
            return (f"MindSpore {ms.__version__} here sees no Ascend device (mindspore.hal.is_available('Ascend') "
                    "is False): the npu gates need an Ascend node with CANN and MindSpore's Ascend build")
        count = ms.hal.device_count("Ascend")
        if count < need:
            return (f"{need} Ascend device(s) needed (device ids are the slot pool's ids, 0..{need - 1}: set "
                    f"[meshtest].slots / --slots to the node's count); MindSpore sees {count}")
        return None

    def init(self, device_kind: str, timeout_s: float) -> None:
        if device_kind == "npu":
            # HCCL's timeouts, as TorchHcclBackend sets them (meshtest.platforms.torch.accel)
            os.environ.setdefault("HCCL_CONNECT_TIMEOUT", "120")
            os.environ.setdefault("HCCL_EXEC_TIMEOUT", str(max(1, int(timeout_s))))
            ms.set_device("Ascend", int(os.environ.get("DEVICE_ID", "0")))
        elif device_kind == "cpu":
            ms.set_device("CPU")
        else:
            raise RuntimeError(f"MindSporeBackend runs on device kinds cpu and npu, not {device_kind!r}")
        communication.init()  # the scheduler msrun started; mccl on CPU, hccl on Ascend

    def rank(self) -> int:
        return communication.get_rank()

    def world_size(self) -> int:
        return communication.get_group_size()

    def make_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...]) -> Any:
        if self._hp is not None:
            return self._hp.init_device_mesh(ms.get_context("device_target"), tuple(shape), mesh_dim_names=tuple(names))
        return HostMesh(tuple(shape), tuple(names))

    def shutdown(self) -> None:
        communication.release()

    # --- tensors ----------------------------------------------------------------------------

    def make_tensor(self, array: np.ndarray, dtype: str, requires_grad: bool = False) -> Any:
        return ms.Tensor(np.array(array).astype(_NP[dtype]), dtype=_MS[dtype])

    def clone(self, tensor: Any) -> Any:
        return tensor.copy()

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, ms.Tensor)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        if isinstance(tensor, np.ndarray):
            return tensor
        if self._hp is not None and isinstance(tensor, self._hp.DTensor):
            tensor = tensor.full_tensor()
        if tensor.dtype in (ms.bfloat16,):
            tensor = tensor.astype(ms.float32)
        return tensor.asnumpy().copy()

    def dtype_name(self, tensor: Any) -> str:
        if isinstance(tensor, np.ndarray):
            return str(tensor.dtype)
        return _NAMES.get(str(tensor.dtype), str(tensor.dtype))

    # --- DTensor (HyperParallel, when installed) --------------------------------------------

    def _require_dtensor(self) -> Any:
        if self._hp is None:
            raise Unsupported(f"no DTensor API: MindSpore {ms.__version__} has none of its own, and the framework "
                              "design's "
                              f"(HyperParallel's distribute_tensor / full_tensor) is missing: {self._hp_missing}")
        return self._hp

    def distribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        hp = self._require_dtensor()
        return hp.distribute_tensor(tensor, mesh, [self._placement(hp, p) for p in placements])

    @staticmethod
    def _placement(hp: Any, p: Placement) -> Any:
        if isinstance(p, Shard):
            return hp.pt.Shard(p.dim)
        if isinstance(p, Replicate):
            return hp.pt.Replicate()
        if isinstance(p, Partial) and hasattr(hp.pt, "Partial"):
            return hp.pt.Partial(p.reduce_op)
        raise Unsupported(f"placement {p!r} has no HyperParallel counterpart here")

    def local_to_global(self, tensor: Any) -> Any:
        if self._hp is not None and isinstance(tensor, self._hp.DTensor):
            return tensor.full_tensor()
        return tensor

    def backward(self, outputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
        raise Unsupported("MindSpore computes gradients functionally (mindspore.grad); meshtest's backward step "
                          "for MindSpore op cases is not written")

    def grad_of(self, tensor: Any) -> Any:
        raise Unsupported("no gradients for MindSpore op cases (see backward)")

    # --- collectives meshtest itself needs ----------------------------------------------------

    def any_rank(self, flag: bool) -> bool:
        # sum over float32: the one reduce op and a dtype MindSpore's CPU AllReduce kernel supports
        total = ops.AllReduce()(ms.Tensor(np.array([1.0 if flag else 0.0], np.float32))).asnumpy()
        return bool(total[0] > 0)

    def recover_after_failure(self, timeout_s: float) -> bool:
        """An all-reduce of one element. mccl has no per-call timeout: a rank that never arrives
        is ended by the runner's watcher at the case deadline (``timeout_s`` unused)."""
        try:
            self._comm.barrier()
            return True
        except Exception:  # a broken group: the launch ends, the rest is relaunched
            return False

    # --- isolation, reporting, features ----------------------------------------------------------

    def library_paths(self) -> Tuple[str, ...]:
        return (os.path.dirname(ms.__file__),)

    def global_state(self) -> Dict[str, Any]:
        return {"execution mode": ms.get_context("mode")}

    def restore_global_state(self, state: Dict[str, Any]) -> None:
        if "execution mode" in state and ms.get_context("mode") != state["execution mode"]:
            ms.set_context(mode=state["execution mode"])

    def seed(self, seed: int) -> None:
        ms.set_seed(seed)

    def build_info(self) -> Dict[str, str]:
        return {"mindspore": ms.__version__}

    def features(self) -> frozenset:
        """``collectives`` always; ``dtensor`` when HyperParallel's DTensor imports."""
        return frozenset({"collectives"} | ({"dtensor"} if self._hp is not None else set()))

    def scenario_api(self) -> Any:
        """``ms`` (mindspore), ``ops``, ``mint``, ``Tensor``, ``np`` (NumPy, for references) and
        ``comm`` (:class:`Collectives`)."""
        return types.SimpleNamespace(ms=ms, ops=ops, mint=mint, Tensor=ms.Tensor, np=np, comm=self._comm)
