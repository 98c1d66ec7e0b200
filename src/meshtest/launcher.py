"""Launcher commands, by launcher kind (parent side; imports no platform).

A launcher starts ``nproc`` rank processes that each run ``python -m meshtest.entry``.
"""
from __future__ import annotations

import sys
from typing import List, Sequence


def launch_command(kind: str, nproc: int, entry_args: Sequence[str], python: str = sys.executable) -> List[str]:
    """Command line that starts ``nproc`` ranks of ``meshtest.entry`` with ``entry_args``.

    ``torchrun``: ``python -m torch.distributed.run --standalone`` (single node; the
    rendezvous store binds an OS-assigned free port, so concurrent launches do not clash).

    :param nproc: number of ranks; must equal prod(mesh_shape) of the launch's cases.
    :raises ValueError: unknown ``kind`` or ``nproc < 1``.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    if kind == "torchrun":
        return [
            python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={nproc}", "-m", "meshtest.entry", *entry_args,
        ]
    raise ValueError(f"unknown launcher kind {kind!r}; known: torchrun")
