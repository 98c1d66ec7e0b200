"""One launch of a group's ranks, watched case by case.

The runner writes the group's :class:`meshtest.contract.LaunchPlan`, starts the platform's
launcher (:func:`launch_command`) and, while it runs, follows every rank's event stream
(:class:`RankWatcher`): a rank still inside a case past the case's deadline (plus
:data:`meshtest.contract.DUMP_GRACE_S` for its Python stack dump) ends the launch, and so does a
rank that makes no progress at all for :data:`meshtest.contract.LAUNCH_OVERHEAD_S` (start-up,
teardown). Whatever ends it, the launch's whole process group is killed afterwards.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psutil

from ..contract import (
    DUMP_GRACE_S,
    FENCE_SLACK_S,
    LAUNCH_OVERHEAD_S,
    CaseStarted,
    FenceEntered,
    LaunchPlan,
    RankDone,
    RankRecord,
    RankStarted,
    StepEntered,
    Stopped,
    event_from_json,
)
from ..platforms.registry import backend_info
from ..proctree import die_with_parent, kill_tree
from . import warm
from .executor import connect as connect_executor
from .launcher_log import harvest_msrun_logs, msrun_first_failure, tail
from .planner import Group
from .slots import SlotLease

#: Poll interval of the watcher, in seconds.
POLL_S = 0.2
#: Variable that tells a launch's ranks which devices they own, per device kind. On CPU,
#: slots only bound concurrency; the ids still reach the ranks (and their logs).
DEVICE_VISIBILITY_ENV = {"cpu": "MESHTEST_SLOT_IDS", "npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}
#: The module every rank runs.
RANK_ENTRY = "meshtest.rank.entry"
#: The torch launcher that forks its ranks after one import of torch (:func:`rank_start`).
FORK_LAUNCHER = "meshtest.rank.torch_launcher"
#: The script msrun workers run (:data:`RANK_ENTRY` as a file: msrun starts a script path).
MSRUN_WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rank", "msrun_worker.py")
#: msrun's ``--cluster_time_out``: seconds its scheduler waits for every worker to register.
#: Registration takes ~10-20 s on 2 cores; the watcher's start-up limit
#: (:data:`meshtest.contract.LAUNCH_OVERHEAD_S`) ends a launch that never starts its cases first.
MSRUN_CLUSTER_TIMEOUT_S = 120


def rank_start(platform: str, device_kind: str) -> str:
    """How a torchrun launch of several ranks starts them: ``"fork"`` (forked by
    :mod:`meshtest.rank.torch_launcher` after it imported torch once, before any thread or store
    exists) for the ``torch`` platform on the CPU device kind, the default there; ``"spawn"``
    (``torchrun`` itself: each rank a new interpreter) everywhere else — an accelerator's runtime
    has not been checked with forked ranks, and another platform gains nothing from torch
    imported first — and wherever ``$MESHTEST_RANK_START=spawn``. Forking cut a 4-rank
    launch's start-up from 9.7 s to 4.6 s here (``docs/scale.md``).

    :raises ValueError: ``$MESHTEST_RANK_START`` is neither ``fork`` nor ``spawn``.
    """
    chosen = os.environ.get(RANK_START_ENV, "")
    if chosen and chosen not in ("fork", "spawn"):
        raise ValueError(f"${RANK_START_ENV} must be 'fork' or 'spawn', not {chosen!r}")
    return "fork" if chosen != "spawn" and platform == "torch" and device_kind == "cpu" else "spawn"


#: Environment variable choosing how torch launches start their ranks (:func:`rank_start`).
RANK_START_ENV = "MESHTEST_RANK_START"


def launch_command(kind: str, nproc: int, entry_args: Sequence[str], python: str = sys.executable,
                   master_port: Optional[int] = None, lane: str = "ranks",
                   log_dir: str = "", start: str = "spawn", nnodes: int = 1, node_rank: int = 0,
                   master_addr: str = "127.0.0.1") -> Tuple[List[str], Dict[str, str]]:
    """Command line (and the environment it adds) that starts ``nproc`` ranks of
    :data:`RANK_ENTRY` with ``entry_args``.

    ``torchrun``: torch's elastic agent as ``torchrun --standalone --nnodes=1`` configures it
    (single node; the rendezvous store binds an OS-assigned free port, so concurrent launches do
    not clash) — with ``start="fork"`` ``python -m meshtest.rank.torch_launcher``, the same
    agent with ranks forked after one import of torch (:func:`rank_start`), else ``python -m
    torch.distributed.run``. With ``master_port`` (sites that need a fixed port,
    ``$MESHTEST_MASTER_PORT``): static rendezvous on ``127.0.0.1:master_port``, where a port
    already in use fails the launch with ``EADDRINUSE`` and the runner retries on another port.
    One rank needs no launcher: the
    runner starts it itself with torchrun's environment (``RANK=0``, ``WORLD_SIZE=1``,
    ``MASTER_ADDR``/``MASTER_PORT``), saving torchrun's agent. The ``local`` lane is one process
    as well (it simulates the ranks; no rendezvous).

    ``msrun`` (MindSpore): ``python -m mindspore.parallel.cluster.run`` (the module behind the
    ``msrun`` command) with one node of ``nproc`` workers, its scheduler on ``127.0.0.1:master_port``
    (default: a free port), its logs in ``log_dir`` (``worker_<k>.log``, ``scheduler.log``), each
    worker running :data:`MSRUN_WORKER` as a script (msrun starts scripts, not modules). msrun
    starts workers with the ``python`` it finds on ``PATH``: the returned environment puts
    ``python``'s directory first. One rank goes through msrun too (MindSpore's communication
    needs its scheduler).

    Across nodes (``nnodes > 1``, a launch placed by Ray: :mod:`meshtest.parent.ray_executor`)
    this is node ``node_rank``'s command, ``nproc`` ranks of ``nnodes * nproc``, node 0 hosting
    the rendezvous on ``master_addr:master_port``: the forked launcher with ``--nnodes
    --node-rank --master-addr --master-port``, ``torchrun --nnodes --node-rank --master-addr
    --master-port`` (its static rendezvous: global ranks in node order), or msrun's
    ``--worker_num --local_worker_num --master_addr --node_rank``.

    :param nproc: number of ranks (on this node); ``nnodes * nproc`` must equal
        prod(mesh_shape) of the launch's cases.
    :raises ValueError: unknown ``kind``, ``nproc < 1``, or several nodes without a port or in the
        one-process lane.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    if nnodes > 1 and (master_port is None or lane == "local"):
        raise ValueError("a launch across nodes needs the rendezvous port of node 0 and real ranks")
    if kind == "msrun":
        port = master_port or free_port()
        env = {"PATH": os.pathsep.join(p for p in (os.path.dirname(python), os.environ.get("PATH", "")) if p),
               # MindSpore's C++ log level: errors only (its INFO/WARNING lines bury the rank's own output);
               # a user's GLOG_v wins (_launch_env keeps what the environment already sets)
               "GLOG_v": os.environ.get("GLOG_v", "3")}
        return [python, "-m", "mindspore.parallel.cluster.run", f"--worker_num={nproc * nnodes}",
                f"--local_worker_num={nproc}", f"--master_addr={master_addr}", f"--master_port={port}",
                *([f"--node_rank={node_rank}"] if nnodes > 1 else []),
                f"--log_dir={log_dir or 'msrun'}", "--join=True", f"--cluster_time_out={MSRUN_CLUSTER_TIMEOUT_S}",
                MSRUN_WORKER, *entry_args], env
    if kind != "torchrun":
        raise ValueError(f"unknown launcher kind {kind!r}; known: torchrun, msrun")
    if lane == "local":
        return [python, "-m", RANK_ENTRY, *entry_args], {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    if nproc == 1 and nnodes == 1:
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port or free_port())}
        return [python, "-m", RANK_ENTRY, *entry_args], env
    nodes = ([f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--master-addr={master_addr}"]
             if nnodes > 1 else [])
    if start == "fork":
        port = [] if master_port is None else [f"--master-port={master_port}"]
        return [python, "-m", FORK_LAUNCHER, f"--nproc={nproc}", *nodes, *port, "--", *entry_args], {}
    if nnodes > 1:
        rendezvous = [*nodes, f"--master-port={master_port}"]
    else:
        rendezvous = (["--standalone", "--nnodes=1"] if master_port is None
                      else ["--master-addr=127.0.0.1", f"--master-port={master_port}", "--nnodes=1"])
    return [python, "-m", "torch.distributed.run", *rendezvous, f"--nproc-per-node={nproc}",
            "-m", RANK_ENTRY, *entry_args], {}


@dataclass
class RankProgress:
    """What the watcher knows of one rank.

    :ivar case: the case the rank is inside (started, no result yet), or ``None``.
    :ivar step: the last step it entered in that case.
    :ivar deadline: Unix time by which the rank must make progress.
    :ivar fence: the case whose end-of-case fence the rank waits in (its result is recorded).
    """

    case: Optional[str] = None
    step: Optional[str] = None
    deadline: float = 0.0
    done: bool = False
    fence: Optional[str] = None
    offset: int = 0
    partial: str = ""
    #: the rank process's pid (its ``rank_started`` event), 0 before it is known
    pid: int = 0
    #: the node it runs on (its ``rank_started`` event; ``""`` on this machine's own launches)
    node: str = ""


@dataclass
class LaunchResult:
    """How a launch ended.

    :ivar rc: the launcher's exit code (negative: killed by that signal).
    :ivar timed_out: the watcher killed the launch at a deadline.
    :ivar wall_s: seconds from start to the end of the kill.
    :ivar out_dir: the launch's directory (plan, logs, rank streams).
    :ivar records: case ID (``file::name``) → rank → that rank's record.
    :ivar progress: rank → last known progress (which case and step it was in).
    :ivar stopped_after: with ``fail_fast``, the failing case after which the ranks stopped.
    """

    rc: int
    timed_out: bool
    wall_s: float
    out_dir: str
    records: Dict[str, Dict[int, RankRecord]] = field(default_factory=dict)
    progress: Dict[int, RankProgress] = field(default_factory=dict)
    stopped_after: Optional[str] = None
    #: seconds from the launch's start to its first case's start (its start-up), ``None`` if no case began
    startup_s: Optional[float] = None
    #: rank → pid of the rank processes the watcher saw exit before finishing their plan (the
    #: launch was ended at once; only watched where the launcher is slow to end, msrun)
    dead: Dict[int, int] = field(default_factory=dict)
    #: rank → exit code of a dead rank, where the launcher reported it (msrun's log line)
    dead_exit: Dict[int, int] = field(default_factory=dict)
    #: what the cluster failed in a launch it placed: a node lost mid-launch (which, and its ranks:
    #: :attr:`meshtest.parent.ray_executor.RayLaunch.lost`) or a launch it could not place; ``""``
    #: otherwise. The case it ended is ``error``, not a crash of the case's own making.
    cluster_error: str = ""

    def recorded_by_all(self, case: str, world_size: int) -> bool:
        """Whether ``world_size`` ranks (the case's, :meth:`Group.ranks_of`) recorded ``case``."""
        return len(self.records.get(case, {})) == world_size

    def started(self, case: str) -> bool:
        """Whether some rank began ``case`` (recorded it, or is or was inside it)."""
        return case in self.records or any(p.case == case for p in self.progress.values())


class RankWatcher:
    """Incremental reader of a launch's ``rank<k>.jsonl`` event streams, one per process.

    Records are kept by the rank they name (a local-lane process writes one per simulated rank);
    ``ranks_of`` gives the records that complete a case (default: one per process).
    """

    def __init__(self, out_dir: str, world_size: int, started: float,
                 ranks_of: Optional[Callable[[str], int]] = None, watch_pids: bool = False) -> None:
        self.out_dir = out_dir
        #: check at each poll that every rank process that announced its pid is still alive
        self.watch_pids = watch_pids
        #: rank → pid of rank processes gone before their ``rank_done`` (see :attr:`LaunchResult.dead`)
        self.dead: Dict[int, int] = {}
        self.world_size = world_size
        self.ranks_of = ranks_of or (lambda case: world_size)
        self.progress = {r: RankProgress(deadline=started + LAUNCH_OVERHEAD_S) for r in range(world_size)}
        self.records: Dict[str, Dict[int, RankRecord]] = {}
        #: the case after which the ranks agreed to stop (fail-fast gates)
        self.stopped_after: Optional[str] = None
        #: Unix time the first case started on some rank
        self.first_case_t: Optional[float] = None

    def poll(self) -> None:
        """Read what the ranks appended since the last poll.

        :raises meshtest.contract.ContractError: a rank wrote an event the contract does not know.
        """
        # liveness before the streams: a rank that wrote rank_done and then exited between the
        # two reads must count as done, not dead
        gone = ({r for r, p in self.progress.items() if p.pid and not p.done and r not in self.dead
                 and not _alive(p.pid)} if self.watch_pids else set())
        for rank, prog in self.progress.items():
            path = os.path.join(self.out_dir, f"rank{rank}.jsonl")
            try:
                with open(path, encoding="utf-8") as f:
                    f.seek(prog.offset)
                    chunk = f.read()
                    prog.offset = f.tell()
            except FileNotFoundError:
                continue
            lines = (prog.partial + chunk).split("\n")
            prog.partial = lines.pop()  # an unterminated last line waits for the next poll
            for line in lines:
                if line.strip():
                    self._apply(rank, prog, line, f"{path}:{line[:60]}")
        for rank in sorted(gone):
            if not self.progress[rank].done:
                self.dead[rank] = self.progress[rank].pid

    def _apply(self, rank: int, prog: RankProgress, line: str, where: str) -> None:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            return  # a line cut by a crash
        event = event_from_json(doc, where)
        now = time.time()
        if isinstance(event, RankStarted):
            prog.pid, prog.node = event.pid, event.node
        elif isinstance(event, CaseStarted):
            if self.first_case_t is None or event.t < self.first_case_t:
                self.first_case_t = event.t
            prog.case, prog.step, prog.fence = event.case, "build", None
            prog.deadline = event.t + event.timeout_s + DUMP_GRACE_S
        elif isinstance(event, StepEntered):
            prog.step = event.step
        elif isinstance(event, FenceEntered):  # recorded its result; waits for the others to finish the case
            prog.fence = event.case
            prog.deadline = now + event.timeout_s + DUMP_GRACE_S + FENCE_SLACK_S
        elif isinstance(event, Stopped):
            self.stopped_after = event.after
        elif isinstance(event, RankDone):
            prog.done, prog.case = True, None
            prog.deadline = now + LAUNCH_OVERHEAD_S
        elif isinstance(event, RankRecord):
            self.records.setdefault(event.case, {})[event.rank] = event
            prog.case, prog.step, prog.fence = None, None, None
            prog.deadline = now + LAUNCH_OVERHEAD_S

    def overdue(self, now: float) -> bool:
        return any(now > p.deadline for p in self.progress.values())

    def cases_done(self) -> int:
        """Cases every rank recorded so far."""
        return sum(len(by_rank) == self.ranks_of(case) for case, by_rank in self.records.items())

    def current_case(self) -> str:
        """A case some rank is inside now, or ``""``."""
        return next((p.case for p in self.progress.values() if p.case), "") or ""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie waiting for its parent to reap
    it has exited)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.AccessDenied:
        return True  # it exists; not ours to inspect
    except psutil.Error:  # NoSuchProcess
        return False


def _launch_env(device_kind: str, slot_ids: Sequence[int]) -> Dict[str, str]:
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env[DEVICE_VISIBILITY_ENV.get(device_kind, "MESHTEST_SLOT_IDS")] = ",".join(map(str, slot_ids))
    if device_kind == "npu":
        # torch_npu, once installed, is auto-loaded by `import torch` and fails it where CANN is
        # missing; the NPU backend imports it itself (meshtest.platforms.torch.accel)
        env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    return env


def launch(group: Group, *, platform: str, device_kind: str, case_timeout_s: float, out_dir: str,
           lease: SlotLease, fail_fast: bool = False, collective_checks: bool = False,
           cases_dir: str, master_port: Optional[int] = None, header: str = "",
           on_poll: Optional[Callable[[RankWatcher], None]] = None, record_ops: bool = False,
           mutant: str = "", executor: str = "local", record_dispatch: bool = False) -> LaunchResult:
    """Run ``group`` as one launch on the first ``group.processes`` slots of ``lease``, watching it.

    The lease's lock files are inherited by the launch (``pass_fds``), so its slots stay held as
    long as any of its processes lives. Whatever ends the launch — exit, deadline, Ctrl-C or
    SIGTERM of the runner — its whole process group is killed afterwards: no rank survives.

    :param collective_checks: the ranks turn on the platform's collective fingerprint checks.
    :param master_port: rendezvous port (``None``: the launcher picks a free one).
    :param header: a line written at the top of ``launcher.log`` (e.g. why this is a retry).
    :param cases_dir: :attr:`meshtest.contract.LaunchPlan.cases_dir` (the run's ``<artifacts>/cases``).
    :param on_poll: called with the :class:`RankWatcher` after each poll (progress reporting).
    :param record_ops: :attr:`meshtest.contract.LaunchPlan.record_ops`.
    :param mutant: :attr:`meshtest.contract.LaunchPlan.mutant`.
    :param record_dispatch: :attr:`meshtest.contract.LaunchPlan.record_dispatch`.
    :param executor: where the launch runs (:mod:`meshtest.parent.executor`): ``local`` (a child
        process of this one, on the lease's slots) or a Ray cluster (the launch is placed on its
        nodes; the lease only bounds this runner's launches in flight).
    """
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        # A reused --artifacts-dir: ranks append to their files and the watcher reads them from
        # the start, so an earlier run's lines must not be there. Keep them under another name.
        os.rename(out_dir, f"{out_dir}.previous-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.makedirs(out_dir, exist_ok=True)
    plan_path = os.path.abspath(os.path.join(out_dir, "plan.json"))
    slot_ids = tuple(lease.slots[: group.processes])
    LaunchPlan(group_id=group.group_id, platform=platform, device_kind=device_kind, mesh_shape=group.mesh_shape,
               mesh_dim_names=group.mesh_dim_names, out_dir=os.path.abspath(out_dir), case_timeout_s=case_timeout_s,
               cases=group.cases, slots=slot_ids, fail_fast=fail_fast,
               collective_checks=collective_checks, cases_dir=os.path.abspath(cases_dir),
               lane=group.lane, workers=group.workers, record_ops=record_ops, mutant=mutant,
               record_dispatch=record_dispatch).write(plan_path)
    kind = backend_info(platform).launcher
    msrun_logs = os.path.join(out_dir, "msrun")
    start = rank_start(platform, device_kind)

    def command(nnodes: int, node_rank: int, master_addr: str, port: Optional[int]) -> Tuple[List[str], Dict[str, str]]:
        return launch_command(kind, group.processes // nnodes, ["--plan", plan_path], master_port=port,
                              lane=group.lane, log_dir=msrun_logs, start=start, nnodes=nnodes, node_rank=node_rank,
                              master_addr=master_addr)

    t0 = time.monotonic()
    started = time.time()
    # msrun kills the other workers within a second of one dying, but exits only ~45 s later (its
    # scheduler's node timeout): watch the rank processes, end the launch as soon as one is gone
    watcher = RankWatcher(out_dir, group.processes, started, _ranks_by_case(group), watch_pids=kind == "msrun")
    timed_out = False
    log_path = os.path.abspath(os.path.join(out_dir, "launcher.log"))
    with open(log_path, "w", encoding="utf-8") as logf:
        if header:
            logf.write(f"# {header}\n")
        logf.flush()
        cluster = connect_executor(executor)
        env = _launch_env(device_kind, slot_ids)
        if cluster is None:
            handle: Any = start_local(command(1, 0, "127.0.0.1", master_port), env, logf, lease.fds,
                                      warm_modules(platform, device_kind))
        else:
            logf.write(f"# placed by {cluster.describe()}\n")
            logf.flush()
            try:
                handle = cluster.start(group.processes, command, env, log_path, plan_path)
            except Exception as e:  # no placement, a node that cannot see the plan: the cluster's failure
                handle = Unplaced(f"the cluster could not place the launch: {type(e).__name__}: {e}")
                logf.write(f"# meshtest: {handle.lost}\n")
        try:
            while handle.poll() is None:
                time.sleep(POLL_S)
                watcher.poll()
                if on_poll is not None:
                    on_poll(watcher)
                if watcher.overdue(time.time()):
                    timed_out = True
                    break
                if watcher.dead:
                    logf.write(f"# meshtest: t={time.time():.3f} rank process(es) {sorted(watcher.dead)} exited "
                               "before finishing; the launch is ended now\n")
                    logf.flush()
                    break
        finally:
            rc = handle.end()
        if handle.lost:
            logf.write(f"# meshtest: t={time.time():.3f} {handle.lost}; the launch was ended\n")
    watcher.watch_pids = False  # from here on every rank is gone: killed by the line above, not dead by itself
    watcher.poll()
    exit_codes: Dict[int, int] = {}
    if kind == "msrun":
        harvest_msrun_logs(out_dir, msrun_logs, group.processes)
        # msrun polls its workers each second and, at the first that failed, kills the others:
        # when it got there before the watcher, its line names the one that died by itself
        first = msrun_first_failure(os.path.join(out_dir, "launcher.log"))
        by_pid = {p.pid: r for r, p in watcher.progress.items() if p.pid}
        if first is not None and first[0] in by_pid:
            rank = by_pid[first[0]]
            watcher.dead = {rank: first[0]}
            exit_codes[rank] = first[1]
    return LaunchResult(rc, timed_out, time.monotonic() - t0, out_dir, watcher.records, watcher.progress,
                        watcher.stopped_after,
                        None if watcher.first_case_t is None else max(0.0, watcher.first_case_t - started),
                        dict(watcher.dead), exit_codes, handle.lost)


class Unplaced:
    """A launch the cluster could not start: ended at once, :attr:`lost` saying why."""

    def __init__(self, why: str) -> None:
        self.lost = why

    def poll(self) -> Optional[int]:
        return 1

    def end(self) -> int:
        return 1


def warm_modules(platform: str, device_kind: str) -> Tuple[str, ...]:
    """The modules the warm launcher imports for ``platform``'s launches on ``device_kind``
    (:attr:`meshtest.platforms.registry.BackendInfo.warm`), or ``()`` when its launches start cold:
    ranks not forked (:func:`rank_start`), another device kind, or ``MESHTEST_WARM=0``."""
    modules = backend_info(platform).warm
    return modules if rank_start(platform, device_kind) == "fork" and warm.enabled(modules, device_kind) else ()


def start_local(command: Tuple[List[str], Dict[str, str]], env: Dict[str, str], logf: Any, pass_fds: Sequence[int],
                warm_modules: Sequence[str] = ()) -> Any:
    """A launch on this machine: forked by the warm launcher (:mod:`meshtest.parent.warm`) when
    ``warm_modules`` are given and the command is one it runs, else a :class:`LocalLaunch`."""
    cmd, extra_env = command
    served = warm.command_module(cmd) if warm_modules and warm.running() else None
    if served is None:
        return LocalLaunch(command, env, logf, pass_fds)
    logf.write("$ " + " ".join(cmd) + "\n")
    logf.write(f"# forked by the warm launcher (imported once per run: {', '.join(warm_modules)})\n")
    logf.flush()
    return warm.WarmLaunch(warm_modules, served[0], served[1], {**env, **extra_env}, logf.fileno(), pass_fds)


class LocalLaunch:
    """A launch on this machine: its launcher a child process in a session of its own (so the
    launcher and its ranks are killed as one group), ``die_with_parent`` so it dies too if this
    runner is killed outright; the lease's lock files are inherited (``pass_fds``), so its slots
    stay held as long as any of its processes lives."""

    #: a local launch loses no node
    lost = ""

    def __init__(self, command: Tuple[List[str], Dict[str, str]], env: Dict[str, str], logf: Any,
                 pass_fds: Sequence[int]) -> None:
        cmd, extra_env = command
        logf.write("$ " + " ".join(cmd) + "\n")
        logf.flush()
        self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env={**env, **extra_env},
                                     pass_fds=tuple(pass_fds), start_new_session=True, preexec_fn=die_with_parent)

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def end(self) -> int:
        """Kill the launch's process tree; the launcher's exit code."""
        kill_tree(self.proc.pid)
        return self.proc.wait()


def salvage(group: Group, out_dir: str) -> Dict[str, Dict[int, RankRecord]]:
    """The records of an interrupted launch's directory (case → rank → record)."""
    watcher = RankWatcher(out_dir, group.processes, time.time(), _ranks_by_case(group))
    watcher.poll()
    return watcher.records


def _ranks_by_case(group: Group) -> Callable[[str], int]:
    ranks = {c.id: group.ranks_of(c) for c in group.cases}
    default = group.world_size
    return lambda case: ranks.get(case, default)


_ADDR_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")


def rendezvous_clashed(res: LaunchResult) -> bool:
    """Whether a launch failed on a rendezvous address already in use: it ended with an error
    before any rank started a case, and its ``launcher.log`` says ``EADDRINUSE``."""
    if res.rc == 0 or res.timed_out or res.records or any(p.case or p.done for p in res.progress.values()):
        return False
    return bool(_ADDR_IN_USE.search(tail(os.path.join(res.out_dir, "launcher.log"), n=None)))


def free_port() -> int:
    """A TCP port the OS reports free on 127.0.0.1 now (another process may take it before the
    launch binds it; that race is what the rendezvous retry covers)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
