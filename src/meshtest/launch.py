"""One launch of a group's ranks, watched case by case.

The runner starts the launcher and, while it runs, follows every rank's JSONL stream:
``start`` (a case began, with its deadline), ``step`` (the pipeline step it entered), the
result line, ``rank_done``. A rank still inside a case past the case's deadline (plus a few
seconds for its Python stack dump, see :mod:`meshtest.entry`) ends the launch: the whole
process group is killed. A rank that makes no progress at all for
:data:`LAUNCH_OVERHEAD_S` (start-up, teardown) ends it too.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, Optional

from .backend import backend_info
from .launcher import launch_command
from .planner import Group, write_plan
from .proctree import die_with_parent
from .slots import SlotLease

#: Seconds a launch may go without any progress outside a case (start-up, between cases,
#: teardown). Measured start-up: 4-11 s for 2-8 ranks; generous for loaded CI machines.
LAUNCH_OVERHEAD_S = 120.0
#: Seconds between a case's deadline (when each rank dumps its stacks) and the kill.
DUMP_GRACE_S = 3.0
#: Seconds beyond a rank's end-of-case fence timeout before the watcher judges it stuck (the
#: fence's own timeout normally ends it first: the rank then gives up the launch).
FENCE_SLACK_S = 10.0
#: Poll interval of the watcher, in seconds.
POLL_S = 0.2
#: Variable that tells a launch's ranks which devices they own, per device kind. On CPU,
#: slots only bound concurrency; the ids still reach the ranks (and their logs).
DEVICE_VISIBILITY_ENV = {"cpu": "MESHTEST_SLOT_IDS", "npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}


@dataclass
class RankProgress:
    """What the watcher knows of one rank.

    :ivar case: the case the rank is inside (started, no result yet), or ``None``.
    :ivar step: the last step it entered in that case.
    :ivar deadline: Unix time by which the rank must make progress.
    """

    case: Optional[str] = None
    step: Optional[str] = None
    deadline: float = 0.0
    done: bool = False
    #: the case whose end-of-case fence the rank waits in (its result is recorded)
    fence: Optional[str] = None
    offset: int = 0
    partial: str = ""


@dataclass
class LaunchResult:
    """How a launch ended.

    :ivar rc: the launcher's exit code (negative: killed by that signal).
    :ivar timed_out: the watcher killed the launch at a deadline.
    :ivar records: case → rank → result record.
    :ivar progress: rank → last known progress (which case and step it was in).
    :ivar stopped_after: with ``fail_fast``, the failing case after which the ranks stopped.
    """

    rc: int
    timed_out: bool
    wall_s: float
    records: Dict[str, Dict[int, dict]] = field(default_factory=dict)
    progress: Dict[int, RankProgress] = field(default_factory=dict)
    stopped_after: Optional[str] = None


class RankWatcher:
    """Incremental reader of a launch's ``rank<k>.jsonl`` files."""

    def __init__(self, out_dir: str, world_size: int, started: float) -> None:
        self.out_dir = out_dir
        self.world_size = world_size
        self.progress = {r: RankProgress(deadline=started + LAUNCH_OVERHEAD_S) for r in range(world_size)}
        self.records: Dict[str, Dict[int, dict]] = {}
        #: the case after which the ranks agreed to stop (fail-fast gates)
        self.stopped_after: Optional[str] = None

    def poll(self) -> None:
        """Read what the ranks appended since the last poll."""
        for rank, prog in self.progress.items():
            path = os.path.join(self.out_dir, f"rank{rank}.jsonl")
            try:
                with open(path, encoding="utf-8") as f:
                    f.seek(prog.offset)
                    chunk = f.read()
                    prog.offset = f.tell()
            except FileNotFoundError:
                continue
            text = prog.partial + chunk
            lines = text.split("\n")
            prog.partial = lines.pop()  # an unterminated last line waits for the next poll
            for line in lines:
                if line.strip():
                    self._apply(rank, prog, line)

    def _apply(self, rank: int, prog: RankProgress, line: str) -> None:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return  # a line cut by a crash
        now = time.time()
        event = rec.get("event")
        if event == "start":
            prog.case, prog.step, prog.fence = rec["case"], "build", None
            prog.deadline = rec["t"] + rec["timeout_s"] + DUMP_GRACE_S
        elif event == "step":
            prog.step = rec["step"]
        elif event == "fence":  # recorded its result; waits for the other ranks to finish the case
            prog.fence = rec["case"]
            prog.deadline = now + float(rec["timeout_s"]) + DUMP_GRACE_S + FENCE_SLACK_S
        elif event == "stopped":
            self.stopped_after = rec["after"]
        elif event == "rank_done":
            prog.done, prog.case = True, None
            prog.deadline = now + LAUNCH_OVERHEAD_S
        elif event is None and "case" in rec:
            self.records.setdefault(rec["case"], {})[rank] = rec
            prog.case, prog.step, prog.fence = None, None, None
            prog.deadline = now + LAUNCH_OVERHEAD_S

    def overdue(self, now: float) -> bool:
        return any(now > p.deadline for p in self.progress.values())


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone


def launch(group: Group, *, platform: str, device_kind: str, case_timeout_s: float, out_dir: str,
           lease: SlotLease, fail_fast: bool = False, master_port: Optional[int] = None,
           header: str = "", on_poll=None) -> LaunchResult:
    """Run ``group`` as one launch on the first ``world_size`` slots of ``lease``, watching it.

    The lease's lock files are inherited by the launch (``pass_fds``), so its slots stay held as
    long as any of its processes lives. Whatever ends the launch — exit, deadline, Ctrl-C or
    SIGTERM of the runner — its whole process group is killed afterwards: no rank survives.
    With ``fail_fast`` the ranks stop together after the first case that fails on any rank.

    :param master_port: rendezvous port (``None``: the launcher picks a free one).
    :param header: a line written at the top of ``launcher.log`` (e.g. why this is a retry).
    :param on_poll: called with the :class:`RankWatcher` after each poll (progress reporting).
    """
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        # A reused --artifacts-dir: ranks append to their files and the watcher reads them from
        # the start, so an earlier run's lines must not be there. Keep them under another name.
        os.rename(out_dir, f"{out_dir}.previous-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.makedirs(out_dir, exist_ok=True)
    plan_path = os.path.join(out_dir, "plan.json")
    slot_ids = lease.slots[: group.world_size]
    write_plan(plan_path, group, platform=platform, device_kind=device_kind,
               out_dir=os.path.abspath(out_dir), case_timeout_s=case_timeout_s, slots=slot_ids, fail_fast=fail_fast)
    cmd = launch_command(backend_info(platform).launcher, group.world_size, ["--plan", os.path.abspath(plan_path)],
                         master_port=master_port)
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env[DEVICE_VISIBILITY_ENV.get(device_kind, "MESHTEST_SLOT_IDS")] = ",".join(map(str, slot_ids))
    t0 = time.monotonic()
    watcher = RankWatcher(out_dir, group.world_size, time.time())
    timed_out = False
    with open(os.path.join(out_dir, "launcher.log"), "w", encoding="utf-8") as logf:
        if header:
            logf.write(f"# {header}\n")
        logf.write("$ " + " ".join(cmd) + "\n")
        logf.flush()
        # Own session, so the launch (launcher and ranks) can be killed as one group;
        # die_with_parent so it also dies if this runner is killed outright.
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, pass_fds=lease.fds,
                                start_new_session=True, preexec_fn=die_with_parent)
        try:
            while proc.poll() is None:
                time.sleep(POLL_S)
                watcher.poll()
                if on_poll is not None:
                    on_poll(watcher)
                if watcher.overdue(time.time()):
                    timed_out = True
                    break
        finally:
            _kill_group(proc.pid)
            rc = proc.wait()
    watcher.poll()
    return LaunchResult(rc, timed_out, time.monotonic() - t0, watcher.records, watcher.progress, watcher.stopped_after)


#: Environment variable with a fixed rendezvous port for the first launch attempt.
MASTER_PORT_ENV = "MESHTEST_MASTER_PORT"
#: How many times a launch that failed its rendezvous on a port in use is retried.
RENDEZVOUS_RETRIES = 3
_ADDR_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")


def rendezvous_clashed(res: LaunchResult, out_dir: str) -> bool:
    """Whether a launch failed on a rendezvous address already in use: it ended with an error
    before any rank started a case, and its ``launcher.log`` says ``EADDRINUSE``."""
    if res.rc == 0 or res.timed_out or res.records or any(p.case or p.done for p in res.progress.values()):
        return False
    try:
        with open(os.path.join(out_dir, "launcher.log"), encoding="utf-8", errors="replace") as f:
            return bool(_ADDR_IN_USE.search(f.read()))
    except OSError:
        return False


def free_port() -> int:
    """A TCP port the OS reports free on 127.0.0.1 now (another process may take it before the
    launch binds it; that race is what the rendezvous retry covers)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: str, n: int = 6) -> str:
    """Last ``n`` lines of a text file ('' if unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


_RANK_EXIT = re.compile(r"^\s*rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", re.M)


def rank_exit_codes(launcher_log: str) -> Dict[int, int]:
    """Exit codes of failed ranks from torchrun's failure report (``rank : k`` followed by
    ``exitcode : c`` in its ChildFailedError summary); ranks it does not list are absent."""
    try:
        with open(launcher_log, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    return {int(r): int(c) for r, c in _RANK_EXIT.findall(text)}


def describe_exit(rc: int) -> str:
    """``exit 1`` / ``killed by SIGKILL``."""
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"
