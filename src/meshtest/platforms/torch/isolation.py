"""What a case could leave changed in its rank process: torch's process-wide settings, each with
how to read it and put it back (:data:`STATE`; the rank checks it after every case, step
``isolation``).
"""
from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


def _dispatcher():
    return DTensor._op_dispatcher


def _pop_modes(length, pop, target: int) -> None:
    while length() > target:
        pop()


def _set_handlers(handlers: dict) -> None:
    _dispatcher()._custom_op_handlers.clear()
    _dispatcher()._custom_op_handlers.update(handlers)


#: The process-wide torch settings a case could leave changed: name → (read, restore). Read
#: values compare with ``==``; ``restore(value)`` puts one back.
STATE = {
    "default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
    "inference mode": (torch.is_inference_mode_enabled, lambda on: torch.inference_mode(on).__enter__()),
    "deterministic algorithms": (
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
    "anomaly mode": (lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                     lambda v: torch.autograd.set_detect_anomaly(v[0], check_nan=v[1])),
    "default device": (lambda: str(torch.get_default_device()), torch.set_default_device),
    "threads": (torch.get_num_threads, torch.set_num_threads),
    "torch function modes": (torch._C._len_torch_function_stack,
                             lambda n: _pop_modes(torch._C._len_torch_function_stack,
                                                  torch._C._pop_torch_function_stack, n)),
    "torch dispatch modes": (torch._C._len_torch_dispatch_stack,
                             lambda n: _pop_modes(torch._C._len_torch_dispatch_stack,
                                                  torch._C._pop_torch_dispatch_stack, n)),
    # loss_parallel() installs DTensor op handlers for the length of its `with` block
    "DTensor op handlers": (lambda: dict(_dispatcher()._custom_op_handlers), _set_handlers),
    "DTensor implicit replication": (lambda: _dispatcher()._allow_implicit_replication,
                                     lambda v: setattr(_dispatcher(), "_allow_implicit_replication", v)),
}


def forget_cached_decisions() -> None:
    """Clears DTensor's sharding-propagation caches (the sharding decisions, in Python and in
    the C++ dispatch fast path, and the output tensor metadata, all keyed on the op's
    schema): their key leaves out ``memory_format`` for ``_to_copy`` and the ``*_like``
    factories in torch 2.13, so a case would see the strides of whatever cast an earlier
    case made (docs/torch-bugs.md#memory-format-cache-key)."""
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()  # torch's "recommended way": the Python cache and the C++ fast path's
    DTensor._op_dispatcher.sharding_propagator._propagate_tensor_meta_cached.cache_clear()
