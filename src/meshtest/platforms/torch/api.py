"""The names a scenario, a training case's model and a plan reach torch by (``ctx.api``), and the
same names as import lines for an exported script (:mod:`meshtest.repro`).
"""
from __future__ import annotations

import types
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from .probes import optional_module


def scenario_api() -> Any:
    """torch's names for the spec's concepts; a missing one (e.g. ``NoParallel`` in torch
    2.13) is ``None`` and the features say so."""
    import torch.distributed.tensor as dt
    import torch.distributed.tensor.parallel as tp
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.debug import CommDebugMode

    names = ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
             "PrepareModuleOutput", "PrepareModuleInputOutput", "NoParallel", "ParallelStyle",
             "parallelize_module", "loss_parallel")
    api = {n: getattr(tp, n, None) for n in names}
    from torch.distributed.fsdp import MixedPrecisionPolicy

    api.update(MixedPrecisionPolicy=MixedPrecisionPolicy, checkpoint=torch.utils.checkpoint,
               pipelining=optional_module("torch.distributed.pipelining"),
               dcp=optional_module("torch.distributed.checkpoint"))
    api.update(torch=torch, nn=torch.nn, F=torch.nn.functional, dist=dist, DTensor=dt.DTensor,
               Shard=dt.Shard, Replicate=dt.Replicate, Partial=dt.Partial,
               distribute_tensor=dt.distribute_tensor, distribute_module=dt.distribute_module,
               init_device_mesh=init_device_mesh,
               CommDebugMode=CommDebugMode, fully_shard=fully_shard,
               funcol=torch.distributed._functional_collectives,
               # the keys of CommDebugMode.get_comm_counts(): comm_ops.all_reduce, .reduce_scatter_tensor, ...
               comm_ops=torch.ops.c10d_functional)
    return types.SimpleNamespace(**api)


def repro_api_source() -> str:
    """Each entry of :meth:`scenario_api` imported by the path torch keeps it under (checked:
    the import gives the same object), as ``api = types.SimpleNamespace(...)``.

    :raises ValueError: an entry that no import path gives back."""
    import importlib

    lines, fields = {"import types", "import torch"}, []
    for name, value in sorted(vars(scenario_api()).items()):
        if value is None:
            expr = "None"
        elif value is torch.ops.c10d_functional:  # an op namespace (a module type), not an importable module
            expr = "torch.ops.c10d_functional"
        elif isinstance(value, types.ModuleType):
            lines.add(f"import {value.__name__}")
            expr = value.__name__
        else:
            module, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
            head = qual.split(".")[0]
            try:
                found = importlib.import_module(module)
                for part in qual.split("."):
                    found = getattr(found, part)
            except (ImportError, AttributeError, TypeError, ValueError):
                found = None
            if found is not value:
                raise ValueError(f"api.{name} ({value!r}) cannot be imported by its path {module}.{qual}")
            lines.add(f"from {module} import {head} as _api_{name}")
            expr = f"_api_{name}" + qual[len(head):]
        fields.append(f"    {name}={expr},")
    return "\n".join(sorted(lines) + ["", "api = types.SimpleNamespace(", *fields, ")"])
