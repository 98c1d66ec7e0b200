"""Comparison of a gathered distributed output with its single-device reference.

Shared policy lives here, in the core, so every platform compares the same way; a backend
only turns its tensors into NumPy arrays (``ShardBackend.to_numpy``).

Every :class:`CompareError` carries a **value signature** (:mod:`meshtest.model.known`, "Value
signatures"): what was wrong, in a form a known failure can pin — for values, the count of
elements outside the tolerance, a digest of their positions and the error's size (max abs and
max rel, 2 significant digits); for a shape, dtype or placements, the two seen.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ..errors import CheckFailed
from ..model.compare_spec import CompareSpec
from ..model.known import SIGNATURE_LINE


class CompareError(CheckFailed):
    """The distributed output differs from the reference; the message says how.

    :ivar signature: the value signature (``output[0] values 3/16 @1a2b3c4d abs 0.027 rel
        0.0032``; parts of several outputs joined by ``"; "``), ``""`` when none was taken.
    """

    def __init__(self, message: str, signature: str = "") -> None:
        super().__init__(message)
        self.signature = signature

    def report(self) -> str:
        """The message and, when there is a signature, the line ``signature: ...`` after it
        (what a rank records; :func:`meshtest.model.known.signature_of` reads it back)."""
        return f"{self}\n{SIGNATURE_LINE}{self.signature}" if self.signature else str(self)

    @staticmethod
    def joined(errors: Sequence["CompareError"]) -> "CompareError":
        """One error for several (one per output or gradient): the messages one per line, the
        signatures joined by ``"; "``."""
        if len(errors) == 1:
            return errors[0]
        return CompareError("\n".join(str(e) for e in errors), "; ".join(e.signature for e in errors if e.signature))


def positions_digest(wrong: np.ndarray) -> str:
    """8 hex digits of SHA-256 over the array's shape and the flat (C-order) indices of its
    ``True`` elements: equal exactly when the same elements are wrong in an array of that shape."""
    h = hashlib.sha256(repr(tuple(int(n) for n in wrong.shape)).encode())
    h.update(np.flatnonzero(wrong).astype("<i8").tobytes())
    return h.hexdigest()[:8]


def text_digest(text: str) -> str:
    """8 hex digits of SHA-256 over ``text`` (a metadata or property message in a signature)."""
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _g2(x: float) -> str:
    """``x`` to 2 significant digits (``0.027``, ``1.7e+03``, ``inf``)."""
    return f"{x:.2g}"


def values_signature(label: str, wrong: np.ndarray, expected: np.ndarray, actual: np.ndarray) -> str:
    """``<label> values <n>/<size> @<positions> abs <max abs> rel <max rel>`` over the ``wrong``
    elements: abs = ``|actual - expected|`` (a NaN on one side counts as ``inf``), rel = abs /
    ``|expected|`` (``inf`` where the reference is 0), each the largest, 2 significant digits."""
    kind = np.complex128 if np.iscomplexobj(expected) or np.iscomplexobj(actual) else np.float64
    e, a = expected.astype(kind)[wrong], actual.astype(kind)[wrong]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.nan_to_num(np.abs(a - e), nan=np.inf)
        rel = np.where(np.abs(e) > 0, diff / np.abs(np.where(np.abs(e) > 0, e, 1)), np.inf)
        rel = np.where(diff == 0, 0.0, rel)
    top_abs = float(diff.max()) if diff.size else 0.0
    top_rel = float(rel.max()) if rel.size else 0.0
    return (f"{label} values {int(wrong.sum())}/{wrong.size} @{positions_digest(wrong)} abs {_g2(top_abs)} "
            f"rel {_g2(top_rel)}")


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
    :raises CompareError: with shape/dtype or the count, largest difference and its index, and
        the value signature (the module docstring).
    """
    if tuple(expected.shape) != tuple(actual.shape):
        raise CompareError(f"{label}: shape {tuple(actual.shape)} != reference shape {tuple(expected.shape)}",
                           f"{label} shape {tuple(actual.shape)} vs {tuple(expected.shape)}")
    if expected_dtype != actual_dtype:
        raise CompareError(f"{label}: dtype {actual_dtype} != reference dtype {expected_dtype}",
                           f"{label} dtype {actual_dtype} vs {expected_dtype}")
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
            "or opt in with allow_nonfinite=True when the op is meant to produce NaN/Inf",
            f"{label} nonfinite-reference {int(bad.sum())}/{expected.size} @{positions_digest(bad)}")


def _check_equal(expected: np.ndarray, actual: np.ndarray, label: str) -> None:
    if np.array_equal(expected, actual, equal_nan=expected.dtype.kind == "f"):
        return
    bad = np.asarray(expected != actual)
    if expected.dtype.kind in "fc":
        bad &= ~(np.isnan(expected) & np.isnan(actual))
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if expected.ndim else ()
    raise CompareError(
        f"{label}: {int(bad.sum())} of {expected.size} elements differ (equal() expected); "
        f"first at index {idx}: got {_plain(actual[idx])}, expected {_plain(expected[idx])}",
        values_signature(label, bad, expected, actual))


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
        f"(got {float(a[worst]):.6g}, expected {float(e[worst]):.6g})",
        values_signature(label, ~close, expected, actual))


def _plain(value) -> str:
    """A NumPy scalar as a plain number (``1.5``, not ``np.float32(1.5)``)."""
    return repr(value.item()) if isinstance(value, np.generic) else repr(value)


def _check_property(expected: np.ndarray, actual: np.ndarray, spec: CompareSpec, label: str) -> None:
    try:
        verdict = spec.fn(expected, actual)
    except AssertionError as e:
        raise CompareError(f"{label}: property {_name(spec.fn)} does not hold: {e}",
                           f"{label} property {_name(spec.fn)} @{text_digest(str(e))}") from None
    if verdict is None or verdict is True:
        return
    why = verdict if isinstance(verdict, str) else "it returned False"
    raise CompareError(f"{label}: property {_name(spec.fn)} does not hold: {why}",
                       f"{label} property {_name(spec.fn)} @{text_digest(why)}")


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or repr(fn)
