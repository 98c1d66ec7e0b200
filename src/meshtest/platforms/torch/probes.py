"""The feature probes: one question per platform feature (:data:`meshtest.model.rules.FEATURES`)
asked of the installed torch on the backend's device type; a case that requires a feature whose
probe says no is ``unsupported``, naming it. None is assumed present or absent.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict

import torch
from torch.distributed.tensor import DTensor


def optional_module(name: str) -> Any:
    """The module ``name``, or ``None`` when it does not import (the features say so)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _probe_modules(wanted: dict) -> set:
    """The features whose modules all import."""
    import importlib

    found = set()
    for feature, modules in wanted.items():
        try:
            for m in modules:
                importlib.import_module(m)
            found.add(feature)
        except ImportError:
            pass
    return found


def _tp_styles(device: str) -> bool:
    import torch.distributed.tensor.parallel as tp

    return all(hasattr(tp, n) for n in ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                                         "PrepareModuleOutput", "PrepareModuleInputOutput", "parallelize_module"))


def _tp_reduce_dtype(device: str) -> bool:
    import torch.distributed.tensor.parallel as tp

    return all(hasattr(tp, n) and "reduce_dtype" in inspect.signature(getattr(tp, n)).parameters
               for n in ("RowwiseParallel", "PrepareModuleOutput"))


def _has_attr(module: str, *names: str) -> Callable[[str], bool]:
    def probe(device: str) -> bool:
        found = optional_module(module)
        return found is not None and all(hasattr(found, n) for n in names)
    return probe


def _has_dtensor_strategy(op: Any) -> bool:
    """Whether DTensor's sharding propagator has a rule or strategy for ``op`` (an OpOverload)."""
    prop = DTensor._op_dispatcher.sharding_propagator
    tables = (prop.op_strategy_funcs, prop.op_to_rules, getattr(prop, "op_single_dim_strategy_funcs", {}))
    return any(op in table for table in tables)


#: The attention kernel ``scaled_dot_product_attention`` dispatches to, by device type: what context
#: parallel's ring attention needs DTensor to shard (CUDA's flash kernel; the CPU build's own one).
#: An NPU's kernel is assumed to be CUDA's (unverified without Ascend hardware).
SDPA_KERNEL = {"cpu": "_scaled_dot_product_flash_attention_for_cpu", "cuda": "_scaled_dot_product_flash_attention",
               "npu": "_scaled_dot_product_flash_attention"}


def _context_parallel(device: str) -> bool:
    """``context_parallel`` exists and DTensor can shard the device's attention kernel (torch 2.13 on
    CPU: no strategy for ``_scaled_dot_product_flash_attention_for_cpu``, docs/torch-bugs.md)."""
    experimental = optional_module("torch.distributed.tensor.experimental")
    kernel = getattr(torch.ops.aten, SDPA_KERNEL.get(device, SDPA_KERNEL["cuda"]), None)
    return (experimental is not None and hasattr(experimental, "context_parallel") and kernel is not None
            and _has_dtensor_strategy(kernel.default))


def _dtensor_rng(device: str) -> bool:
    """torch's own test (``torch.distributed.tensor._random.is_rng_supported_mesh``): the device's
    module can set an RNG state (CUDA-like devices; ``torch.cpu`` cannot in 2.13)."""
    from torch.distributed.device_mesh import _get_device_handle

    handle = _get_device_handle(device)
    return handle is not None and hasattr(handle, "set_rng_state")


def _symmetric_memory(device: str) -> bool:
    """A symmetric-memory backend is registered for the device (``_symmetric_memory.get_backend``:
    CUDA's; none for CPU in 2.13)."""
    symm = optional_module("torch.distributed._symmetric_memory")
    return symm is not None and symm.get_backend(device) is not None


def _modules(*names: str) -> Callable[[str], bool]:
    return lambda device: len(_probe_modules({"_": names})) == 1


#: One probe per platform feature (:data:`meshtest.model.rules.FEATURES`, but ``collectives``:
#: MindSpore's ``ctx.api.comm``), each asked with the backend's device type; a case that requires
#: a feature whose probe says no is ``unsupported``, naming it.
FEATURE_PROBES: Dict[str, Callable[[str], bool]] = {
    "dtensor": _modules("torch.distributed.tensor"),
    "tp.styles": _tp_styles,
    "tp.no_parallel": _has_attr("torch.distributed.tensor.parallel", "NoParallel"),
    "tp.reduce_dtype": _tp_reduce_dtype,
    "loss_parallel": _has_attr("torch.distributed.tensor.parallel", "loss_parallel"),
    "comm_debug_mode": _has_attr("torch.distributed.tensor.debug", "CommDebugMode"),
    "fsdp2": _has_attr("torch.distributed.fsdp", "fully_shard"),
    "fsdp2.mixed_precision": _has_attr("torch.distributed.fsdp", "fully_shard", "MixedPrecisionPolicy"),
    "training": lambda device: True,  # the backend's own train(): always here
    "pipelining": _modules("torch.distributed.pipelining"),
    "pipelining.zero_bubble": _has_attr("torch.distributed.pipelining", "ScheduleInterleavedZeroBubble",
                                        "ScheduleZBVZeroBubble"),
    "checkpoint": _modules("torch.utils.checkpoint"),
    "dcp": _modules("torch.distributed.checkpoint"),
    "meta_init": lambda device: hasattr(torch.nn.Module, "to_empty"),
    "context_parallel": _context_parallel,
    "dtensor_rng": _dtensor_rng,
    "symmetric_memory": _symmetric_memory,
}
