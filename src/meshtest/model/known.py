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

Value signatures
----------------
A message pattern cannot tell one wrong value from another: every comparison prints "N of M
elements outside rtol=...". So a ``mismatch`` mark at a value step (:data:`SIGNED_STEPS`:
``compare``, ``backward``, ``output-metadata``) also pins *what* was wrong when it was marked:
its ``signature``, the text the comparison records after its message (a ``signature: ...``
line, :class:`meshtest.rank.compare.CompareError`), one part per wrong output joined by ``"; "``:

- ``<label> values <n>/<size> @<positions> abs <a> rel <r>``: how many elements were outside the
  tolerance, an 8-hex-digit digest of which ones (their flat indices and the array's shape), and
  the largest absolute and relative error, 2 significant digits;
- ``<label> shape <got> vs <reference>``, ``<label> dtype <got> vs <reference>``,
  ``<label> placements <got> vs <declared>``, ``<label> metadata @<digest of the ranks' values>``,
  ``<label> nonfinite-reference ...``, ``<label> property <fn> @<digest of its message>``;
- when the ranks saw different things (a result labelled ``Replicate()`` whose ranks hold
  different values gathers to a different tensor on each): one group per signature,
  ``ranks 0 of 4: <sig> | ranks 1,3 of 4: <sig> | ranks 2 of 4: pass`` (:func:`rank_groups`).

A run reproduces the mark when every part agrees (:func:`signatures_agree`): the same parts in
the same order, the same counts and positions, and each error size within
:data:`SIZE_TOLERANCE` of the recorded one (the 2-digit rounding alone is at most 5 % apart);
any other part must be the same text. The one-process lane sees every rank and compares the
whole text; a rank process compares its own group (and a rank the signature records as
``pass`` must pass). Otherwise the case is ``fail``: "known failure, but a different one", with
both signatures.

Stdlib only and CPython 3.9-compatible (the scan imports it inside Pants).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

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
#: The steps at which a ``mismatch`` mark must carry a value signature (module docstring).
SIGNED_STEPS = ("compare", "backward", "output-metadata")
#: What starts the line of an error text that holds its value signature.
SIGNATURE_LINE = "signature: "
#: How far apart a recorded and a seen error size (max abs, max rel) may be, relative to the
#: larger: 10 %, twice what rounding to 2 significant digits alone can make them differ.
SIZE_TOLERANCE = 0.10
#: A rank group's signature for ranks that passed.
PASSED = "pass"
#: How :meth:`KnownFailure.expectation` introduces a signature (read back by :func:`pins_values`).
PINNED = " with signature"
_GROUP = re.compile(r"^ranks (?P<ranks>\d+(?:,\d+)*) of (?P<n>\d+): (?P<sig>.*)$")
_VALUES = re.compile(r"^(?P<head>.*? values \d+/\d+ @[0-9a-f]{8}) abs (?P<abs>\S+) rel (?P<rel>\S+)$")


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
    :param peers: how the ranks that do not reproduce the failure fail, when only some do (a
        rank that stops at the marked step leaves the others waiting in their next collective):
        ``"<step>: <pattern>"``, the later step they fail at and a regular expression searched in
        their message (``"output-metadata: Timed out|Connection closed"``). Without it every
        rank must show the failure itself (:func:`meshtest.parent.outcomes.aggregate`).
    :param signature: for ``mismatch`` at a step of :data:`SIGNED_STEPS` (required there): the
        value signature the failure had when it was marked (module docstring); written by
        ``python -m meshtest triage --write-signatures`` for generated cases, copied from the
        ``signature:`` line of the case's failure for a hand-written one.

    Exactly one of ``upstream`` and ``divergence`` is given. Validated by :meth:`validated`
    (rule ``known-failure``).
    """

    kind: str
    step: str
    match: str
    reason: str
    upstream: Optional[str] = None
    divergence: Optional[str] = None
    signature: Optional[str] = None
    peers: Optional[str] = None

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
        if self.signature is not None and (not isinstance(self.signature, str) or not self.signature.strip()):
            raise bad(f"signature= must be a non-empty text; got {self.signature!r}")
        if self.peers is not None:
            if not isinstance(self.peers, str) or ": " not in self.peers:
                raise bad(f"peers={self.peers!r} must be '<step>: <pattern>', how the other ranks fail")
            try:
                re.compile(self.peer_expectation()[1])
            except re.error as e:
                raise bad(f"peers={self.peers!r}: the pattern is not a regular expression: {e}") from None
        if self.kind == "mismatch" and self.step in SIGNED_STEPS and self.signature is None:
            raise bad(f"a mismatch at step {self.step} needs signature=: the value signature of the failure when it "
                      "was marked (the 'signature:' line of its message; for generated cases python -m meshtest "
                      "triage --write-signatures RESULTS), else any wrong value would reproduce it")
        return self

    def peer_expectation(self) -> Tuple[str, str]:
        """``peers`` split into (step, pattern). :raises ValueError: no ``peers``."""
        if self.peers is None:
            raise ValueError("the mark has no peers=")
        step, _, pattern = self.peers.partition(": ")
        return step, pattern

    def expectation(self) -> str:
        """The expected failure in words: ``raises at step run matching /aten\\.fill_/`` (and
        ``with signature <...>`` when it has one)."""
        pinned = f"{PINNED} <{self.signature}>" if self.signature else ""
        return f"{self.kind} at step {self.step} matching /{self.match}/{pinned}"

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


def signature_of(error: str) -> Optional[str]:
    """The value signature recorded in an error text (its last ``signature: ...`` line), or
    ``None``."""
    found = [ln[len(SIGNATURE_LINE):] for ln in error.splitlines() if ln.startswith(SIGNATURE_LINE)]
    return found[-1] if found else None


def _size_close(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    if x == y:
        return True
    return abs(x - y) <= SIZE_TOLERANCE * max(abs(x), abs(y))


def rank_groups(by_signature: Dict[str, Sequence[int]], world: int) -> str:
    """The signature of ranks that saw different things: ``ranks 0 of 4: <sig> | ranks 1,3 of
    4: pass``, one group per signature (``by_signature``: signature → ranks, in order)."""
    return " | ".join(f"ranks {','.join(map(str, ranks))} of {world}: {sig}" for sig, ranks in by_signature.items())


def rank_signature(recorded: str, rank: int) -> Optional[str]:
    """What ``recorded`` says rank ``rank`` saw: its group's signature (:data:`PASSED` for a
    rank that passed), the whole text when it has no groups, ``None`` when no group names it."""
    groups = [_GROUP.match(g) for g in recorded.split(" | ")]
    if not all(groups):
        return recorded
    return next((g["sig"] for g in groups if rank in {int(r) for r in g["ranks"].split(",")}), None)


def signatures_agree(recorded: str, seen: Optional[str], rank: Optional[int] = None) -> bool:
    """Whether a run's signature ``seen`` reproduces the ``recorded`` one (module docstring):
    the same rank groups and, in each, the same parts in order, values parts equal but for their
    error sizes, which may differ by :data:`SIZE_TOLERANCE`; every other part the same text.

    :param rank: the rank process that saw ``seen`` (its own signature only): compared with its
        group of ``recorded`` (:func:`rank_signature`). ``None``: ``seen`` covers every rank.
    """
    if seen is None:
        return False
    if rank is not None:
        want_rank = rank_signature(recorded, rank)
        return want_rank is not None and _parts_agree(want_rank, seen)
    want_groups, got_groups = recorded.split(" | "), seen.split(" | ")
    if len(want_groups) != len(got_groups):
        return False
    for w, g in zip(want_groups, got_groups):
        mw, mg = _GROUP.match(w), _GROUP.match(g)
        if (mw is None) != (mg is None):
            return False
        if mw is not None and (mw["ranks"], mw["n"]) != (mg["ranks"], mg["n"]):
            return False
        if not _parts_agree(mw["sig"] if mw else w, mg["sig"] if mg else g):
            return False
    return True


def _parts_agree(recorded: str, seen: str) -> bool:
    want, got = recorded.split("; "), seen.split("; ")
    if len(want) != len(got):
        return False
    for w, g in zip(want, got):
        mw, mg = _VALUES.match(w), _VALUES.match(g)
        if mw is None or mg is None:
            if w != g:
                return False
        elif (mw["head"] != mg["head"] or not _size_close(mw["abs"], mg["abs"])
              or not _size_close(mw["rel"], mg["rel"])):
            return False
    return True


def marks_a_later_phase(known: Optional[KnownFailure], phase: Optional[int]) -> bool:
    """Whether ``known`` names a step of a later phase than ``phase`` (a phased training case's
    1-based phase; its steps are ``phase<k> <step>``, e.g. ``phase2 resume``): an earlier phase
    that passes is not judged against it (it is held for the next phase, which is)."""
    m = re.match(r"phase(\d+) ", known.step) if known is not None and phase is not None else None
    return m is not None and int(m.group(1)) > phase


def pins_values(described: str) -> bool:
    """Whether a mark's text (:meth:`KnownFailure.describe`, as a case outcome carries it in
    ``known_failure``) records a value signature: an ``xfail`` under it reproduced the exact
    wrong values, which says as much about the operator as a pass (``coverage-ops`` counts it)."""
    return f"/{PINNED} <" in described  # the pattern's closing slash, then the signature


def judge(known: Optional[KnownFailure], status: Status, step: str, error: str,
          rank: Optional[int] = None) -> Tuple[Status, str]:
    """A rank's raw result judged against the case's known failure: ``(status, error)``.

    - no mark, or ``unsupported`` (the case did not run): unchanged;
    - passed: ``xpass`` (the mark must go), unless the mark's signature records this rank
      (``rank``: a rank process) as one that passes while others fail: ``xfail``;
    - failed as declared (kind, step, pattern and, when the mark has one, its value signature:
      :func:`signatures_agree`): ``xfail``, the error kept;
    - failed as declared but with another signature: ``fail``, "known failure, but a different
      one", both signatures;
    - failed otherwise: ``fail``, the error saying what was expected and what happened. A
      ``crash`` mark never matches here: only the parent sees a rank die
      (:func:`judge_crash`), and a rank that recorded a failure did not crash.
    """
    if known is None or status is Status.UNSUPPORTED:
        return status, error
    if status is Status.PASS:
        if known.signature is not None and rank is not None and rank_signature(known.signature, rank) == PASSED:
            return Status.XFAIL, (f"passed, as the known failure's signature records for rank {rank}: "
                                  f"<{known.signature}>")
        return Status.XPASS, (f"passed, but the case is marked known_failure ({known.expectation()}): the platform "
                              "is fixed; remove the mark")
    kind = next((k for k, raw in _RAW.items() if raw is status), status.value)
    if known.matches(kind, step, error):
        if known.signature is None or signatures_agree(known.signature, signature_of(error), rank):
            return Status.XFAIL, error
        return Status.FAIL, (f"known failure, but a different one: marked with signature <{known.signature}>; "
                             f"this run's is <{signature_of(error) or 'none'}> ({known.kind} at step {step}): {error}")
    return Status.FAIL, f"expected {known.expectation()}; got {status.value} at step {step}: {error}"


def judge_crash(known: Optional[KnownFailure], step: str, cause: str) -> bool:
    """Whether a rank that died at ``step`` with ``cause`` (its native error line, signal, last
    log lines) is the case's declared crash."""
    return known is not None and known.matches("crash", step, cause)
