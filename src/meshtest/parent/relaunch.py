"""What launches next, given how a launch ended: the relaunch policy as a pure function.

No case is lost and none is reported passed without every rank's record:

- a launch that failed its rendezvous on an address in use (``EADDRINUSE``) before any case
  started is retried as it was, up to :data:`RENDEZVOUS_RETRIES` times;
- cases every rank recorded are reported from their records;
- a fail-fast stop reports the rest ``not_run``;
- the first case not recorded by every rank, if some rank started it, ended the launch (deadline
  or crash): it is reported ``timeout``/``crash`` and the cases after it run in a fresh launch;
- if no rank started it but earlier cases were recorded, the ranks stopped between cases (a
  failed end-of-case fence): the rest run in a fresh launch;
- the case that timed out, or the last one recorded before a fence found the group broken, is
  the ``suspect`` the runner may re-run alone with collective checks to diagnose;
- a launch that recorded nothing and started nothing ends the group: its cases are reported
  ``timeout``/``crash`` (a relaunch would fail the same way);
- a node lost mid-launch (a launch placed across a cluster) makes the case it ended ``error``
  instead (the infrastructure failed, not the case), and the rest run in a fresh launch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Optional, Sequence, Tuple

from ..model.scan import name_of
from ..status import Status

#: How many times a launch that failed its rendezvous on a port in use is retried.
RENDEZVOUS_RETRIES = 3


@dataclass(frozen=True)
class LaunchFacts:
    """What the policy knows of a finished launch.

    :ivar recorded: cases every rank recorded.
    :ivar started: cases some rank recorded or entered.
    :ivar stopped_after: the failing case after which a fail-fast launch stopped, or ``None``.
    :ivar rendezvous_clash: the launch failed its rendezvous on an address in use.
    :ivar exit_text: how the launcher ended (``exit 0``, ``killed by SIGKILL``); ``clean``: exit 0.
    """

    recorded: FrozenSet[str]
    started: FrozenSet[str]
    stopped_after: Optional[str]
    rendezvous_clash: bool
    timed_out: bool
    clean: bool
    exit_text: str
    launch_name: str
    group_id: str
    #: what the cluster failed (a node lost mid-launch, a launch it could not place:
    #: :attr:`meshtest.parent.launch.LaunchResult.cluster_error`): the case it ended is ``error``,
    #: not a crash of the case's own making
    cluster_error: str = ""


@dataclass(frozen=True)
class Decision:
    """What to report and what to launch next.

    :ivar retry_rendezvous: launch ``next_cases`` again on another port; report nothing yet.
    :ivar complete: cases to report from their records.
    :ivar interrupted: cases to report as :attr:`interrupted_status` (``timeout``/``crash``).
    :ivar not_run: cases a fail-fast stop left (reported ``not_run``).
    :ivar next_cases: the cases of the next launch, in order (empty: the group is done).
    :ivar notes: report lines explaining the decision.
    :ivar suspect: the case to diagnose (re-run alone with collective checks): the one that timed
        out, or the last one recorded before the end-of-case fence found the group broken.
    """

    complete: Tuple[str, ...] = ()
    interrupted: Tuple[str, ...] = ()
    interrupted_status: Status = Status.CRASH
    not_run: Tuple[str, ...] = ()
    next_cases: Tuple[str, ...] = ()
    retry_rendezvous: bool = False
    notes: Tuple[str, ...] = ()
    suspect: Optional[str] = None


def decide(remaining: Sequence[str], facts: LaunchFacts, clashes_so_far: int = 0) -> Decision:
    """The decision after a launch that ran ``remaining`` (case names, in plan order).

    :param clashes_so_far: rendezvous retries already made for this group.
    """
    remaining = tuple(remaining)
    if facts.rendezvous_clash and clashes_so_far < RENDEZVOUS_RETRIES:
        return Decision(next_cases=remaining, retry_rendezvous=True)
    complete = tuple(c for c in remaining if c in facts.recorded)
    incomplete = tuple(c for c in remaining if c not in facts.recorded)
    died = Status.ERROR if facts.cluster_error else Status.TIMEOUT if facts.timed_out else Status.CRASH
    if facts.stopped_after:
        return Decision(complete, not_run=incomplete, notes=(
            f"fail-fast: stopped after {name_of(facts.stopped_after)} failed; {len(incomplete)} case(s) of "
            f"{facts.group_id} not run",))
    if not incomplete:
        notes = () if facts.clean or facts.timed_out else (
            f"teardown warning: launch {facts.launch_name} ended with {facts.exit_text} after every rank recorded "
            "every case; results stand (see its launcher.log)",)
        return Decision(complete, notes=notes)
    culprit = incomplete[0]
    if culprit in facts.started:
        rest, why = incomplete[1:], f"{culprit} ended its launch ({died})"
        interrupted: Tuple[str, ...] = (culprit,)
        suspect = culprit if died is Status.TIMEOUT else None
    elif complete:
        rest, why = incomplete, ("a rank's end-of-case fence failed (the health probe after an error, or a peer "
                                 "that did not finish)")
        interrupted, suspect = (), complete[-1]
    else:
        return Decision(complete, interrupted=incomplete, interrupted_status=died)
    notes = (f"relaunching {len(rest)} case(s) of {facts.group_id}: {why}",) if rest else ()
    return Decision(complete, interrupted=interrupted, interrupted_status=died, next_cases=rest, notes=notes,
                    suspect=suspect)
