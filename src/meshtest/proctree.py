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
