"""Test double of ``torch_npu``'s device layer, for the NPU wiring tests on a CPU machine.

Not a mock of meshtest: it stands in for the Ascend extension meshtest's NPU backend imports
(``meshtest.platforms.torch.accel.TorchHcclBackend``), with the parts of its surface that
backend uses, behaving as torch_npu documents them:

- ``import torch_npu`` names torch's PrivateUse1 device ``npu`` and adds ``torch.npu``:
  ``is_available()``, ``device_count()`` (the devices ``ASCEND_RT_VISIBLE_DEVICES`` leaves
  visible, else :data:`DEVICES`), ``set_device(i)`` (an
  index into the visible devices; out of range raises as the real one does),
  ``current_device()``;
- it registers the ``hccl`` process-group backend — here gloo underneath, for CPU tensors
  (the real one runs HCCL on NPU tensors).

What it cannot stand in for — tensors on ``npu:<i>``, HCCL itself — is why the tests run with
``MESHTEST_HOST_TENSORS=1``; docs/platforms.md lists those checks for real hardware.
"""
import os
import types
from datetime import timedelta

import torch
import torch.distributed as dist

#: Devices a node of this double has when nothing restricts visibility (an Atlas 800: 8 NPUs).
DEVICES = 8

_state = {"device": 0}


def _visible() -> list:
    raw = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    return [int(d) for d in raw.split(",") if d.strip()] if raw else list(range(DEVICES))


def is_available() -> bool:
    return bool(_visible())


def device_count() -> int:
    return len(_visible())


def set_device(index) -> None:
    index = index.index if isinstance(index, torch.device) else int(index)
    if not 0 <= index < device_count():
        raise RuntimeError(f"torch_npu double: invalid device {index}; {device_count()} visible "
                           f"(ASCEND_RT_VISIBLE_DEVICES={os.environ.get('ASCEND_RT_VISIBLE_DEVICES', '<unset>')})")
    _state["device"] = index


def current_device() -> int:
    return _state["device"]


npu = types.ModuleType("torch.npu")
for _f in (is_available, device_count, set_device, current_device):
    setattr(npu, _f.__name__, _f)
if not hasattr(torch, "npu"):
    # as torch_npu does: the PrivateUse1 device is named "npu", and torch.npu is its module
    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu)


def _hccl(store, rank, size, timeout):
    timeout = timeout if isinstance(timeout, timedelta) else timedelta(seconds=60)
    return dist.ProcessGroupGloo(store, rank, size, timeout)


if "hccl" not in dist.Backend.backend_list:
    dist.Backend.register_backend("hccl", _hccl, devices=["cpu"])
