"""A minimal, complete meshtest platform: NumPy on one rank (docs/platforms.md walks through it).

It implements every method of the ``ShardBackend`` port, declares its features and gives
scenario cases an API namespace. It is deliberately tiny — one process, so a "distributed"
tensor is the full array with its placements attached — but it is a real platform to meshtest:
installed through the ``meshtest.backends`` entry point (see ``pyproject.toml``), selected with
``--platform numpy-example`` (or ``meshtest_cases(platform="numpy-example")``), run by the same
planner, launcher, rank entry, comparison and reports as torch. A platform for a real
distributed library (e.g. a DTensor/TP implementation on Ascend) fills the same methods with
its own process group, mesh, distribute and gather calls.
"""
from __future__ import annotations

import os
import types
from dataclasses import dataclass
from typing import Any, Sequence, Tuple

import numpy as np

from meshtest.platforms.backend import ShardBackend


@dataclass
class Placed:
    """A "distributed" array: on one rank every shard is the whole array."""

    array: np.ndarray
    placements: tuple

    def __add__(self, other):
        return Placed(self.array + (other.array if isinstance(other, Placed) else other), self.placements)

    def __mul__(self, other):
        return Placed(self.array * (other.array if isinstance(other, Placed) else other), self.placements)


class NumpyExampleBackend(ShardBackend):
    platform = "numpy-example"

    def init(self, device_kind: str, timeout_s: float) -> None:
        if device_kind != "cpu":
            raise RuntimeError(f"numpy-example runs on device kind 'cpu', not {device_kind!r}")
        if int(os.environ.get("WORLD_SIZE", "1")) != 1:
            raise RuntimeError("numpy-example has no process group: it runs meshes of one rank only")

    def rank(self) -> int:
        return 0

    def world_size(self) -> int:
        return 1

    def make_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...]) -> Any:
        return types.SimpleNamespace(shape=shape, mesh_dim_names=names)

    def make_tensor(self, array: np.ndarray, dtype: str, requires_grad: bool = False) -> Any:
        if requires_grad:
            raise NotImplementedError("numpy-example has no autograd")
        return np.array(array, dtype="float32" if dtype == "bfloat16" else dtype)

    def clone(self, tensor: Any) -> Any:
        return np.array(tensor)

    def distribute(self, tensor: Any, mesh: Any, placements: Sequence[Any]) -> Any:
        return Placed(np.array(tensor), tuple(placements))

    def local_to_global(self, tensor: Any) -> Any:
        return tensor.array if isinstance(tensor, Placed) else tensor

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, (np.ndarray, np.generic, Placed))

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.asarray(self.local_to_global(tensor))

    def dtype_name(self, tensor: Any) -> str:
        return str(self.to_numpy(tensor).dtype)

    def backward(self, outputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
        raise NotImplementedError("numpy-example has no autograd")

    def grad_of(self, tensor: Any) -> Any:
        return None

    def any_rank(self, flag: bool) -> bool:
        return bool(flag)  # one rank: its own flag

    def recover_after_failure(self, timeout_s: float) -> bool:
        return True  # no process group to break

    def shutdown(self) -> None:
        pass

    # Scenario cases: what this platform provides (names from meshtest.model.rules.FEATURES) and the
    # namespace they receive as ctx.api. No tensor-parallel styles here, so a case requiring
    # "tp.styles" is reported "unsupported on platform numpy-example".
    def features(self) -> frozenset:
        return frozenset()

    def scenario_api(self) -> Any:
        return types.SimpleNamespace(np=np, Placed=Placed)
