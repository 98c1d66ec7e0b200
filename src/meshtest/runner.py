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
    targets/<file>/                results.jsonl and junit.xml of one case file
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from . import reporter
from .backend import backend_info
from .errors import SelectionError
from .junit import write_junit
from .launcher import launch_command
from .proctree import die_with_parent
from .planner import DEFAULT_CASE_TIMEOUT_S, Group, plan_groups, select_cases, write_plan
from .reporter import CaseOutcome
from .scan import FileScan, ScannedCase, scan_case_file
from .slots import DEFAULT_SLOTS, SlotLease, SlotPool, SlotRequestError

#: Seconds allowed for starting and tearing down one launch (measured: 4-11 s for 2-8 ranks).
LAUNCH_OVERHEAD_S = 120.0
#: Environment variable, per device kind, that tells a launch's ranks which devices they own.
#: On CPU slots only bound concurrency; the ids still reach the ranks (and their logs).
DEVICE_VISIBILITY_ENV = {"cpu": "MESHTEST_SLOT_IDS", "npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}


def default_slot_dir() -> str:
    """``$MESHTEST_SLOT_DIR``, else ``~/.cache/meshtest/slots``."""
    return os.environ.get("MESHTEST_SLOT_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "meshtest", "slots")


@dataclass(frozen=True)
class RunOptions:
    """What to run and where to put the evidence.

    :param tag_filters: Pants ``--tag`` style filters, see :func:`meshtest.planner.select_cases`.
    :param name_patterns: fnmatch patterns on case names.
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


@dataclass
class RunResult:
    outcomes: List[CaseOutcome]
    notes: List[str] = field(default_factory=list)
    launches: int = 0

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


def _launch(group: Group, opts: RunOptions, out_dir: str, lease: SlotLease) -> Tuple[int, bool, float]:
    """Start the group's launcher on the first ``world_size`` slots of ``lease`` and wait for it.

    The lease's lock files are inherited by the launch (``pass_fds``), so its slots stay held
    as long as any of its processes lives, even if this runner dies first.

    :returns: (exit code, timed out, wall seconds). On timeout the launcher's whole process
        group (launcher and ranks) is killed.
    """
    os.makedirs(out_dir, exist_ok=True)
    plan_path = os.path.join(out_dir, "plan.json")
    slot_ids = lease.slots[: group.world_size]
    write_plan(plan_path, group, platform=opts.platform, device_kind=opts.device_kind,
               out_dir=os.path.abspath(out_dir), case_timeout_s=opts.case_timeout_s, slots=slot_ids)
    cmd = launch_command(backend_info(opts.platform).launcher, group.world_size, ["--plan", os.path.abspath(plan_path)])
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env[DEVICE_VISIBILITY_ENV.get(opts.device_kind, "MESHTEST_SLOT_IDS")] = ",".join(map(str, slot_ids))
    deadline = LAUNCH_OVERHEAD_S + opts.case_timeout_s * len(group.cases)
    t0 = time.monotonic()
    with open(os.path.join(out_dir, "launcher.log"), "w", encoding="utf-8") as logf:
        logf.write("$ " + " ".join(cmd) + "\n")
        logf.flush()
        # Own session, so the whole launch (launcher and ranks) can be killed as one group;
        # die_with_parent so it also dies if this runner is killed outright.
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, pass_fds=lease.fds,
                                start_new_session=True, preexec_fn=die_with_parent)
        timed_out = False
        try:
            rc = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # normal exit, timeout, Ctrl-C or SIGTERM of the runner: no rank survives
            _kill_group(proc.pid)
            rc = proc.wait()
    return rc, timed_out, time.monotonic() - t0


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone


def _read_rank_results(out_dir: str, world_size: int) -> Tuple[Dict[str, Dict[int, dict]], set]:
    """rank JSONL files → ({case: {rank: record}}, ranks that wrote ``rank_done``)."""
    by_case: Dict[str, Dict[int, dict]] = {}
    done = set()
    for rank in range(world_size):
        path = os.path.join(out_dir, f"rank{rank}.jsonl")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                if rec.get("event") == "rank_done":
                    done.add(rank)
                elif "case" in rec:
                    by_case.setdefault(rec["case"], {})[rank] = rec
    return by_case, done


def _launcher_tail(out_dir: str, n: int = 6) -> str:
    try:
        with open(os.path.join(out_dir, "launcher.log"), encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def run_group(group: Group, opts: RunOptions, out_dir: str, lease: SlotLease) -> Tuple[List[CaseOutcome], List[str]]:
    """Launch one group and turn its rank results into outcomes and report notes."""
    rc, timed_out, wall = _launch(group, opts, out_dir, lease)
    by_case, done = _read_rank_results(out_dir, group.world_size)
    notes = [f"launch {group.group_id}: {group.world_size} ranks, {len(group.cases)} case(s), {wall:.1f}s, exit {rc}"]
    if timed_out:
        reason = f"launch {group.group_id} timed out and was killed; see ranks/{group.group_id}/rank<k>.log"
    elif rc != 0:
        reason = f"launch {group.group_id} exited {rc} before this rank recorded the case:\n{_launcher_tail(out_dir)}"
    else:
        reason = f"launch {group.group_id} exited 0 but this rank recorded no result"
    if rc != 0 and not timed_out and len(done) == group.world_size:
        notes.append(
            f"teardown warning: launch {group.group_id} exited {rc} after every rank recorded all results; "
            f"results stand (see ranks/{group.group_id}/launcher.log)"
        )
    outcomes = [
        reporter.aggregate(c.name, c.file, group.group_id, group.world_size, by_case.get(c.name, {}),
                           ("timeout: " if timed_out else "") + reason)
        for c in group.cases
    ]
    if timed_out:
        for o in outcomes:
            if o.status == "missing":
                o.status = "timeout"
    return outcomes, notes


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

    :raises SelectionError: name patterns match nothing.
    :raises meshtest.slots.SlotRequestError: the run needs more slots than the pool has.
    """
    os.makedirs(opts.artifacts_dir, exist_ok=True)
    cases, outcomes, scan_notes = scan_files(files)
    selected = select_cases(cases, opts.device_kind, opts.tag_filters, opts.name_patterns)
    groups = plan_groups(selected)
    result = RunResult(outcomes=list(outcomes))
    need = device_need(groups, opts.device_need)
    with open(os.path.join(opts.artifacts_dir, "summary.txt"), "w", encoding="utf-8") as summary:
        emit = lambda lines: reporter.emit(lines, stream, summary)  # noqa: E731
        emit([f"meshtest: {len(selected)} case(s) selected from {len(files)} file(s) in {len(groups)} launch(es)"])
        emit(scan_notes)
        emit([reporter.format_outcome(o) for o in outcomes])
        if groups:
            pool = SlotPool(opts.slot_dir or default_slot_dir(), opts.slots)
            t0 = time.monotonic()
            with pool.acquire(need, opts.target or ",".join(files)) as lease:
                result.notes.append(f"device slots {lease.slots} of {opts.slots} held "
                                    f"(waited {time.monotonic() - t0:.1f}s; pool {pool.directory})")
                for group in groups:
                    emit([f"-- launch {group.group_id}: mesh {group.mesh_shape} {group.mesh_dim_names}, "
                          f"{len(group.cases)} case(s), slots {lease.slots[:group.world_size]}"])
                    pool.audit("launch", lease.target, lease.slots[: group.world_size], group.world_size)
                    group_outcomes, notes = run_group(group, opts, os.path.join(opts.artifacts_dir, "ranks", group.group_id), lease)
                    result.launches += 1
                    result.outcomes.extend(group_outcomes)
                    result.notes.extend(notes)
                    emit([reporter.format_outcome(o) for o in group_outcomes])
        emit(reporter.summary_lines(result.outcomes, result.notes))
    write_evidence(opts.artifacts_dir, result.outcomes)
    return result


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
