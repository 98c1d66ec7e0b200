"""The rank's half: a manifest entry's :class:`OpShardCase` (:func:`materialize`), its call
(:class:`OpCall`), its inputs split by placement, its comparison, and its one-step
simplifications (:func:`simpler`, for ``meshtest shrink``).
"""
from __future__ import annotations

import functools
import zlib
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from ....errors import Unsupported
from ....model.compare_spec import CompareSpec
from ....model.inputs import InputSpec
from ....model.known import KnownFailure
from ....model.layout import chunk
from ....model.local_input import LocalInput
from ....model.placement import Partial, Shard
from ....model.spec import OpShardCase
from ....properties import random_draw
from .manifest import sample_facts
from .samples import (
    TOLERANCES,
    _numpy,
    call,
    entry_name,
    kind_of,
    opinfos,
    parse_placement,
    samples,
    signature,
    tensors_of,
)


class _SampleArray:
    """Tensor ``index`` of an entry's sample, as the array-like ``InputSpec(data=...)`` takes:
    its shape is known from the manifest, its values are drawn when the case builds its inputs."""

    def __init__(self, entry: Dict[str, Any], index: int) -> None:
        self.entry, self.index = entry, index
        self.shape = tuple(entry["shapes"][index])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = _numpy(tensors_of(sample_of(self.entry))[self.index])
        return arr if dtype is None else arr.astype(dtype)


class _Parts:
    """The locals of a tensor placed with at least one ``Partial``: the sample's value split mesh
    dimension by mesh dimension, outermost first — ``Shard(d)`` as torch chunks it, ``Partial``
    into distinct per-rank parts that reduce to the value (``sum``: random parts, the last one
    the remainder; ``avg``: the value plus offsets that sum to zero; ``max``/``min``: one rank
    holds the value, the others less/more), ``Replicate()`` unchanged. So the global tensor
    meshtest assembles is the sample's value (up to float rounding for sum/avg)."""

    def __init__(self, entry: Dict[str, Any], index: int) -> None:
        self.entry, self.index = entry, index
        self.placements = [parse_placement(p) for p in entry["placements"][index]]

    def __call__(self, coord: Tuple[int, ...]) -> np.ndarray:
        value = _numpy(tensors_of(sample_of(self.entry))[self.index])
        mesh = self.entry["mesh_shape"]
        for k, p in enumerate(self.placements):
            n = mesh[k]
            if isinstance(p, Shard):
                value = _chunk(value, p.dim, n)[coord[k]]
            elif isinstance(p, Partial):
                seed = zlib.crc32(f"{self.entry['name']}:{self.index}:{k}:{coord[:k]}".encode())
                value = _split_partial(value, p.reduce_op, n, np.random.default_rng(seed))[coord[k]]
        return value


def _chunk(value: np.ndarray, dim: int, n: int) -> List[np.ndarray]:
    """``value`` split on ``dim`` as ``Shard(dim)`` splits it over ``n`` ranks
    (:func:`meshtest.model.layout.chunk`: ``torch.chunk``'s pieces, then empty ones)."""
    return [np.take(value, piece, axis=dim) for piece in chunk(range(value.shape[dim]), n)]


def _split_partial(value: np.ndarray, op: str, n: int, rng: np.random.Generator) -> List[np.ndarray]:
    integer = value.dtype.kind in "iub"
    noise = [(rng.integers(-3, 4, size=value.shape) if integer else rng.standard_normal(value.shape) * 0.5)
             .astype(value.dtype) for _ in range(n)]
    if op == "sum":
        parts = noise[:-1]
        return parts + [(value - sum(parts, np.zeros_like(value))).astype(value.dtype)]
    if op == "avg":
        mean = sum(noise, np.zeros_like(value)) / n
        return [(value + x - mean).astype(value.dtype) for x in noise]
    keep = int(rng.integers(n))
    sign = -1 if op == "max" else 1
    return [value if r == keep else (value + sign * np.abs(noise[r]).astype(value.dtype)).astype(value.dtype)
            for r in range(n)]


def sample_of(entry: Dict[str, Any]) -> Any:
    """The entry's sample, regenerated and checked against its signature.

    :raises RuntimeError: the OpInfo is gone or its sample differs from the manifest's (another
        torch): regenerate the manifests (``python -m meshtest generate opinfo``).
    """
    key, dtype, index = entry["op"], entry["dtype"], entry["sample"]
    if key not in opinfos():
        raise RuntimeError(f"torch's op_db has no OpInfo {key!r} (the manifest was generated for another torch): "
                           "regenerate it with python -m meshtest generate opinfo")
    drawn = samples(key, dtype)
    sig = signature(drawn[index]) if index < len(drawn) else "<no such sample>"
    if sig != entry["sig"]:
        raise RuntimeError(f"OpInfo {key!r} sample {index} ({dtype}) is {sig}, the manifest says {entry['sig']} "
                           f"(torch {torch.__version__}): regenerate with python -m meshtest generate opinfo")
    return drawn[index]


class OpCall:
    """A generated case's ``fn``: the OpInfo's op on the entry's sample, its tensors replaced by
    the case's (full on the reference path, DTensors on the distributed one)."""

    def __init__(self, entry: Dict[str, Any]) -> None:
        self.entry = entry
        self.__name__ = self.__qualname__ = entry["op"].replace(".", "_")

    def __call__(self, *tensors: Any) -> Any:
        """:raises meshtest.errors.Unsupported: a random entry on DTensors whose mesh torch's own
        probe (``torch.distributed.tensor._random.is_rng_supported_mesh``) says has no DTensor
        RNG (a CPU mesh): after the call, so that a failure of the op itself is still seen."""
        result = call(opinfos()[self.entry["op"]], sample_of(self.entry), tensors, self.entry.get("variant", ""))
        if self.entry["random"]:
            mesh = next((t.device_mesh for t in tensors if isinstance(t, DTensor)), None)
            if mesh is not None and not _rng_supported(mesh):
                raise Unsupported(
                    f"a random op (its values change with the seed on one device); torch's probe "
                    f"torch.distributed.tensor._random.is_rng_supported_mesh says DTensor random ops are not "
                    f"supported on a {mesh.device_type} mesh, so its values cannot be compared with a "
                    "single-device draw")
        return result

    def repro_source(self, name: str) -> str:
        """Source of a function ``name(*tensors)`` that does what this call does, for a standalone
        script (:mod:`meshtest.repro`): the OpInfo from torch's ``op_db``, the sample's non-tensor
        arguments written out, its tensors taken in order, the variant's call (:func:`call`).

        :raises ValueError: an argument whose ``repr`` does not read back (an object with no
            literal spelling)."""
        sample = sample_of(self.entry)
        structure = "(" + ", ".join(_arg_source(x) for x in (sample.input, sample.args, sample.kwargs)) + ")"
        variant = self.entry.get("variant", "")
        if variant == "inplace":
            result = "OP.inplace_variant(inp, *args, **kwargs)"
        elif variant == "out":  # the buffer's memory filled as the case fills it (filled_empty_like)
            result = ("OP.op(inp, *args, **kwargs, out=filled_empty_like(OP.op(inp, *args, **kwargs)))\n\n\n"
                      "def filled_empty_like(t):\n"
                      "    import torch.utils.deterministic\n"
                      "    torch.use_deterministic_algorithms(True)\n"
                      "    torch.utils.deterministic.fill_uninitialized_memory = True\n"
                      "    try:\n"
                      "        return torch.empty_like(t)\n"
                      "    finally:\n"
                      "        torch.use_deterministic_algorithms(False)\n"
                      "        torch.utils.deterministic.fill_uninitialized_memory = False")
        else:
            result = "OP.op(inp, *args, **kwargs)"
        return (
            "# torch's OpInfo database (torch.testing._internal: it needs `pip install expecttest`)\n"
            "from torch.testing._internal.common_methods_invocations import op_db\n"
            "from torch.utils._pytree import tree_flatten, tree_unflatten\n\n"
            f"OP = next(o for o in op_db if o.name + ('.' + o.variant_test_name if o.variant_test_name else '') "
            f"== {self.entry['op']!r})\n"
            "T = object()  # where the sample holds a tensor (the case's inputs, in order)\n"
            f"STRUCTURE = {structure}  # OpInfo {self.entry['op']!r}, {self.entry['dtype']} sample "
            f"{self.entry['sample']}: (input, args, kwargs)\n\n\n"
            f"def {name}(*tensors):\n"
            "    leaves, spec = tree_flatten(STRUCTURE)\n"
            "    it = iter(tensors)\n"
            "    inp, args, kwargs = tree_unflatten([next(it) if x is T else x for x in leaves], spec)\n"
            f"    return {result}\n")


def _arg_source(x: Any) -> str:
    """Python source of a sample argument with ``T`` for each tensor (:meth:`OpCall.repro_source`)."""
    if isinstance(x, torch.Tensor):
        return "T"
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return "(" + "".join(_arg_source(v) + ", " for v in x) + ")"
    if isinstance(x, list):
        return "[" + ", ".join(_arg_source(v) for v in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {_arg_source(v)}" for k, v in x.items()) + "}"
    text = repr(x)
    try:
        back = eval(text, {"torch": torch, "inf": float("inf"), "nan": float("nan")})  # noqa: S307 — our own repr
    except Exception:  # noqa: BLE001 — no literal spelling
        back = _NO_SPELLING
    if back is _NO_SPELLING or not (back == x or (isinstance(x, float) and x != x)):
        raise ValueError(f"a sample argument {text} ({type(x).__name__}) has no literal spelling")
    return text


_NO_SPELLING = object()


def compare_of(out_dtypes: Sequence[str], nonfinite: bool = False, random_: bool = False,
               in_dtypes: Sequence[str] = (), uninitialised: bool = False,
               shards: Sequence[Tuple[int, int, Tuple[int, ...]]] = ()) -> CompareSpec:
    """Exact for integer and bool outputs, else ``assert_close``'s tolerances for the least
    precise float among the outputs and the inputs (:data:`TOLERANCES`: a float64 result of
    float32 inputs carries float32's rounding of the inputs, e.g. of their partial sums).
    ``nonfinite``: the sample's reference holds NaN or Inf by design (an input outside the op's
    domain), compared place for place. ``random_``: the op's values change with the seed on one
    device: compared as a draw (:func:`meshtest.properties.random_draw`: the reference's
    distribution, shards that differ where the reference's do — ``shards``, from the inputs'
    ``Shard`` placements), where DTensor has an RNG (:class:`OpCall`). ``uninitialised``: the
    values are whatever memory held (``empty_like``): only shapes and dtypes are compared."""
    if uninitialised:
        return CompareSpec.shape("the op returns uninitialised memory")
    if random_:
        return CompareSpec.check(random_draw(shards), reason=(
            "a random op: its draw on the mesh against a single-device draw, in distribution (two-sample "
            "Kolmogorov-Smirnov) and with shards that differ where the single-device draw's do"))
    if not any(d in TOLERANCES for d in out_dtypes):
        return CompareSpec.equal(allow_nonfinite=nonfinite)
    floats = [d for d in list(out_dtypes) + list(in_dtypes) if d in TOLERANCES]
    rtol, atol = max((TOLERANCES[d] for d in floats), key=lambda t: t[0])
    return CompareSpec.allclose(rtol=rtol, atol=atol, allow_nonfinite=nonfinite)


def _compute_dtypes(entry: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    """(input dtypes, output dtypes) the case computes in: the entry's, float32 widened to float64
    when a triage rule moved the case to float64 (``in_float64``, :mod:`meshtest.strength.triage`)."""
    wide = {"float32": "float64"} if entry.get("in_float64") else {}
    return [wide.get(d, d) for d in entry["dtypes"]], [wide.get(d, d) for d in entry["out_dtypes"]]


def materialize(entry: Dict[str, Any], manifest: Dict[str, Any]) -> OpShardCase:
    """The :class:`OpShardCase` of a manifest entry (see the module docstring). Cheap: the
    sample is drawn when the case builds its inputs.

    :raises KeyError: the entry lacks a field of :func:`entry`."""
    opinfos()  # op_db imported while the case file loads, not inside the first case (isolation)
    grads = set(entry["grad_inputs"])
    inputs: List[Any] = []
    dtypes, out_dtypes = _compute_dtypes(entry)
    for i, (shape, dtype) in enumerate(zip(entry["shapes"], dtypes)):
        req = i in grads
        if any(p.startswith("P(") for p in entry["placements"][i]):
            inputs.append(LocalInput(shape=tuple(shape), local=_Parts(entry, i), dtype=dtype, requires_grad=req))
        else:
            inputs.append(InputSpec(tuple(shape), dtype=dtype, data=_SampleArray(entry, i), requires_grad=req))
    known = entry["known_failure"]
    return OpShardCase(
        name=entry["name"], fn=OpCall(entry), inputs=inputs,
        placements=[tuple(parse_placement(p) for p in per) for per in entry["placements"]],
        mesh_shape=tuple(entry["mesh_shape"]), tags=tuple(entry["tags"]),
        compare=compare_of(out_dtypes, entry["nonfinite"], entry["random"], dtypes,
                           uninitialised=entry.get("uninitialised", False), shards=_shards(entry)),
        compare_outputs=tuple(entry["outputs"]), known_failure=None if known is None else KnownFailure.from_json(known),
        simulation_limit=entry.get("simulation_limit"))


def _shards(entry: Dict[str, Any]) -> List[Tuple[int, int, Tuple[int, ...]]]:
    """``(dim, ranks, shape)`` of every input placed ``Shard(dim)`` on a mesh dim of ``ranks``
    ranks, with its shape (:func:`meshtest.properties.random_draw`'s ``shards``)."""
    out = []
    for shape, per in zip(entry["shapes"], entry["placements"]):
        for k, text in enumerate(per):
            p = parse_placement(text)
            if type(p) is Shard and entry["mesh_shape"][k] > 1:  # not a _StridedShard: its pieces interleave
                out.append((p.dim % max(len(shape), 1), entry["mesh_shape"][k], tuple(shape)))
    return out


# ---------------------------------------------------------------------------------------------
# shrinking: one-step simplifications of an entry (meshtest.strength.shrink drives them)


def _renamed(e: Dict[str, Any], **changes: Any) -> Dict[str, Any]:
    out = {**e, **changes, "known_failure": None}
    out.pop("simulation_limit", None)
    out["kind"] = kind_of(out["placements"], out["shapes"], out["mesh_shape"])
    out["name"] = entry_name(out)
    return out


def simpler(e: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    """Every one-step simplification of entry ``e``, simplest first, each ``(what changed, entry)``:
    one mesh dim of a 2-D mesh kept (with its placements); a 1-D mesh of 2 ranks; one placement
    made ``Replicate()``; no backward; a smaller sample of the same OpInfo and dtype whose tensors
    have the same ranks (so the placements still apply), smallest first."""
    out: List[Tuple[str, Dict[str, Any]]] = []
    mesh, pl = e["mesh_shape"], e["placements"]
    if len(mesh) > 1:
        for k in range(len(mesh)):
            out.append((f"mesh dim {k} only", _renamed(e, mesh_shape=[mesh[k]], placements=[[per[k]] for per in pl])))
    elif mesh[0] > 2:
        out.append(("2 ranks", _renamed(e, mesh_shape=[2])))
    for i, per in enumerate(pl):
        for k, p in enumerate(per):
            if p != "R":
                new = [list(x) for x in pl]
                new[i][k] = "R"
                out.append((f"input {i} mesh dim {k} Replicate()", _renamed(e, placements=new)))
    if e["grad_inputs"]:
        out.append(("no backward", _renamed(e, grad_inputs=[])))
    size = sum(int(np.prod(s)) for s in e["shapes"])
    sample_of(e)  # the OpInfo and the sample still exist (else: the message naming the command to rerun)
    op = opinfos()[e["op"]]
    smaller = []
    for index, sample in enumerate(samples(e["op"], e["dtype"])):
        ts = tensors_of(sample)
        if index == e["sample"] or [t.dim() for t in ts] != [len(s) for s in e["shapes"]]:
            continue
        if sum(t.numel() for t in ts) >= size:
            continue
        facts, _ = sample_facts(op, e["op"], e["dtype"], index, sample, _rules())
        if facts is None:
            continue
        smaller.append((sum(t.numel() for t in ts), index, facts))
    variant = e.get("variant", "")
    for _, index, f in sorted(smaller, key=lambda x: x[:2]):
        if variant and variant not in f.variants:
            continue  # this sample has no such overload call
        grads = f.grad_inputs if e["grad_inputs"] else []
        out.append((f"sample {index}", _renamed(
            e, sample=index, sig=f.sig, shapes=f.shapes, dtypes=f.dtypes, outputs=f.outputs, out_dtypes=f.out_dtypes,
            grad_inputs=grads, nonfinite=f.nonfinite, random=f.random, uninitialised=f.uninitialised,
            aten=f.aten, weak=f.weak,
            inplace=[0] if variant == "inplace" else f.inplace)))
    return [(what, x) for what, x in out if _valid(x)]


@functools.lru_cache(maxsize=1)
def _rules() -> Dict[str, str]:
    from ..rules import registered_rules

    return registered_rules()


def _valid(e: Dict[str, Any]) -> bool:
    """Every ``Shard(d)`` within its tensor's rank."""
    return all(int(p[2:-1]) < len(shape) for per, shape in zip(e["placements"], e["shapes"]) for p in per
               if p.startswith("S("))


def _rng_supported(mesh: Any) -> bool:
    """torch's own answer (``is_rng_supported_mesh``), without the warning it logs on every call."""
    import warnings

    from torch.distributed.tensor._random import is_rng_supported_mesh

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(is_rng_supported_mesh(mesh))
