"""Faults below the sharding rules' output: in the redistribute and collective layer, in argument
normalisation, in the view rules' dim analysis and in the local offset computation — the places a DTensor bug hides
when every rule returns the right placements.

:mod:`meshtest.platforms.torch.rules` mutates what a rule *says* (its ``OutputSharding``). The
faults here leave the rules alone and break what DTensor *does* with their answer, for one
operator at a time (a mutant is ``operator:fault`` as there): each is a wrapper, installed once
per process, around one torch function, that misbehaves only while the mutant's operator is the
one being propagated or dispatched (:func:`current`):

=========================  =====================================  ==========================================
fault                      layer (torch function wrapped)         the bug it stands for
=========================  =====================================  ==========================================
``reduce_skipped``         redistribute (``_dispatch``'s           a Partial input used as if reduced (a
                           ``redistribute_local_tensor``)          missing all-reduce / reduce-scatter)
``reduce_op_swapped``      collective (same)                       the collective reduces with another op
                                                                   (sum→max, avg→sum, max→min, min→max)
``gather_reversed``        collective (same)                       an all-gather concatenates the shards in
                                                                   reverse rank order
``negative_dim_off``       argument normalisation                  a negative dim normalised one too low
                           (``_ops.utils.normalize_dim`` and its   (``dim + ndim - 1``)
                           copies in the rule modules)
``shard_offset_dropped``   local offset (``Shard.local_shard_     a shard's global offset taken as 0
                           size_and_offset``, the argmax/argmin    (local indices without their offset)
                           handler's offsets)
``view_split_piece``       view analysis (``_view_ops.propagate_   a dim split by a view keeps its shard on
                           shape_and_sharding``)                   the wrong piece (the last, not the first)
=========================  =====================================  ==========================================

The operator is known while it is propagated (the rule hook of :mod:`.rules` calls
:func:`propagating`) and while its inputs are redistributed or its custom handler runs (the
wrappers here); torch's C++ fast path caches a propagation, so ``rules.activate`` clears
the caches when a mutant starts, and the faulty answer is what gets cached.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import pkgutil
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.distributed.tensor._dispatch as _dispatch
import torch.distributed.tensor._nonlinear_redux as _nonlinear_redux
import torch.distributed.tensor._ops as _ops_pkg
import torch.distributed.tensor._ops._view_ops as _view_ops
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

#: Fault name → (what it does, the layer).
LAYER_FAULTS: Dict[str, Tuple[str, str]] = {
    "reduce_skipped": ("a Partial input is redistributed without its reduction", "redistribute"),
    "reduce_op_swapped": ("a Partial input's collective reduces with another op", "collective"),
    "gather_reversed": ("a Shard→Replicate all-gather concatenates the shards in reverse order", "collective"),
    "negative_dim_off": ("a negative dim argument is normalised to dim + ndim - 1", "argument normalisation"),
    "shard_offset_dropped": ("a shard's global offset is taken as 0 (argmax/argmin indices, embedding masks)",
                             "local offset"),
    "view_split_piece": ("a view that splits a sharded dim puts the shard on the last piece, not the first",
                         "view analysis"),
}

_OTHER_REDUCE = {"sum": "max", "avg": "sum", "max": "min", "min": "max"}

#: (operator, fault) of the active layer mutant, or None.
_ACTIVE: Optional[Tuple[str, str]] = None
#: Operators being propagated or dispatched, innermost last.
_CURRENT: List[str] = []
#: How many times the active fault changed something since it was activated.
_REACHED = [0]


def set_active(op: Optional[str], fault: Optional[str]) -> None:
    """Activate ``fault`` for operator ``op`` (``None``: none); installs the wrappers on first use."""
    global _ACTIVE
    _install()
    _ACTIVE = (op, fault) if op and fault else None
    _REACHED[0] = 0


def reached() -> int:
    """How many times the active layer fault changed a value since :func:`set_active`."""
    return _REACHED[0]


def current() -> Optional[str]:
    """The operator being propagated or dispatched now (innermost), or ``None``."""
    return _CURRENT[-1] if _CURRENT else None


@contextlib.contextmanager
def propagating(op: str) -> Iterator[None]:
    """Make ``op`` the :func:`current` operator for the ``with`` block (it is being propagated,
    redistributed for, or handled), restoring the one before on the way out."""
    _CURRENT.append(op)
    try:
        yield
    finally:
        _CURRENT.pop()


def _on(fault: str) -> bool:
    """Whether ``fault`` is active for the operator being worked on now."""
    return _ACTIVE is not None and _ACTIVE[1] == fault and _ACTIVE[0] == current()


def _hit() -> None:
    _REACHED[0] += 1


# ---------------------------------------------------------------------------------------------
# redistribute and collective layer


def _with_placements(spec: DTensorSpec, placements: Tuple[Any, ...]) -> DTensorSpec:
    return DTensorSpec(spec.mesh, tuple(placements), tensor_meta=spec.tensor_meta)


def _reversed_gather(out: torch.Tensor, src: DTensorSpec, dst: DTensorSpec) -> Optional[torch.Tensor]:
    """``out`` with the shards of every Shard(d)→Replicate mesh dim in reverse order."""
    changed = False
    for k, (s, t) in enumerate(zip(src.placements, dst.placements)):
        if type(s) is Shard and isinstance(t, Replicate):
            n = src.mesh.size(k)
            pieces = list(torch.chunk(out, n, dim=s.dim))
            if len(pieces) > 1:
                out = torch.cat(pieces[::-1], dim=s.dim)
                changed = True
    return out if changed else None


def _redistribute_wrapper(inner: Callable) -> Callable:
    @functools.wraps(inner)
    def redistribute_local_tensor(local: torch.Tensor, src: DTensorSpec, dst: DTensorSpec, *a: Any, **k: Any):
        pairs = list(zip(src.placements, dst.placements))
        reduced = [i for i, (s, t) in enumerate(pairs) if type(s) is Partial and not isinstance(t, Partial)]
        if reduced and _on("reduce_skipped"):
            _hit()
            src = _with_placements(src, tuple(Replicate() if i in reduced else p for i, p in enumerate(src.placements)))
        elif reduced and _on("reduce_op_swapped"):
            swapped = tuple(Partial(_OTHER_REDUCE.get(p.reduce_op, "sum")) if i in reduced else p
                            for i, p in enumerate(src.placements))
            _hit()
            src = _with_placements(src, swapped)
        out = inner(local, src, dst, *a, **k)
        if _on("gather_reversed"):
            flipped = _reversed_gather(out, src, dst)
            if flipped is not None:
                _hit()
                return flipped
        return out

    return redistribute_local_tensor


def _args_wrapper(inner: Callable) -> Callable:
    """``OpDispatcher.redistribute_local_args`` (a static method) run under its operator."""
    @functools.wraps(inner)
    def redistribute_local_args(op_info: Any, suggested_input_schema: Any, *a: Any, **k: Any):
        with propagating(str(suggested_input_schema.op)):
            return inner(op_info, suggested_input_schema, *a, **k)

    return redistribute_local_args


# ---------------------------------------------------------------------------------------------
# argument normalisation, local offset and shape


def _normalize_dim_wrapper(inner: Callable) -> Callable:
    @functools.wraps(inner)
    def normalize_dim(dim: int, ndim: int) -> int:
        if dim < 0 and ndim >= 2 and _on("negative_dim_off"):
            _hit()
            return dim + ndim - 1
        return inner(dim, ndim)

    return normalize_dim


def _offset_wrapper(inner: Callable) -> Callable:
    @functools.wraps(inner)
    def local_shard_size_and_offset(curr_local_size: Any, num_chunks: int, rank: Any):
        size, offset = inner(curr_local_size, num_chunks, rank)
        if _on("shard_offset_dropped") and not (isinstance(offset, int) and offset == 0):
            _hit()
            return size, 0
        return size, offset

    return local_shard_size_and_offset


def _global_offset_wrapper(inner: Callable) -> Callable:
    @functools.wraps(inner)
    def compute_local_shape_and_global_offset(global_shape: Any, mesh: Any, placements: Any, *a: Any, **k: Any):
        shape, offset = inner(global_shape, mesh, placements, *a, **k)
        if _on("shard_offset_dropped") and any(offset):
            _hit()
            return shape, tuple(0 for _ in offset)
        return shape, offset

    return compute_local_shape_and_global_offset


def _view_wrapper(inner: Callable) -> Callable:
    """``propagate_shape_and_sharding`` (the view rules' dim analysis) with the output shard of a
    split dim moved to the split's last piece."""
    @functools.wraps(inner)
    def propagate_shape_and_sharding(input_src_placements: Any, global_input_shape: Any, rule: Any, *a: Any,
                                     **k: Any):
        tgt, out = inner(input_src_placements, global_input_shape, rule, *a, **k)
        if not _on("view_split_piece"):
            return tgt, out
        moved = list(out)
        for m, p in enumerate(out):
            if type(p) is not Shard or p.dim >= len(rule) or type(rule[p.dim]).__name__ != "Split":
                continue
            pieces = [j for j, spec in enumerate(rule)
                      if type(spec).__name__ == "Split" and spec.input_dim == rule[p.dim].input_dim]
            if pieces and pieces[-1] != p.dim:
                moved[m] = Shard(pieces[-1])
        if moved != list(out):
            _hit()
            return tgt, type(out)(moved) if isinstance(out, tuple) else moved
        return tgt, out

    return propagate_shape_and_sharding


def _handler_wrapper(op: str, inner: Callable) -> Callable:
    """A custom op handler (argmax, argmin, ...) run under its operator."""
    @functools.wraps(inner)
    def handler(*a: Any, **k: Any):
        with propagating(op):
            return inner(*a, **k)

    return handler


_INSTALLED = [False]


def _install() -> None:
    """Wrap the torch functions the faults live in (once per process; inactive until a fault is)."""
    if _INSTALLED[0]:
        return
    _INSTALLED[0] = True
    _dispatch.redistribute_local_tensor = _redistribute_wrapper(_dispatch.redistribute_local_tensor)
    od = _dispatch.OpDispatcher
    od.redistribute_local_args = staticmethod(_args_wrapper(od.__dict__["redistribute_local_args"].__func__
                                                            if isinstance(od.__dict__["redistribute_local_args"],
                                                                          staticmethod)
                                                            else od.redistribute_local_args))
    # normalize_dim is imported by name into the rule modules: wrap every copy
    for mod in [_ops_pkg] + [importlib.import_module(f"{_ops_pkg.__name__}.{m.name}")
                             for m in pkgutil.iter_modules(_ops_pkg.__path__)]:
        if callable(getattr(mod, "normalize_dim", None)):
            mod.normalize_dim = _normalize_dim_wrapper(mod.normalize_dim)
    Shard.local_shard_size_and_offset = staticmethod(_offset_wrapper(Shard.__dict__["local_shard_size_and_offset"]
                                                                     .__func__))
    _nonlinear_redux.compute_local_shape_and_global_offset = _global_offset_wrapper(
        _nonlinear_redux.compute_local_shape_and_global_offset)
    _view_ops.propagate_shape_and_sharding = _view_wrapper(_view_ops.propagate_shape_and_sharding)
    handlers = DTensor._op_dispatcher._custom_op_handlers
    for op, fn in list(handlers.items()):
        handlers[op] = _handler_wrapper(str(op), fn)


#: The view operators whose rules go through ``propagate_shape_and_sharding`` (the sites of
#: ``view_split_piece``; the witness proves which of their calls split a sharded dim).
VIEW_OPS = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.unflatten.int",
            "aten.view_copy.default", "aten.expand.default")
#: Operators with a custom handler that computes global offsets (the sites of ``shard_offset_dropped``
#: besides the embedding's mask).
OFFSET_OPS = ("aten.argmax.default", "aten.argmin.default")


def sites(call: Dict[str, Any], tensor_args: List[Dict[str, Any]]) -> List[str]:
    """The layer faults that can change a recorded call (:func:`meshtest.platforms.torch.rules.call_json`)."""
    found = []
    sources = [a["p"] for a in tensor_args]
    moved = [(s, t) for src, dst in zip(sources, call.get("to", [])) for s, t in zip(src, dst) if s != t]
    if any(s.startswith("P(") and not t.startswith("P(") and t != "MP" for s, t in moved):
        found += ["reduce_skipped", "reduce_op_swapped"]
    if any(s.startswith("S(") and t == "R" for s, t in moved):
        found.append("gather_reversed")
    if any(isinstance(v, int) and not isinstance(v, bool) and v < 0 for v in _literals(call)):
        found.append("negative_dim_off")
    sharded = any(p.startswith("S(") for src in sources for p in src)
    if sharded and call["op"] in OFFSET_OPS or any(t == "MP" for _, t in moved):
        found.append("shard_offset_dropped")
    outs = [p for o in call.get("out") or [] if o for p in o]
    if call["op"] in VIEW_OPS and sharded and any(p.startswith("S(") for p in outs):
        found.append("view_split_piece")
    return found


def _literals(call: Dict[str, Any]) -> Iterator[Any]:
    """Every literal argument of a recorded call (``{"v": x}``, also inside lists ``{"l": [...]}``)."""
    def walk(a: Any) -> Iterator[Any]:
        if isinstance(a, dict) and "v" in a:
            yield a["v"]
        elif isinstance(a, dict) and "l" in a:
            for x in a["l"]:
                yield from walk(x)

    for a in list(call.get("args", [])) + list(call.get("kwargs", {}).values()):
        yield from walk(a)
