"""How a case is judged: :class:`CompareSpec` (the gathered output against the single-device
reference) and :class:`ExpectRaises` (an exception as the passing outcome), with rule
``expect-raises``. Platform-free.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import numpy as np

from ..errors import CaseDeclarationError, CheckFailed
from .layout import METADATA_FIELDS

#: ``torch.testing.assert_close``'s float32 tolerances: the defaults of :meth:`CompareSpec.allclose`
#: and of a scenario's ``ctx.assert_close``.
DEFAULT_RTOL = 1.3e-6
DEFAULT_ATOL = 1e-5


@dataclass(frozen=True)
class CompareSpec:
    """How the gathered distributed output is compared with the single-device reference.

    Build with :meth:`allclose`, :meth:`equal`, :meth:`shape` or :meth:`check`; every kind also
    checks shape and dtype. ``allclose`` and ``equal`` first check that the reference is finite:
    a reference with NaN or Inf makes the case fail ("reference has NaN/Inf"), since NaN equals
    NaN and a broken case would look green; ``allow_nonfinite=True`` opts in (an op whose
    reference is meant to hold NaN/Inf).
    """

    kind: str
    rtol: float = 0.0
    atol: float = 0.0
    reason: str = ""
    allow_nonfinite: bool = False
    #: ``check``: the property, ``fn(expected, actual)`` on NumPy arrays
    fn: Optional[Callable[[np.ndarray, np.ndarray], Any]] = None
    #: output metadata fields not compared with the reference (:meth:`exempt_metadata`)
    metadata_exempt: Tuple[str, ...] = ()
    #: why they are not (:meth:`exempt_metadata`)
    metadata_reason: str = ""

    @staticmethod
    def allclose(rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                 allow_nonfinite: bool = False) -> "CompareSpec":
        """Elementwise ``|actual - expected| <= atol + rtol * |expected|`` (NumPy's ``isclose``;
        NaNs at the same places are equal when ``allow_nonfinite``).

        Defaults are ``torch.testing.assert_close``'s float32 tolerances.
        """
        return CompareSpec("allclose", rtol=float(rtol), atol=float(atol), allow_nonfinite=bool(allow_nonfinite))

    @staticmethod
    def equal(allow_nonfinite: bool = False) -> "CompareSpec":
        """Bitwise-equal values (integer, bool and data-movement ops)."""
        return CompareSpec("equal", allow_nonfinite=bool(allow_nonfinite))

    @staticmethod
    def check(fn: Callable[[np.ndarray, np.ndarray], Any], reason: str = "") -> "CompareSpec":
        """A property instead of closeness, for values that differ by design (random ops).

        :param fn: ``fn(expected, actual)`` with the reference and the gathered output as NumPy
            arrays (shape and dtype already equal). It passes by returning ``None`` or ``True``;
            ``False``, a string (the failure's text) or an ``AssertionError`` fail the case.
            Ready-made properties: :mod:`meshtest.properties`.
        :param reason: why closeness does not apply; shown in reports.
        """
        return CompareSpec("check", reason=reason, fn=fn)

    def exempt_metadata(self, *fields: str, reason: str) -> "CompareSpec":
        """This spec, with the output metadata ``fields`` (of ``"stride"``, ``"contiguous"``,
        ``"requires_grad"``) left out of the check against the reference at step
        ``output-metadata`` (:mod:`meshtest.rank.metadata`): for a difference the platform
        documents, e.g. ``CompareSpec.equal().exempt_metadata("stride", reason="...")``.

        :param reason: where the platform documents the difference; shown in reports.
        :raises ValueError: no field, a field not compared, or an empty ``reason``.
        """
        unknown = [f for f in fields if f not in METADATA_FIELDS]
        if not fields or unknown:
            raise ValueError(f"exempt_metadata({', '.join(map(repr, fields))}): the fields compared with the "
                             f"reference are {', '.join(METADATA_FIELDS)}")
        if not reason.strip():
            raise ValueError(f"exempt_metadata({', '.join(map(repr, fields))}) needs a reason: where the platform "
                             "documents the difference")
        return dataclasses.replace(self, metadata_exempt=tuple(dict.fromkeys(self.metadata_exempt + fields)),
                                   metadata_reason=reason)

    @staticmethod
    def shape(reason: str = "") -> "CompareSpec":
        """Only shape and dtype: for data-dependent values (e.g. dropout with p > 0).

        :param reason: why values cannot be compared; shown in reports.
        """
        return CompareSpec("shape", reason=reason)


@dataclass(frozen=True)
class ExpectRaises:
    """An exception the case must raise on every rank, as its passing outcome.

    Written in a case as ``expect_raises=(ValueError, "regex")`` or ``(ValueError, "regex",
    "step")``; for a bug whose fix may be either a raise or the right result,
    ``expect_raises=ExpectRaises(ValueError, "regex", or_pass=True)``; when the fix's exception
    type is not known yet (a maintainer promising "a more obvious error"), leave the class out:
    ``ExpectRaises(match="aten.foo", or_pass=True)`` takes any exception whose message
    matches, raised at the step, or a right result.

    :param exception: the exception class (a subclass matches); ``None``: any ``Exception``
        except meshtest's own verdict that a check failed (:class:`meshtest.errors.CheckFailed`:
        the values differ, which is not a raise of the platform); ``match`` must then be
        non-empty (rule ``expect-raises``), or a typo anywhere in the case would pass.
    :param match: a regular expression searched in ``str(exception)`` (``""``: any message).
    :param step: the step it must be raised in; ``None``: ``run`` for an op case, ``parallel``
        for a training case, any step for a scenario.
    :param or_pass: the case also passes when nothing is raised and every check holds (an op
        case's outputs equal the reference, a training case's runs agree): "raises this, or is
        right". Any other exception, or a completed run whose values differ, fails naming both
        outcomes.
    """

    exception: Optional[type] = None
    match: str = ""
    step: Optional[str] = None
    or_pass: bool = False

    def describe(self) -> str:
        text = "any exception" if self.exception is None else self.exception.__name__
        text += f" matching {self.match!r}" if self.match else ""
        text += f" at step {self.step}" if self.step else ""
        return text + (" (or a pass)" if self.or_pass else "")

    def matches(self, error: BaseException, step: str) -> bool:
        """Whether ``error``, raised at ``step``, is the expected exception."""
        import re

        if self.exception is None:
            kind_ok = isinstance(error, Exception) and not isinstance(error, CheckFailed)
        else:
            kind_ok = isinstance(error, self.exception)
        return (kind_ok and (self.step is None or self.step == step)
                and re.search(self.match, str(error)) is not None)


def check_expect_raises(file: str, name: str, value: Any) -> Optional[ExpectRaises]:
    """Rule ``expect-raises``: ``None``, an :class:`ExpectRaises`, or ``(exc, "regex"[, "step"])``."""
    import re

    if value is None or isinstance(value, ExpectRaises):
        spec = value
    elif isinstance(value, tuple) and 1 <= len(value) <= 3:
        spec = ExpectRaises(*value)
    else:
        raise CaseDeclarationError(file, name, "expect-raises",
                                   f"expect_raises must be (ExceptionClass, 'regex'[, 'step']); got {value!r}")
    if spec is None:
        return None
    if spec.exception is None:
        if not (isinstance(spec.match, str) and spec.match):
            raise CaseDeclarationError(file, name, "expect-raises",
                                       "without an exception class, expect_raises needs the regex its message must "
                                       "match (any exception with any message would pass a typo in the case)")
    elif not (isinstance(spec.exception, type) and issubclass(spec.exception, BaseException)):
        raise CaseDeclarationError(file, name, "expect-raises", f"{spec.exception!r} is not an exception class")
    if not isinstance(spec.match, str) or not (spec.step is None or isinstance(spec.step, str)):
        raise CaseDeclarationError(file, name, "expect-raises", "the regex and the step must be strings")
    if not isinstance(spec.or_pass, bool):
        raise CaseDeclarationError(file, name, "expect-raises", f"or_pass must be True or False; got {spec.or_pass!r}")
    try:
        re.compile(spec.match)
    except re.error as e:
        raise CaseDeclarationError(file, name, "expect-raises", f"regex {spec.match!r} does not compile: {e}") from None
    return spec
