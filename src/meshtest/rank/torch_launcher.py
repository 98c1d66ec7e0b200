"""Rank processes forked from a process that imported torch once, supervised as torchrun does.

``python -m meshtest.rank.torch_launcher --nproc N [--master-port P] -- <rank entry args>``
is how a torch launch of several ranks starts on the CPU device kind
(:func:`meshtest.parent.launch.rank_start`; ``MESHTEST_RANK_START=spawn`` gives ``torchrun``
itself). This process imports torch, DTensor and the torch backend once, then forks the ranks
with torch's own worker machinery — ``torch.distributed.elastic.multiprocessing.start_processes``
with ``start_method="fork"``, the call torchrun's agent makes for a function entrypoint — so no
rank pays the ~3.5 s of CPU those imports cost (2 / 4 / 8 ranks started in 4.2 / 4.6 / 4.2 s
here against 5.6 / 9.7 / 17.5 s with ``torchrun``). It forks while it is single-threaded: only
then does it start the launch's store (a ``TCPStore`` on ``127.0.0.1``, an OS-assigned port or
``--master-port``), which every rank joins as a client, as under torchrun's agent
(``TORCHELASTIC_USE_AGENT_STORE``); a rank reads the port from a pipe before it starts. (An
earlier version ran torchrun's agent with ``start_method="fork"``: the agent forks after its
rendezvous has started threads — 4 in all, measured — and one 8-rank launch in three cold
main-job runs never began a case, the classic hazard of a lock held by another thread at fork
time.)

What the runner relies on stays torchrun's: each rank gets the agent's environment
(:func:`rank_env`: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``,
``TORCHELASTIC_*``; ``OMP_NUM_THREADS`` 1 unless set, as torchrun sets it for more than one rank
per node); this process polls the ranks every 0.1 s and, when one fails, stops the others
(``SIGTERM``, ``SIGKILL`` after 30 s) and ends with torchrun's ``ChildFailedError`` report on its
stderr (``launcher.log``: ``rank : k`` / ``exitcode : c``, the root cause first), which
:func:`meshtest.parent.launcher_log.rank_exit_codes` reads, preceded by every rank's exit
(:class:`RankExits`); ``SIGTERM``/``SIGINT`` to this process go to the ranks first. A rank's exit
code is its :func:`meshtest.rank.entry.run` result, so a rank that gave up exits
:data:`meshtest.contract.GAVE_UP_EXIT` as under torchrun. A taken ``--master-port`` fails the
launch with ``EADDRINUSE`` in ``launcher.log`` (the runner retries on another port).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from . import entry


class RankExits:
    """Every rank's exit status, in the order this process saw them.

    torch's fork context reports one failed rank only (the first its join finds, which may be
    a peer that gave up after the rank that died), where torchrun's report lists every failure
    and names the first. So each rank writes ``<pid> <rank> <local rank>`` into a pipe as it starts,
    and a ``SIGCHLD`` handler peeks at each exited rank with ``waitid(..., WNOWAIT)`` — leaving
    the reaping to the fork context — to record its status. :meth:`report` prints them in torchrun's
    format (``rank : k`` / ``exitcode : c``, the first seen as the root cause) for
    :func:`meshtest.parent.launcher_log.rank_exit_codes` and ``root_cause_rank``.
    """

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self._partial = b""
        #: pid → global rank, and → local rank (they differ on every node but node 0 of a launch across nodes)
        self.rank_of: Dict[int, int] = {}
        self.local_of: Dict[int, int] = {}
        #: (pid, global rank, exit code: negative for a signal), in the order seen
        self.seen: List[Tuple[int, int, int]] = []

    def announce(self, rank: int, local_rank: int) -> None:
        """In a rank, first thing: tell the launcher which pid is which (global and local) rank."""
        os.write(self.write_fd, f"{os.getpid()} {rank} {local_rank}\n".encode())

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
                pid, rank, local = line.split()
                self.rank_of[int(pid)] = int(rank)
                self.local_of[int(pid)] = int(local)

    def on_child_exit(self, signum: int = 0, frame: object = None) -> None:
        """``SIGCHLD``: record the status of each rank that exited since (not reaping it)."""
        self._read_announcements()
        done = {pid for pid, _, _ in self.seen}
        for pid, rank in sorted(self.rank_of.items(), key=lambda item: item[1]):
            if pid in done:
                continue
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # already reaped by the fork context
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
        blocks = [f"[{i}]:\n  rank      : {rank} (local_rank: {self.local_of.get(pid, rank)})\n"
                  f"  exitcode  : {code} (pid: {pid})" for i, (pid, rank, code) in enumerate(failed)]
        return ("=" * 60 + "\nmeshtest.rank.torch_launcher: rank exits, first seen first\n"
                + "Root Cause (first observed failure):\n" + "\n".join(blocks) + "\n" + "=" * 60)


#: the launch's exit log, made by :func:`main` (a forked rank inherits it); no pipe at import
EXITS: Optional[RankExits] = None

#: bytes of one store-port record on the port pipe (``%07d\n``): a pipe read of this many bytes
#: takes exactly one record, so each rank reads its own
_PORT_RECORD = 8


def rank_main(port_fd: int, port_write_fd: int, *entry_args: str) -> None:
    """One rank (a fork of the launcher): wait for the store's port on ``port_fd`` (its write
    end ``port_write_fd``, inherited, is closed first, so a launcher that died reads as EOF), then
    :func:`meshtest.rank.entry.run`; a non-zero result becomes the process's exit code
    (``SystemExit``), which :func:`main` reports as torchrun would."""
    entry.die_with_parent()  # before waiting on the launcher: never outlive it
    os.close(port_write_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the launcher's handler is not the rank's
    # Nor are torch's (PContext.start installs them in the launcher before it forks): they raise
    # SignalException in Python, which a rank blocked in a gloo collective never runs, so a SIGTERM
    # from the launcher (a peer failed) was waited out for 30 s until its SIGKILL. A rank started by
    # torchrun is a fresh Python: default actions (SIGINT: KeyboardInterrupt); entry.run's
    # faulthandler chains to SIGTERM's.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if EXITS is not None:
        EXITS.announce(int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")))
    record = os.read(port_fd, _PORT_RECORD)
    if len(record) != _PORT_RECORD:  # the launcher closed the pipe without a port: it failed
        raise SystemExit(1)
    os.environ["MASTER_PORT"] = str(int(record))
    code, _ = entry.run(list(entry_args))  # a forked process always ends with os._exit
    if code:
        raise SystemExit(code)


def rank_env(local_rank: int, nproc: int, run_id: str, nnodes: int = 1, node_rank: int = 0,
             master_addr: str = "127.0.0.1") -> Dict[str, str]:
    """The environment torchrun's agent gives local rank ``local_rank`` of node ``node_rank`` of a
    launch of ``nnodes`` nodes of ``nproc`` ranks each (global rank ``node_rank * nproc +
    local_rank``, torchrun's static rendezvous order) whose store node 0's agent hosts on
    ``master_addr`` (``TORCHELASTIC_USE_AGENT_STORE``: every rank a client of it; ``MASTER_PORT``
    is set by :func:`rank_main` once the store's port is known)."""
    rank = node_rank * nproc + local_rank
    return {"LOCAL_RANK": str(local_rank), "RANK": str(rank), "GROUP_RANK": str(node_rank),
            "ROLE_RANK": str(rank), "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(nproc),
            "WORLD_SIZE": str(nnodes * nproc), "GROUP_WORLD_SIZE": str(nnodes), "ROLE_WORLD_SIZE": str(nnodes * nproc),
            "MASTER_ADDR": master_addr, "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": run_id,
            "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}


def main(argv: Optional[List[str]] = None) -> None:
    """Parse ``--nproc N [--master-port P] -- <entry args>`` and run the launch.

    :raises torch.distributed.elastic.multiprocessing.errors.ChildFailedError: a rank failed
        (its report is printed by the interpreter on the way out, exit 1, as torchrun does).
    :raises torch.distributed.elastic.multiprocessing.api.SignalException: this process got
        ``SIGTERM``/``SIGINT``; the ranks got the same signal first.
    :raises RuntimeError: the store could not bind ``--master-port`` (``EADDRINUSE``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(prog="meshtest.rank.torch_launcher")
    ap.add_argument("--nproc", type=int, required=True, help="ranks on this node")
    ap.add_argument("--master-port", type=int, default=None,
                    help="the store on MASTER_ADDR:PORT (default: a free one; required with --nnodes > 1)")
    ap.add_argument("--nnodes", type=int, default=1, help="nodes of the launch (one launcher each)")
    ap.add_argument("--node-rank", type=int, default=0, help="this node's index: 0 hosts the store")
    ap.add_argument("--master-addr", default="127.0.0.1", help="the address of node 0, where the store is")
    args = ap.parse_args(argv)
    if args.nnodes > 1 and args.master_port is None:
        ap.error("--nnodes > 1 needs --master-port (every node's ranks must find node 0's store)")
    if not 0 <= args.node_rank < args.nnodes:
        ap.error(f"--node-rank {args.node_rank} is not in 0..{args.nnodes - 1}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch reads it: what torchrun sets for nproc > 1
    # imported once here, inherited by every rank: torch, DTensor, the backend the ranks load
    import torch.distributed.tensor  # noqa: F401
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes

    from ..platforms.torch import gloo  # noqa: F401

    global EXITS
    EXITS = RankExits()
    signal.signal(signal.SIGCHLD, EXITS.on_child_exit)
    port_r, port_w = os.pipe()
    run_id = str(uuid.uuid4())
    # the ranks are forked before any store thread exists: a lock a thread holds at fork time would
    # stay held in every rank (the hang seen when torchrun's agent forked after its rendezvous)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0
    print(f"meshtest.rank.torch_launcher: forking {args.nproc} rank(s) from a process of {threads} thread(s)",
          file=sys.stderr, flush=True)
    # torch's per-rank log directories (empty: nothing is redirected) in a directory removed at the end,
    # not one more /tmp/torchelastic_* per launch
    with tempfile.TemporaryDirectory(prefix="meshtest-launch-") as logs:
        pc = start_processes(name="meshtest.rank.entry", entrypoint=rank_main,
                             args={i: (port_r, port_w, *rest) for i in range(args.nproc)},
                             envs={i: rank_env(i, args.nproc, run_id, args.nnodes, args.node_rank, args.master_addr)
                                   for i in range(args.nproc)},
                             logs_specs=DefaultLogsSpecs(log_dir=logs), start_method="fork")
        os.close(port_r)
        _supervise(pc, port_w, args.nproc, args.master_port, host_store=args.node_rank == 0,
                   master_addr=args.master_addr)


def _supervise(pc: Any, port_w: int, nproc: int, master_port: Optional[int], host_store: bool = True,
               master_addr: str = "127.0.0.1") -> None:
    """Start the store (node 0: ``host_store``; another node's ranks join node 0's at
    ``master_addr:master_port``), hand its port to the ranks, and watch them until they end (see
    :func:`main`)."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    result = None
    store = None
    try:
        if host_store:
            try:
                store = TCPStore(master_addr, master_port or 0, is_master=True, wait_for_workers=False)
            except Exception as e:  # a taken --master-port: say so, as torchrun's rendezvous would
                os.close(port_w)
                raise RuntimeError(f"the launch's store could not bind {master_addr}:{master_port}: {e}") from e
        port = store.port if store is not None else master_port
        os.write(port_w, (f"{port:07d}\n" * nproc).encode())
        os.close(port_w)
        while (result := pc.wait(timeout=0)) is None:  # torchrun's monitor loop, every 0.1 s
            time.sleep(0.1)
    except SignalException as e:  # SIGTERM/SIGINT to this process: pass it to the ranks first
        pc.close(e.sigval)
        raise
    finally:
        if result is None or result.is_failed():
            pc.close()  # the others: SIGTERM, then SIGKILL after 30 s, as torchrun's agent does
    if result.is_failed():
        report = EXITS.report() if EXITS is not None else ""
        if report:
            print(report, file=sys.stderr, flush=True)
        raise ChildFailedError(name="meshtest.rank.entry", failures=result.failures)
    pc.close()

if __name__ == "__main__":
    main()
