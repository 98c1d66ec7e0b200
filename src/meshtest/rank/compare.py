"""Comparison of a gathered distributed output with its single-device reference.

Shared policy lives here, in the core, so every platform compares the same way; a backend
only turns its tensors into NumPy arrays (``ShardBackend.to_numpy``).
"""
from __future__ import annotations

import numpy as np

from ..model.spec import CompareSpec


class CompareError(AssertionError):
    """The distributed output differs from the reference; the message says how."""


def compare_arrays(
    expected: np.ndarray,
    actual: np.ndarray,
    expected_dtype: str,
    actual_dtype: str,
    spec: CompareSpec,
    label: str = "output",
) -> None:
    """Check ``actual`` against ``expected`` by ``spec``.

    Shape and dtype always must match. ``allclose`` checks
    ``|actual - expected| <= atol + rtol * |expected|`` elementwise (NumPy's ``isclose`` rule,
    computed in float64); ``equal`` needs identical values. Both first require a finite reference
    unless ``spec.allow_nonfinite`` (then NaNs at the same places are equal). ``check`` calls
    ``spec.fn(expected, actual)``: ``None``/``True`` pass; ``False``, a string or an
    ``AssertionError`` fail.

    :param expected_dtype: platform-agnostic dtype name of the reference (e.g. ``"bfloat16"``).
    :param actual_dtype: the same for the gathered output.
    :param label: names the output in messages, e.g. ``"output[1]"``.
    :raises CompareError: with shape/dtype or the count, largest difference and its index.
    """
    if tuple(expected.shape) != tuple(actual.shape):
        raise CompareError(f"{label}: shape {tuple(actual.shape)} != reference shape {tuple(expected.shape)}")
    if expected_dtype != actual_dtype:
        raise CompareError(f"{label}: dtype {actual_dtype} != reference dtype {expected_dtype}")
    if spec.kind == "shape":
        return
    if spec.kind == "check":
        _check_property(expected, actual, spec, label)
        return
    if expected.dtype.kind == "f" and not spec.allow_nonfinite:
        _check_finite(expected, label)
    if spec.kind == "equal":
        _check_equal(expected, actual, label)
    else:
        _check_close(expected, actual, spec, label)


def _check_finite(expected: np.ndarray, label: str) -> None:
    bad = ~np.isfinite(expected)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0]) if expected.ndim else ()
        raise CompareError(
            f"{label}: reference has NaN/Inf ({int(bad.sum())} of {expected.size} elements, first at index "
            f"{first}: {_plain(expected[first])}); a non-finite reference compares nothing, so fix the inputs, "
            "or opt in with allow_nonfinite=True when the op is meant to produce NaN/Inf")


def _check_equal(expected: np.ndarray, actual: np.ndarray, label: str) -> None:
    if np.array_equal(expected, actual, equal_nan=expected.dtype.kind == "f"):
        return
    bad = expected != actual
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if expected.ndim else ()
    raise CompareError(
        f"{label}: {int(bad.sum())} of {expected.size} elements differ (equal() expected); "
        f"first at index {idx}: got {_plain(actual[idx])}, expected {_plain(expected[idx])}"
    )


def _check_close(expected: np.ndarray, actual: np.ndarray, spec: CompareSpec, label: str) -> None:
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    close = np.isclose(a, e, rtol=spec.rtol, atol=spec.atol, equal_nan=True)
    if close.all():
        return
    diff = np.nan_to_num(np.where(close, 0.0, np.abs(a - e)), nan=np.inf)
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
    raise CompareError(
        f"{label}: {int((~close).sum())} of {close.size} elements outside rtol={spec.rtol:g} atol={spec.atol:g}; "
        f"max abs diff {float(diff[worst]):.6g} at index {tuple(int(i) for i in worst)} "
        f"(got {float(a[worst]):.6g}, expected {float(e[worst]):.6g})"
    )


def _plain(value) -> str:
    """A NumPy scalar as a plain number (``1.5``, not ``np.float32(1.5)``)."""
    return repr(value.item()) if isinstance(value, np.generic) else repr(value)


def _check_property(expected: np.ndarray, actual: np.ndarray, spec: CompareSpec, label: str) -> None:
    try:
        verdict = spec.fn(expected, actual)
    except AssertionError as e:
        raise CompareError(f"{label}: property {_name(spec.fn)} does not hold: {e}") from None
    if verdict is None or verdict is True:
        return
    why = verdict if isinstance(verdict, str) else "it returned False"
    raise CompareError(f"{label}: property {_name(spec.fn)} does not hold: {why}")


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or repr(fn)
