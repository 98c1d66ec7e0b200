"""What a launch's logs say: the tail of a file, the failed ranks' exit codes and the root cause
in torchrun's failure report, msrun's first failed worker and its own log files folded into the
launch's, an exit status in words. Stdlib only; read by the launch and the outcomes.
"""
from __future__ import annotations

import os
import re
import signal
from typing import Dict, Optional, Tuple


def tail(path: str, n: Optional[int] = 6) -> str:
    """Last ``n`` lines of a text file (all with ``None``; ``''`` if unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return ""
    return "".join(lines if n is None else lines[-n:])


def harvest_msrun_logs(out_dir: str, log_dir: str, world_size: int) -> None:
    """Fold msrun's own log files into the launch's: ``worker_<k>.log`` (the worker's output
    before the rank redirected it to ``rank<k>.log``: interpreter start-up, import errors) goes
    to the top of ``rank<k>.log`` (it came first; the rank's own last lines stay last, where a
    report's tail reads them), ``scheduler.log`` to the end of ``launcher.log``; each under a
    header naming the file. The originals stay in ``log_dir``."""
    for k in range(world_size):
        text = tail(os.path.join(log_dir, f"worker_{k}.log"), n=None)
        if text.strip():
            path = os.path.join(out_dir, f"rank{k}.log")
            own = tail(path, n=None)
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"-- msrun's msrun/worker_{k}.log (before the rank's own output):\n{text}"
                        f"{'' if text.endswith(chr(10)) else chr(10)}-- the rank's own output:\n{own}")
    text = tail(os.path.join(log_dir, "scheduler.log"), n=None)
    if text.strip():
        with open(os.path.join(out_dir, "launcher.log"), "a", encoding="utf-8") as f:
            f.write(f"\n-- msrun's msrun/scheduler.log:\n{text}")


_MSRUN_EXIT = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")


def msrun_first_failure(launcher_log: str) -> Optional[Tuple[int, int]]:
    """(pid, exit code) of the worker msrun saw fail first (``Worker process <pid> exit with
    exception. Error code: <n>``; msrun then kills the other workers), or ``None``."""
    m = _MSRUN_EXIT.search(tail(launcher_log, n=None))
    return (int(m.group(1)), int(m.group(2))) if m else None


_RANK_EXIT = re.compile(r"^\s*rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", re.M)


def rank_exit_codes(launcher_log: str) -> Dict[int, int]:
    """Exit codes of failed ranks from torchrun's failure report (``rank : k`` followed by
    ``exitcode : c`` in its ChildFailedError summary); ranks it does not list are absent."""
    return {int(r): int(c) for r, c in _RANK_EXIT.findall(tail(launcher_log, n=None))}


_ROOT_CAUSE = re.compile(r"^Root Cause \(first observed failure\):\s*\n(?:.*\n)*?\s*rank\s*:\s*(\d+)", re.M)


def root_cause_rank(launcher_log: str) -> Optional[int]:
    """The rank torchrun's failure report names as ``Root Cause (first observed failure)``, or
    ``None`` when the log has no such report."""
    m = _ROOT_CAUSE.search(tail(launcher_log, n=None))
    return int(m.group(1)) if m else None


def describe_exit(rc: int) -> str:
    """``exit 1`` / ``killed by SIGKILL``."""
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"
