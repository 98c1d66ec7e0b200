"""What a case's inputs are: :class:`InputSpec` (a full tensor, built as NumPy on every rank from
its seed) and :class:`DerivedSpec` (an input computed from the full primary inputs). Rules
``input-*`` (docs/cases.md). Platform-free.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import numpy as np

from ..errors import CaseDeclarationError
from .dtypes import DTYPES, FLOAT_DTYPES

#: Input initialisers (the InputSpec fields).
INITS = ("randn", "uniform", "ones", "zeros", "arange")



def numpy_dtype(dtype: str) -> np.dtype:
    """NumPy dtype used to carry values of the platform-agnostic ``dtype`` (bfloat16 → float32)."""
    return np.dtype("float32" if dtype == "bfloat16" else dtype)


@dataclass(frozen=True)
class InputSpec:
    """One full (global) input tensor of a case.

    :param shape: full tensor shape; ``()`` is a 0-d tensor; a dim may be 0 (an empty tensor).
    :param init: ``randn`` (standard normal), ``uniform`` (``[low, high)``; integers for
        integer dtypes, fair coin for ``bool``), ``ones``, ``zeros`` or ``arange``
        (``0 .. numel-1`` in row-major order).
    :param seed: seed of NumPy's ``default_rng``. ``None`` derives a stable seed from the case
        name and input index (CRC-32), so every rank and every run builds the same values.
    :param dtype: one of :data:`DTYPES`.
    :param data: exact values (array-like of ``shape``); overrides ``init``.
    :param low: lower bound for ``uniform``.
    :param high: upper bound (exclusive) for ``uniform``.
    :param requires_grad: build the tensor as a leaf that requires grad (float dtypes only).
    """

    shape: Tuple[int, ...]
    init: str = "randn"
    seed: Optional[int] = None
    dtype: str = "float32"
    data: Any = None
    low: float = 0.0
    high: float = 1.0
    requires_grad: bool = False

    def validate(self, file: str, case: str, index: int) -> "InputSpec":
        """Rules ``input-shape``, ``input-init``, ``input-dtype``, ``input-data``; returns a normalised copy."""
        where = f"inputs[{index}]"
        shape = self.shape
        if not isinstance(shape, (tuple, list)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise CaseDeclarationError(
                file, case, "input-shape", f"{where}.shape must be a tuple of integers >= 0; got {shape!r}"
            )
        if self.init not in INITS:
            raise CaseDeclarationError(
                file, case, "input-init", f"{where}.init {self.init!r} unknown; use one of {', '.join(INITS)}"
            )
        if self.dtype not in DTYPES:
            raise CaseDeclarationError(
                file, case, "input-dtype", f"{where}.dtype {self.dtype!r} unknown; use one of {', '.join(DTYPES)}"
            )
        if self.init == "randn" and self.dtype not in FLOAT_DTYPES and self.data is None:
            raise CaseDeclarationError(
                file, case, "input-init",
                f"{where}: init 'randn' needs a float dtype, not {self.dtype!r}; use 'uniform' or 'arange'",
            )
        if self.requires_grad and self.dtype not in FLOAT_DTYPES:
            raise CaseDeclarationError(
                file, case, "input-dtype", f"{where}: requires_grad needs a float dtype, not {self.dtype!r}"
            )
        if self.data is not None:
            data_shape = np.shape(self.data)
            if tuple(data_shape) != tuple(shape):
                raise CaseDeclarationError(
                    file, case, "input-data",
                    f"{where}.data has shape {tuple(data_shape)!r} but shape is {tuple(shape)!r}",
                )
        return dataclasses.replace(self, shape=tuple(shape))

    def build_numpy(self, default_seed: int) -> np.ndarray:
        """Build the full input as a NumPy array of :func:`numpy_dtype` (``self.dtype``).

        :param default_seed: seed used when ``self.seed`` is ``None``.
        """
        dt = numpy_dtype(self.dtype)
        if self.data is not None:
            return np.array(self.data, dtype=dt).reshape(self.shape)
        rng = np.random.default_rng(default_seed if self.seed is None else self.seed)
        if self.init == "randn":
            arr = rng.standard_normal(self.shape)
        elif self.init == "uniform":
            if self.dtype == "bool":
                arr = rng.random(self.shape) < 0.5
            elif dt.kind in "iu":
                arr = rng.integers(int(self.low), int(self.high), size=self.shape)
            else:
                arr = rng.uniform(self.low, self.high, size=self.shape)
        elif self.init == "ones":
            arr = np.ones(self.shape)
        elif self.init == "zeros":
            arr = np.zeros(self.shape)
        else:  # arange
            arr = np.arange(int(np.prod(self.shape, dtype=np.int64))).reshape(self.shape)
        return np.asarray(arr).astype(dt)


@dataclass(frozen=True)
class DerivedSpec:
    """An extra input computed once from the *full* primary inputs, then distributed.

    Use it for values that depend on global information (e.g. an attention statistic over
    the full Q/K): computing them on each rank's shard would change their meaning
    (the process model). The case's ``fn`` receives primary inputs then derived inputs, in order.

    :param fn: ``fn(*full_primary_inputs) -> tensor``, run on every rank with identical inputs.
    :param placements: one placement per mesh dimension for the derived tensor.
    :param ndim: rank of the derived tensor (needed to check ``Shard(d)`` at registration).
    :param name: label used in error messages.
    """

    fn: Callable[..., Any]
    placements: tuple
    ndim: int
    name: str = "derived"
