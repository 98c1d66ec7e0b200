"""Keeping launches from outliving whoever started them (Linux).

A rank must not survive its launcher, and a launcher must not survive the runner: a killed
test process would otherwise leave rank processes holding CPU, ports and device slots.
Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` makes the kernel kill a process as soon as its
parent dies, whatever killed the parent (``kill -9`` included).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent exits (no-op off Linux).

    If the parent is already gone (we were re-parented), exit at once.
    Safe to call in ``subprocess.Popen(preexec_fn=...)``: async-signal-safe calls only.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def kill_tree(pid: int) -> None:
    """SIGKILL the launcher ``pid``, its process group and every descendant, including those that
    left the group (msrun starts each worker in a session of its own), then wait (at most 5 s)
    until they are gone (a killed process nobody reaps stays a zombie, which is gone)."""
    import time

    import psutil

    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone
    for p in descendants:
        try:
            p.kill()
        except psutil.Error:
            pass  # already gone

    def alive(p: "psutil.Process") -> bool:
        try:
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + 5.0
    while any(alive(p) for p in descendants) and time.monotonic() < deadline:
        time.sleep(0.05)
