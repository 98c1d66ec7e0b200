"""torch.distributed.tensor on an accelerator: Ascend NPUs over hccl (:class:`TorchHcclBackend`,
the Torch Ascend deployment) and CUDA GPUs over nccl (:class:`TorchNcclBackend`).

The DTensor side is :class:`meshtest.platforms.torch.backend.TorchBackend`'s; what differs is
the device layer, reached only through torch's device-module interface (``torch.npu`` once
``torch_npu`` is imported, ``torch.cuda``):

- the device layer is imported lazily, in :meth:`init` (``torch_npu`` breaks ``import torch``
  on a machine without CANN unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, which the runner sets
  for ``npu`` launches);
- each rank selects device ``<type>:<LOCAL_RANK>``, an index into the devices its launch sees
  (the runner exports the launch's device slots as ``ASCEND_RT_VISIBLE_DEVICES`` /
  ``CUDA_VISIBLE_DEVICES``), and the process group is the device's (``hccl`` / ``nccl``),
  checked after start;
- inputs and meshes live on that device; results come back to the host for comparison;
- the end-of-case fence and the health probe are an all-reduce of one element waited on with
  a timeout (``monitored_barrier`` is gloo's only).

``MESHTEST_HOST_TENSORS=1`` (a wiring check, e.g. with a test double of the device layer on a
CPU machine): everything above runs except that tensors and the mesh stay on the host CPU.
"""
from __future__ import annotations

import datetime
import importlib
import logging
import os
from typing import Any, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from .backend import TorchBackend

log = logging.getLogger("meshtest.rank")

#: Set to ``1``: tensors and meshes stay on the host (see the module docstring).
HOST_TENSORS_ENV = "MESHTEST_HOST_TENSORS"


class TorchAcceleratorBackend(TorchBackend):
    """Torch DTensor on ``device_type`` devices over the ``dist_backend`` process group."""

    #: meshtest's device kind (``--device-kind``)
    device_kind = ""
    #: torch's device type, and the attribute of ``torch`` holding its device module
    device_type = ""
    #: the process-group backend torch must report after :meth:`init`
    dist_backend = ""
    #: the module that adds the device to torch (``torch_npu``), or ``""`` when torch has it built in
    device_layer = ""
    #: what the user needs where the device layer is missing (one line)
    install_hint = ""
    #: the variable the runner exports the launch's device slots in
    visible_env = ""

    def __init__(self) -> None:
        super().__init__()
        self._device: Optional[torch.device] = None
        self._mesh_type = "cpu"

    # --- the device layer ----------------------------------------------------------------------

    def _layer(self) -> Any:
        """Import the device layer (if any) and return torch's device module for ``device_type``.

        :raises ImportError: the device layer is not installed or cannot load.
        """
        if self.device_layer:
            importlib.import_module(self.device_layer)
        module = getattr(torch, self.device_type, None)
        if module is None:
            raise ImportError(f"torch has no device module torch.{self.device_type}")
        return module

    def device_problem(self, device_kind: str, need: int) -> Optional[str]:
        if device_kind != self.device_kind:
            return f"{type(self).__name__} runs on device kind {self.device_kind!r}, not {device_kind!r}"
        try:
            module = self._layer()
        except Exception as e:  # ImportError, or the layer's own failure to load (CANN missing)
            what = self.device_layer or f"torch.{self.device_type}"
            return f"{what} is not usable here ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): " \
                   f"{self.install_hint}"
        if not module.is_available():
            return (f"torch {torch.__version__} sees no {self.device_kind} device (torch.{self.device_type}."
                    f"is_available() is False; {self.visible_env}={os.environ.get(self.visible_env, '<unset>')}): "
                    f"{self.install_hint}")
        count = module.device_count()
        if count < need:
            return (f"{need} {self.device_kind} device(s) needed (device ids are the slot pool's ids, 0..{need - 1}: "
                    f"set [meshtest].slots / --slots to the node's count); torch.{self.device_type} sees {count}")
        return None

    def init(self, device_kind: str, timeout_s: float) -> None:
        if device_kind != self.device_kind:
            raise RuntimeError(f"{type(self).__name__} runs on device kind {self.device_kind!r}, not {device_kind!r}")
        module = self._layer()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        module.set_device(local_rank)
        host = os.environ.get(HOST_TENSORS_ENV) == "1"
        self._device = torch.device("cpu") if host else torch.device(self.device_type, local_rank)
        self._mesh_type = "cpu" if host else self.device_type
        self._set_timeouts(timeout_s)
        if not dist.is_initialized():
            dist.init_process_group(self.dist_backend, timeout=datetime.timedelta(seconds=timeout_s))
        got = dist.get_backend()
        if got != self.dist_backend:
            raise RuntimeError(f"the process group is {got!r}, not {self.dist_backend!r}")
        log.info("rank %d: process group %s, device %s:%d (torch.%s.current_device() = %s), %s=%s, tensors on %s",
                 dist.get_rank(), got, self.device_type, local_rank, self.device_type, module.current_device(),
                 self.visible_env, os.environ.get(self.visible_env, "<unset>"), self._device)

    def _set_timeouts(self, timeout_s: float) -> None:
        """The collective library's own timeouts, from the launch's process-group timeout."""

    # --- tensors on the device ------------------------------------------------------------------

    def make_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...]) -> Any:
        return init_device_mesh(self._mesh_type, tuple(shape), mesh_dim_names=tuple(names))
    # make_replicated_mesh: TorchBackend's, over this make_mesh

    def make_tensor(self, array: np.ndarray, dtype: str, requires_grad: bool = False) -> Any:
        t = super().make_tensor(array, dtype).to(self._device)
        return t.requires_grad_(True) if requires_grad else t

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return super().to_numpy(tensor.detach().cpu())

    # --- fence and health probe -----------------------------------------------------------------

    def collective_device(self) -> Any:
        return self._device

    def _all_reduce_probe(self, timeout_s: float) -> bool:
        try:
            flag = torch.ones(1, device=self._device)
            work = dist.all_reduce(flag, async_op=True)
            return bool(work.wait(timeout=datetime.timedelta(seconds=timeout_s)))
        except Exception as e:  # timeout, peer gone, group destroyed
            print(f"meshtest: case fence failed: {type(e).__name__}: {e}", flush=True)
            return False

    def recover_after_failure(self, timeout_s: float) -> bool:
        return self._all_reduce_probe(timeout_s)

    def case_fence(self, timeout_s: float) -> bool:
        """An all-reduce of one element on the device, waited on for ``timeout_s`` (hccl and
        nccl have no ``monitored_barrier``)."""
        return self._all_reduce_probe(timeout_s)

    def probe_device(self) -> str:
        """The device the meshes live on (``cpu`` when tensors stay on the host)."""
        return getattr(self, "_mesh_type", self.device_type)

    def build_info(self) -> dict:
        return {**super().build_info(), "device": self.device_type}


class TorchHcclBackend(TorchAcceleratorBackend):
    """Torch on Ascend NPUs: ``torch_npu``, the ``hccl`` process group, ``npu:<local rank>``."""

    device_kind = "npu"
    device_type = "npu"
    dist_backend = "hccl"
    device_layer = "torch_npu"
    visible_env = "ASCEND_RT_VISIBLE_DEVICES"
    install_hint = ("the npu gates need an Ascend node with CANN and torch_npu 2.13 "
                    "(PANTS_CONFIG_FILES=pants.npu.toml; docs/platforms.md)")

    def _set_timeouts(self, timeout_s: float) -> None:
        # HCCL's execution timeout (seconds): the process-group timeout, which is half the longest
        # case deadline of the launch, so a stuck collective raises before the watcher's deadline.
        # Its connect timeout is HCCL's minimum, 120 s: connecting is launch start-up, which the
        # watcher bounds by LAUNCH_OVERHEAD_S (120 s) as well.
        os.environ.setdefault("HCCL_CONNECT_TIMEOUT", "120")
        os.environ.setdefault("HCCL_EXEC_TIMEOUT", str(max(1, int(timeout_s))))


class TorchNcclBackend(TorchAcceleratorBackend):
    """Torch on CUDA GPUs: the ``nccl`` process group, ``cuda:<local rank>``."""

    device_kind = "cuda"
    device_type = "cuda"
    dist_backend = "nccl"
    visible_env = "CUDA_VISIBLE_DEVICES"
    install_hint = "the cuda gates need a CUDA build of torch 2.13 and an NVIDIA GPU per rank (docs/platforms.md)"

    def _set_timeouts(self, timeout_s: float) -> None:
        # a timed-out NCCL collective raises (and aborts the communicator) instead of hanging
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
