"""Live progress of running targets: cases done / total per target and the launch in flight.

Each run writes ``<slot dir>/progress/<target>.json`` (atomically, on every finished case and
at most every :data:`INTERVAL_S` seconds otherwise) and prints a progress line to stdout when
something a reader follows changed: the launches in flight, or another tenth of the cases done
(never the same line twice, no heartbeat lines; a long case shows in the board file). The
slot directory is the one the device-slot pool uses, so under Pants (where every target's
test process shares the named cache ``meshtest_slots``) ``python -m meshtest progress
--slot-dir ~/.cache/pants/named_caches/meshtest_slots --watch`` shows every target of a
``./pants test`` run while it runs.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, List, Optional, TextIO

#: Seconds between rewrites of the board file while nothing finishes.
INTERVAL_S = 15.0
#: A progress line is printed each time another ``1/STEPS`` of the cases is done.
STEPS = 10


class ProgressBoard:
    """One run's entry on the board.

    :param directory: ``<slot dir>/progress``.
    :param target: the requester label (a Pants address, or the case files).
    :param total: cases selected for the run.
    """

    def __init__(self, directory: str, target: str, total: int, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.time) -> None:
        os.makedirs(directory, exist_ok=True)
        safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in target)[:150] or "run"
        self.path = os.path.join(directory, f"{safe}.json")
        self.target, self.total, self.stream, self.clock = target, total, stream, clock
        self.started = clock()
        self.done = 0
        self.group = ""
        self._last_write = 0.0
        self._printed: Optional[tuple] = None
        self._write(finished=False, current="")

    def update(self, done: int, group: str, current: str = "") -> None:
        """Record progress (``group``: the launches in flight); rewrites the board file when
        ``done`` or ``group`` changed or :data:`INTERVAL_S` passed, and prints a line when
        ``group`` changed or ``done`` entered another of :data:`STEPS` equal parts of the total."""
        now = self.clock()
        changed = (done, group) != (self.done, self.group)
        if not changed and now - self._last_write < INTERVAL_S:
            return
        self.done, self.group = done, group
        self._last_write = now
        self._write(finished=False, current=current)
        step = done * STEPS // max(self.total, 1)
        if self.stream is None or self._printed == (group, step):
            return
        self._printed = (group, step)
        self.stream.write(f"progress {self.target}: {done}/{self.total} case(s) done, launch {group or '-'}"
                          + (f", running {current}" if current else "") + f" ({now - self.started:.0f}s)\n")
        self.stream.flush()

    def finish(self, done: int) -> None:
        self.done = done
        self._write(finished=True, current="")

    def _write(self, finished: bool, current: str) -> None:
        doc = {"target": self.target, "pid": os.getpid(), "done": self.done, "total": self.total, "group": self.group,
               "current": current, "started": self.started, "updated": self.clock(), "finished": finished}
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, self.path)


def read_board(directory: str) -> List[dict]:
    """Every entry under ``directory`` (unreadable or half-written files are skipped)."""
    out = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if name.endswith(".json"):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                continue
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def format_board(entries: List[dict], now: Optional[float] = None) -> List[str]:
    """One line per target, running ones first: state, done/total, launch, running case, age."""
    now = time.time() if now is None else now
    rows = []
    for e in entries:
        state = "finished" if e["finished"] else ("running" if _alive(e["pid"]) else "gone")
        rows.append((state != "running", e["target"], f"{state:8} {e['done']:4d}/{e['total']:<4d} {e['target']}"
                     + (f"  launch {e['group']}" if e["group"] else "")
                     + (f"  running {e['current']}" if e["current"] else "")
                     + f"  ({now - e['started']:.0f}s since start)"))
    return [r[2] for r in sorted(rows)] or ["no meshtest run has written progress here"]
