"""``TorchGlooBackend``: the torch platform on the ``cpu`` device kind, over gloo's process group.

What is gloo's: the process group it starts, and the end-of-case fence, gloo's
``monitored_barrier`` (point-to-point with rank 0; the other process groups lack it).
"""
from __future__ import annotations

import datetime

import torch.distributed as dist

from .backend import TorchBackend


class TorchGlooBackend(TorchBackend):
    """Torch on CPU over gloo; the launch is torchrun (RANK/WORLD_SIZE/MASTER_* from its env)."""

    def init(self, device_kind: str, timeout_s: float) -> None:
        if device_kind != "cpu":
            raise RuntimeError(f"TorchGlooBackend runs on device kind 'cpu', not {device_kind!r}")
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))

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
