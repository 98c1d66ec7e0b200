"""torchrun's elastic agent with rank processes forked from a process that imported torch once.

``python -m meshtest.rank.torch_launcher --nproc N [--master-port P] -- <rank entry args>``
runs the agent behind ``torchrun`` (``torch.distributed.launcher.api.elastic_launch``, the
function ``torch.distributed.run`` calls) with the configuration ``torchrun --standalone
--nnodes=1 --nproc-per-node=N`` builds (c10d rendezvous on ``localhost:0``; with ``--master-port``
the static rendezvous of ``--master-addr=127.0.0.1 --master-port=P``), no restarts, a 0.1 s
monitor interval — but with a function entrypoint and ``start_method="fork"`` (torchrun's
``--start-method`` for function entrypoints): this process imports torch, DTensor and the torch
backend once, and each rank is a fork of it that skips those imports (about 3.5 s of CPU per
rank on the project's 2-core machines, measured: a 4-rank launch of 2 cases took 14 s with
``torchrun`` and about 7 s this way).

What the runner relies on stays torchrun's: the agent sets each rank's ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` and ``TORCHELASTIC_*``; a rank
that fails ends the launch with the agent's ``ChildFailedError`` report on this process's
stderr (``launcher.log``: ``rank : k`` / ``exitcode : c``, the root cause first), which
:func:`meshtest.parent.launch.rank_exit_codes` reads; ``OMP_NUM_THREADS`` is 1 unless set, as
torchrun sets it for more than one rank per node. A rank's exit code is its
:func:`meshtest.rank.entry.run` result (``SystemExit``), so a rank that gave up exits
:data:`meshtest.contract.GAVE_UP_EXIT` as under torchrun. This process starts no thread pool,
device or process group before the ranks exist, but the agent forks after its rendezvous has
started threads (the store, the keep-alive), and a lock one of them holds at that moment stays
held in the rank: the suspected cause of the one failure seen (an 8-rank launch in which no
case began, 1 of 3 cold main-job runs). So it is opt-in: ``MESHTEST_RANK_START=fork``, torch on
the CPU device kind only (:func:`meshtest.parent.launch.rank_start`); by default ranks start
with ``torchrun`` itself.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid
from typing import Any, Dict, List, Optional, Tuple

from . import entry


class RankExits:
    """Every rank's exit status, in the order this process saw them.

    The agent's fork context reports one failed rank only (the first its join finds, which may be
    a peer that gave up after the rank that died), where torchrun's report lists every failure
    and names the first. So each rank writes ``<pid> <local rank>`` into a pipe as it starts,
    and a ``SIGCHLD`` handler peeks at each exited rank with ``waitid(..., WNOWAIT)`` — leaving
    the reaping to the agent — to record its status. :meth:`report` prints them in torchrun's
    format (``rank : k`` / ``exitcode : c``, the first seen as the root cause) for
    :func:`meshtest.parent.launch.rank_exit_codes` and ``root_cause_rank``.
    """

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self._partial = b""
        #: pid → local rank
        self.rank_of: Dict[int, int] = {}
        #: (pid, local rank, exit code: negative for a signal), in the order seen
        self.seen: List[Tuple[int, int, int]] = []

    def announce(self, local_rank: int) -> None:
        """In a rank, first thing: tell the agent which pid is which rank."""
        os.write(self.write_fd, f"{os.getpid()} {local_rank}\n".encode())

    def _read_announcements(self) -> None:
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                pid, rank = line.split()
                self.rank_of[int(pid)] = int(rank)

    def on_child_exit(self, signum: int = 0, frame: object = None) -> None:
        """``SIGCHLD``: record the status of each rank that exited since (not reaping it)."""
        self._read_announcements()
        done = {pid for pid, _, _ in self.seen}
        for pid, rank in sorted(self.rank_of.items(), key=lambda item: item[1]):
            if pid in done:
                continue
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # already reaped by the agent
                continue
            if info is not None:
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                self.seen.append((pid, rank, code))

    def report(self) -> str:
        """The ranks that failed, in torchrun's report format; ``""`` when none did."""
        self.on_child_exit()
        failed = [(pid, rank, code) for pid, rank, code in self.seen if code != 0]
        if not failed:
            return ""
        blocks = [f"[{i}]:\n  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {pid})"
                  for i, (pid, rank, code) in enumerate(failed)]
        return ("=" * 60 + "\nmeshtest.rank.torch_launcher: rank exits, first seen first\n"
                + "Root Cause (first observed failure):\n" + "\n".join(blocks) + "\n" + "=" * 60)


#: the launch's exit log, made by :func:`main` (a forked rank inherits it); no pipe at import
EXITS: Optional[RankExits] = None


def rank_main(*entry_args: str) -> None:
    """One rank (a fork of the agent): :func:`meshtest.rank.entry.run`; a non-zero result becomes
    the process's exit code (``SystemExit``), which the agent reports as torchrun would."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the agent's handler is not the rank's
    if EXITS is not None:
        EXITS.announce(int(os.environ.get("LOCAL_RANK", "0")))
    code, _ = entry.run(list(entry_args))  # a forked process always ends with os._exit
    if code:
        raise SystemExit(code)


def config(nproc: int, master_port: Optional[int]) -> Any:
    """torchrun's configuration (a ``torch.distributed.launcher.api.LaunchConfig``) for
    ``--standalone --nnodes=1 --nproc-per-node=nproc`` (or the static rendezvous on
    ``127.0.0.1:master_port``), with forked ranks."""
    from torch.distributed.launcher.api import LaunchConfig

    if master_port is None:
        backend, endpoint, run_id, rdzv = "c10d", "localhost:0", str(uuid.uuid4()), {}
    else:
        backend, endpoint, run_id, rdzv = "static", f"127.0.0.1:{master_port}", "none", {"rank": 0}
    return LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=run_id, role="default",
                        rdzv_endpoint=endpoint, rdzv_backend=backend, rdzv_configs=rdzv, max_restarts=0,
                        monitor_interval=0.1, start_method="fork")


def main(argv: Optional[List[str]] = None) -> None:
    """Parse ``--nproc N [--master-port P] -- <entry args>`` and run the launch.

    :raises torch.distributed.elastic.multiprocessing.errors.ChildFailedError: a rank failed
        (its report is printed by the interpreter on the way out, exit 1, as torchrun does).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(prog="meshtest.rank.torch_launcher")
    ap.add_argument("--nproc", type=int, required=True, help="ranks on this node")
    ap.add_argument("--master-port", type=int, default=None, help="static rendezvous on 127.0.0.1:PORT")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch reads it: what torchrun sets for nproc > 1
    # imported once here, inherited by every rank: torch, DTensor, the backend the ranks load
    import torch.distributed.tensor  # noqa: F401
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from ..platforms import torch_gloo  # noqa: F401

    global EXITS
    EXITS = RankExits()
    signal.signal(signal.SIGCHLD, EXITS.on_child_exit)
    try:
        elastic_launch(config(args.nproc, args.master_port), rank_main)(*rest)
    except ChildFailedError:
        report = EXITS.report()
        if report:
            print(report, file=sys.stderr, flush=True)
        raise


if __name__ == "__main__":
    main()
