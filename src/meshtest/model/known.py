"""Known failures: what a case is expected to fail with on a platform, and how a result is judged
against it.

A case marked ``known_failure=KnownFailure(...)`` still runs on every rank. Its result is
``xfail`` only when the failure is the declared one — the same kind, at the same step, with a
message the declared pattern finds — ``xpass`` when it passed (the mark must go: fails the run),
and ``fail`` when it failed some other way (the message says what was expected and what
happened). This follows pytest's ``xfail(strict=True, raises=...)``, with the step and the
message added because a distributed failure can happen at many points of one case.

The mark is a static field: the scan reads it from the syntax tree (a ``KnownFailure(...)``
call with literal keywords, or a module-level name bound once to one), so the parent can judge
a crash — which no rank can record — and listings can show the expected verdict without
importing the case file.

Stdlib only and CPython 3.9-compatible (the scan imports it inside Pants).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ..errors import CaseDeclarationError
from ..status import Status

#: Kinds of expected failure: a comparison (or assertion, placement check) that fails; an
#: exception raised; a rank process that dies (a native abort, a signal).
KINDS = ("mismatch", "raises", "crash")
#: The raw rank status each kind is (a crash is seen by the parent only).
_RAW = {"mismatch": Status.FAIL, "raises": Status.ERROR}
#: An upstream reference: ``owner/repo#123``, an http(s) URL, or a section of a document in this
#: repository that holds a minimal reproduction of a bug not yet reported upstream
#: (``docs/torch-bugs.md#anchor``); several separated by ``, ``.
_REF = r"(?:[\w.-]+/[\w.-]+#\d+|https?://\S+|docs/[\w./-]+\.md#[\w-]+)"
UPSTREAM_RE = re.compile(rf"^{_REF}(?:, {_REF})*$")
#: Where a Python traceback starts in an error text: the pattern is matched before it.
_TRACEBACK = "\nTraceback (most recent call last):"


@dataclass(frozen=True)
class KnownFailure:
    """The failure a case is expected to have on a platform (``known_failure=`` of every case kind).

    :param kind: ``"mismatch"`` (a comparison, assertion or placement check fails: status
        ``fail``), ``"raises"`` (an exception: status ``error``) or ``"crash"`` (a rank process
        dies: status ``crash``, judged by the parent on the dead rank's own cause).
    :param step: the pipeline step it fails at (``run``, ``compare``, ``backward``, ``gather``,
        a scenario's ``ctx.step`` name, a training case's ``parallel`` ...), compared exactly.
    :param match: a regular expression searched (``re.search``) in the failure's message — for
        ``raises`` the ``Type: message`` line(s) before the traceback, for ``mismatch`` the
        comparison's text, for ``crash`` the dead rank's cause (its native error line, signal,
        last log lines).
    :param reason: why the platform fails, in one or two sentences.
    :param upstream: the upstream report(s): ``pytorch/pytorch#123``, a URL, or
        ``docs/torch-bugs.md#anchor`` for a bug not yet reported (with a reproduction there).
    :param divergence: instead of ``upstream``, when the platform deliberately differs from the
        test plan: what the plan asks and what the platform documents.

    Exactly one of ``upstream`` and ``divergence`` is given. Validated by :meth:`validated`
    (rule ``known-failure``).
    """

    kind: str
    step: str
    match: str
    reason: str
    upstream: Optional[str] = None
    divergence: Optional[str] = None

    def validated(self, file: str, case: Optional[str]) -> "KnownFailure":
        """:raises CaseDeclarationError: rule ``known-failure``, naming the field and what it must be."""
        def bad(why: str) -> CaseDeclarationError:
            return CaseDeclarationError(file, case, "known-failure", why)

        if self.kind not in KINDS:
            raise bad(f"kind={self.kind!r}: must be one of {', '.join(KINDS)}")
        for name in ("step", "match", "reason"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise bad(f"{name}= must be a non-empty string; got {value!r}")
        try:
            re.compile(self.match)
        except re.error as e:
            raise bad(f"match={self.match!r} is not a regular expression: {e}") from None
        if (self.upstream is None) == (self.divergence is None):
            raise bad("give exactly one of upstream= (the upstream issue or PR: 'pytorch/pytorch#123', a URL, or "
                      "'docs/torch-bugs.md#anchor' for a bug not reported yet) and divergence= (the platform "
                      "deliberately differs from the plan)")
        if self.upstream is not None and (not isinstance(self.upstream, str) or not UPSTREAM_RE.match(self.upstream)):
            raise bad(f"upstream={self.upstream!r} must be 'owner/repo#123', an http(s) URL or "
                      "'docs/<file>.md#anchor', several separated by ', '")
        if self.divergence is not None and (not isinstance(self.divergence, str) or not self.divergence.strip()):
            raise bad(f"divergence= must be a non-empty text; got {self.divergence!r}")
        return self

    def expectation(self) -> str:
        """The expected failure in words: ``raises at step run matching /aten\\.fill_/``."""
        return f"{self.kind} at step {self.step} matching /{self.match}/"

    def describe(self) -> str:
        """What reports print: the expectation, the reason and the reference."""
        ref = self.upstream if self.upstream is not None else f"divergence from the plan: {self.divergence}"
        return f"{self.expectation()}: {self.reason} ({ref})"

    def matches(self, kind: str, step: str, message: str) -> bool:
        """Whether a failure of ``kind`` at ``step`` with ``message`` is this one."""
        return kind == self.kind and step == self.step and re.search(self.match, message_of(message)) is not None

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @staticmethod
    def from_json(doc: Dict[str, Any]) -> "KnownFailure":
        """:raises TypeError: unknown or missing keys."""
        return KnownFailure(**doc)


def message_of(error: str) -> str:
    """The part of an error text a pattern is matched against: everything before a Python
    traceback (the platform's reading and the ``Type: message`` line(s))."""
    return error.split(_TRACEBACK, 1)[0]


def judge(known: Optional[KnownFailure], status: Status, step: str, error: str) -> Tuple[Status, str]:
    """A rank's raw result judged against the case's known failure: ``(status, error)``.

    - no mark, or ``unsupported`` (the case did not run): unchanged;
    - passed: ``xpass`` (the mark must go);
    - failed as declared (kind, step, pattern): ``xfail``, the error kept;
    - failed otherwise: ``fail``, the error saying what was expected and what happened. A
      ``crash`` mark never matches here: only the parent sees a rank die
      (:func:`judge_crash`), and a rank that recorded a failure did not crash.
    """
    if known is None or status is Status.UNSUPPORTED:
        return status, error
    if status is Status.PASS:
        return Status.XPASS, (f"passed, but the case is marked known_failure ({known.expectation()}): the platform "
                              "is fixed; remove the mark")
    kind = next((k for k, raw in _RAW.items() if raw is status), status.value)
    if known.matches(kind, step, error):
        return Status.XFAIL, error
    return Status.FAIL, f"expected {known.expectation()}; got {status.value} at step {step}: {error}"


def judge_crash(known: Optional[KnownFailure], step: str, cause: str) -> bool:
    """Whether a rank that died at ``step`` with ``cause`` (its native error line, signal, last
    log lines) is the case's declared crash."""
    return known is not None and known.matches("crash", step, cause)
