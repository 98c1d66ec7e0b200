"""Device-slot pool: exclusive, crash-safe, all-or-nothing, fair locks on N device slots.

Several test processes (one per Pants test target, run concurrently by Pants' executor)
share one machine of N devices (default 8). Before a launch of ``k`` ranks, the runner takes
``k`` slots here; on NPU/CUDA the slot ids are the device ids given to the ranks.

Mechanism (all locks are ``fcntl.flock`` on files in one directory, so the kernel drops
them the moment a holder dies — no stale locks):

* ``slot<i>.lock`` — held while slot ``i`` is in use.
* ``turnstile.lock`` — held by the one request at the head of the line while it waits.
  Only the turnstile holder takes slots, and it takes all ``k`` at once or none (it never
  keeps some while waiting for others), so there is no hold-and-wait and no deadlock.
  Because a large request keeps the turnstile while it waits for enough slots to drain,
  later small requests cannot overtake it: an 8-slot request is not starved by a stream
  of 2-slot requests.

Every wait, acquire and release is appended to ``audit.jsonl`` in the directory (one JSON
object per line: ``t`` (Unix seconds), ``event``, ``target``, ``slots``, ``need``, ``pid``),
and the runner adds a ``launch`` event per launch it starts on its lease (``group``, ``cases``)
and a ``launch_end`` event when it ends (``group``, ``wall_s``, ``startup_s``);
``tools/slot_report.py`` turns it into peak usage and slot-time utilization, and the run index
page (``tools/report_index.py``) draws it as a timeline, one row per slot
(:mod:`meshtest.report.timeline`).
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

#: Default pool size: one 8-card node (8-card packing).

def default_slot_dir() -> str:
    """``$MESHTEST_SLOT_DIR``, else ``~/.cache/meshtest/slots``."""
    return os.environ.get("MESHTEST_SLOT_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "meshtest", "slots")


DEFAULT_SLOTS = 8
#: Seconds between tries while the head of the line waits for slots to free up.
POLL_S = 0.05


class SlotRequestError(ValueError):
    """A request can never be satisfied (needs more slots than the pool has)."""


@dataclass
class SlotLease:
    """Slots held by this process; release with :meth:`SlotPool.release` or ``with``.

    :ivar slots: the slot ids (device ids on NPU/CUDA), ascending.
    :ivar fds: open lock files; pass them to child processes (``pass_fds``) so the slots stay
        held for as long as any process of the launch lives.
    """

    pool: "SlotPool"
    target: str
    slots: List[int]
    fds: List[int] = field(default_factory=list)

    def __enter__(self) -> "SlotLease":
        return self

    def __exit__(self, *exc) -> None:
        self.pool.release(self)


class SlotPool:
    """N slots backed by lock files in ``directory`` (created if missing).

    :param directory: shared by every process that must respect the same devices.
    :param size: number of slots N (≥ 1).
    """

    def __init__(self, directory: str, size: int = DEFAULT_SLOTS) -> None:
        if size < 1:
            raise ValueError(f"slot pool size must be >= 1, got {size}")
        self.directory = directory
        self.size = size
        os.makedirs(directory, exist_ok=True)

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def audit(self, event: str, target: str, slots: Sequence[int], need: int, **extra: object) -> None:
        """Append one audit record (a single ``write`` on an ``O_APPEND`` file: atomic for small
        lines). ``extra``: more fields, e.g. a launch's ``group`` and ``cases``, or at its end
        (``launch_end``) its ``wall_s`` and ``startup_s`` (seconds until its first case started)."""
        line = json.dumps({"t": time.time(), "event": event, "target": target, "slots": list(slots),
                           "need": need, "pid": os.getpid(), "size": self.size, **extra}) + "\n"
        fd = os.open(self._path("audit.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def _try_take(self, need: int) -> Optional[List[tuple]]:
        """Lock ``need`` free slots without blocking, or none. Caller holds the turnstile."""
        taken = []
        for i in range(self.size):
            fd = os.open(self._path(f"slot{i}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            taken.append((i, fd))
            if len(taken) == need:
                return taken
        for _, fd in taken:
            os.close(fd)  # closing drops the flock
        return None

    def acquire(self, need: int, target: str, timeout_s: Optional[float] = None) -> SlotLease:
        """Block until ``need`` slots are free, then hold them all.

        :param need: slots wanted (the launch's world size).
        :param target: who asks (a Pants target address), for the audit log.
        :param timeout_s: give up after this many seconds (``None``: wait forever).
        :raises SlotRequestError: ``need`` is not in ``1..size``.
        :raises TimeoutError: ``timeout_s`` passed first.
        """
        if not 1 <= need <= self.size:
            raise SlotRequestError(
                f"{target} needs {need} device slot(s) but the pool has {self.size}; "
                f"raise [meshtest].slots (MESHTEST_SLOTS) or shrink the mesh"
            )
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.audit("wait", target, [], need)
        turnstile = os.open(self._path("turnstile.lock"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            self._lock_turnstile(turnstile, deadline, target, need)
            while True:
                taken = self._try_take(need)
                if taken is not None:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{target}: no {need} free device slot(s) within {timeout_s}s")
                time.sleep(POLL_S)
        finally:
            os.close(turnstile)
        lease = SlotLease(self, target, [i for i, _ in taken], [fd for _, fd in taken])
        self.audit("acquire", target, lease.slots, need)
        return lease

    @staticmethod
    def _lock_turnstile(fd: int, deadline: Optional[float], target: str, need: int) -> None:
        if deadline is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{target}: still queued for {need} device slot(s) at the deadline") from None
                time.sleep(POLL_S)

    def release(self, lease: SlotLease) -> None:
        """Give the lease's slots back (idempotent)."""
        if not lease.fds:
            return
        for fd in lease.fds:
            os.close(fd)
        lease.fds = []
        self.audit("release", lease.target, lease.slots, len(lease.slots))


@dataclass(frozen=True)
class AuditStats:
    """Figures from an audit log.

    :ivar peak_in_use: most slots held at any instant.
    :ivar utilization: held slot-seconds / (pool size × span), in [0, 1].
    :ivar span_s: seconds from the first acquire to the last release.
    :ivar leases: completed acquire/release pairs.
    :ivar open_leases: acquires with no release (a holder still running, or killed).
    :ivar mean_wait_s: mean seconds from ``wait`` to ``acquire``.
    :ivar launches: ``launch`` events (launcher starts) in the records.
    """

    size: int
    peak_in_use: int
    utilization: float
    span_s: float
    leases: int
    open_leases: int
    mean_wait_s: float
    launches: int = 0


def audit_stats(records: Sequence[dict], size: Optional[int] = None) -> AuditStats:
    """Summarise audit records (dicts as written by :meth:`SlotPool.audit`).

    Peak usage is a sweep over acquire (+slots) and release (−slots) events in time order,
    releases first at equal times. A lease whose holder died without a release record counts
    as held until another lease acquires one of its slots (the kernel freed them by then), or
    else until the last event of the log.

    :param size: pool size; default: the ``size`` recorded in the log.
    """
    size = size or max((r.get("size", 0) for r in records), default=0) or DEFAULT_SLOTS
    start: dict = {}
    waits: dict = {}
    killed = 0
    wait_times: List[float] = []
    intervals: List[tuple] = []
    for r in sorted(records, key=lambda r: r["t"]):
        key = (r["pid"], r["target"])
        if r["event"] == "wait":
            waits[key] = r["t"]
        elif r["event"] == "acquire":
            # Slots are exclusive: an open lease on any of these slots (a holder killed before its
            # release record) ended by now at the latest.
            for other, (t0, slots) in list(start.items()):
                if set(slots) & set(r["slots"]):
                    intervals.append((t0, r["t"], len(slots)))
                    del start[other]
                    killed += 1
            start[key] = (r["t"], tuple(r["slots"]))
            if key in waits:
                wait_times.append(r["t"] - waits.pop(key))
        elif r["event"] == "release" and key in start:
            t0, slots = start.pop(key)
            intervals.append((t0, r["t"], len(slots)))
    end = max((r["t"] for r in records), default=0.0)
    open_leases = len(start) + killed
    intervals.extend((t0, end, len(slots)) for t0, slots in start.values())
    events = sorted([(t0, 1, n) for t0, _, n in intervals] + [(t1, 0, -n) for _, t1, n in intervals])
    peak = in_use = 0
    for _, _, delta in events:
        in_use += delta
        peak = max(peak, in_use)
    launches = sum(r["event"] == "launch" for r in records)
    if not intervals:
        return AuditStats(size, 0, 0.0, 0.0, 0, open_leases, 0.0, launches)
    completed = len(intervals) - open_leases
    span = max(t1 for _, t1, _ in intervals) - min(t0 for t0, _, _ in intervals)
    held = sum((t1 - t0) * n for t0, t1, n in intervals)
    util = held / (size * span) if span > 0 else 0.0
    return AuditStats(size, peak, util, span, completed, open_leases,
                      sum(wait_times) / len(wait_times) if wait_times else 0.0, launches)


def read_audit(directory: str) -> List[dict]:
    """Records of ``directory``'s ``audit.jsonl`` (a line cut by a crash is skipped)."""
    path = os.path.join(directory, "audit.jsonl")
    out = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return out
