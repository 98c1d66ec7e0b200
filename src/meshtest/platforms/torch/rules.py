"""DTensor's sharding rules, observed and mutated: the torch side of sharding-rule coverage and
mutation mode (:mod:`meshtest.strength`).

Every DTensor operator call goes through one object, torch's ``ShardingPropagator``
(``DTensor._op_dispatcher.sharding_propagator``): given the operator and its inputs'
``DTensorSpec`` s (placements on the DeviceMesh, shape, dtype) it returns an ``OutputSharding``
— the output placements and, when the inputs must move first, the placements to redistribute
them to. This module wraps, once per process, both of its entry points: ``propagate_op_sharding``
(the cached one) and ``propagate_op_sharding_non_cached`` (which torch's C++ fast path calls after
its own cache missed):

- :class:`CallRecorder` writes down each distinct call (operator, input specs, literal
  arguments, the rule's output placements and redistributions) while a case runs;
- a mutant (:func:`activate`) rewrites one operator's ``OutputSharding`` with one fault of
  :data:`FAULTS` — the sharding rule as a buggy implementation would have written it.

Both clear torch's two propagation caches (Python ``lru_cache`` and the C++ fast-path cache,
``torch.distributed.tensor.debug._clear_sharding_prop_cache``) when they start, so that every call
of interest reaches the wrapper.

The registered rules (:func:`registered_rules`) are the keys of the propagator's three tables
(``op_strategy_funcs``, ``op_to_rules``, ``op_single_dim_strategy_funcs``); an operator's family
is the torch module that registered its rule (``torch/distributed/tensor/_ops/_<family>_ops.py``).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSchema, OutputSharding
from torch.distributed.tensor.debug import _clear_sharding_prop_cache
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

from . import layer_faults

log = logging.getLogger(__name__)


def _propagator() -> Any:
    return DTensor._op_dispatcher.sharding_propagator


def _family(rule: Any) -> str:
    """``torch.distributed.tensor._ops._math_ops`` → ``math``; ``…_ops.autogen`` → ``autogen``."""
    func = getattr(rule, "func", rule)
    module = getattr(func, "__module__", "") or ""
    name = module.rsplit(".", 1)[-1].strip("_")
    return name[: -len("_ops")] if name.endswith("_ops") else (name or "other")


def registered_rules() -> Dict[str, str]:
    """Every operator torch registers a DTensor sharding rule for → its family (see module doc).

    :returns: ``{"aten.mm.default": "matrix", ...}`` (about 1,170 operators in torch 2.13).
    """
    p = _propagator()
    out: Dict[str, str] = {}
    for table in (p.op_single_dim_strategy_funcs, p.op_to_rules, p.op_strategy_funcs):
        for op, rule in table.items():
            out[str(op)] = _family(rule)
    return out


# ---------------------------------------------------------------------------------------------
# placements as text


def placement_text(p: Any) -> str:
    """``R``, ``S(d)``, ``SS(d,k)`` (strided shard, split factor ``k``), ``P(sum)``, ``MP``
    (the embedding's masked partial), or the class name for anything else."""
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, _StridedShard):
        return f"SS({p.dim},{p.split_factor})"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if type(p).__name__ == "_MaskPartial":
        return "MP"
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    return type(p).__name__


def _spec_json(spec: DTensorSpec) -> Dict[str, Any]:
    meta = spec.tensor_meta
    return {"t": list(meta.shape) if meta is not None else None,
            "dtype": str(meta.dtype).replace("torch.", "") if meta is not None else None,
            "p": [placement_text(p) for p in spec.placements]}


def _arg_json(a: Any) -> Any:
    """One argument of an ``OpSchema`` as JSON: ``{"t": shape, "dtype", "p": placements}`` for a
    DTensor, ``{"l": [...]}`` for a list, ``{"v": x}`` for a literal, ``{"dtype": name}`` for a
    ``torch.dtype``, ``{"x": repr}`` for anything that cannot be replayed."""
    if isinstance(a, DTensorSpec):
        return _spec_json(a)
    if isinstance(a, (list, tuple)):
        return {"l": [_arg_json(x) for x in a]}
    if a is None or isinstance(a, (bool, int, float, str)):
        return {"v": a}
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).replace("torch.", "")}
    return {"x": repr(a)}


def _specs_of(output_spec: Any) -> List[Optional[DTensorSpec]]:
    if isinstance(output_spec, DTensorSpec) or output_spec is None:
        return [output_spec]
    return [s if isinstance(s, DTensorSpec) else None for s in output_spec]


def call_json(schema: OpSchema, result: Optional[OutputSharding]) -> Dict[str, Any]:
    """One propagated call as a JSON record (see ``docs/strength.md``): ``op``, ``mesh`` (shape),
    ``args``/``kwargs`` (:func:`_arg_json`), ``out`` (each output's placements, ``None`` for a
    non-tensor output), ``to`` (each tensor input's placements after the rule's redistribution;
    equal to ``args`` when nothing moves) and ``rule`` (``False``: no sharding rule, decomposed)."""
    specs = [a for a in schema.args_spec]
    mesh = list(specs[0].mesh.shape) if specs else []
    rec: Dict[str, Any] = {"op": str(schema.op), "mesh": mesh,
                           "args": [_arg_json(a) for a in schema.args_schema],
                           "kwargs": {k: _arg_json(v) for k, v in schema.kwargs_schema.items()},
                           "rule": result is not None}
    if result is not None:
        outs = _specs_of(result.output_spec)
        rec["out"] = [None if s is None else [placement_text(p) for p in s.placements] for s in outs]
        rec["out_ndim"] = [None if s is None else _ndim(s) for s in outs]
        target = result.redistribute_schema.args_spec if result.needs_redistribute and \
            result.redistribute_schema is not None else specs
        rec["to"] = [[placement_text(p) for p in s.placements] for s in target]
    return rec


# ---------------------------------------------------------------------------------------------
# faults: f(result, schema) -> mutated OutputSharding, or None where the fault has no site


def _with_out(result: OutputSharding, change: Callable[[Any, DTensorSpec], Any]) -> Optional[OutputSharding]:
    """``result`` with every output placement ``p`` replaced by ``change(p, spec)`` (``None``:
    keep); ``None`` when no placement changed."""
    specs = _specs_of(result.output_spec)
    changed = False
    new_specs: List[Any] = []
    for spec in specs:
        if spec is None:
            new_specs.append(None)
            continue
        placements = []
        for p in spec.placements:
            q = change(p, spec)
            changed |= q is not None
            placements.append(p if q is None else q)
        new_specs.append(DTensorSpec(spec.mesh, tuple(placements), tensor_meta=spec.tensor_meta))
    if not changed:
        return None
    out = new_specs[0] if isinstance(result.output_spec, DTensorSpec) else type(result.output_spec)(new_specs)
    return dataclasses.replace(result, output_spec=out)


def _is_partial(p: Any) -> bool:
    return isinstance(p, Partial) and type(p).__name__ != "_MaskPartial"


def _ndim(spec: DTensorSpec) -> int:
    return len(spec.tensor_meta.shape) if spec.tensor_meta is not None else 0


_OTHER_REDUCE = {"sum": "max", "avg": "sum", "max": "min", "min": "max"}


def _partial_as_replicate(result: OutputSharding, schema: OpSchema) -> Optional[OutputSharding]:
    return _with_out(result, lambda p, s: Replicate() if _is_partial(p) else None)


def _shard_instead_of_partial(result: OutputSharding, schema: OpSchema) -> Optional[OutputSharding]:
    return _with_out(result, lambda p, s: Shard(0) if _is_partial(p) and _ndim(s) >= 1 else None)


def _wrong_reduce_op(result: OutputSharding, schema: OpSchema) -> Optional[OutputSharding]:
    return _with_out(result, lambda p, s: Partial(_OTHER_REDUCE[p.reduce_op])
                     if _is_partial(p) and p.reduce_op in _OTHER_REDUCE else None)


def _wrong_shard_dim(result: OutputSharding, schema: OpSchema) -> Optional[OutputSharding]:
    return _with_out(result, lambda p, s: Shard((p.dim + 1) % _ndim(s))
                     if type(p) is Shard and _ndim(s) >= 2 else None)


def _missing_redistribute(result: OutputSharding, schema: OpSchema) -> Optional[OutputSharding]:
    if not result.needs_redistribute or result.redistribute_schema is None:
        return None
    return dataclasses.replace(result, needs_redistribute=False, redistribute_schema=None,
                               use_val_from_redistribute_schema=False)


def _redistribute_with(result: OutputSharding, schema: OpSchema,
                       keep: Callable[[Any, Any], bool]) -> Optional[OutputSharding]:
    """``result`` whose redistribution leaves a tensor input's placement on a mesh dim as it was
    where ``keep(source, target)``; ``None`` when that changes nothing."""
    target = result.redistribute_schema
    if not result.needs_redistribute or target is None:
        return None
    sources = iter(schema.args_spec)
    changed = False

    def fix(a: Any) -> Any:
        nonlocal changed
        if isinstance(a, DTensorSpec):
            src = next(sources)
            placements = []
            for s, t in zip(src.placements, a.placements):
                if s != t and keep(s, t):
                    changed = True
                    placements.append(s)
                else:
                    placements.append(t)
            return DTensorSpec(a.mesh, tuple(placements), tensor_meta=a.tensor_meta)
        if isinstance(a, (list, tuple)):
            return type(a)(fix(x) for x in a)
        return a

    # positional tensor inputs only (``args_spec`` pairs with them); keyword tensors keep the rule's plan
    args = tuple(fix(a) for a in target.args_schema)
    if not changed:
        return None
    return dataclasses.replace(result, redistribute_schema=OpSchema(target.op, args, target.kwargs_schema,
                                                                    schema_info=target.schema_info))


def _gather_skipped(result: OutputSharding, schema: OpSchema) -> Optional[OutputSharding]:
    return _redistribute_with(result, schema, lambda s, t: isinstance(s, Shard) and isinstance(t, Replicate))


def _mask_dropped(result: OutputSharding, schema: OpSchema) -> Optional[OutputSharding]:
    return _redistribute_with(result, schema, lambda s, t: type(t).__name__ == "_MaskPartial")


#: The fault operators, each applied to one operator's rule at a time: name → (what the fault
#: is, the function). The catalogue follows the issue that asked for mutation mode (#15): a
#: Partial output taken as Replicate (a missing all-reduce), Shard instead of Partial, the wrong
#: reduce op on Partial, the wrong shard dim (after a view or permute), a missing redistribute
#: before a non-linear op or a scan, a local index without its global offset (a Shard input the
#: rule gathers is used as is), and the embedding's missing mask.
FAULTS: Dict[str, Tuple[str, Callable[[OutputSharding, OpSchema], Optional[OutputSharding]]]] = {
    "partial_as_replicate": ("a Partial output is declared Replicate (its reduction is lost)", _partial_as_replicate),
    "shard_instead_of_partial": ("a Partial output is declared Shard(0)", _shard_instead_of_partial),
    "wrong_reduce_op": ("a Partial output's reduce op is another (sum→max, avg→sum, max→min, min→max)",
                        _wrong_reduce_op),
    "wrong_shard_dim": ("an output Shard(d) is declared Shard(d+1 mod ndim)", _wrong_shard_dim),
    "missing_redistribute": ("the inputs are not redistributed as the rule asks", _missing_redistribute),
    "gather_skipped": ("a Shard input the rule gathers to Replicate stays sharded (local results without the "
                       "global offset)", _gather_skipped),
    "mask_dropped": ("the embedding's masked partial (MaskPartial) input redistribution is skipped", _mask_dropped),
}


# ---------------------------------------------------------------------------------------------
# the wrapper


class _Hook:
    """Stands in for ``ShardingPropagator.propagate_op_sharding`` (torch's ``LocalLRUCache``):
    calls it, records and/or mutates the result, and passes ``cache_info``/``cache_clear`` on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.recorder: Optional["CallRecorder"] = None
        self.mutant: Optional[Tuple[str, Callable]] = None
        self.reached = 0

    def __call__(self, schema: OpSchema, *args: Any, **kwargs: Any) -> Any:
        try:
            with layer_faults.propagating(str(schema.op)):
                result = self.inner(schema, *args, **kwargs)
        except NotImplementedError:
            if self.recorder is not None:
                self.recorder.add(schema, None)
            raise
        if self.recorder is not None:
            self.recorder.add(schema, result)
        if self.mutant is not None and str(schema.op) == self.mutant[0]:
            mutated = self.mutant[1](result, schema)
            if mutated is not None:
                self.reached += 1
                return mutated
        return result

    def cache_info(self) -> Any:
        return self.inner.cache_info()

    def cache_clear(self) -> Any:
        return self.inner.cache_clear()


class _Hooks:
    """The two wrapped entry points (the cached one and the one the C++ fast path calls after
    its own cache missed); their recorder and mutant are set together."""

    def __init__(self, p: Any) -> None:
        self.cached = p.propagate_op_sharding = _Hook(p.propagate_op_sharding)
        self.uncached = p.propagate_op_sharding_non_cached = _Hook(p.propagate_op_sharding_non_cached)
        self.both = (self.cached, self.uncached)

    def set(self, recorder: Any = None, mutant: Any = None) -> None:
        for h in self.both:
            h.recorder, h.mutant, h.reached = recorder, mutant, 0

    @property
    def reached(self) -> int:
        return sum(h.reached for h in self.both)


_HOOKS: Optional[_Hooks] = None


def _hooks() -> _Hooks:
    global _HOOKS
    if _HOOKS is None:
        _HOOKS = _Hooks(_propagator())
    return _HOOKS


class CallRecorder:
    """Records each distinct propagated call (:func:`call_json`) between :meth:`__enter__` and
    :meth:`__exit__`; :attr:`calls` keeps them in first-seen order."""

    def __init__(self) -> None:
        self.calls: List[Dict[str, Any]] = []
        self._seen: set = set()

    def add(self, schema: OpSchema, result: Optional[OutputSharding]) -> None:
        """Record one propagated call (``result`` ``None``: no rule), once per distinct record; a
        call this module cannot describe is recorded as ``{"op", "error"}``."""
        try:
            rec = call_json(schema, result)
        except Exception as e:  # a call torch can make but this module cannot describe: say so, go on
            rec = {"op": str(schema.op), "error": f"{type(e).__name__}: {e}"}
        key = json.dumps(rec, sort_keys=True, default=str)
        if key not in self._seen:
            self._seen.add(key)
            self.calls.append(rec)

    def __enter__(self) -> "CallRecorder":
        h = _hooks()
        h.set(self, h.cached.mutant)
        _clear_sharding_prop_cache()
        return self

    def __exit__(self, *exc: Any) -> None:
        h = _hooks()
        h.set(None, h.cached.mutant)


#: Every fault a mutant may carry: those of the rules' output (:data:`FAULTS`) and those below it
#: (:data:`meshtest.platforms.torch.layer_faults.LAYER_FAULTS`), name → what it does.
ALL_FAULTS: Dict[str, str] = {**{name: what for name, (what, _) in FAULTS.items()},
                              **{name: f"{what} ({layer})" for name, (what, layer)
                                 in layer_faults.LAYER_FAULTS.items()}}


def parse_mutant(mutant: str) -> Tuple[str, str]:
    """``"aten.sum.dim_IntList:partial_as_replicate"`` → (operator, fault).

    :raises ValueError: no ``:``, or a fault not in :data:`ALL_FAULTS` (the message lists them)."""
    op, sep, fault = mutant.rpartition(":")
    if not sep or not op:
        raise ValueError(f"mutant {mutant!r}: expected OPERATOR:FAULT, e.g. aten.sum.default:partial_as_replicate")
    if fault not in ALL_FAULTS:
        raise ValueError(f"mutant {mutant!r}: unknown fault {fault!r}; known: {', '.join(ALL_FAULTS)}")
    return op, fault


def activate(mutant: str) -> None:
    """From now on in this process, operator ``op``'s sharding rule — or, for a fault of
    :mod:`meshtest.platforms.torch.layer_faults`, what DTensor does below it for ``op`` — carries
    ``fault`` (``mutant`` = ``"op:fault"``, :func:`parse_mutant`); ``""`` deactivates.

    :raises ValueError: see :func:`parse_mutant`."""
    h = _hooks()
    chosen, layer = None, (None, None)
    if mutant:
        op, fault = parse_mutant(mutant)
        if fault in FAULTS:
            chosen = (op, FAULTS[fault][1])
        else:
            layer = (op, fault)
        log.info("mutant %s active: %s", mutant, ALL_FAULTS[fault])
    h.set(h.cached.recorder, chosen)
    layer_faults.set_active(*layer)
    _clear_sharding_prop_cache()


def reached() -> int:
    """How many propagated calls (or, for a layer fault, values) the active mutant has changed
    since :func:`activate`."""
    return _hooks().reached + layer_faults.reached()


def fault_sites(call: Dict[str, Any]) -> List[str]:
    """The faults of :data:`ALL_FAULTS` that can change this recorded call (:func:`call_json`),
    judged from its output placements, redistributions and literal arguments (the same
    conditions the fault functions test)."""
    if not call.get("rule") or "out" not in call:
        return []
    ndims = call.get("out_ndim") or [0] * len(call["out"])
    outs = [(o, n or 0) for o, n in zip(call["out"], ndims) if o is not None]
    sites = []
    if any(p.startswith("P(") for o, _ in outs for p in o):
        sites.append("partial_as_replicate")
        if any(p.startswith("P(") and n >= 1 for o, n in outs for p in o):
            sites.append("shard_instead_of_partial")
        if any(p in ("P(sum)", "P(avg)", "P(max)", "P(min)") for o, _ in outs for p in o):
            sites.append("wrong_reduce_op")
    if any(p.startswith("S(") and n >= 2 for o, n in outs for p in o):
        sites.append("wrong_shard_dim")
    sites += layer_faults.sites(call, _tensor_args(call))
    sources = [a["p"] for a in _tensor_args(call)]
    moved = [(s, t) for src, dst in zip(sources, call.get("to", [])) for s, t in zip(src, dst) if s != t]
    if moved:
        sites.append("missing_redistribute")
        if any(s.startswith("S(") and t == "R" for s, t in moved):
            sites.append("gather_skipped")
        if any(t == "MP" for _, t in moved):
            sites.append("mask_dropped")
    return sites


def _tensor_args(call: Dict[str, Any]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []

    def walk(a: Any) -> None:
        if isinstance(a, dict) and "t" in a:
            out.append(a)
        elif isinstance(a, dict) and "l" in a:
            for x in a["l"]:
                walk(x)

    for a in call.get("args", []):
        walk(a)
    for a in call.get("kwargs", {}).values():
        walk(a)
    return out


def replayable(call: Dict[str, Any]) -> Optional[str]:
    """``None`` when :func:`meshtest.platforms.torch.witness.replay` can rebuild this call, else why not."""
    if "error" in call:
        return call["error"]
    text = json.dumps(call)
    if '"x":' in text:
        return "an argument that is not a tensor, list or literal"
    if any(a.get("t") is None for a in _tensor_args(call)):
        return "an input without tensor metadata"
    if any(str(a.get("dtype", "")).startswith("complex") for a in _tensor_args(call)):
        return "a complex input"
    return None
