"""The checkpoint runtime: DCP and full-state-dict checkpoints of a training case's phases, and
an op case's ``checkpoint_inputs`` round trip.

A phase's checkpoint is committed only once every rank has written (:mod:`meshtest.checkpoints`);
a half-written one is never loaded.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Sequence

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ...model.placement import Placement
from ..ports import TrainContext
from .placement import to_torch_placement

#: The file of a full-state-dict checkpoint (``TrainCase(checkpoint="full"|"full_broadcast")``).
FULL_STATE_FILE = "full.pt"


def flat_optim():
    """``StateDictOptions(flatten_optimizer_state_dict=True)``: optimizer state and param groups
    keyed by parameter FQN. Without it the param groups are a list saved under the same keys on
    every rank, and DCP keeps one rank's: pipeline stages (each with its own parameters) load
    the last stage's groups (measured on torch 2.13: stage 0's SGD lost ``momentum``;
    torchtitan sets the option for the same reason)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def full_options(broadcast: bool) -> Any:
    """``StateDictOptions`` of a full state dict (gathered to rank 0, on CPU; the optimizer's
    nested ``{"state", "param_groups"}`` keyed by FQN: torch 2.13's flattened form does not load
    into a fresh optimizer with ``set_optimizer_state_dict``); ``broadcast``: rank 0's is sent to
    the others on load (``broadcast_from_rank0``)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, broadcast_from_rank0=broadcast)


def roundtrip(backend, tensors: Dict[str, Any], mesh: Any, placements: Dict[str, Sequence[Placement]],
                         directory: str) -> Dict[str, Any]:
    """``torch.distributed.checkpoint.save`` of ``tensors`` (each rank its shards and their
    global offsets), then ``load`` into ``torch.distributed.tensor.zeros`` of each key's
    placements."""
    import shutil

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    if directory is None:
        raise ValueError("checkpoint_inputs needs a directory shared by the ranks; this run gives the case none")
    if backend.rank() == 0:
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
    dist.barrier()
    bad = [k for k, t in tensors.items() if not isinstance(t, DTensor)]
    if bad:
        raise TypeError(f"checkpoint_inputs: {', '.join(bad)} is not a DTensor")
    target = {k: torch.distributed.tensor.zeros(t.shape, dtype=t.dtype, device_mesh=mesh,
                                                placements=[to_torch_placement(p) for p in placements[k]])
              for k, t in tensors.items()}
    try:
        dcp.save({k: t.detach() for k, t in tensors.items()}, checkpoint_id=directory)
        dist.barrier()
        dcp.load(target, checkpoint_id=directory)
    except CheckpointException as e:  # a BaseException: the rank would die instead of reporting
        raise RuntimeError(f"checkpoint {directory}: {e}") from None
    return {k: v.requires_grad_(True) if tensors[k].requires_grad else v for k, v in target.items()}


def save(backend, root: str, step: int, model: Any, opt: Any, sched: Any, mesh: Any, fmt: str = "dcp") -> None:
    """Save ``{"model", "optim"}`` — ``fmt`` ``"dcp"``: DCP (``get_state_dict``: DTensor shards
    by FQN, each rank writing its own); ``"full"``/``"full_broadcast"``: the full state dict
    (``full_state_dict=True``, gathered to CPU) written by rank 0 as ``full.pt`` —, then
    ``extra_rank<r>.pt`` (step, RNG state, scheduler) beside it, then the commit
    (:mod:`meshtest.checkpoints`) once every rank has written."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from ... import checkpoints

    rank = backend.rank()
    if rank == 0:
        checkpoints.prepare(root, step)
    dist.barrier()
    path = checkpoints.partial_dir(root, step)
    if fmt == "dcp":
        model_sd, optim_sd = get_state_dict(model, opt, options=flat_optim())
        try:
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
        except CheckpointException as e:  # a BaseException: the rank would die instead of reporting
            raise RuntimeError(f"saving checkpoint {path} failed: {e}") from None
    else:
        model_sd, optim_sd = get_state_dict(model, opt, options=full_options(broadcast=False))
        if rank == 0:
            torch.save({"model": model_sd, "optim": optim_sd}, os.path.join(path, FULL_STATE_FILE))
    extra = {"step": step, "rng": torch.get_rng_state(), "scheduler": None if sched is None else sched.state_dict()}
    torch.save(extra, os.path.join(path, f"extra_rank{rank}.pt"))
    dist.barrier()
    if rank == 0:
        checkpoints.commit(root, step, {"world_size": backend.world_size(), "mesh_shape": list(mesh.shape),
                                        "mesh_dim_names": list(mesh.mesh_dim_names or ()), "format": fmt,
                                        "saved": ["model", "optim", "scheduler", "rng", "data"]})
    dist.barrier()


def load(backend, root: str, model: Any, opt: Any, sched: Any, ctx: TrainContext, restore: Sequence[str],
          fmt: str = "dcp") -> int:
    """Restore ``restore`` from the newest committed checkpoint under ``root``; returns the
    first step to train (the saved step, or 0 when the data position is not restored). A
    rank with no ``extra_rank<r>.pt`` of its own (a restore on more ranks than saved) takes
    rank 0's: the RNG state every rank draws from is seeded alike. ``fmt`` as :meth:`_save`:
    ``"full"``: every rank reads ``full.pt``; ``"full_broadcast"``: rank 0 reads it and
    ``set_state_dict(broadcast_from_rank0=True)`` sends each tensor to the others."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
        set_state_dict,
    )

    from ... import checkpoints

    found = checkpoints.latest(root)
    ctx.note(checkpoints.describe(found))
    try:
        if fmt == "dcp":
            options = flat_optim()
            model_sd, optim_sd = get_state_dict(model, opt, options=options)
            wanted = {k: v for k, v in (("model", model_sd), ("optim", optim_sd)) if k in restore}
            if wanted:
                dcp.load(wanted, checkpoint_id=found.path)
        else:
            options = full_options(broadcast=fmt == "full_broadcast")
            reads = fmt == "full" or ctx.rank == 0
            full = (torch.load(os.path.join(found.path, FULL_STATE_FILE), weights_only=False) if reads
                    else {"model": {}, "optim": {}})
        own = os.path.join(found.path, f"extra_rank{ctx.rank}.pt")
        extra = torch.load(own if os.path.exists(own) else os.path.join(found.path, "extra_rank0.pt"),
                           weights_only=False)
    except (Exception, CheckpointException) as e:  # DCP's CheckpointException is a BaseException
        raise checkpoints.CheckpointError(f"checkpoint {found.path} could not be loaded: "
                                          f"{type(e).__name__}: {e}") from e
    if fmt == "dcp":
        set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
    else:
        if "model" in restore:
            set_model_state_dict(model, full["model"], options=options)
        if "optim" in restore:
            set_optimizer_state_dict(model, opt, full["optim"], options=options)
    if sched is not None and "scheduler" in restore:
        sched.load_state_dict(extra["scheduler"])
    if "rng" in restore:
        torch.set_rng_state(extra["rng"])
    return int(extra["step"]) if "data" in restore else 0
