"""Every way the parent turns what it saw into a :class:`meshtest.contract.CaseOutcome`.

- :func:`aggregate` — a case every rank recorded: the worst rank status wins
  (:data:`meshtest.status.PRECEDENCE`), with ``xpass`` only when every rank passed; ``xfail``
  needs the known failure on every rank (a rank its signature records as passing counts), or
  on some ranks with each other rank failing the way the mark's ``peers`` names
  (:func:`waited_for_known_failure`); a rank that passed beside ranks that reproduced it makes
  the case ``fail``, naming it;
- :func:`interrupted` — a case its launch died in (``timeout`` or ``crash``): each rank's record,
  or the step it was in and the tail of its log;
- :func:`not_run` — cases a fail-fast gate did not start;
- :func:`broken_declaration` — a case whose declaration the static scan found broken;
- :func:`too_large` — a case whose mesh needs more device slots than the pool has;
- :func:`file_error` — a case file that could not be scanned at all.
"""
from __future__ import annotations

import os
import re
import signal
from dataclasses import replace
from typing import Dict, List, Mapping, Optional, Sequence

from ..contract import GAVE_UP_EXIT, CaseOutcome, RankFailure, RankRecord
from ..model import rules
from ..model.known import KnownFailure, judge_crash, message_of
from ..model.rules import GOLDEN_NOTE
from ..model.scan import BrokenDeclaration, ScannedCase, case_id
from ..status import Status, worst
from . import rank_logs
from .launch import LaunchResult
from .launcher_log import describe_exit, rank_exit_codes, root_cause_rank, tail
from .planner import Group


def aggregate(case: str, file: str, group: str, world_size: int, by_rank: Mapping[int, RankRecord],
              missing_reason: str = "", launch_dir: str = "", kind: str = "op",
              known: Optional[KnownFailure] = None) -> CaseOutcome:
    """Aggregate one case's rank records (``by_rank``: rank → record).

    :param missing_reason: error text for ranks that recorded nothing (names the launch fault).
    :param kind: the case's kind (``op``, ``scenario``, ``train``): only an op case's steps have a
        known order (:func:`waited_for_known_failure`).
    :param known: the case's known failure (its ``peers``: how the ranks that did not reproduce
        it fail).
    """
    failures: List[RankFailure] = []
    statuses = set()
    slowest, slowest_rank = 0.0, None
    ordered = [r for _, r in sorted(by_rank.items())]
    for rank in range(world_size):
        rec = by_rank.get(rank)
        if rec is None:
            statuses.add(Status.MISSING)
            failures.append(RankFailure(rank, Status.MISSING, "?", missing_reason))
            continue
        statuses.add(rec.status)
        if rec.duration_s >= slowest:
            slowest, slowest_rank = rec.duration_s, rank
        if rec.status is not Status.PASS:
            failures.append(RankFailure(rank, rec.status, rec.step, rec.error, rec.node))
    status = worst(statuses)
    if status is Status.XPASS and statuses - {Status.XPASS}:
        passed = [f.rank for f in failures if f.status is Status.XPASS]
        shown = [f.rank for f in failures if f.status is Status.XFAIL]
        status = Status.FAIL
        failures.insert(0, RankFailure(None, Status.FAIL, next(f.step for f in failures if f.status is Status.XFAIL), (
            f"the known failure reproduced on rank(s) {','.join(map(str, shown))} only: rank(s) "
            f"{','.join(map(str, passed))} passed. Every rank must show it, unless its signature records which "
            "ranks pass (meshtest.model.known, 'Value signatures')")))
    detail = _detail(ordered)
    waited = (waited_for_known_failure(by_rank, world_size, known)
              if kind == "op" and status in (Status.FAIL, Status.ERROR) else "")
    if waited:
        status, detail = Status.XFAIL, "\n".join(x for x in (detail, waited) if x)
    nodes = tuple(by_rank[r].node if r in by_rank else "" for r in range(world_size))
    return CaseOutcome(case, file, group, world_size, status, slowest, slowest_rank,
                       tuple(failures) if status is not Status.PASS else (),
                       launch_dir=launch_dir, divergence=next((r.divergence for r in ordered if r.divergence), ""),
                       detail=detail, nodes=nodes if any(nodes) else ())


def waited_for_known_failure(by_rank: Mapping[int, RankRecord], world_size: int,
                             known: Optional[KnownFailure] = None) -> str:
    """A note when an op case's known failure reproduced on some ranks only and every other rank
    failed the way the mark's ``peers`` says (:attr:`meshtest.model.known.KnownFailure.peers`: a
    later op step, :data:`meshtest.model.rules.OP_STEPS`, and a pattern of its message): in
    lockstep, a rank that stops at the marked step leaves its peers to wait for it in their next
    collective (gloo's timeout, the output-metadata exchange), so their failure is the known
    failure's, not a second one. Else ``""``: a mark without ``peers``, a rank that failed
    another way, at the marked step or before it, that passed, or that recorded nothing keeps
    the worst status.
    """
    if known is None or known.peers is None:
        return ""
    peer_step, peer_match = known.peer_expectation()
    records = [by_rank.get(r) for r in range(world_size)]
    if any(r is None for r in records):
        return ""
    stopped = [r for r in records if r.status is Status.XFAIL]
    others = [r for r in records if r.status is not Status.XFAIL]
    if not stopped or not others or any(r.status not in (Status.FAIL, Status.ERROR) for r in others):
        return ""
    step = stopped[0].step
    if any(r.step != step for r in stopped) or not all(rules.after_step(r.step, step) for r in others):
        return ""
    if any(r.step != peer_step or not re.search(peer_match, message_of(r.error)) for r in others):
        return ""
    return (f"known failure reproduced on rank(s) {','.join(str(r.rank) for r in stopped)} at step {step}; "
            f"rank(s) {','.join(str(r.rank) for r in others)} went on and failed waiting for them at step(s) "
            f"{', '.join(sorted({r.step for r in others}))}")


def _detail(ordered: Sequence[RankRecord]) -> str:
    """The notes of the first rank that wrote any, plus the golden-curve notes of the others (a
    pipeline's last stage is the rank that compares its curve)."""
    first = next((r.detail for r in ordered if r.detail), "")
    lines = first.splitlines()
    lines += [ln for r in ordered for ln in r.detail.splitlines() if ln.startswith(GOLDEN_NOTE) and ln not in lines]
    return "\n".join(dict.fromkeys(lines))


def _why_missing(rank: int, res: LaunchResult, exits: Dict[int, int]) -> str:
    prog = res.progress.get(rank)
    if exits.get(rank) == GAVE_UP_EXIT:
        return (f"the rank left the launch (exit {GAVE_UP_EXIT}) after its end-of-case fence failed"
                + (f" at the end of {prog.fence}" if prog is not None and prog.fence else "")
                + ": a peer did not finish a case or the process group broke")
    if rank in res.dead:
        how = f" ({describe_exit(res.dead_exit[rank])})" if rank in res.dead_exit else ""
        return (f"the rank process (pid {res.dead[rank]}) exited{how} before recording the case; the launch was "
                "ended as soon as the watcher saw it gone")
    if res.timed_out:
        return "did not finish before the case deadline; the launch was killed"
    if rank in exits:
        return f"the rank died ({describe_exit(exits[rank])}) before recording the case"
    return f"the launch ended ({describe_exit(res.rc)}) before this rank recorded the case"


def interrupted(case: ScannedCase, group: Group, res: LaunchResult, status: Status) -> CaseOutcome:
    """Outcome of the case a launch died in: ``status`` is ``timeout`` (killed at its deadline)
    or ``crash``.

    Ranks that recorded a result keep it (a rank that passed and then waited at the
    end-of-case fence is ``waited``). A rank that died leads, with its own cause read from its
    log (:func:`meshtest.parent.rank_logs.crash_cause`: the native error line, the signal and
    the top frame — the same text on every run); its peers follow, each marked as a consequence
    (``after rank 1 died: ...``: "connection reset" and the like vary from run to run). A rank
    killed at the deadline is shown by the innermost frames of its stack dump. A case marked
    ``known_failure=KnownFailure(kind="crash", ...)`` whose dead rank matches the declaration
    (step and message) is ``xfail``; any other crash says what was expected.
    """
    by_rank = res.records.get(case.id, {})
    # exit codes from torchrun's failure report, or from msrun's line on a rank the watcher saw gone
    exits = {**res.dead_exit, **rank_exit_codes(os.path.join(res.out_dir, "launcher.log"))}
    # the ranks that died on their own: a rank torchrun stopped with SIGTERM after another rank failed
    # did not, nor one that gave up after a failed fence; of those that did, torchrun's first leads
    died = ({r for r, code in exits.items() if code not in (0, GAVE_UP_EXIT, -signal.SIGTERM)}
            | {r for r in res.dead if exits.get(r) != GAVE_UP_EXIT})
    first = root_cause_rank(os.path.join(res.out_dir, "launcher.log"))
    failures = []
    # a local-lane launch: the worker process (its stream and log) that took the case simulated every rank
    worker = next((p for p, prog in sorted(res.progress.items()) if prog.case == case.id), 0)
    for rank in range(group.ranks_of(case)):
        proc = worker if group.lane == "local" else rank
        rec, prog = by_rank.get(rank), res.progress.get(proc)
        node = prog.node if prog is not None else ""
        if rec is not None:
            if rec.status is not Status.PASS:
                failures.append(RankFailure(rank, rec.status, rec.step, rec.error, rec.node))
            elif prog is not None and prog.fence == case.id:
                failures.append(RankFailure(rank, Status.WAITED, "fence", (
                    f"finished the case ({rec.status}) and waited at its end for the other ranks: "
                    "a collective one rank skipped, added or reordered leaves the others blocked"), rec.node))
            continue
        step = prog.step if prog is not None and prog.case == case.id else "not started"
        own = proc in died and status is Status.CRASH
        why = (f"{res.cluster_error}; the launch was ended and rank {rank} did not finish {case.name}"
               if res.cluster_error else _unrecorded(case.name, proc, res, exits, own))
        failures.append(RankFailure(rank, status, step or "?", why, node))
    slowest = max((r.duration_s for r in by_rank.values()), default=0.0)
    failures.sort(key=lambda f: (f.rank not in died, f.rank != first,
                                 f.status not in (Status.CRASH, Status.TIMEOUT), f.rank))
    lead = failures[0] if failures and failures[0].rank in died else None
    if lead is not None:
        failures = [lead] + [replace(f, error=f"after rank {lead.rank} died: {f.error}") for f in failures[1:]]
    known = case.known_failure
    if status is Status.CRASH and known is not None and known.kind == "crash":
        if lead is not None and judge_crash(known, lead.step, lead.error):
            status = Status.XFAIL
        else:
            got = (f"rank {lead.rank} at step {lead.step}: {_first_line(lead.error)}" if lead
                   else "no rank died on its own")
            failures.insert(0, RankFailure(None, Status.CRASH, lead.step if lead else "?",
                                           f"expected {known.expectation()}; got {got}"))
    nodes = tuple(res.progress[r].node if r in res.progress else "" for r in range(group.ranks_of(case)))
    return CaseOutcome(case.name, case.file, group.group_id, group.ranks_of(case), status, slowest, None,
                       tuple(failures),
                       launch_dir=os.path.basename(res.out_dir), nodes=nodes if any(nodes) else ())


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _unrecorded(case: str, proc: int, res: LaunchResult, exits: Dict[int, int], died: bool) -> str:
    """What a rank that recorded nothing for ``case`` says: a rank that died, its own cause
    first (:func:`meshtest.parent.rank_logs.crash_cause`); any other, why it is missing and the
    innermost frames of its stack dump (at the deadline, or at the SIGTERM that stopped it)."""
    log = tail(os.path.join(res.out_dir, f"rank{proc}.log"), None)
    why = _why_missing(proc, res, exits)
    if died:
        code = exits.get(proc, res.dead_exit.get(proc))
        line, evidence = rank_logs.crash_cause(log, case, describe_exit(code) if code is not None else "exited")
        if line is not None:
            return "\n".join([line, why, f"-- rank{proc}.log, the failure (innermost frames first):", *evidence])
    frames = rank_logs.innermost_frames(rank_logs.case_section(log, case))
    if frames:
        return "\n".join([why, f"-- rank{proc}.log, its stack (innermost frame first):", *frames])
    return (f"{why}\n-- last lines of rank{proc}.log:\n{tail(os.path.join(res.out_dir, f'rank{proc}.log'), 12)}"
            f"-- last lines of launcher.log:\n{tail(os.path.join(res.out_dir, 'launcher.log'))}")


def not_run(cases: Sequence[ScannedCase], group: Group, reason: str) -> List[CaseOutcome]:
    """Outcomes for cases a fail-fast run did not start."""
    return [CaseOutcome(c.name, c.file, group.group_id, group.ranks_of(c), Status.NOT_RUN,
                        failures=(RankFailure(None, Status.NOT_RUN, "-", reason),)) for c in cases]


def broken_declaration(b: BrokenDeclaration) -> CaseOutcome:
    """A declaration the static scan found broken: that case's ``error`` at step ``scan``."""
    return CaseOutcome(case=b.label, file=b.file, group="-", world_size=0, status=Status.ERROR,
                       failures=(RankFailure(None, Status.ERROR, "scan", b.error),))


def too_large(case: ScannedCase, node_slots: int, where: str = "") -> CaseOutcome:
    """A case whose mesh needs more device slots than there are: ``unsupported`` at step
    ``slots``, ``needs <n> nodes of <k> slots`` (:func:`meshtest.model.rules.nodes_needed`), never
    silently skipped.

    :param node_slots: the slots of a node (this machine's pool, or a cluster's largest node).
    :param where: what the run has (default: this machine's pool of ``node_slots`` and no cluster).
    """
    nodes = rules.nodes_needed(case.device_need, node_slots)
    have = where or (f"this machine's pool has {node_slots} ([meshtest].slots / --slots) and the run has no cluster "
                     "(--executor ray://HOST:PORT: docs/scale.md)")
    return CaseOutcome(case=case.name, file=case.file, group="-", world_size=case.device_need,
                       status=Status.UNSUPPORTED,
                       failures=(RankFailure(None, Status.UNSUPPORTED, "slots", (
                           f"unsupported: needs {nodes} nodes of {node_slots} slots ({case.device_need} ranks, mesh "
                           f"{case.mesh_shape}); {have}")),))


def file_error(path: str, step: str, error: str) -> CaseOutcome:
    """A case file that failed as a whole (its scan): one ``error`` outcome named after it."""
    return CaseOutcome(case=f"<file {path}>", file=path, group="-", world_size=0, status=Status.ERROR,
                       failures=(RankFailure(None, Status.ERROR, step, error),))


def phase_chain(group: Group, found: Sequence[CaseOutcome], held: Dict[str, CaseOutcome]) -> List[CaseOutcome]:
    """Chain the outcomes of the phases ``group`` ran (its cases with ``phase`` set: a later
    phase's own group, or phase 1 among other cases) with their cases' earlier phases; other
    outcomes pass through.

    A phase that passed, not the last, is kept in ``held`` (nothing is reported yet: the case's
    outcome is its last phase's). Otherwise — the last phase, or a phase that did not pass, after
    which no later phase runs — the case's one outcome is returned: that phase's, its detail
    starting with what each earlier phase did (``phase 1/2 passed in <launch>``). The failing
    phase names itself in the failure's step (``phase2 resume``) and text (``phase 2/2 (mesh
    (2, 2)): step 3 params w1.weight: ...``).
    """
    units = {c.id: (c.phase, len(c.phase_meshes)) for c in group.phase_units()}
    out = []
    for o in found:
        key = case_id(o.file, o.case)
        if key not in units:
            out.append(o)
            continue
        index, count = units[key]
        earlier = held.pop(key, None)
        done = f"phase {index}/{count} {o.status} in {o.launch_dir or group.group_id}"
        story = "; ".join(t for t in ((earlier.detail if earlier else ""), done) if t)
        if o.status is Status.PASS and index < count:
            held[key] = replace(o, detail=story)
            continue
        out.append(replace(o, detail=story + (f"\n{o.detail}" if o.detail else "")))
    return out
