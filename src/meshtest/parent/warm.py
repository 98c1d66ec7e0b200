"""The warm launcher: a launch forked from a process that imported the platform once per run.

A CPU launch of torch ranks used to start a new interpreter for its launcher, which spent
~3.5 s of CPU importing torch, DTensor and the backend before forking its ranks
(:mod:`meshtest.rank.torch_launcher`); a run of several launches (relaunches after a fault,
one launch per world size, phases) paid it each time. Here the standard library's fork server
(:mod:`multiprocessing.forkserver`, ``set_forkserver_preload``) imports the platform's
:attr:`~meshtest.platforms.registry.BackendInfo.warm` modules once, started as soon as the run
is planned (:func:`prestart`), and each launch's launcher is a fork of it that does what
``python -m <module> <args>`` would (``<module>.main(args)``, as its ``__main__`` block), with the
launch's environment, its ``launcher.log`` as stdout and stderr, and the slot lease's lock files
(both passed by the fork server, so the slots stay held while any process of the launch lives).

What a launch keeps from a launcher started by command line: a session of its own (the
runner kills the launch as one process group), the kernel's parent-death signal (the fork
server exits when the runner does, however it ends, and takes the launch with it), its exit
code (a signal's as minus the signal), and ``$ <command>`` heading its ``launcher.log``. The
launches' processes show the fork server's command line, not the launch's: look for them by
their open files (each holds its logs in the run's artifacts directory).

Used for ``python -m`` commands of the modules in :data:`WARM_MODULES`, on the ``cpu`` device
kind, once the runner started the fork server (:func:`prestart`, from its main thread: the run
that planned the launches); ``MESHTEST_WARM=0`` turns it off (every launch a new interpreter
again).

The platform-agnostic core: this module imports no platform; the fork server does.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing import reduction
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..proctree import die_with_parent, kill_tree

#: Environment variable: ``0`` turns the warm launcher off.
WARM_ENV = "MESHTEST_WARM"

#: The modules a warm launch may run as ``python -m <module>``: the CPU launcher that forks the
#: ranks, and the rank entry (a one-rank launch, the one-process lane); each ``python -m`` runs
#: its ``main(argv)`` and exits with what it returns.
WARM_MODULES = ("meshtest.rank.torch_launcher", "meshtest.rank.entry")

_lock = threading.Lock()
_server: Optional[Tuple[int, Any, Tuple[str, ...]]] = None  # (pid that started it, context, modules)


def enabled(warm: Sequence[str], device_kind: str) -> bool:
    """Whether launches of a platform whose backend names ``warm`` modules, on ``device_kind``,
    start warm: the ``cpu`` device kind only (an accelerator's runtime has not been checked in
    forked launchers), and not with ``MESHTEST_WARM=0``."""
    return bool(warm) and device_kind == "cpu" and os.environ.get(WARM_ENV, "1") != "0"


#: Imported by the fork server before the platform's modules: it dies with the runner.
GUARD = "meshtest.parent.warm_server"


def prestart(warm: Sequence[str]) -> None:
    """Start the fork server now, from the runner's main thread (the kernel's parent-death signal
    follows the thread that started a process), importing :data:`GUARD` and then ``warm`` while
    the runner takes its slots. At most one per process; a second call with other modules is
    ignored (one platform per run)."""
    global _server
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("the warm launcher's fork server is started from the main thread")
    with _lock:
        if not running():
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([GUARD, *warm])
            from multiprocessing import forkserver

            # the fork server imports with its own sys.path (multiprocessing passes it the
            # runner's only for its forks): meshtest's source root goes on its PYTHONPATH, as on
            # a launch's (a runner in a PEX finds meshtest through PEX_EXTRA_SYS_PATH, which a
            # plain interpreter does not read)
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            saved = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, saved or "") if p)
            try:
                forkserver.ensure_running()
            finally:
                if saved is None:
                    del os.environ["PYTHONPATH"]
                else:
                    os.environ["PYTHONPATH"] = saved
            _server = (os.getpid(), ctx, tuple(warm))


def running() -> bool:
    """Whether this process started the fork server (a runner forked from another starts none:
    :func:`meshtest.parent.launch.start_local` then starts its launches cold)."""
    return _server is not None and _server[0] == os.getpid()


def command_module(cmd: Sequence[str]) -> Optional[Tuple[str, List[str]]]:
    """``(module, args)`` of ``[python, "-m", module, *args]`` when ``python`` is this interpreter
    and ``module`` is one of :data:`WARM_MODULES`; else ``None`` (a command to start as it is)."""
    if len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m" and cmd[2] in WARM_MODULES:
        return cmd[2], list(cmd[3:])
    return None


class _InheritedFd:
    """A file descriptor handed to the forked launch by the fork server (``SCM_RIGHTS``): pickled
    as :func:`multiprocessing.reduction.DupFd`, the way multiprocessing hands over sockets."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        return _inherited, (reduction.DupFd(self.fd),)


def _inherited(dup: Any) -> int:
    return dup.detach()


def _serve(module: str, args: List[str], env: Dict[str, str], log: int, fds: List[int],
           preloaded: Sequence[str]) -> None:
    """The launch, in the fork of the fork server: what ``python -m module args`` would do with
    ``env``, stdout and stderr the runner's ``launcher.log`` (``log``: the same open file, so
    the runner's own lines and the launch's never overwrite each other), in a session of its
    own, killed with its parent. ``fds`` (the lease's lock files) stay open for the launch's life.

    :raises SystemExit: the fork server did not import :data:`GUARD` or ``preloaded`` (it ignores
        an ``ImportError`` of what it preloads): the launch fails, saying so, rather than leave
        a fork server that outlives its runner or import the platform at every launch unseen."""
    os.setsid()
    die_with_parent()
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    missing = [m for m in (GUARD, *preloaded) if m not in sys.modules]
    if missing:  # the fork server swallows an ImportError of what it preloads: say it here
        raise SystemExit(f"meshtest: the warm launcher's fork server did not import {', '.join(missing)}; "
                         f"run with {WARM_ENV}=0 to start each launch in a new interpreter")
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [module, *args]
    raise SystemExit(importlib.import_module(module).main(args))


class WarmLaunch:
    """A launch forked from the fork server, with :class:`meshtest.parent.launch.LocalLaunch`'s
    interface (``poll``, ``end``, ``lost``)."""

    #: a local launch loses no node
    lost = ""

    def __init__(self, warm: Sequence[str], module: str, args: List[str], env: Dict[str, str], log_fd: int,
                 pass_fds: Sequence[int]) -> None:
        if not running():
            raise RuntimeError("the warm launcher was not started (warm.prestart) in this process")
        self.proc = _server[1].Process(target=_serve, args=(module, args, env, _InheritedFd(log_fd),
                                                            [_InheritedFd(fd) for fd in pass_fds], _server[2]),
                                name=f"meshtest-launch:{module}")
        self.proc.start()
        self.pid = self.proc.pid

    def poll(self) -> Optional[int]:
        """The launcher's exit code (minus the signal that killed it), or ``None`` while it runs."""
        return self.proc.exitcode

    def end(self) -> int:
        """Kill the launch's process tree (its session, every descendant, the launcher itself:
        it may not have made its session yet); the launcher's exit code."""
        kill_tree(self.pid)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.join()
        return self.proc.exitcode
