"""The one status vocabulary of meshtest: rank results, case outcomes, reports and tools.

A rank records one of :data:`RANK_STATUSES` per case; the parent aggregates a case over its
ranks into one of the statuses below (adding ``timeout``, ``crash``, ``missing`` and
``not_run``, which only the parent can observe). Every module that writes, reads, counts or
colours a status goes through :class:`Status` and its predicates, so the runner, the rank
side, the reports and ``tools/`` agree on what fails a run.

Stdlib only and CPython 3.9-compatible: the Pants plugin and ``tools/`` (system ``python3``)
import it.
"""
from __future__ import annotations

from enum import Enum
from typing import Iterable


class Status(str, Enum):
    """A case's (or one rank's) result.

    A ``str`` enum: the JSON files carry the value (``"pass"``), and ``Status("pass")`` reads
    it back (an unknown value raises ``ValueError``).
    """

    #: every rank passed (or, for a rank, this rank passed)
    PASS = "pass"
    #: a comparison or assertion failed
    FAIL = "fail"
    #: any other exception
    ERROR = "error"
    #: a ``known_failure`` case failed the declared way (kind, step, message): the platform's bug
    #: reproduced; counted apart from pass, never fails the run
    XFAIL = "xfail"
    #: a ``known_failure`` case passed: the mark must go (fails the run)
    XPASS = "xpass"
    #: the platform lacks a feature the case requires: not run, neither passed nor failed
    UNSUPPORTED = "unsupported"
    #: the launch was killed at the case's deadline (parent only)
    TIMEOUT = "timeout"
    #: a rank died inside the case (parent only)
    CRASH = "crash"
    #: a rank recorded nothing for the case (parent only)
    MISSING = "missing"
    #: a fail-fast gate stopped before the case (parent only)
    NOT_RUN = "not_run"
    #: per-rank detail of a timeout: this rank finished the case and waited at its end-of-case
    #: fence for a peer (never a case's status)
    WAITED = "waited"

    def __str__(self) -> str:
        return self.value

    @property
    def failing(self) -> bool:
        """Whether this outcome fails the run: fail, error, crash, missing, timeout, xpass."""
        return self in FAILING

    @property
    def neutral(self) -> bool:
        """Neither passed nor failed, and listed apart: ``unsupported`` (the platform lacks a
        feature) and ``not_run`` (a fail-fast gate stopped first; the failure that stopped it
        is counted on its own)."""
        return self in NEUTRAL

    @property
    def passing(self) -> bool:
        """Counts as passed: ``pass`` only (an ``xfail`` is counted apart, see :attr:`expected`)."""
        return self in PASSING

    @property
    def expected(self) -> bool:
        """A known failure of the platform that reproduced as declared (``xfail``): neither passed
        nor failed; counted and shown apart, as pytest's ``xfailed``."""
        return self is Status.XFAIL

    @property
    def counts_as_run(self) -> bool:
        """Whether the case ran (every status but ``unsupported`` and ``not_run``)."""
        return self not in NEUTRAL


#: Statuses a rank writes into its ``rank<k>.jsonl`` (see :class:`meshtest.contract.RankRecord`).
RANK_STATUSES = (Status.PASS, Status.FAIL, Status.ERROR, Status.XFAIL, Status.XPASS, Status.UNSUPPORTED)
#: Outcomes that make the run fail.
FAILING = frozenset({Status.FAIL, Status.ERROR, Status.CRASH, Status.MISSING, Status.TIMEOUT, Status.XPASS})
#: Outcomes that count as passed.
PASSING = frozenset({Status.PASS})
#: Known failures that reproduced as declared: counted apart (``xfailed``), never failing.
EXPECTED = frozenset({Status.XFAIL})
#: Outcomes that are neither passed nor failed.
NEUTRAL = frozenset({Status.UNSUPPORTED, Status.NOT_RUN})
#: A case's outcome over its ranks is the first of these that some rank has (the worst).
PRECEDENCE = (Status.CRASH, Status.ERROR, Status.TIMEOUT, Status.MISSING, Status.FAIL, Status.NOT_RUN,
              Status.XPASS, Status.XFAIL, Status.UNSUPPORTED, Status.PASS)
#: Column order of status counts in reports.
REPORT_ORDER = (Status.PASS, Status.FAIL, Status.ERROR, Status.TIMEOUT, Status.CRASH, Status.MISSING, Status.XFAIL,
                Status.XPASS, Status.UNSUPPORTED, Status.NOT_RUN)


def worst(statuses: Iterable[Status]) -> Status:
    """The status that wins by :data:`PRECEDENCE`.

    :raises ValueError: ``statuses`` is empty or holds only ``waited``.
    """
    present = set(statuses)
    for s in PRECEDENCE:
        if s in present:
            return s
    raise ValueError(f"no case status among {sorted(present)}")
