"""Launcher commands, by launcher kind (parent side; imports no platform).

A launcher starts ``nproc`` rank processes that each run ``python -m meshtest.entry``.
"""
from __future__ import annotations

import sys
from typing import List, Optional, Sequence


def launch_command(kind: str, nproc: int, entry_args: Sequence[str], python: str = sys.executable,
                   master_port: Optional[int] = None) -> List[str]:
    """Command line that starts ``nproc`` ranks of ``meshtest.entry`` with ``entry_args``.

    ``torchrun``: ``python -m torch.distributed.run --standalone`` (single node; the
    rendezvous store binds an OS-assigned free port, so concurrent launches do not clash).
    With ``master_port`` (sites that need a fixed port, ``$MESHTEST_MASTER_PORT``): static
    rendezvous on ``127.0.0.1:master_port``, where a port already in use fails the launch with
    ``EADDRINUSE`` and the runner retries on another port.

    :param nproc: number of ranks; must equal prod(mesh_shape) of the launch's cases.
    :raises ValueError: unknown ``kind`` or ``nproc < 1``.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    if kind == "torchrun":
        rendezvous = (["--standalone"] if master_port is None
                      else ["--master-addr=127.0.0.1", f"--master-port={master_port}"])
        return [
            python, "-m", "torch.distributed.run", *rendezvous, "--nnodes=1",
            f"--nproc-per-node={nproc}", "-m", "meshtest.entry", *entry_args,
        ]
    raise ValueError(f"unknown launcher kind {kind!r}; known: torchrun")
