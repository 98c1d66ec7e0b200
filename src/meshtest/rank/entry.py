"""Rank entry: the process harness every rank of a launch runs
(``python -m meshtest.rank.entry --plan P``).

It reads the :class:`meshtest.contract.LaunchPlan`, sends its own stdout/stderr (native output
too) to ``rank<k>.log``, imports the plan's case files and checks them against their static
scan, initialises the platform and the mesh, then runs each case through
:mod:`meshtest.rank.pipeline` under the case's deadline, writing the contract's rank events to
``rank<k>.jsonl``. After every case every rank passes the end-of-case fence; a failed fence
ends the launch with :data:`meshtest.contract.GAVE_UP_EXIT` and the runner relaunches the
rest. At the deadline each rank dumps its Python stacks into its log (faulthandler).

Case isolation: before each case the platform's RNGs are reseeded from the case's name
(:func:`case_seed`), what it cached from earlier cases' ops is dropped
(``backend.forget_cached_decisions()``) and its process-wide state is snapshot (``backend.global_state()``); a case
that leaves a setting changed (``torch.set_default_dtype``, grad mode, a pushed mode, ...) is
reported ``error`` at step ``isolation`` naming each change, and the setting is restored, so the
next case runs clean and is not blamed.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import logging
import math
import os
import signal
import sys
import time
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..contract import (
    FENCE_MARGIN_S,
    GAVE_UP_EXIT,
    HEALTH_PROBE_FRACTION,
    NODE_ENV,
    CaseStarted,
    FenceEntered,
    LaunchPlan,
    RankDone,
    RankEvent,
    RankRecord,
    RankStarted,
    StepEntered,
    Stopped,
    event_to_json,
)
from ..errors import CaseFileError, MeshtestError
from ..model import dispatch_map, rules
from ..model.known import judge, marks_a_later_phase
from ..model.registry import BrokenCase, Registry, check_against_scan, load_case_file
from ..model.scan import ScannedCase, case_id, scan_case_file
from ..platforms.backend import ShardBackend
from ..platforms.registry import load_backend
from ..proctree import die_with_parent
from ..status import Status
from . import dispatch, pipeline
from .slow import CaseClock
from .train import CaseFiles, PhaseRun

log = logging.getLogger("meshtest.rank")


class RankStream:
    """This rank's ``rank<k>.jsonl``: the contract's rank events, one JSON line each, flushed
    at once (the runner's watcher reads them while the launch runs)."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a", encoding="utf-8")

    def emit(self, event: RankEvent) -> None:
        self.f.write(json.dumps(event_to_json(event)) + "\n")
        self.f.flush()
        if isinstance(event, RankRecord):  # the log names the case as its start line does (event.case is file::name)
            log.info("case %s: %s at step %s (%.3fs)%s", event.case.rsplit("::", 1)[-1], event.status, event.step,
                     event.duration_s, f"\n{event.error}" if event.error else "")

    def close(self) -> None:
        self.f.close()


def load_cases(plan_cases: Tuple[ScannedCase, ...]) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """Import each file of the plan once (skipping the declarations its static scan found broken:
    :func:`meshtest.model.registry.load_case_file`) and check it against that scan.

    :returns: (cases by ID, ``file::name``; load error by file).
    """
    registry = Registry(keep_broken=True)
    cases: Dict[str, Any] = {}
    errors: Dict[str, str] = {}
    for file in dict.fromkeys(c.file for c in plan_cases):
        try:
            scan = scan_case_file(file)
            if scan.error:
                raise CaseFileError(file, "static-scan", scan.error)
            loaded = load_case_file(file, registry, scan)
            check_against_scan(scan, loaded)
            cases.update((case_id(file, c.name), c) for c in loaded)
        except MeshtestError as e:
            errors[file] = str(e)
    return cases, errors


def deadline_s(case: Any, plan: LaunchPlan) -> float:
    """A case's deadline in seconds: its ``timeout_s``, else the run's ``--case-timeout``
    (also for a case whose file could not be loaded: ``case`` is ``None``)."""
    return float(getattr(case, "timeout_s", None) or plan.case_timeout_s)


def fails_suite(backend: ShardBackend, judged: Status) -> bool:
    """Collective: whether the case's outcome over all ranks fails the suite (every rank gets
    the same answer), from each rank's judged status (after the known-failure judgement): some
    rank failed (fail, error), or every rank passed a case marked ``known_failure`` (``xpass``);
    one rank's ``xpass`` beside another's ``xfail`` is an ``xfail``, as the aggregation rule
    says (:func:`meshtest.parent.outcomes.aggregate`)."""
    failed = backend.any_rank(judged.failing and judged is not Status.XPASS)
    not_all_xpass = backend.any_rank(judged is not Status.XPASS)
    return failed or not not_all_xpass


def case_seed(name: str) -> int:
    """The RNG seed every rank sets before case ``name``: ``crc32(f"{name}:seed")``."""
    return zlib.crc32(f"{name}:seed".encode())


def _show(value: Any) -> str:
    return f"{len(value)} entries" if isinstance(value, dict) else str(value)


def state_changes(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
    """Each changed entry of two ``global_state()`` snapshots: ``default dtype torch.float32 →
    torch.float64`` (for a dict, the keys added and removed)."""
    changes = []
    for name, old in before.items():
        new = after.get(name)
        if new == old:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            added, removed = sorted(map(str, set(new) - set(old))), sorted(map(str, set(old) - set(new)))
            changes.append(f"{name} " + ", ".join([f"+{k}" for k in added] + [f"-{k}" for k in removed]))
        else:
            changes.append(f"{name} {_show(old)} → {_show(new)}")
    return changes


def isolated(result: pipeline.StepResult, changes: List[str]) -> pipeline.StepResult:
    """``result`` of a case that left ``changes`` behind: ``error`` at step ``isolation`` (the
    case's own failure, if any, follows in the message)."""
    if not changes:
        return result
    text = (f"the case changed process-wide state and did not restore it: {'; '.join(changes)} "
            "(restored before the next case)")
    if result.status is not Status.PASS:
        text += f"\nbefore that, the case itself: {result.status} at step {result.step}: {result.error}"
    return pipeline.StepResult(Status.ERROR, "isolation", text, result.notes)


def run_one(case: Any, sc: ScannedCase, plan: LaunchPlan, rank: int, backend: ShardBackend, mesh: Any,
            out: RankStream, simulated: Sequence[int] = ()) -> Tuple[Status, Status]:
    """Run one case under its deadline, isolated from the cases around it, and record it, judged
    against its known failure (:func:`meshtest.model.known.judge`); returns (raw status, judged
    status).

    :param simulated: the ranks this process simulates (the local lane): one record each, all
        with this process's result; empty: one record, for ``rank``.
    """
    timeout_s = deadline_s(case, plan)
    out.emit(CaseStarted(sc.id, time.time(), timeout_s))
    log.info("case %s: start (deadline %.0fs)", case.name, timeout_s)
    # At the deadline every thread's stack goes to this rank's log, before the runner kills the launch.
    faulthandler.dump_traceback_later(timeout_s, exit=False, file=sys.stderr)
    t0 = time.perf_counter()
    if isinstance(case, BrokenCase):
        result = pipeline.StepResult(Status.ERROR, "register", case.error)
    else:
        before = backend.global_state()
        backend.seed(case_seed(case.name))
        backend.forget_cached_decisions()
        phase = None if sc.phase is None else PhaseRun(sc.phase, len(sc.phase_meshes),
                                                       os.path.join(plan.cases_dir, case.name))
        files = CaseFiles(os.path.join(plan.cases_dir, case.name),
                          os.path.join(os.path.dirname(sc.file), "golden", f"{case.name}.json"), sc.file)
        def on_step(step: str) -> None:
            clock.step(step)
            out.emit(StepEntered(sc.id, step))

        with _recording(plan, sc, backend, rank, simulated), _dispatching(plan, sc, backend, rank) as seen, \
                CaseClock(timeout_s, backend.library_paths()) as clock:
            clock.step("build")
            result = dispatch.run(case, backend, mesh, on_step, phase, files)
        result = result if plan.record_dispatch else against_dispatch_map(result, sc, seen)
        changes = state_changes(before, backend.global_state())
        if changes:
            backend.restore_global_state(before)
        result = isolated(result, changes)
    faulthandler.cancel_dump_traceback_later()
    elapsed = time.perf_counter() - t0
    later = (not isinstance(case, BrokenCase) and result.status is Status.PASS
             and marks_a_later_phase(case.known_failure, sc.phase))
    status, error = ((result.status, result.error) if later else
                     judge(case.known_failure, result.status, result.step, result.error, None if simulated else rank))
    near = None if isinstance(case, BrokenCase) else clock.note(elapsed)
    detail = "\n".join(n for n in (result.detail, near) if n)
    for r in simulated or (rank,):
        out.emit(RankRecord(sc.id, sc.file, plan.group_id, r, status, result.step, elapsed, error, detail,
                            getattr(case, "divergence", None) or "", node=os.environ.get(NODE_ENV, "")))
    return result.status, status


@contextlib.contextmanager
def _recording(plan: LaunchPlan, sc: ScannedCase, backend: ShardBackend, rank: int, simulated: Sequence[int]):
    """With ``plan.record_ops``: record the case's sharding-rule calls and append them to
    ``ops<rank>.jsonl`` (rank 0 only in the ranks lane: every rank makes the same calls)."""
    if not plan.record_ops or (rank != 0 and not simulated):
        yield
        return
    with backend.record_calls() as recorder:
        try:
            yield
        finally:
            with open(os.path.join(plan.out_dir, f"ops{rank}.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps({"case": sc.name, "file": sc.file, "calls": recorder.calls}, default=str) + "\n")


#: map path → (its dispatch map, the path, why it cannot be read), or ``None`` where there is no
#: map: looked up once per process, not once per case
_MAPS: Dict[str, Optional[Tuple[Optional[Dict[str, Any]], str, str]]] = {}


def _covering_map(case_file: str) -> Optional[Tuple[Optional[Dict[str, Any]], str, str]]:
    """The dispatch map beside ``case_file`` as ``(map, path, "")``, ``(None, path, why)`` when it
    cannot be read, or ``None`` when there is none."""
    path = dispatch_map.map_path(case_file)
    if path not in _MAPS:
        if not os.path.isfile(path):
            _MAPS[path] = None
        else:
            try:
                _MAPS[path] = (dispatch_map.read(path), path, "")
            except dispatch_map.DispatchMapError as e:
                _MAPS[path] = (None, path, str(e))
    return _MAPS[path]


@contextlib.contextmanager
def _dispatching(plan: LaunchPlan, sc: ScannedCase, backend: ShardBackend, rank: int):
    """For a case beside a dispatch map, or with ``plan.record_dispatch``: record which module
    served each operator it dispatches (yields the recorder; ``None``: not recorded; a
    ``NotImplementedError``: the platform cannot tell); with ``plan.record_dispatch``, append
    ``{"case", "file", "served"}`` to ``dispatch<rank>.jsonl``."""
    if not plan.record_dispatch and _covering_map(sc.file) is None:
        yield None
        return
    try:
        recorder = backend.record_dispatch()
    except NotImplementedError as e:
        yield NotImplementedError(str(e))
        return
    with recorder:
        try:
            yield recorder
        finally:
            if plan.record_dispatch:
                with open(os.path.join(plan.out_dir, f"dispatch{rank}.jsonl"), "a", encoding="utf-8") as f:
                    f.write(json.dumps({"case": sc.name, "file": sc.file, "served": recorder.served}) + "\n")


def against_dispatch_map(result: pipeline.StepResult, sc: ScannedCase, seen: Any) -> pipeline.StepResult:
    """``result``, or ``fail`` at step ``dispatch-map`` when the case's file has a dispatch map
    and what the case dispatched is not what it lists (:func:`meshtest.model.dispatch_map.check`),
    the map cannot be read, or the platform cannot record dispatches; the case's own failure, if
    any, follows in the message. A known failure cannot hide it (its step is another). Not
    applied while the map is being recorded (``plan.record_dispatch``)."""
    covered = _covering_map(sc.file)
    if covered is None:
        return result
    doc, path, why = covered
    if why:
        problem = why
    elif isinstance(seen, NotImplementedError):
        problem = f"the case's file has a dispatch map ({path}) but {seen}"
    else:
        problem = dispatch_map.check(doc, path, sc.file, sc.name, seen.served)
    if not problem:
        return result
    if result.status is not Status.PASS:
        problem += f"\nbefore that, the case itself: {result.status} at step {result.step}: {result.error}"
    return pipeline.StepResult(Status.FAIL, "dispatch-map", problem, result.notes)


def fence_timeout_s(case: Any, status: Status, plan: LaunchPlan) -> float:
    """How long rank 0 waits at a case's end-of-case fence: after an error that is not an
    assertion failure, the health probe's short wait (:data:`HEALTH_PROBE_FRACTION` of the run's
    case timeout); otherwise the case deadline plus :data:`FENCE_MARGIN_S`, so that a peer still
    inside the case is killed at its deadline (with stacks) before this rank gives up."""
    if status is Status.ERROR:
        return plan.case_timeout_s * HEALTH_PROBE_FRACTION
    return deadline_s(case, plan) + FENCE_MARGIN_S


def run_plan(plan: LaunchPlan, rank: int, out: RankStream) -> Tuple[ShardBackend, bool]:
    """Run every case of the plan in order on this rank.

    :returns: (backend, broken) — ``broken`` when the fence failed (a peer did not reach the end
        of the case, or the process group is broken) and the remaining cases were left for a
        fresh launch.
    """
    cases, load_errors = load_cases(plan.cases)
    backend = load_backend(plan.platform, device_kind=plan.device_kind)
    # The process-group timeout (one per launch) is half the longest deadline among the plan's
    # cases: shorter than that case's deadline, and long enough for a peer that is legitimately
    # slow inside a long case (a rank waiting for it at the fence waits this long at most).
    pg_timeout_s = max(deadline_s(cases.get(sc.id), plan) for sc in plan.cases) / 2
    if plan.collective_checks and not backend.enable_collective_checks():
        log.info("platform %s has no collective fingerprint checks; running without", plan.platform)
    backend.init(plan.device_kind, timeout_s=pg_timeout_s)
    if plan.mutant:
        backend.activate_mutant(plan.mutant)
    if backend.world_size() != math.prod(plan.mesh_shape):  # nproc == prod(mesh_shape) (one rank per mesh device)
        raise RuntimeError(f"launch {plan.group_id} has {backend.world_size()} ranks but its mesh "
                           f"{plan.mesh_shape} needs {math.prod(plan.mesh_shape)}")
    meshes: Dict[tuple, Any] = {}
    for sc in plan.cases:
        case = cases.get(sc.id)
        if sc.file in load_errors:
            out.emit(RankRecord(sc.id, sc.file, plan.group_id, rank, Status.ERROR, "load", 0.0, load_errors[sc.file],
                                node=os.environ.get(NODE_ENV, "")))
            status = judged = Status.ERROR
        else:
            # each case's own mesh (shape and axis names; an op case whose names are labels still sees
            # them, x.device_mesh["tp"]): the launch keeps one mesh per (shape, names), over the same
            # ranks, made by every rank when the first case needs it (plan order is the same on all)
            # (a case of a smaller mesh merged into this launch: one replica of its mesh per
            # ``prod(mesh_shape)`` ranks, each running the case on its own; planner.merge_small_groups)
            key = (sc.mesh_shape, sc.mesh_dim_names or rules.normalised_dim_names(len(sc.mesh_shape)))
            if key not in meshes:
                replicas = backend.world_size() // rules.world_size(sc.mesh_shape)
                meshes[key] = backend.make_mesh(*key) if replicas == 1 else backend.make_replicated_mesh(*key, replicas)
            status, judged = run_one(case, sc, plan, rank, backend, meshes[key], out)
        # Every rank, after every case: a bounded barrier. A rank that skipped a collective waits
        # here instead of pairing with its peers' next case. Only rank 0 applies the fence timeout
        # (gloo's monitored_barrier); the others wait at most the process-group timeout, which the
        # watcher is told too.
        fence_s = fence_timeout_s(case, status, plan)
        out.emit(FenceEntered(sc.id, max(fence_s, pg_timeout_s)))
        if not backend.case_fence(timeout_s=fence_s):
            log.info("case %s: not every rank reached its end within %.0fs (after %s here); giving up this launch",
                     sc.name, fence_s, status)
            return backend, True
        if plan.fail_fast and fails_suite(backend, judged):
            log.info("fail-fast gate: stopping after %s failed", sc.name)
            out.emit(Stopped(sc.id))
            break
    out.emit(RankDone(rank))
    return backend, False


class CaseQueue:
    """The plan's cases, handed out one at a time to the local lane's worker processes (forked
    after the case files are imported, so they share this object's counter): whichever worker is
    free takes the next case, so the workers end together whatever the cases cost."""

    def __init__(self, count: int) -> None:
        import multiprocessing

        self.count = count
        self._next = multiprocessing.Value("i", 0)
        self._stop = multiprocessing.Value("b", 0)

    def take(self) -> Optional[int]:
        """The next case's index in the plan, or ``None`` (all taken, or a worker stopped the run)."""
        with self._next.get_lock():
            if self._stop.value or self._next.value >= self.count:
                return None
            i = self._next.value
            self._next.value += 1
            return i

    def stop(self) -> None:
        """No worker takes another case (a fail-fast gate saw a failure)."""
        self._stop.value = 1


def run_local_plan(plan: LaunchPlan, out: RankStream, cases: Dict[str, Any], load_errors: Dict[str, str],
                   queue: CaseQueue, worker: int = 0) -> ShardBackend:
    """One worker of the local lane: this process simulates every rank of each case it takes
    from ``queue`` (:mod:`meshtest.platforms.torch.local_lane`), switching its simulated world when a
    case's world size differs from the one before (the plan is ordered by mesh), and records
    each case once per simulated rank in its own stream. The same pipeline, seeding, isolation
    and fail-fast rule as :func:`run_plan`; no fence (there are no peers to wait for)."""
    backend = load_backend(plan.platform, lane="local")
    backend.init(plan.device_kind, timeout_s=plan.case_timeout_s)
    if plan.mutant:
        backend.activate_mutant(plan.mutant)
    meshes: Dict[tuple, Any] = {}
    while (i := queue.take()) is not None:
        sc = plan.cases[i]
        case = cases.get(sc.id)
        ranks = tuple(range(sc.world_size))
        if sc.file in load_errors:
            for r in ranks:
                out.emit(RankRecord(sc.id, sc.file, plan.group_id, r, Status.ERROR, "load", 0.0,
                                    load_errors[sc.file]))
            judged = Status.ERROR
        else:
            if backend.world_size() != sc.world_size:
                backend.set_world(sc.world_size)
                meshes = {}
            key = (sc.mesh_shape, sc.mesh_dim_names or rules.normalised_dim_names(len(sc.mesh_shape)))
            if key not in meshes:
                meshes[key] = backend.make_mesh(*key)
            _, judged = run_one(case, sc, plan, worker, backend, meshes[key], out, simulated=ranks)
        if plan.fail_fast and fails_suite(backend, judged):
            log.info("fail-fast gate: stopping after %s failed", sc.name)
            queue.stop()
            out.emit(Stopped(sc.id))
            break
    out.emit(RankDone(worker))
    return backend


def run_local_workers(plan: LaunchPlan) -> int:
    """The local lane's launch: import the case files once, fork ``plan.workers - 1`` more workers
    (each its own ``rank<w>.log`` / ``rank<w>.jsonl``, killed with this process), share the cases
    out (:class:`CaseQueue`), and return the exit code: 0, or 1 when a worker died (its case is
    reported by the runner from that worker's stream; the others went on with the rest)."""
    cases, load_errors = load_cases(plan.cases)
    queue = CaseQueue(len(plan.cases))
    children = []
    worker = 0
    for w in range(1, plan.workers):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            worker = w
            die_with_parent()
            _redirect_output(plan.out_dir, w)
            log.info("local lane worker %d of %d", w, plan.workers)
            break
        children.append(pid)
    out = RankStream(os.path.join(plan.out_dir, f"rank{worker}.jsonl"))
    backend = run_local_plan(plan, out, cases, load_errors, queue, worker)
    out.close()
    backend.shutdown()
    if worker:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    rc = 0
    for pid in children:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            log.info("local lane worker pid %d ended with %s", pid, code)
            rc = 1
    return rc


def _redirect_output(out_dir: str, rank: int) -> None:
    """Send this process's fd 1 and 2 (Python and native output) to ``rank<k>.log``."""
    fd = os.open(os.path.join(out_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s rank{rank} %(message)s", force=True)


def rank_from_env() -> int:
    """This process's global rank as its launcher exports it before any runtime starts:
    ``RANK_ID`` in an msrun worker (``MS_ROLE`` set; msrun numbers a single node's workers by
    local rank, and a ``RANK`` inherited from the user's shell must not win), otherwise ``RANK``
    (torchrun, and the runner's own one-rank start)."""
    for name in (("RANK_ID", "RANK") if os.environ.get("MS_ROLE") else ("RANK", "RANK_ID")):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def run(argv: Optional[List[str]] = None) -> Tuple[int, bool]:
    """Run one launch's plan on this rank: ``(exit code, hard exit)``. The code is 0 once every
    result is recorded (:data:`GAVE_UP_EXIT`: the fence failed and the runner relaunches the
    rest); hard exit: end the process with ``os._exit`` (the backend's
    :attr:`~meshtest.platforms.backend.ShardBackend.hard_exit`). Called by :func:`main`, and in a
    rank forked by :mod:`meshtest.rank.torch_launcher` (which always ends that way)."""
    ap = argparse.ArgumentParser(prog="meshtest.rank.entry")
    ap.add_argument("--plan", required=True, help="launch plan JSON written by the runner")
    args = ap.parse_args(argv)
    die_with_parent()  # a rank never outlives its launcher
    plan = LaunchPlan.read(args.plan)
    rank = rank_from_env()
    _redirect_output(plan.out_dir, rank)
    # torchrun stops the other ranks with SIGTERM when one fails: leave their stacks in their logs.
    faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    log.info("group %s: %d case(s), mesh %s %s, device slots %s", plan.group_id, len(plan.cases),
             list(plan.mesh_shape), list(plan.mesh_dim_names), list(plan.slots))
    if plan.lane == "local":
        rc = run_local_workers(plan)
        log.info("local lane done")
        return rc, True
    out = RankStream(os.path.join(plan.out_dir, f"rank{rank}.jsonl"))
    out.emit(RankStarted(rank, os.getpid(), os.environ.get(NODE_ENV, "")))
    backend, broken = run_plan(plan, rank, out)
    out.close()
    if not broken:
        backend.recover_after_failure(timeout_s=plan.case_timeout_s)  # closing barrier
        backend.shutdown()
    log.info("rank %s", "gave up: the runner relaunches the remaining cases" if broken else "done")
    return (GAVE_UP_EXIT if broken else 0), backend.hard_exit


def main(argv: Optional[List[str]] = None) -> int:
    """The rank process started by a launcher (``python -m meshtest.rank.entry --plan P``):
    :func:`run`, then exit with its code."""
    code, hard = run(argv)
    if not hard:
        return code
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: gloo's threads can abort the process during static
    # destruction after all work is done (see WORKSPACE-notes.md, "teardown aborts").
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
