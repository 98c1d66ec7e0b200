"""Parent side: scan case files, select and plan cases, launch each group, report.

The parent never imports a platform (torch, mindspore): it reads case files statically
(:mod:`meshtest.scan`), writes one launch plan per group and starts the group's launcher.
Artifacts, under ``artifacts_dir``::

    ranks/<group>/plan.json        the launch plan every rank read
    ranks/<group>/launcher.log     the launcher's own output
    ranks/<group>/rank<k>.log      rank k's stdout/stderr
    ranks/<group>/rank<k>.jsonl    rank k's per-case results
    results.jsonl                  one aggregated outcome per case
    summary.txt                    the report printed on stdout
    junit.xml                      one <testcase> per case (failures name ranks and step)
    report.html                    files → cases → ranks matrix, linking each rank's log and JSONL
    targets/<file>/                results.jsonl and junit.xml of one case file
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from . import reporter
from .backend import backend_info
from .errors import SelectionError
from .html_report import write_html_report
from .junit import write_junit
from .launch import (MASTER_PORT_ENV, RENDEZVOUS_RETRIES, LaunchResult, RankWatcher, describe_exit, free_port, launch,
                     rank_exit_codes, rendezvous_clashed, tail)
from .progress import ProgressBoard
from .planner import DEFAULT_CASE_TIMEOUT_S, GAVE_UP_EXIT, Group, plan_groups, select_cases
from .reporter import CaseOutcome
from .scan import FileScan, ScannedCase, scan_case_file
from .slots import DEFAULT_SLOTS, SlotLease, SlotPool, SlotRequestError, default_slot_dir



@dataclass(frozen=True)
class RunOptions:
    """What to run and where to put the evidence.

    :param tag_filters: Pants ``--tag`` style filters, see :func:`meshtest.planner.select_cases`.
    :param name_patterns: fnmatch patterns on case names.
    :param fail_fast: stop at the first failing case (level0 gates); the cases not run are
        reported ``not_run``. Off: run everything and list every failure (level1).
    """

    artifacts_dir: str
    platform: str = "torch"
    device_kind: str = "cpu"
    tag_filters: Tuple[str, ...] = ()
    name_patterns: Tuple[str, ...] = ()
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    slots: int = DEFAULT_SLOTS
    slot_dir: str = ""
    device_need: Optional[int] = None
    target: str = ""
    fail_fast: bool = False


@dataclass
class RunResult:
    outcomes: List[CaseOutcome]
    notes: List[str] = field(default_factory=list)
    launches: int = 0
    #: the group being run and its launch directory, while a launch is in flight
    in_flight: Optional[Tuple[Group, str]] = None

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and not any(o.status in reporter.FAILING for o in self.outcomes)


def scan_files(files: Sequence[str]) -> Tuple[List[ScannedCase], List[CaseOutcome], List[str]]:
    """Scan every file; broken files and cross-file duplicate names become error outcomes.

    :returns: (cases, error outcomes, scan notes such as sweep summaries).
    """
    cases: List[ScannedCase] = []
    errors: List[CaseOutcome] = []
    notes: List[str] = []
    owner: Dict[str, str] = {}
    for path in files:
        scan: FileScan = scan_case_file(path)
        if scan.error:
            errors.append(_file_error(path, "scan", scan.error))
            continue
        notes.extend(scan.notes)
        for c in scan.cases:
            if c.name in owner:
                errors.append(_file_error(
                    path, "scan",
                    f"{path}: case {c.name!r}: rule duplicate-name: also declared in {owner[c.name]}",
                ))
                continue
            owner[c.name] = path
            cases.append(c)
    return cases, errors, notes


def _file_error(path: str, step: str, error: str) -> CaseOutcome:
    return CaseOutcome(case=f"<file {path}>", file=path, group="-", world_size=0, status="error",
                       failures=[{"rank": "-", "status": "error", "step": step, "error": error}])


def _interrupted_outcome(case: ScannedCase, group: Group, res: LaunchResult, out_dir: str) -> CaseOutcome:
    """Outcome of the case a launch died in: ``timeout`` (killed at its deadline) or ``crash``.

    Ranks that recorded a result keep it; each other rank is reported with the step it was in
    and the tail of its log (where a timed-out rank's stack dump is).
    """
    status = "timeout" if res.timed_out else "crash"
    by_rank = res.records.get(case.name, {})
    exits = rank_exit_codes(os.path.join(out_dir, "launcher.log"))
    failures = []
    for rank in range(group.world_size):
        rec = by_rank.get(rank)
        prog = res.progress.get(rank)
        if rec is not None:
            if rec["status"] != "pass":
                failures.append({"rank": rank, "status": rec["status"], "step": rec["step"], "error": rec["error"]})
            elif prog is not None and prog.fence == case.name:
                failures.append({"rank": rank, "status": "waited", "step": "fence", "error": (
                    f"finished the case ({rec['status']}) and waited at its end for the other ranks: "
                    "a collective one rank skipped, added or reordered leaves the others blocked")})
            continue
        step = prog.step if prog is not None and prog.case == case.name else "not started"
        if rank in exits and exits[rank] == GAVE_UP_EXIT:
            why = (f"the rank left the launch (exit {GAVE_UP_EXIT}) after its end-of-case fence failed"
                   + (f" at the end of {prog.fence}" if prog is not None and prog.fence else "")
                   + ": a peer did not finish a case or the process group broke")
        elif res.timed_out:
            why = "did not finish before the case deadline; the launch was killed"
        elif rank in exits:
            why = f"the rank died ({describe_exit(exits[rank])}) before recording the case"
        else:
            why = f"the launch ended ({describe_exit(res.rc)}) before this rank recorded the case"
        log_tail = tail(os.path.join(out_dir, f"rank{rank}.log"), 12)
        failures.append({"rank": rank, "status": status, "step": step,
                         "error": f"{why}\n-- last lines of rank{rank}.log:\n{log_tail}"
                                  f"-- last lines of launcher.log:\n{tail(os.path.join(out_dir, 'launcher.log'))}"})
    slowest = max((r["duration_s"] for r in by_rank.values()), default=0.0)
    return CaseOutcome(case.name, case.file, group.group_id, group.world_size, status, slowest, None, failures,
                       launch_dir=os.path.basename(out_dir))


def _salvage(group: Group, group_dir: str) -> List[CaseOutcome]:
    """Outcomes of the cases every rank recorded in an interrupted group's first launch."""
    watcher = RankWatcher(group_dir, group.world_size, time.time())
    watcher.poll()
    return [dataclasses.replace(reporter.aggregate(c.name, c.file, group.group_id, group.world_size,
                                                   watcher.records[c.name], ""), launch_dir=os.path.basename(group_dir))
            for c in group.cases if len(watcher.records.get(c.name, {})) == group.world_size]


def not_run(cases: Sequence[ScannedCase], group: Group, reason: str) -> List[CaseOutcome]:
    """Outcomes for cases a fail-fast run did not start."""
    return [CaseOutcome(c.name, c.file, group.group_id, group.world_size, "not_run",
                        failures=[{"rank": "-", "status": "not_run", "step": "-", "error": reason}]) for c in cases]


def run_group(group: Group, opts: RunOptions, out_dir: str, lease: SlotLease,
              on_progress=None) -> Tuple[List[CaseOutcome], List[str], int]:
    """Run a group's cases, relaunching after a hang or crash so no case is lost.

    Each launch runs the cases still to do. When a launch dies inside a case (deadline or
    crash), that case is reported ``timeout``/``crash`` with the ranks and steps, and the cases
    after it run in a fresh launch (artifacts in ``<group>.relaunch<k>/``). When a launch stops
    between cases (a rank gave up after a failed health probe), the rest are relaunched. A
    launch that ends without starting any case ends the group: its cases are reported ``crash``.
    A launch whose rendezvous failed on an address in use (``EADDRINUSE``) is retried on
    another port up to :data:`meshtest.launch.RENDEZVOUS_RETRIES` times; its directory is kept
    as ``<dir>.addrinuse<k>`` and the retry is noted in the report and the new ``launcher.log``.

    :param on_progress: called with (cases of this group finished, case running on some rank or "")
        while a launch runs.
    :returns: (outcomes, report notes, number of launches). Each launch is also recorded in
        the slot pool's audit log.
    """
    outcomes: List[CaseOutcome] = []
    notes: List[str] = []
    remaining = list(group.cases)
    attempt = launches = clashes = 0
    port = int(os.environ[MASTER_PORT_ENV]) if os.environ.get(MASTER_PORT_ENV) else None
    header = ""
    while remaining:
        sub = dataclasses.replace(group, cases=tuple(remaining))
        sub_dir = out_dir if attempt == 0 else f"{out_dir}.relaunch{attempt}"
        lease.pool.audit("launch", lease.target, lease.slots[: group.world_size], group.world_size)
        launches += 1
        res = launch(sub, platform=opts.platform, device_kind=opts.device_kind, case_timeout_s=opts.case_timeout_s,
                     out_dir=sub_dir, lease=lease, fail_fast=opts.fail_fast, master_port=port, header=header,
                     on_poll=None if on_progress is None else _poller(on_progress, len(outcomes), group.world_size))
        if clashes < RENDEZVOUS_RETRIES and rendezvous_clashed(res, sub_dir):
            clashes += 1
            aside = f"{sub_dir}.addrinuse{clashes}"
            if os.path.exists(aside):  # a reused --artifacts-dir: keep the earlier run's too
                aside += f"-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            os.rename(sub_dir, aside)
            new_port = free_port() if port is not None else None
            header = (f"rendezvous retry {clashes}/{RENDEZVOUS_RETRIES}: the previous launch failed with address "
                      f"already in use (port {port or 'chosen by torchrun'}); its log: {os.path.basename(aside)}/launcher.log")
            notes.append(f"{header}; retrying on port {new_port or 'chosen by torchrun'}")
            port = new_port
            continue
        header = ""
        notes.append(f"launch {os.path.basename(sub_dir)}: {group.world_size} ranks, {len(remaining)} case(s), "
                     f"{res.wall_s:.1f}s, {describe_exit(res.rc)}" + (", killed at a deadline" if res.timed_out else ""))
        complete = [c for c in remaining if len(res.records.get(c.name, {})) == group.world_size]
        first_new = len(outcomes)
        outcomes.extend(reporter.aggregate(c.name, c.file, group.group_id, group.world_size, res.records[c.name], "")
                        for c in complete)
        incomplete = [c for c in remaining if c not in complete]
        for o in outcomes[first_new:]:
            o.launch_dir = os.path.basename(sub_dir)
        if res.stopped_after:
            outcomes.extend(not_run(incomplete, group, f"not run: fail-fast gate stopped after {res.stopped_after} failed"))
            notes.append(f"fail-fast: stopped after {res.stopped_after} failed; {len(incomplete)} case(s) of "
                         f"{group.group_id} not run")
            break
        if not incomplete:
            if res.rc != 0 and not res.timed_out:
                notes.append(f"teardown warning: launch {os.path.basename(sub_dir)} ended with {describe_exit(res.rc)} "
                             f"after every rank recorded every case; results stand (see its launcher.log)")
            break
        culprit = incomplete[0]
        started = culprit.name in res.records or any(p.case == culprit.name for p in res.progress.values())
        if started:
            outcomes.append(_interrupted_outcome(culprit, group, res, sub_dir))
            remaining = incomplete[1:]
            why = f"{culprit.name} ended its launch ({outcomes[-1].status})"
        elif complete:
            remaining = incomplete  # the ranks stopped between cases: relaunch the rest
            why = "a rank's end-of-case fence failed (the health probe after an error, or a peer that did not finish)"
        else:
            outcomes.extend(_interrupted_outcome(c, group, res, sub_dir) for c in incomplete)
            break
        if remaining:
            notes.append(f"relaunching {len(remaining)} case(s) of {group.group_id}: {why}")
        attempt += 1
    return outcomes, notes, launches


def _poller(on_progress, finished_before: int, world_size: int):
    def poll(watcher: RankWatcher) -> None:
        done = sum(len(by_rank) == world_size for by_rank in watcher.records.values())
        current = next((p.case for p in watcher.progress.values() if p.case), "") or ""
        on_progress(finished_before + done, current)
    return poll


def device_need(groups: Sequence[Group], declared: Optional[int]) -> int:
    """Slots this run holds: ``declared`` (the build target's resource tag) or the largest
    group's world size.

    :raises SlotRequestError: a group needs more ranks than ``declared`` — the target's tag and the
        planned launches disagree, which must never pass silently.
    """
    largest = max((g.world_size for g in groups), default=0)
    if declared is None:
        return largest
    if largest > declared:
        raise SlotRequestError(
            f"launch group {max(groups, key=lambda g: g.world_size).group_id} needs {largest} ranks but the "
            f"target declared a device need of {declared}; its tags are stale or were typed by hand"
        )
    return declared


def run(files: Sequence[str], opts: RunOptions, stream=sys.stdout) -> RunResult:
    """Scan, select, plan, take device slots, launch each group, report.

    :raises SelectionError: name patterns match nothing, or the platform is unknown.
    :raises meshtest.slots.SlotRequestError: the run needs more slots than the pool has.
    """
    try:
        backend_info(opts.platform)
    except KeyError as e:
        raise SelectionError(e.args[0]) from None
    os.makedirs(opts.artifacts_dir, exist_ok=True)
    cases, outcomes, scan_notes = scan_files(files)
    selected = select_cases(cases, opts.device_kind, opts.tag_filters, opts.name_patterns)
    groups = plan_groups(selected)
    result = RunResult(outcomes=list(outcomes))
    need = device_need(groups, opts.device_need)
    with open(os.path.join(opts.artifacts_dir, "summary.txt"), "w", encoding="utf-8") as summary:
        emit = lambda lines: reporter.emit(lines, stream, summary)  # noqa: E731
        try:
            emit([f"meshtest: {len(selected)} case(s) selected from {len(files)} file(s) in {len(groups)} launch group(s)"])
            emit(scan_notes)
            emit([reporter.format_outcome(o) for o in outcomes])
            if groups:
                pool = SlotPool(opts.slot_dir or default_slot_dir(), opts.slots)
                t0 = time.monotonic()
                with pool.acquire(need, opts.target or ",".join(files)) as lease:
                    result.notes.append(f"device slots {lease.slots} of {opts.slots} held "
                                        f"(waited {time.monotonic() - t0:.1f}s; pool {pool.directory})")
                    board = ProgressBoard(os.path.join(pool.directory, "progress"), opts.target or ",".join(files),
                                          len(selected), stream)
                    try:
                        _run_groups(groups, opts, lease, result, emit, board)
                    finally:
                        board.finish(len(result.outcomes) - len(outcomes))
        except BaseException as e:  # SIGTERM (SystemExit), Ctrl-C: keep what was recorded so far
            if result.in_flight is not None:
                salvaged = _salvage(*result.in_flight)
                result.outcomes.extend(salvaged)
                emit([reporter.format_outcome(o) for o in salvaged])
            result.notes.append(f"run interrupted ({type(e).__name__}); results so far are kept")
            raise
        finally:
            ids = {c.name: c.spec_id for c in cases if c.spec_id}
            for o in result.outcomes:
                o.spec_id = ids.get(o.case, o.spec_id)
            emit(reporter.summary_lines(result.outcomes, result.notes))
            write_evidence(opts.artifacts_dir, result.outcomes)
            write_html_report(os.path.join(opts.artifacts_dir, "report.html"), result.outcomes, result.notes)
    return result


def _run_groups(groups: Sequence[Group], opts: RunOptions, lease: SlotLease, result: RunResult, emit,
                board: Optional[ProgressBoard] = None) -> None:
    """Run the groups in order into ``result``; a fail-fast run stops after a failing group."""
    scan_errors = len(result.outcomes)  # a broken file fails by itself; it does not stop the others
    for gi, group in enumerate(groups):
        failed = [o for o in result.outcomes[scan_errors:] if o.status in reporter.FAILING]
        if opts.fail_fast and failed:
            reason = f"not run: fail-fast gate stopped after {failed[0].case} ({failed[0].file}) failed"
            skipped = [o for g in groups[gi:] for o in not_run(g.cases, g, reason)]
            result.outcomes.extend(skipped)
            result.notes.append(f"fail-fast: {len(skipped)} case(s) in {len(groups) - gi} later launch group(s) not run")
            emit([reporter.format_outcome(o) for o in skipped])
            return
        emit([f"-- launch {group.group_id}: mesh {group.mesh_shape} {group.mesh_dim_names}, "
              f"{len(group.cases)} case(s), slots {lease.slots[:group.world_size]}"])
        group_dir = os.path.join(opts.artifacts_dir, "ranks", group.group_id)
        result.in_flight = (group, group_dir)
        before = len(result.outcomes) - scan_errors
        progress = None if board is None else (
            lambda done, current, g=group.group_id, b=before: board.update(b + done, g, current))
        group_outcomes, notes, launches = run_group(group, opts, group_dir, lease, progress)
        result.in_flight = None
        result.launches += launches
        result.outcomes.extend(group_outcomes)
        result.notes.extend(notes)
        emit([reporter.format_outcome(o) for o in group_outcomes])


def write_evidence(artifacts_dir: str, outcomes: Sequence[CaseOutcome]) -> None:
    """``results.jsonl`` and ``junit.xml`` for the whole run, and again per case file under
    ``targets/<file path with / as .>/`` (one run may serve several build targets)."""
    reporter.write_results(os.path.join(artifacts_dir, "results.jsonl"), outcomes)
    write_junit(os.path.join(artifacts_dir, "junit.xml"), outcomes)
    files = sorted({o.file for o in outcomes})
    for file in files:
        d = os.path.join(artifacts_dir, "targets", file.replace(os.sep, "."))
        os.makedirs(d, exist_ok=True)
        mine = [o for o in outcomes if o.file == file]
        reporter.write_results(os.path.join(d, "results.jsonl"), mine)
        write_junit(os.path.join(d, "junit.xml"), mine)
