"""Which module served each operator a case dispatched: the torch side of the dispatch map
(:mod:`meshtest.model.dispatch_map`).

DTensor's sharding propagator picks an operator's rule from three tables, in the order torch
2.13 consults them (``ShardingPropagator.propagate_op_sharding_non_cached``): a single-dim
strategy (``op_single_dim_strategy_funcs``), else a strategy (``op_strategy_funcs``, where
``register_sharding`` puts a library's function, wrapped in a ``functools.partial`` of torch's
``custom_strategy``), else a rule (``op_to_rules``), else a decomposition. The module that
served an operator is that entry's function's module — the library's for a ``register_sharding``
function — with every module of torch itself named :data:`meshtest.model.dispatch_map.TORCH`.
"""
from __future__ import annotations

import functools
from typing import Any, Dict, Optional

from torch._ops import OpOverload

from ...model.dispatch_map import NONE, TORCH
from . import rules


def _function_module(entry: Any) -> str:
    func = getattr(entry, "func", entry)  # a _SingleDimStrategyInfo, a partial, or the function
    if isinstance(entry, functools.partial) and entry.args and callable(entry.args[0]) and (
            getattr(func, "__module__", "") or "").startswith("torch.distributed.tensor.experimental"):
        func = entry.args[0]  # register_sharding: partial(custom_strategy, the library's function)
    module = getattr(func, "__module__", "") or ""
    return TORCH if module == "torch" or module.startswith("torch.") else (module or NONE)


def serving_module(op: OpOverload) -> str:
    """The module whose sharding serves ``op`` in this process (see the module docstring):
    a library's module name, ``torch``, or ``none`` where DTensor has no rule and no decomposition."""
    p = rules._propagator()
    for table in (p.op_single_dim_strategy_funcs, p.op_strategy_funcs, p.op_to_rules):
        entry = table.get(op)
        if entry is not None:
            return _function_module(entry)
    from torch.distributed.tensor._decompositions import DecompShardingStrategy

    return TORCH if DecompShardingStrategy.has_decomp(op) else NONE


class DispatchRecorder:
    """Between :meth:`__enter__` and :meth:`__exit__`: every operator the sharding propagator saw
    and the module that served it (:attr:`served`, ``{"aten.mul.Tensor": "torch", ...}``); an
    operator whose propagation raised is served by ``none`` unless a rule answered it another
    time. Shares the propagator's wrapper with a :class:`meshtest.platforms.torch.rules.CallRecorder`
    entered before it (both see every call) and clears torch's propagation caches on entry."""

    def __init__(self) -> None:
        self.served: Dict[str, str] = {}
        self._before: Optional[Any] = None

    def add(self, schema: Any, result: Any) -> None:
        if self._before is not None:
            self._before.add(schema, result)
        op = schema.op
        module = serving_module(op) if result is not None else NONE
        if self.served.get(str(op)) in (None, NONE):
            self.served[str(op)] = module

    def __enter__(self) -> "DispatchRecorder":
        h = rules._hooks()
        self._before = h.cached.recorder
        h.set(self, h.cached.mutant)
        rules._clear_sharding_prop_cache()
        return self

    def __exit__(self, *exc: Any) -> None:
        h = rules._hooks()
        h.set(self._before, h.cached.mutant)
