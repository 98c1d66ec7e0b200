"""Parent side: scan case files, select and plan cases, launch each group, report.

The parent never imports a platform (torch, mindspore): it reads case files statically
(:mod:`meshtest.model.scan`), writes one launch plan per group and starts the group's launcher.
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

import os
import queue
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..contract import CaseOutcome
from ..errors import DeviceUnavailable, SelectionError
from ..model.scan import FileScan, ScannedCase, case_id, name_of, scan_case_file
from ..platforms import probe
from ..platforms.registry import backend_info
from ..report import reporter
from ..report.html import write_html_report
from ..report.junit import write_junit
from ..report.results import write_results
from ..status import Status
from . import executor, outcomes, relaunch, warm
from .launch import (
    LaunchResult,
    RankWatcher,
    free_port,
    launch,
    rendezvous_clashed,
    salvage,
    warm_modules,
)
from .launcher_log import describe_exit
from .options import RunOptions
from .plan import RunPlan, is_ranks_lane, make_plan
from .planner import Group, LaunchSchedule, device_kind_mismatch
from .progress import ProgressBoard
from .selection import cache_dir, update_lastfailed
from .slots import SlotLease, SlotPool, SlotRequestError, default_slot_dir

#: Environment variable with a fixed rendezvous port for the first launch attempt.
MASTER_PORT_ENV = "MESHTEST_MASTER_PORT"


@dataclass
class RunResult:
    outcomes: List[CaseOutcome]
    notes: List[str] = field(default_factory=list)
    launches: int = 0
    #: the groups being run and their launch directories, by group id, while their launches are in flight
    in_flight: Dict[str, Tuple[Group, str]] = field(default_factory=dict)
    #: phased cases whose phases so far passed, waiting for their next phase (by case ID, file::name)
    held: Dict[str, CaseOutcome] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and not any(o.status.failing for o in self.outcomes)


def scan_files(files: Sequence[str]) -> Tuple[List[ScannedCase], List[CaseOutcome], List[str]]:
    """Scan every file. A file that cannot be read as a whole (a syntax error) is one error
    outcome; each broken declaration is an error outcome of its own case
    (:attr:`meshtest.model.scan.FileScan.broken`), the file's other cases run. Cases are
    ``file::name``: two files may declare the same name.

    :returns: (cases, error outcomes, scan notes such as sweep summaries).
    """
    cases: List[ScannedCase] = []
    errors: List[CaseOutcome] = []
    notes: List[str] = []
    for path in files:
        scan: FileScan = scan_case_file(path)
        if scan.error:
            errors.append(outcomes.file_error(path, "scan", scan.error))
            continue
        notes.extend(scan.notes)
        errors.extend(outcomes.broken_declaration(b) for b in scan.broken)
        cases.extend(scan.cases)
    return cases, errors, notes


def run_group(group: Group, opts: RunOptions, out_dir: str, lease: SlotLease,
              on_progress=None, on_watch=None) -> Tuple[List[CaseOutcome], List[str], int]:
    """Run a group's cases, relaunching after a hang or crash so no case is lost (the policy:
    :func:`meshtest.parent.relaunch.decide`). Relaunches write to ``<group>.relaunch<k>/``; a
    launch that failed its rendezvous on an address in use is kept as ``<dir>.addrinuse<k>``
    and retried on another port.

    :param on_progress: called with (cases of this group finished, case running on some rank or "")
        while a launch runs.
    :param on_watch: called with (the launch's :class:`RankWatcher`, its directory) at each poll
        (what every rank recorded so far: the runner starts a phased case's next phase from it).
    :returns: (outcomes, report notes, number of launches). Each launch is also recorded in
        the slot pool's audit log.
    """
    found: List[CaseOutcome] = []
    notes: List[str] = []
    remaining = list(group.cases)
    attempt = launches = clashes = 0
    port = int(os.environ[MASTER_PORT_ENV]) if os.environ.get(MASTER_PORT_ENV) else None
    header = ""
    while remaining:
        sub_dir = out_dir if attempt == 0 else f"{out_dir}.relaunch{attempt}"
        _audit_launch(lease, group, sub_dir, len(remaining))
        launches += 1
        res = launch(replace(group, cases=tuple(remaining)), platform=opts.platform, device_kind=opts.device_kind,
                     case_timeout_s=opts.case_timeout_s, out_dir=sub_dir, lease=lease, fail_fast=opts.fail_fast,
                     cases_dir=cases_dir(opts),
                     collective_checks=opts.collective_checks == "on", master_port=port, header=header,
                     on_poll=_poller(on_progress, len(found), on_watch, sub_dir), record_ops=opts.record_ops,
                     mutant=opts.mutant, executor=opts.executor or "local", record_dispatch=opts.record_dispatch)
        _audit_launch(lease, group, sub_dir, res=res)
        decision = relaunch.decide([c.id for c in remaining], _facts(res, group), clashes)
        if decision.retry_rendezvous:
            clashes += 1
            header = _keep_aside(sub_dir, clashes, port)
            port = free_port() if port is not None else None
            notes.append(f"{header}; retrying on port {port or 'chosen by torchrun'}")
            continue
        header = ""
        ranks = (f"{group.workers} process(es) simulating the ranks" if group.lane == "local"
                 else f"{group.world_size} ranks")
        notes.append(f"launch {os.path.basename(sub_dir)}: {ranks}, {len(remaining)} case(s), "
                     f"{res.wall_s:.1f}s, {describe_exit(res.rc)}"
                     + (", killed at a deadline" if res.timed_out else ""))
        decided = _decided_outcomes(decision, group, res, remaining)
        suspect = next((o for o in decided if case_id(o.file, o.case) == decision.suspect), None)
        if (opts.collective_checks == "auto" and group.lane == "ranks" and suspect is not None
                and suspect.status in (Status.TIMEOUT, Status.ERROR)):
            launches += 1
            decided = _diagnose(decided, decision.suspect, group, opts, f"{out_dir}.diagnose{attempt}", lease)
        found.extend(decided)
        notes.extend(decision.notes)
        by_id = {c.id: c for c in remaining}
        remaining = [by_id[n] for n in decision.next_cases]
        attempt += 1
    return found, notes, launches


def _diagnose(decided: List[CaseOutcome], suspect: str, group: Group, opts: RunOptions, out_dir: str,
              lease: SlotLease) -> List[CaseOutcome]:
    """Re-run the case with ID ``suspect`` (it timed out, or broke the group) alone with collective
    checks on; what each rank reports becomes that outcome's ``diagnosis`` (its status stays as it was)."""
    case = next(c for c in group.cases if c.id == suspect)
    _audit_launch(lease, group, out_dir, 1)
    res = launch(replace(group, cases=(case,)), platform=opts.platform, device_kind=opts.device_kind,
                 case_timeout_s=opts.case_timeout_s, out_dir=out_dir, lease=lease, collective_checks=True,
                 cases_dir=cases_dir(opts), mutant=opts.mutant, executor=opts.executor or "local",
                 header=f"diagnosis of {case.name}: re-run alone with collective checks")
    _audit_launch(lease, group, out_dir, res=res)
    records = res.records.get(case.id, {})
    seen: Dict[str, List[str]] = {}
    for r, rec in sorted(records.items()):
        seen.setdefault(f"{rec.status} at step {rec.step}: {_first_line(rec.error)}".rstrip(": "), []).append(str(r))
    lines = [f"rank(s) {','.join(ranks)}: {text}" for text, ranks in seen.items()]
    if len(records) < group.ranks_of(case):
        lines.append(f"rank(s) {','.join(map(str, sorted(set(range(group.ranks_of(case))) - set(records))))} "
                     "did not finish again")
    text = f"re-run alone with collective checks ({os.path.basename(out_dir)}): " + "; ".join(lines)
    return [replace(o, diagnosis=text) if case_id(o.file, o.case) == suspect else o for o in decided]


def _audit_launch(lease: SlotLease, group: Group, launch_dir: str, cases: int = 0,
                  res: Optional[LaunchResult] = None) -> None:
    """The slot audit log's ``launch`` event (with ``cases``), or its ``launch_end`` (with ``res``:
    wall and start-up seconds), for the launch in ``launch_dir`` on the lease's first slots."""
    slots, need, name = lease.slots[: group.processes], group.processes, os.path.basename(launch_dir)
    if res is None:
        lease.pool.audit("launch", lease.target, slots, need, group=name, cases=cases)
    else:
        lease.pool.audit("launch_end", lease.target, slots, need, group=name, wall_s=round(res.wall_s, 3),
                         startup_s=None if res.startup_s is None else round(res.startup_s, 3))


def cases_dir(opts: RunOptions) -> str:
    """``<artifacts>/cases``: files a case keeps across its launches (phases' checkpoints, losses, curves)."""
    return os.path.join(opts.artifacts_dir, "cases")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _facts(res: LaunchResult, group: Group) -> relaunch.LaunchFacts:
    ids = [c.id for c in group.cases]
    return relaunch.LaunchFacts(
        recorded=frozenset(c.id for c in group.cases if res.recorded_by_all(c.id, group.ranks_of(c))),
        started=frozenset(n for n in ids if res.started(n)), stopped_after=res.stopped_after,
        rendezvous_clash=rendezvous_clashed(res), timed_out=res.timed_out, clean=res.rc == 0,
        exit_text=describe_exit(res.rc), launch_name=os.path.basename(res.out_dir), group_id=group.group_id,
        cluster_error=res.cluster_error)


def _decided_outcomes(decision: relaunch.Decision, group: Group, res: LaunchResult,
                      cases: Sequence[ScannedCase]) -> List[CaseOutcome]:
    """The outcomes a decision reports, in plan order (recorded, interrupted, not run)."""
    by_id = {c.id: c for c in cases}
    launch_dir = os.path.basename(res.out_dir)
    found = [outcomes.aggregate(by_id[n].name, by_id[n].file, group.group_id, group.ranks_of(by_id[n]),
                                res.records[n], launch_dir=launch_dir, kind=by_id[n].kind,
                                known=by_id[n].known_failure) for n in decision.complete]
    found += [outcomes.interrupted(by_id[n], group, res, decision.interrupted_status) for n in decision.interrupted]
    if decision.not_run:
        found += outcomes.not_run([by_id[n] for n in decision.not_run], group,
                                  f"not run: fail-fast gate stopped after {name_of(res.stopped_after or '')} failed")
    return found


def _keep_aside(sub_dir: str, clashes: int, port: Optional[int]) -> str:
    """Rename a launch directory that failed its rendezvous to ``<dir>.addrinuse<k>``; returns
    the line that heads the retry's ``launcher.log`` and the report note."""
    aside = f"{sub_dir}.addrinuse{clashes}"
    if os.path.exists(aside):  # a reused --artifacts-dir: keep the earlier run's too
        aside += f"-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    os.rename(sub_dir, aside)
    return (f"rendezvous retry {clashes}/{relaunch.RENDEZVOUS_RETRIES}: the previous launch failed with address "
            f"already in use (port {port or 'chosen by torchrun'}); its log: {os.path.basename(aside)}/launcher.log")


def _poller(on_progress, finished_before: int, on_watch=None, launch_dir: str = ""):
    if on_progress is None and on_watch is None:
        return None

    def poll(watcher: RankWatcher) -> None:
        if on_progress is not None:
            on_progress(finished_before + watcher.cases_done(), watcher.current_case())
        if on_watch is not None:
            on_watch(watcher, launch_dir)
    return poll


def run(files: Sequence[str], opts: RunOptions, stream=sys.stdout) -> RunResult:
    """Scan, select, plan, take device slots, launch each group, report.

    Whatever ends the run (Ctrl-C and SIGTERM included), the report, ``results.jsonl``,
    ``junit.xml`` and ``report.html`` are written with what was recorded.

    A case whose mesh needs more device slots than there are (this machine's pool, or the Ray
    cluster the run's executor names) is ``unsupported`` at step ``slots``, ``needs <n> nodes of
    <k> slots``; the other cases run.

    :raises SelectionError: name patterns match nothing, or the platform is unknown.
    :raises meshtest.parent.slots.SlotRequestError: a launch group needs more ranks than the build
        target declared (its tags are stale).
    """
    try:
        backend_info(opts.platform)
    except KeyError as e:
        raise SelectionError(e.args[0]) from None
    mismatch = device_kind_mismatch(opts.tag_filters, opts.device_kind)
    if mismatch:
        raise SelectionError(mismatch)
    os.makedirs(opts.artifacts_dir, exist_ok=True)
    opts, cluster = _with_executor(opts, is_ranks_lane(opts))
    cases, scan_errors, scan_notes = scan_files(files)
    plan = make_plan(cases, opts, cluster.shape.largest if cluster is not None else opts.slots,
                     "" if cluster is None else f"the run's {cluster.describe()}")
    opts = plan.options
    scan_errors = list(scan_errors) + list(plan.refused)
    scan_notes = list(scan_notes) + list(plan.notes)
    if cluster is not None:
        scan_notes.append(f"launches placed by the {cluster.describe()}")
    selected, groups = plan.selected, plan.groups
    if groups and opts.device_kind != "cpu":
        # before any slot is taken or launch started: a gate run on the wrong machine stops here
        # device ids are slot ids: every id of the pool must exist, not only the largest launch's count
        why = probe.problem(opts.platform, opts.device_kind, max([opts.slots, *(g.processes for g in groups)]))
        if why:
            raise DeviceUnavailable(f"cannot run {len(selected)} selected case(s) on device kind "
                                    f"{opts.device_kind!r} here: {why}")
    modules = warm_modules(opts.platform, opts.device_kind)
    if groups and cluster is None and modules:
        warm.prestart(modules)  # imports the platform while the run takes its slots
    result = RunResult(outcomes=list(scan_errors))
    with open(os.path.join(opts.artifacts_dir, "summary.txt"), "w", encoding="utf-8") as summary:
        def emit(lines: Sequence[str]) -> None:
            reporter.emit(lines, stream, summary)

        try:
            emit([f"meshtest: {len(selected)} case(s) selected from {len(files)} file(s) in {len(groups)} launch "
                  "group(s)"])
            emit(scan_notes)
            emit([reporter.format_outcome(o) for o in scan_errors])
            if groups:
                _run_on_slots(plan, opts.target or _label(files), result, emit, stream)
        except BaseException as e:  # SIGTERM (SystemExit), Ctrl-C: keep what was recorded so far
            salvaged = _salvage_in_flight(result) + [
                replace(o, status=Status.NOT_RUN, detail=f"{o.detail}; run interrupted before its next phase")
                for o in result.held.values()]
            result.outcomes.extend(salvaged)
            emit([reporter.format_outcome(o) for o in salvaged])
            result.notes.append(f"run interrupted ({type(e).__name__}); results so far are kept")
            raise
        finally:
            spec_ids = {c.id: c.spec_id for c in cases if c.spec_id}
            known = {c.id: c.known_failure.describe() for c in cases if c.known_failure}
            kinds = {c.id: c.kind for c in cases}
            result.outcomes = [replace(o, spec_id=spec_ids.get(case_id(o.file, o.case), o.spec_id),
                                       known_failure=known.get(case_id(o.file, o.case), ""),
                                       kind=kinds.get(case_id(o.file, o.case), o.kind))
                               for o in result.outcomes]
            if opts.slowest >= 0:
                emit(reporter.slowest_lines(result.outcomes, opts.slowest))
            emit(reporter.summary_lines(result.outcomes, result.notes))
            write_evidence(opts.artifacts_dir, result.outcomes, result.notes)
            record_last_failed(result.outcomes, opts)
    return result


def _with_executor(opts: RunOptions, ranks_lane: bool) -> Tuple[RunOptions, Any]:
    """The run's executor (:mod:`meshtest.parent.executor`) and its options: on a Ray cluster the
    pool this runner holds is the cluster's slots, in a directory of its own (Ray's placement
    groups share the real slots out among every driver); ``None`` for this machine.

    :raises SelectionError: the executor is unknown, or names Ray where Ray is not installed.
    """
    spec = executor.resolve(opts.executor, opts.slot_dir or default_slot_dir())
    try:
        cluster = executor.connect(spec) if ranks_lane else None
    except (ImportError, ValueError) as e:
        raise SelectionError(str(e)) from None
    if cluster is None:
        return opts, None
    pool = tempfile.mkdtemp(prefix="meshtest-ray-pool-")
    return replace(opts, executor=spec, slots=cluster.shape.total, slot_dir=pool), cluster


def record_last_failed(found: Sequence[CaseOutcome], opts: RunOptions) -> None:
    """Update the last-failed cache with this run's outcomes (every run does, as pytest's cache
    provider does); a cache that cannot be written is a warning, never a lost run."""
    ran = [case_id(o.file, o.case) for o in found if o.status.counts_as_run]
    failed = [case_id(o.file, o.case) for o in found if o.status.failing]
    try:
        update_lastfailed(cache_dir(opts.cache_dir), ran, failed)
    except OSError as e:
        print(f"meshtest: warning: the last-failed cache was not updated: {e}", file=sys.stderr)


def _run_on_slots(plan: RunPlan, label: str, result: RunResult, emit, stream) -> None:
    """Hold the plan's slots of the pool (waiting in line) while its groups run, with a progress board."""
    opts = plan.options
    pool = SlotPool(opts.slot_dir or default_slot_dir(), opts.slots)
    t0 = time.monotonic()
    before = len(result.outcomes)
    with pool.acquire(plan.need, label) as lease:
        result.notes.append(f"device slots {lease.slots} of {opts.slots} held "
                            f"(waited {time.monotonic() - t0:.1f}s; pool {os.path.realpath(pool.directory)})")
        board = ProgressBoard(os.path.join(pool.directory, "progress"), label, len(plan.selected), stream)
        try:
            _run_groups(plan, lease, result, emit, board)
        finally:
            board.finish(len(result.outcomes) - before)


def _label(files: Sequence[str]) -> str:
    """How a run without a ``--target`` names itself in progress lines and the slot audit log:
    its files, or the first and a count (a progress line must not list 30 files)."""
    return ",".join(files) if len(files) <= 3 else f"{files[0]} and {len(files) - 1} more file(s)"


def _salvage_in_flight(result: RunResult) -> List[CaseOutcome]:
    """Outcomes of the cases every rank recorded in the interrupted groups' first launches."""
    found = []
    for group, group_dir in result.in_flight.values():
        records = salvage(group, group_dir)
        found += [outcomes.aggregate(c.name, c.file, group.group_id, group.ranks_of(c), records[c.id],
                                     launch_dir=os.path.basename(group_dir), kind=c.kind, known=c.known_failure)
                  for c in group.cases if len(records.get(c.id, {})) == group.ranks_of(c)
                  and c.id not in result.held]  # a phase that passed is reported from ``held``
    return found


class LaunchAborted(Exception):
    """Raised inside a launch's poll loop when the run is interrupted: the launch is killed."""


def _launch_line(group: Group, slots: List[int]) -> str:
    """``-- launch w4: 4 ranks, mesh(es) (2, 2), (4,), 96 case(s), slots [0, 1, 2, 3]``."""
    if group.lane == "local":
        what = f"{len(group.cases)} case(s) shared by {group.workers} process(es) simulating their ranks"
    else:
        meshes = ", ".join(dict.fromkeys(str(c.mesh_shape) for c in group.cases))
        what = f"{group.world_size} ranks, mesh(es) {meshes}, {len(group.cases)} case(s)"
    return f"-- launch {group.group_id}: {what}, slots {slots}"


@dataclass(frozen=True)
class PhasePassed:
    """Every rank of a launch still running recorded a pass for ``case`` (one phase of a phased
    case, not its last): its next phase may start now. ``outcome``: that phase's."""

    case: ScannedCase
    outcome: CaseOutcome


class _GroupsAtOnce:
    """The launches of one run in flight: a thread per launch, each on its own slots of the
    lease, reporting back through a queue (its end, or :class:`PhasePassed` while it runs);
    progress summed over them for the board."""

    def __init__(self, opts: RunOptions, lease: SlotLease, result: RunResult, board: Optional[ProgressBoard],
                 sched: LaunchSchedule) -> None:
        self.opts, self.lease, self.result, self.board, self.sched = opts, lease, result, board, sched
        self.before = len(result.outcomes)
        self.ended: "queue.Queue[Tuple[Group, object]]" = queue.Queue()
        self.abort = threading.Event()
        self.lock = threading.Lock()
        self.done: Dict[str, int] = {}
        self.threads: List[threading.Thread] = []
        #: (group id, case) of the phases reported passed while their launch ran
        self.early: set = set()

    def progress(self, group_id: str, done: int, current: str) -> None:
        """Called from a launch's poll loop; raises :class:`LaunchAborted` once the run is interrupted."""
        if self.abort.is_set():
            raise LaunchAborted()
        if self.board is not None:
            with self.lock:
                self.done[group_id] = done
                self.board.update(sum(self.done.values()) + len(self.result.outcomes) - self.before,
                                  ", ".join(sorted(self.sched.running)), current)

    def start(self, group: Group, slots: List[int]) -> None:
        group_dir = os.path.join(self.opts.artifacts_dir, "ranks", group.group_id)
        self.result.in_flight[group.group_id] = (group, group_dir)

        def work() -> None:
            try:
                sub = SlotLease(self.lease.pool, self.lease.target, slots, self.lease.fds)
                self.ended.put((group, run_group(group, self.opts, group_dir, sub,
                                                 lambda done, current: self.progress(group.group_id, done, current),
                                                 self._phase_watch(group))))
            except BaseException as e:  # reported by the main thread
                self.ended.put((group, e))

        t = threading.Thread(target=work, name=group.group_id, daemon=True)
        self.threads.append(t)
        t.start()

    def _phase_watch(self, group: Group):
        """A poll hook that reports :class:`PhasePassed` once for each phase (not a case's last)
        ``group`` runs, as soon as every rank recorded it passed."""
        units = [c for c in group.phase_units() if c.phase < len(c.phase_meshes)]
        if not units:
            return None
        told = set()

        def watch(watcher: RankWatcher, launch_dir: str) -> None:
            for c in units:
                records = watcher.records.get(c.id, {})
                if (c.id not in told and len(records) == group.ranks_of(c)
                        and all(r.status is Status.PASS for r in records.values())):
                    told.add(c.id)
                    self.ended.put((group, PhasePassed(c, outcomes.aggregate(
                        c.name, c.file, group.group_id, group.ranks_of(c), records,
                        launch_dir=os.path.basename(launch_dir)))))
        return watch

    def next_ended(self) -> Tuple[Group, object]:
        """The next launch group to end and what :func:`run_group` returned (its slots are free
        again), or a :class:`PhasePassed` of a launch still running. An exception in a launch's
        thread is raised here."""
        group, got = _next_ended(self.ended)
        if isinstance(got, PhasePassed):
            self.early.add((group.group_id, got.case.id))
            return group, got
        self.sched.give_back(group.group_id)
        del self.result.in_flight[group.group_id]
        if isinstance(got, BaseException):
            raise got
        with self.lock:
            self.done.pop(group.group_id, None)
        return group, got

    def stop(self) -> None:
        """Kill the launches still in flight (their poll loops raise) and wait for their threads."""
        self.abort.set()
        for t in self.threads:
            t.join(timeout=30)


def _run_groups(plan: RunPlan, lease: SlotLease, result: RunResult, emit,
                board: Optional[ProgressBoard] = None) -> None:
    """Run the groups into ``result``, each launch on its own slots of ``lease``, as many at once
    as the lease holds slots for (:class:`meshtest.parent.planner.LaunchSchedule`); outcomes are
    reported as each group ends and kept in plan order. A fail-fast run starts no group after a
    failure (the running ones finish) and reports the rest ``not_run``."""
    opts = plan.options
    scan_errors = len(result.outcomes)  # a broken file fails by itself; it does not stop the others
    order = {g.group_id: i for i, g in enumerate(plan.groups)}
    sched = plan.schedule(lease.slots)
    flight = _GroupsAtOnce(opts, lease, result, board, sched)
    ranked: Dict[int, int] = {}
    try:
        while sched.pending or sched.running:
            failed = [o for o in result.outcomes[scan_errors:] if o.status.failing]
            if opts.fail_fast and failed and sched.pending:
                _fail_fast_rest(sched.pending, failed[0], result, emit)
                sched.pending = []
            while sched.pending and (group := sched.startable()) is not None:
                slots = sched.take(group)
                emit([_launch_line(group, slots)])
                flight.start(group, slots)
            if not sched.running:
                if sched.pending:  # cannot happen: every group fits the lease (device_need)
                    raise SlotRequestError(f"launch group {sched.pending[0].group_id} needs more slots than the "
                                           f"run holds ({len(lease.slots)})")
                break
            group, got = flight.next_ended()
            if isinstance(got, PhasePassed):  # its next phase may start while this launch goes on
                _chain_phases(group, [got.outcome], result, sched)
                continue
            group_outcomes, notes, launches = got
            if group.phase_units():
                group_outcomes = _chain_phases(
                    group, [o for o in group_outcomes if (group.group_id, case_id(o.file, o.case)) not in flight.early],
                    result, sched)
            with flight.lock:
                result.launches += launches
                result.outcomes.extend(group_outcomes)
            ranked.update((id(o), order[group.group_id]) for o in group_outcomes)
            result.notes.extend(notes)
            emit([reporter.format_outcome(o, opts.verbosity) for o in group_outcomes
                  if opts.verbosity >= 0 or o.status.failing])
    finally:
        flight.stop()
        # plan order, whatever order the groups ended in
        rest = result.outcomes[scan_errors:]
        result.outcomes[scan_errors:] = sorted(rest, key=lambda o: ranked.get(id(o), len(order)))


def _chain_phases(group: Group, found: Sequence[CaseOutcome], result: RunResult,
                  sched: LaunchSchedule) -> List[CaseOutcome]:
    """``found`` (outcomes of ``group``'s launch) chained with their cases' earlier phases
    (:func:`meshtest.parent.outcomes.phase_chain`, which keeps a passed phase that is not the last
    in ``result.held``); the next phase of each such case may start (``sched.phase_passed``).
    The main thread's only: the launch threads never touch ``result.held``."""
    out = outcomes.phase_chain(group, found, result.held)
    reported = {case_id(o.file, o.case) for o in found}
    for c in group.phase_units():
        if c.id in reported and c.id in result.held:
            sched.phase_passed(c.id, c.phase)
    return out


def _next_ended(ended: "queue.Queue") -> Tuple[Group, object]:
    """The next group to end (waiting in short steps, so a signal handler runs meanwhile)."""
    while True:
        try:
            return ended.get(timeout=0.5)
        except queue.Empty:
            continue


def _fail_fast_rest(pending: Sequence[Group], failed: CaseOutcome, result: RunResult, emit) -> None:
    reason = f"not run: fail-fast gate stopped after {failed.case} ({failed.file}) failed"
    later = {case_id(o.file, o.case): o for g in pending for o in outcomes.not_run(g.cases, g, reason)}
    skipped = [o for key, o in later.items() if key not in result.held]
    result.outcomes.extend(skipped)
    result.notes.append(f"fail-fast: {len(skipped)} case(s) in {len(pending)} later launch group(s) not run")
    emit([reporter.format_outcome(o) for o in skipped])


def write_evidence(artifacts_dir: str, outcomes: Sequence[CaseOutcome], notes: Sequence[str] = ()) -> None:
    """``results.jsonl``, ``junit.xml`` and ``report.html`` for the whole run, and results and JUnit
    again per case file under ``targets/<file path with / as .>/`` (one run may serve several
    build targets)."""
    write_html_report(os.path.join(artifacts_dir, "report.html"), outcomes, notes)
    write_results(os.path.join(artifacts_dir, "results.jsonl"), outcomes)
    write_junit(os.path.join(artifacts_dir, "junit.xml"), outcomes)
    files = sorted({o.file for o in outcomes})
    for file in files:
        d = os.path.join(artifacts_dir, "targets", file.replace(os.sep, "."))
        os.makedirs(d, exist_ok=True)
        mine = [o for o in outcomes if o.file == file]
        write_results(os.path.join(d, "results.jsonl"), mine)
        write_junit(os.path.join(d, "junit.xml"), mine)
