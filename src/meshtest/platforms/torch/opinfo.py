"""Op cases generated from torch's OpInfo database: every operator with a DTensor sharding rule,
its CPU samples, every placement kind.

torch keeps, per operator, a description of how to call it (``OpInfo`` in
``torch.testing._internal.common_methods_invocations.op_db``): sample inputs (tensors and the
other arguments) per dtype, the dtypes it supports, whether it supports autograd. torch's own
``test_dtensor_ops.py`` runs them on DTensors with ``Shard(0)`` / ``Replicate()`` only. Here
each sample becomes op cases with every placement kind per input (:func:`placement_patterns`):
``Replicate()``, ``Shard(d)`` for every dim (uneven where the dim does not divide), and
``Partial(sum|avg|max|min)`` with distinct per-rank parts (:class:`_Parts`), on 1-D meshes of 2,
3 and 4 ranks and the 2-D mesh ``(2, 2)``; backward where the sample's inputs get gradients.

Two halves:

- :func:`generate` (``python -m meshtest generate opinfo``) discovers the operators, runs each
  usable sample once on plain tensors (to learn the aten operators it dispatches, its outputs
  and which inputs get a gradient) and writes one manifest per rule family
  (:mod:`meshtest.model.generated`), each entry tagged with its gate (:func:`tiers`);
- :func:`materialize` builds an entry's :class:`OpShardCase` on the ranks: the sample is
  regenerated from the same seed (cheaply: only when the case runs) and checked against the
  entry's signature, so a torch whose samples differ fails at step ``build`` naming the drift
  instead of testing something else.

The reference is the op on the full tensors and the comparison torch's own
``torch.testing.assert_close`` tolerances for the output dtype (:data:`TOLERANCES`), as for a
hand-written case.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import random
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from ...errors import Unsupported
from ...model.known import KnownFailure
from ...model.layout import chunk
from ...model.local_input import LocalInput
from ...model.placement import Partial, Placement, Replicate, Shard
from ...model.spec import CompareSpec, InputSpec, OpShardCase

log = logging.getLogger(__name__)

GENERATOR = "torch-opinfo"
#: torch's global seed before a sample list is generated (``op.sample_inputs`` draws from it).
SAMPLE_SEED = 0
#: The first usable samples considered per OpInfo and dtype.
MAX_SAMPLES = 8
#: Meshes the cases run on.
MESHES_1D = ((2,), (3,), (4,))
MESH_2D = (2, 2)
#: torch dtype ↔ meshtest's dtype names (:data:`meshtest.model.spec.DTYPES`); samples with a
#: tensor of another dtype (complex, int16, ...) are not used.
DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
               torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.int8: "int8",
               torch.uint8: "uint8", torch.bool: "bool"}
_TORCH_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}
FLOATS = ("float32", "float64", "float16", "bfloat16")
#: ``torch.testing.assert_close``'s default (rtol, atol) per dtype (torch/testing/_comparison.py,
#: ``_DTYPE_PRECISIONS``); integer and bool outputs are compared exactly.
TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
              "float64": (1e-7, 1e-7)}
#: Reduce ops a Partial input of each dtype is built with: exact ones only for the low-precision
#: floats (their parts would not sum to the value), none for bool.
PARTIAL_OPS = {"float32": ("sum", "avg", "max", "min"), "float64": ("sum", "avg", "max", "min"),
               "float16": ("max", "min"), "bfloat16": ("max", "min"), "int64": ("sum", "max", "min"),
               "int32": ("sum", "max", "min"), "int8": ("max", "min"), "uint8": ("max",), "bool": ()}
#: OpInfos whose samples pass, as a tensor after the first, an argument the op reads on the host
#: (sizes, indices as Python numbers): distributing it tests how DTensor treats a DTensor where
#: a list of ints is meant, not a sharding rule. Samples with such a tensor are not used.
HOST_READ_ARGS = {"tensor_split": "indices_or_sections given as a tensor (read on the host)"}
#: The second dtype tried after float32, in order of preference: a low-precision float, else an integer.
SECOND_DTYPES = (torch.bfloat16, torch.int64)


# ---------------------------------------------------------------------------------------------
# OpInfos and their samples


def op_key(op: Any) -> str:
    """An OpInfo's name in cases and manifests: ``name`` or ``name.variant``."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@functools.lru_cache(maxsize=1)
def opinfos() -> Dict[str, Any]:
    """``op_db`` by :func:`op_key` (imported on first use: a few seconds)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(op): op for op in op_db}


@functools.lru_cache(maxsize=32)
def samples(key: str, dtype: str) -> Tuple[Any, ...]:
    """The OpInfo's CPU samples of ``dtype``, drawn from :data:`SAMPLE_SEED` (the caller's random
    state and dispatch modes are left as they were), in the order of their :func:`signature`
    (a tuple; samples this module cannot describe are left out; ``KeyError``: no such OpInfo):
    some sample functions iterate over a set, whose order changes from process to process
    (string hashing is salted), so ``op_db``'s own order does not name a sample. Samples of one
    signature (the same shapes and arguments, other floating-point values) keep the order they
    were drawn in (the sort is stable): that order is the same under any hash seed (checked for
    the 109 OpInfo/dtype pairs of the manifests that have such ties) and on any CPU."""
    op = opinfos()[key]

    def draw() -> List[Any]:
        state = random.getstate()
        # plain tensors, whatever mode the caller runs under (the one-process lane's LocalTensorMode)
        with _disable_current_modes(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(SAMPLE_SEED)
            random.seed(SAMPLE_SEED)
            try:
                return list(op.sample_inputs("cpu", _TORCH_DTYPES[dtype], requires_grad=False))
            finally:
                random.setstate(state)

    drawn = _on_a_short_stack(draw)
    keyed = []
    for s in drawn:
        try:
            keyed.append((signature(s), s))
        except Exception:  # noqa: BLE001 — a sample this module cannot describe (sparse, ...) is never used
            continue
    return tuple(s for _, s in sorted(keyed, key=lambda kv: kv[0]))


def _on_a_short_stack(fn: Any) -> Any:
    """``fn()`` run in a thread of its own, the caller waiting; its result, or its exception raised.

    torch's sample iterators (``TrackedInputIter``) call ``inspect.stack()`` and
    ``traceback.format_stack()`` for every sample, whose cost grows with the caller's stack, and a
    frame without a source file (``python -m``'s runpy) makes each lookup scan ``sys.modules``:
    drawing every OpInfo's samples took 72 s under ``python -m meshtest`` and 40 s from a new
    thread's stack, which holds the draw alone (measured 2026-12-07, 2 cores). The samples are the
    same: the caller waits, and the seeds are set inside ``fn``."""
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = fn()
        except BaseException as e:  # noqa: BLE001 — re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=run, name="meshtest-samples")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["out"]


def _leaves(sample: Any) -> Tuple[List[Any], Any]:
    return tree_flatten((sample.input, sample.args, sample.kwargs))


def tensors_of(sample: Any) -> List[torch.Tensor]:
    """The sample's tensors in call order (input, positional, keyword arguments)."""
    return [x for x in _leaves(sample)[0] if isinstance(x, torch.Tensor)]


def signature(sample: Any) -> str:
    """What the manifest records of a sample to notice drift: each tensor's dtype and shape, a
    CRC-32 of the other arguments' text and a CRC-32 of the bytes of its integer and bool tensors
    (``str``; raises for a tensor NumPy cannot view: sparse, quantized).

    Floating-point bytes are left out: the same torch on another CPU draws them differently in
    the last bits wherever a sample function computes them (``log_softmax`` for ``ctc_loss``, the
    factorizations and products behind the linalg samples): 24 of the 529 level-0 samples differ
    between ``ATEN_CPU_CAPABILITY=avx2`` and AVX-512 on one machine. The signature, the order of
    :func:`samples` and so every case name must not depend on the machine that wrote them."""
    leaves, spec = _leaves(sample)
    ts = [x for x in leaves if isinstance(x, torch.Tensor)]
    text = repr(spec) + "|" + "|".join("T" if isinstance(x, torch.Tensor) else repr(x) for x in leaves)
    arrays = [_numpy(t) for t in ts]  # raises for a tensor with no NumPy view (sparse, quantized, ...)
    exact = [a for t, a in zip(ts, arrays) if not (t.is_floating_point() or t.is_complex())]
    data = zlib.crc32(b"".join(a.tobytes() for a in exact))
    shapes = ",".join(f"{DTYPE_NAMES.get(t.dtype, t.dtype)}{list(t.shape)}" for t in ts)
    return f"{shapes}|{zlib.crc32(text.encode()):08x}|{data:08x}"


def _numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).contiguous().numpy()


#: The ways a case calls its OpInfo: the functional op (``""``), its in-place variant (the
#: first tensor is written and returned), or the op with ``out=`` a buffer shaped like its result
#: (``torch.empty_like`` of the functional result, so a DTensor buffer has its placements, made by
#: :func:`filled_empty_like`: an op that leaves ``out`` unwritten gives the same wrong values on
#: every run, where plain uninitialised memory differed from run to run).
VARIANTS = ("", "inplace", "out")


def filled_empty_like(t: Any) -> Any:
    """``torch.empty_like(t)`` with its memory filled as torch's
    ``torch.utils.deterministic.fill_uninitialized_memory`` fills it under
    ``torch.use_deterministic_algorithms(True)``: NaN for a floating or complex dtype, an integer
    dtype's largest value (both settings restored after)."""
    import torch.utils.deterministic as deterministic

    was, was_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = deterministic.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(True)
        deterministic.fill_uninitialized_memory = True
        return torch.empty_like(t)
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
        deterministic.fill_uninitialized_memory = was_fill


def call(op: Any, sample: Any, tensors: Sequence[Any], variant: str = "") -> Any:
    """Call ``op`` (:data:`VARIANTS`) with ``sample``'s arguments, its tensors replaced by
    ``tensors`` in order; returns what the op returns (what it raises propagates)."""
    leaves, spec = _leaves(sample)
    it = iter(tensors)
    inp, args, kwargs = tree_unflatten([next(it) if isinstance(x, torch.Tensor) else x for x in leaves], spec)
    if variant == "inplace":
        return op.inplace_variant(inp, *args, **kwargs)
    out = op.op(inp, *args, **kwargs)
    if variant == "out":
        return op.op(inp, *args, **kwargs, out=filled_empty_like(out))
    return out


def seeds_itself(op: Any) -> bool:
    """Whether the OpInfo's op reseeds torch's generator inside every call (torch's
    ``wrapper_set_seed``, which OpInfo wraps its random ops in: ``dropout``, ``rand_like``,
    ``svd_lowrank`` ...), so that two calls agree whatever the caller seeded."""
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def _call_unseeded(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


@contextlib.contextmanager
def unseeded(op: Any) -> Iterator[None]:
    """Within the block the op of a :func:`seeds_itself` OpInfo draws from the caller's seed
    (its module's ``wrapper_set_seed`` calls the wrapped function as it is), so that two calls
    from two seeds tell a random op (and a random sample of one: ``scaled_dot_product_attention``
    with ``dropout_p > 0``) from a deterministic one."""
    if not seeds_itself(op):
        yield
        return
    scope = op.op.__globals__
    was = scope["wrapper_set_seed"]
    scope["wrapper_set_seed"] = _call_unseeded
    try:
        yield
    finally:
        scope["wrapper_set_seed"] = was


# ---------------------------------------------------------------------------------------------
# placements


def placement_text(p: Placement) -> str:
    """``R``, ``S(0)``, ``P(sum)``: how a manifest writes a placement (:func:`parse_placement`)."""
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    return "R"


def parse_placement(text: str) -> Placement:
    """Inverse of :func:`placement_text`. :raises ValueError: other text."""
    if text == "R":
        return Replicate()
    if text.startswith("S(") and text.endswith(")"):
        return Shard(int(text[2:-1]))
    if text.startswith("P(") and text.endswith(")"):
        return Partial(text[2:-1])
    raise ValueError(f"not a placement: {text!r}")


def _short(text: str) -> str:
    return text.replace("(", "").replace(")", "")


def placement_label(placements: Sequence[Sequence[str]]) -> str:
    """A case name's placement part: per input its per-mesh-dim placements, inputs joined by ``_``
    (``S0Psum_R``)."""
    return "_".join("".join(_short(p) for p in per) for per in placements)


def kind_of(placements: Sequence[Sequence[str]], shapes: Sequence[Sequence[int]], mesh: Sequence[int]) -> str:
    """The placement kind a case stands for in coverage and triage: the kinds of its inputs'
    non-Replicate placements, sorted (``P(max)``, ``S``, ``S~`` uneven), ``R`` when all replicate,
    ``2d:`` on a 2-D mesh."""
    kinds = set()
    for per, shape in zip(placements, shapes):
        for k, p in enumerate(per):
            if p.startswith("S("):
                d = int(p[2:-1])
                kinds.add("S~" if shape[d] % mesh[k] else "S")
            elif p.startswith("P("):
                kinds.add(p)
    text = "+".join(sorted(kinds)) or "R"
    return ("2d:" if len(mesh) > 1 else "") + text


# ---------------------------------------------------------------------------------------------
# what one sample does on plain tensors


@dataclass
class SampleFacts:
    """One usable sample of an OpInfo at a dtype, as run once on plain tensors."""

    index: int
    sig: str
    shapes: List[List[int]]
    dtypes: List[str]
    outputs: List[int]  # indices of the tensor outputs (``[0]`` for a single tensor)
    out_dtypes: List[str]
    grad_inputs: List[int] = field(default_factory=list)  # tensors that got a gradient
    aten: List[str] = field(default_factory=list)  # operators with a registered rule it dispatched
    nonfinite: bool = False  # the op's output holds NaN/Inf for this sample (compared NaN for NaN)
    random: bool = False  # runs from two seeds differ, or with filled memory (a random op, uninitialised memory)
    inplace: List[int] = field(default_factory=list)  # tensors the op writes into (version counter bumped)
    variants: List[str] = field(default_factory=list)  # "inplace", "out": what else gives the same result here
    weak: str = ""  # why its reference cannot tell a wrong answer from a right one (:func:`weak_reference`)


class _AtenOps(TorchDispatchMode):
    """Records the aten operators a call dispatches."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: List[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name not in self.ops:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def _outputs(out: Any) -> Optional[List[Tuple[int, torch.Tensor]]]:
    if isinstance(out, torch.Tensor):
        return [(0, out)]
    if isinstance(out, (tuple, list)) and out:
        found = [(i, o) for i, o in enumerate(out) if isinstance(o, torch.Tensor)]
        return found or None
    return None


def sample_facts(op: Any, key: str, dtype: str, index: int, sample: Any,
                 rules: Dict[str, str]) -> Tuple[Optional[SampleFacts], str]:
    """Run ``sample`` once (forward, and backward when the op supports autograd): its facts, or
    ``(None, why it is not used)``."""
    ts = tensors_of(sample)
    if not ts:
        return None, "no tensor argument"
    if any(t.layout != torch.strided or t.is_quantized for t in ts):
        return None, "a sparse or quantized tensor"
    bad = sorted({str(t.dtype) for t in ts if t.dtype not in DTYPE_NAMES})
    if bad:
        return None, f"a tensor of dtype {', '.join(bad)}"
    if any(t.numel() == 0 for t in ts):
        return None, "an empty tensor"
    if key in HOST_READ_ARGS and len(ts) > 1:
        return None, HOST_READ_ARGS[key]
    rec = _AtenOps()
    first, second = ([t.detach().clone() for t in ts] for _ in range(2))
    versions = [t._version for t in first]  # an in-place write bumps a tensor's version counter
    try:
        with torch.random.fork_rng(devices=[]), unseeded(op):
            torch.manual_seed(SAMPLE_SEED)
            with rec:
                out = call(op, sample, first)
            torch.manual_seed(SAMPLE_SEED + 1)  # another seed: a random op's values change with it
            with _AtenOps():  # the same dispatch path as the first call (a mode can change the kernel)
                again = call(op, sample, second)
            torch.manual_seed(SAMPLE_SEED)
            filled = _with_filled_memory(op, sample, ts)
    except Exception as e:  # the op rejects the sample on one device: nothing to compare with
        return None, f"raises on one device: {type(e).__name__}"
    outs = _outputs(out)
    if outs is None:
        return None, f"returns {type(out).__name__}"
    if any(o.dtype not in DTYPE_NAMES or o.layout != torch.strided for _, o in outs):
        return None, "an output of an unsupported dtype or layout"
    aten = [a for a in rec.ops if a in rules]
    random_ = not all(_close(o, a) for (_, o), (_, a) in zip(outs, _outputs(again) or []))
    random_ = random_ or filled is not None and not all(
        _close(o, a) for (_, o), (_, a) in zip(outs, _outputs(filled) or []))
    nonfinite = not random_ and any(o.is_floating_point() and not bool(torch.isfinite(o).all()) for _, o in outs)
    facts = SampleFacts(index, signature(sample), [list(t.shape) for t in ts], [DTYPE_NAMES[t.dtype] for t in ts],
                        [i for i, _ in outs], [DTYPE_NAMES[o.dtype] for _, o in outs], aten=aten,
                        nonfinite=nonfinite, random=random_,
                        inplace=[i for i, t in enumerate(first) if t._version != versions[i]])
    if op.supports_autograd and dtype in FLOATS:
        facts.grad_inputs = _grad_inputs(op, sample, ts)
    if not random_:
        facts.weak = weak_reference([o for _, o in outs])
    if not random_ and not facts.inplace and isinstance(out, torch.Tensor):
        facts.variants = [v for v in VARIANTS[1:] if _variant_agrees(op, sample, ts, v, out)]
    return facts, ""


def weak_reference(outs: Sequence[torch.Tensor]) -> str:
    """Why a sample's forward outputs cannot tell a wrong answer from a right one, or ``""``:
    ``"empty output"`` (no element to compare), ``"all-zero reference"`` (every element 0, or
    within its dtype's ``atol`` of 0, :data:`TOLERANCES`: a partial sum never reduced, a shard
    taken from the wrong rank, both give zeros too), ``"non-finite reference"`` (every float
    element NaN or ±Inf: compared place for place, any finite mistake aside), or
    ``"zero or non-finite reference"`` for a mix of the last two."""
    if all(o.numel() == 0 for o in outs):
        return "empty output"
    zero = nonfinite = True
    for o in outs:
        if o.numel() == 0:
            continue
        if o.is_floating_point() or o.is_complex():
            atol = TOLERANCES.get(DTYPE_NAMES.get(o.dtype, ""), (0.0, 0.0))[1]
            finite = torch.isfinite(o)
            small = finite & (o.abs() <= atol)
            zero = zero and bool(small.all())
            nonfinite = nonfinite and not bool(finite.any())
            if not bool((small | ~finite).all()):
                return ""
        else:
            nonfinite = False
            if bool((o != 0).any()):
                return ""
    return "all-zero reference" if zero else "non-finite reference" if nonfinite else "zero or non-finite reference"


def _with_filled_memory(op: Any, sample: Any, ts: Sequence[torch.Tensor]) -> Any:
    """``op`` on ``sample`` with uninitialised memory filled (``torch.use_deterministic_algorithms``
    with ``torch.utils.deterministic.fill_uninitialized_memory``: NaN, or an integer dtype's
    largest value), or ``None`` where that mode refuses the op. An op whose result is the memory
    it allocates (``new_empty``, ``empty_like``) returns those fills here and garbage otherwise —
    sometimes the same garbage twice, which is why comparing two plain calls cannot tell."""
    import torch.utils.deterministic as deterministic

    was, was_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = deterministic.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(True)
        deterministic.fill_uninitialized_memory = True
        with _AtenOps():
            return call(op, sample, [t.detach().clone() for t in ts])
    except Exception:  # noqa: BLE001 — no deterministic kernel for the op: the check does not apply
        return None
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
        deterministic.fill_uninitialized_memory = was_fill


def _variant_agrees(op: Any, sample: Any, ts: Sequence[torch.Tensor], variant: str, out: torch.Tensor) -> bool:
    """Whether calling ``op`` as ``variant`` gives the functional result (an in-place variant
    exists and the result's dtype allows it; the op takes ``out=``)."""
    if variant == "inplace" and op.inplace_variant is None or variant == "out" and not op.supports_out:
        return False
    try:
        with torch.random.fork_rng(devices=[]):
            got = call(op, sample, [t.detach().clone() for t in ts], variant)
    except Exception:  # noqa: BLE001 — the variant refuses this sample (dtype promotion, a view input)
        return False
    return isinstance(got, torch.Tensor) and got.dtype == out.dtype and _close(got, out)


#: How far two calls of one op on one sample may differ and still be "the same result"
#: (relative, absolute; NaN equal to NaN): a deterministic kernel can round differently in the
#: last bits from call to call — a matmul's blocking follows its buffers' alignment, a LAPACK
#: routine its workspace — so a bitwise test called ``__rmatmul__``, ``linalg.cond`` and
#: ``linalg.svdvals`` random in one process and not in the next; a random op (``rand_like``,
#: ``dropout``) or uninitialised memory (``empty_like``) differs in every place by far more.
SAME_RESULT_TOLERANCE = (1e-5, 1e-6)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are one op's result twice (:data:`SAME_RESULT_TOLERANCE`, the
    relative one at least two ulps of the dtype): equal shapes, and equal values or, for
    floating-point and complex tensors, values within it."""
    if a.shape != b.shape:
        return False
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    rtol, atol = SAME_RESULT_TOLERANCE
    rtol = max(rtol, 2 * torch.finfo(a.dtype).eps)  # float16, bfloat16: two units in their last place
    return bool(torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())


def _grad_inputs(op: Any, sample: Any, ts: Sequence[torch.Tensor]) -> List[int]:
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in ts]
    try:
        outs = _outputs(call(op, sample, leaves)) or []
        floats = [o for _, o in outs if o.is_floating_point() and o.requires_grad]
        if not floats:
            return []
        torch.autograd.backward(floats, [torch.ones_like(o) for o in floats])
    except Exception:  # noqa: BLE001 — no backward for this sample: forward cases only
        return []
    return [i for i, t in enumerate(leaves) if t.requires_grad and t.grad is not None]


# ---------------------------------------------------------------------------------------------
# placement patterns and gates


def _partial_ok(dtype: str, index: int, inplace: Sequence[int] = ()) -> Tuple[str, ...]:
    """Partial reduce ops input ``index`` of ``dtype`` may carry: integers only as the primary
    input (an index argument split into parts would index out of range), and none for a tensor
    the op writes into (an in-place op cannot change its input's placement: DTensor refuses, by
    design)."""
    if dtype not in FLOATS and index != 0 or index in inplace:
        return ()
    return PARTIAL_OPS[dtype]


def placement_patterns(shapes: Sequence[Sequence[int]], dtypes: Sequence[str], mesh: Tuple[int, ...],
                       full: bool = True, inplace: Sequence[int] = ()) -> List[List[List[str]]]:
    """Placements to try for a sample's tensors on ``mesh`` (each: per tensor, per mesh dim).

    1-D: each tensor alone ``Shard(d)`` for every dim, then ``Partial(op)`` for each reduce op its
    dtype allows, the others ``Replicate()``; every tensor ``Shard(d)`` on a dim all have; every
    float tensor ``Partial(sum)``. 2-D (``full``): the first tensor ``(Shard(d), Shard(e))`` for
    every pair, ``(Shard(d), Partial(sum))``, ``(Partial(max), Shard(d))``, ``(Replicate(),
    Shard(d))``. ``full=False``: only the single-tensor patterns.
    """
    n = len(shapes)
    rep = ["R"] * len(mesh)
    out: List[List[List[str]]] = []

    def alone(i: int, per: List[str]) -> List[List[str]]:
        return [per if j == i else list(rep) for j in range(n)]

    if len(mesh) == 1:
        for i, (shape, dt) in enumerate(zip(shapes, dtypes)):
            out += [alone(i, [f"S({d})"]) for d in range(len(shape))]
            out += [alone(i, [f"P({r})"]) for r in _partial_ok(dt, i, inplace)]
        if full and n > 1:
            common = min(len(s) for s in shapes)
            out += [[[f"S({d})"] for _ in range(n)] for d in range(common)]
            if all("sum" in _partial_ok(dt, i, inplace) for i, dt in enumerate(dtypes)):
                out.append([["P(sum)"] for _ in range(n)])
        return out
    shape, dt = shapes[0], dtypes[0]
    dims = range(len(shape))
    out += [alone(0, [f"S({d})", f"S({e})"]) for d in dims for e in dims]
    if "sum" in _partial_ok(dt, 0, inplace):
        out += [alone(0, [f"S({d})", "P(sum)"]) for d in dims]
    if "max" in _partial_ok(dt, 0, inplace):
        out += [alone(0, ["P(max)", f"S({d})"]) for d in dims]
    out += [alone(0, ["R", f"S({d})"]) for d in dims]
    if not full:
        out = out[:2]
    return out


@dataclass(frozen=True)
class Planned:
    """One generated case before it is written: its gate tags and what to build it from."""

    key: str
    dtype: str
    facts: SampleFacts
    mesh: Tuple[int, ...]
    placements: Tuple[Tuple[str, ...], ...]
    grad: bool
    tags: Tuple[str, ...]
    variant: str = ""

    @property
    def name(self) -> str:
        return entry_name({"op": self.key, "dtype": self.dtype, "sample": self.facts.index, "mesh_shape": self.mesh,
                           "placements": self.placements, "variant": self.variant, "grad_inputs": self.grad})

    @property
    def kind(self) -> str:
        return kind_of(self.placements, self.facts.shapes, self.mesh)


#: float32 samples per OpInfo at level 1.
LEVEL1_SAMPLES = 2
#: The level-0 sample's gates: the one-process lane (the PR signal; on real ranks it would cost
#: the main job over half its time again) and level 1 on real ranks.
LEVEL0 = ("cpu_local", "cpu_level1")
LEVEL1 = ("cpu_level1",)
NIGHTLY = ("cpu_nightly",)


def tiers(key: str, turn: int, by_dtype: Dict[str, List[SampleFacts]], nightly: bool = False) -> List[Planned]:
    """The cases of one OpInfo, each tagged with its gate.

    - level 0 (``cpu_local`` + ``cpu_level1``), a bounded sample: one case per OpInfo
      (:func:`level0_case`), forward only, that meets Shard (uneven where it can), Partial,
      Replicate and a 2-D mesh at once;
    - level 1 (``cpu_level1``): every tensor ``Replicate()`` on 2 ranks for the first float32
      sample — the rule's baseline, where an OpInfo whose every sharded case meets a torch bug
      still shows its rule working (or fails for a reason no placement avoids) —, and every
      pattern of :func:`placement_patterns` for the first
      :data:`LEVEL1_SAMPLES` float32 samples (1-D patterns on 2 ranks, ``Shard`` alone on 4,
      uneven ``Shard`` alone on 3, the 2-D ones on ``(2, 2)``), the 1-D patterns of the first
      sample of the second dtype, backward on the 2-rank patterns of the first sample, and the
      in-place and ``out=`` overloads (:data:`VARIANTS`, where they give the functional result on
      one device) on the single-tensor patterns of the first sample, 1-D and 2-D;
    - ``nightly``: every pattern on every mesh, every usable sample, both dtypes, backward for
      every float32 sample.

    A case is listed once, at its lowest gate.
    """
    out: Dict[str, Planned] = {}

    def add(dtype: str, f: SampleFacts, mesh: Tuple[int, ...], pl: Optional[List[List[str]]], grad: bool,
            tags: Tuple[str, ...], variant: str = "") -> None:
        if pl is None:
            return
        p = Planned(key, dtype, f, mesh, tuple(tuple(x) for x in pl), grad and bool(f.grad_inputs) and not variant,
                    NIGHTLY if nightly else tags, variant)
        out.setdefault(p.name, p)

    floats = by_dtype.get("float32", [])
    if floats:
        add("float32", floats[0], *level0_case(floats[0], turn), False, LEVEL0)
        add("float32", floats[0], (2,), [["R"]] * len(floats[0].shapes), False, LEVEL1)  # the rule's baseline
    for f in floats[:LEVEL1_SAMPLES] if not nightly else floats:
        for mesh in ((2,), (4,), (3,)) if not nightly else MESHES_1D:
            for pl in placement_patterns(f.shapes, f.dtypes, mesh, inplace=f.inplace):
                if not nightly and mesh != (2,) and not _is_shard_alone(pl, f.shapes, mesh, uneven=mesh == (3,)):
                    continue
                add("float32", f, mesh, pl, False, LEVEL1)
                if (nightly or (f is floats[0] and mesh == (2,))) and f.grad_inputs:
                    add("float32", f, mesh, pl, True, LEVEL1)
        for pl in placement_patterns(f.shapes, f.dtypes, MESH_2D, inplace=f.inplace):
            add("float32", f, MESH_2D, pl, False, LEVEL1)
    for f in floats[:1] if not nightly else floats:
        for variant in f.variants:  # the in-place and out= overloads, on the patterns the variant allows
            written = [0] if variant == "inplace" else f.inplace
            for mesh in ((2,), MESH_2D):
                for pl in placement_patterns(f.shapes, f.dtypes, mesh, full=False, inplace=written):
                    add("float32", f, mesh, pl, False, LEVEL1, variant)
    for dtype, facts in by_dtype.items():
        if dtype == "float32":
            continue
        for f in facts[:1] if not nightly else facts:
            for mesh in ((2,),) if not nightly else MESHES_1D + (MESH_2D,):
                for pl in placement_patterns(f.shapes, f.dtypes, mesh, inplace=f.inplace):
                    add(dtype, f, mesh, pl, False, LEVEL1)
    return list(out.values())


def level0_case(f: SampleFacts, turn: int) -> Tuple[Tuple[int, ...], List[List[str]]]:
    """The level-0 case of an OpInfo's first float32 sample: on the 2-D mesh ``(2, 2)`` the first
    tensor ``(Shard(d), Partial(op))`` — or ``(Partial(op), Shard(d))`` every other OpInfo — with
    ``d`` a dim of odd size where there is one (an uneven shard), the reduce op turning through
    those its dtype allows; the other tensors ``Replicate()``. A 0-d first tensor: ``Partial(op)``
    on 2 ranks; one that cannot be Partial (bool, an integer index): ``(Shard(d), Shard(e))``.
    ``turn`` (the OpInfo's place in sorted order) varies ``d``, the order and the reduce op."""
    shape, dt = f.shapes[0], f.dtypes[0]
    rest = [["R", "R"]] * (len(f.shapes) - 1)
    ops = _partial_ok(dt, 0, f.inplace)
    if not shape:
        return (2,), [[f"P({ops[turn % len(ops)]})" if ops else "R"]] + [["R"]] * (len(f.shapes) - 1)
    odd = [d for d, size in enumerate(shape) if size % 2]
    dims = odd or list(range(len(shape)))
    d = dims[turn % len(dims)]
    if not ops:
        return MESH_2D, [[f"S({d})", f"S({dims[(turn + 1) % len(dims)]})"]] + rest
    partial = f"P({ops[turn % len(ops)]})"
    return MESH_2D, [[f"S({d})", partial] if turn % 2 == 0 else [partial, f"S({d})"]] + rest


def _is_shard_alone(pl: List[List[str]], shapes: Sequence[Sequence[int]], mesh: Tuple[int, ...], uneven: bool) -> bool:
    """A pattern with exactly one ``Shard(d)`` (even, or uneven when ``uneven``) and no Partial."""
    found = [(i, p) for i, per in enumerate(pl) for p in per if p != "R"]
    if len(found) != 1 or not found[0][1].startswith("S("):
        return False
    i, p = found[0]
    return bool(shapes[i][int(p[2:-1])] % mesh[0]) == uneven


# ---------------------------------------------------------------------------------------------
# generation


@dataclass
class Discovery:
    """What :func:`discover` found: usable OpInfos with their samples, the others with a reason."""

    ops: Dict[str, Dict[str, List[SampleFacts]]] = field(default_factory=dict)  # key → dtype → samples
    family: Dict[str, str] = field(default_factory=dict)  # key → rule family
    skipped: Dict[str, str] = field(default_factory=dict)  # key → why no case


def discover(rules: Dict[str, str], only: Optional[Iterable[str]] = None) -> Discovery:
    """Every OpInfo of ``op_db`` with CPU float32 samples that dispatch an operator with a
    registered rule (``rules``: operator → family, :func:`meshtest.platforms.torch.rules.registered_rules`),
    as a :class:`Discovery` (the usable samples per dtype, each OpInfo's family, the others with
    their reason).

    :param only: OpInfo keys to consider (default: all).
    """
    found = Discovery()
    wanted = None if only is None else set(only)
    for key, op in opinfos().items():
        if wanted is not None and key not in wanted:
            continue
        if not op.supports_dtype(torch.float32, "cpu"):
            found.skipped[key] = "no CPU float32 support"
            continue
        by_dtype: Dict[str, List[SampleFacts]] = {}
        second = next((d for d in SECOND_DTYPES if op.supports_dtype(d, "cpu")), None)
        reasons: Dict[str, int] = {}
        for dt in [torch.float32] + ([second] if second is not None else []):
            name = DTYPE_NAMES[dt]
            try:
                drawn = samples(key, name)
            except Exception as e:  # noqa: BLE001 — torch's sample function itself fails on CPU
                why = f"sample_inputs raises {type(e).__name__}"
                reasons[why] = reasons.get(why, 0) + 1
                continue
            usable = []
            for index, sample in enumerate(drawn):
                facts, why = sample_facts(op, key, name, index, sample, rules)
                if facts is None:
                    reasons[why] = reasons.get(why, 0) + 1
                elif not facts.aten:
                    why = "dispatches no operator with a registered rule"
                    reasons[why] = reasons.get(why, 0) + 1
                else:
                    usable.append(facts)
                if len(usable) >= MAX_SAMPLES:
                    break
            if usable:  # a sample whose reference cannot tell right from wrong goes last: another is drawn first
                by_dtype[name] = sorted(usable, key=lambda f: bool(f.weak))
        if "float32" not in by_dtype:
            found.skipped[key] = "no usable float32 sample: " + ", ".join(
                f"{why} ({k})" for why, k in sorted(reasons.items(), key=lambda kv: -kv[1]))
            continue
        found.ops[key] = by_dtype
        aten = by_dtype["float32"][0].aten
        families = [rules[a] for a in aten]
        found.family[key] = max(dict.fromkeys(families), key=families.count)
    return found


@functools.lru_cache(maxsize=None)
def sample_digest(key: str) -> str:
    """What the generator reads of an OpInfo's samples, as 16 hex digits of a SHA-256: for each
    dtype :func:`discover` tries (float32, then the first of :data:`SECOND_DTYPES` the OpInfo
    supports), the :func:`signature` of every drawn sample in order, or the type of the exception
    its sample function raises; an OpInfo without CPU float32 support hashes that fact alone.
    Equal digests mean :func:`discover` reads the same samples (their floats up to the last bits,
    which :func:`signature` ignores). :raises KeyError: no such OpInfo."""
    op = opinfos()[key]
    lines = [key]
    if not op.supports_dtype(torch.float32, "cpu"):
        lines.append("no CPU float32 support")
    else:
        second = next((d for d in SECOND_DTYPES if op.supports_dtype(d, "cpu")), None)
        for dt in [torch.float32] + ([second] if second is not None else []):
            name = DTYPE_NAMES[dt]
            try:
                lines += [f"{name} {signature(s)}" for s in samples(key, name)]
            except Exception as e:  # noqa: BLE001 — recorded as discover records it
                lines.append(f"{name} raises {type(e).__name__}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def entry(p: Planned) -> Dict[str, Any]:
    """The manifest entry of a planned case (:mod:`meshtest.model.generated`)."""
    f = p.facts
    return {
        "name": p.name, "mesh_shape": list(p.mesh), "tags": list(p.tags), "known_failure": None,
        "op": p.key, "dtype": p.dtype, "sample": f.index, "sig": f.sig, "shapes": f.shapes, "dtypes": f.dtypes,
        "placements": [list(x) for x in p.placements], "kind": p.kind, "outputs": f.outputs,
        "out_dtypes": f.out_dtypes, "grad_inputs": f.grad_inputs if p.grad else [], "aten": f.aten,
        "nonfinite": f.nonfinite, "random": f.random, "inplace": [0] if p.variant == "inplace" else f.inplace,
        "variant": p.variant, "weak": f.weak,
    }


def generate(rules: Dict[str, str], only: Optional[Iterable[str]] = None, nightly: bool = False,
             order: Optional[Sequence[str]] = None) -> Tuple[Dict[str, List[Dict[str, Any]]], Discovery]:
    """Manifest entries by family (level 0 and 1; ``nightly``: every case, tagged
    ``cpu_nightly``), and the discovery they came from.

    :param order: every usable OpInfo key, sorted, when ``only`` regenerates a subset of a whole
        generation: an OpInfo's level-0 case turns with its position in that list
        (:func:`level0_case`), so a subset must be placed in the whole (default: ``only``'s own
        usable keys). :raises KeyError: ``order`` lacks a usable key of ``only``.
    """
    found = discover(rules, only)
    by_family: Dict[str, List[Dict[str, Any]]] = {}
    turns = {k: i for i, k in enumerate(sorted(order if order is not None else found.ops))}
    for key in sorted(found.ops):
        turn = turns[key]
        for p in tiers(key, turn, found.ops[key], nightly=nightly):
            by_family.setdefault(found.family[key], []).append(entry(p))
    return by_family, found


# ---------------------------------------------------------------------------------------------
# the rank side: an entry → OpShardCase


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
               in_dtypes: Sequence[str] = ()) -> CompareSpec:
    """Exact for integer and bool outputs, else ``assert_close``'s tolerances for the least
    precise float among the outputs and the inputs (:data:`TOLERANCES`: a float64 result of
    float32 inputs carries float32's rounding of the inputs, e.g. of their partial sums).
    ``nonfinite``: the sample's reference holds NaN or Inf by design (an input outside the op's
    domain), compared place for place. ``random_``: the op's values change with the seed on one
    device (a random op, ``empty_like``): only shapes and dtypes can be compared."""
    if random_:
        return CompareSpec.shape("the op's output changes with the random seed on one device (random or "
                                 "uninitialised values)")
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
        compare=compare_of(out_dtypes, entry["nonfinite"], entry["random"], dtypes),
        compare_outputs=tuple(entry["outputs"]), known_failure=None if known is None else KnownFailure.from_json(known),
        simulation_limit=entry.get("simulation_limit"))


# ---------------------------------------------------------------------------------------------
# shrinking: one-step simplifications of an entry (meshtest.strength.shrink drives them)


def entry_name(e: Dict[str, Any]) -> str:
    """The case name an entry's fields give: ``<op>.<dtype>.s<sample>.m<mesh>.<placements>``, then
    ``.inplace``/``.out`` for a variant, ``.bwd`` with backward (``add.float32.s0.m2x2.S0Psum_RR``)
    and ``.in_float64`` for a case a triage rule moved to float64."""
    mesh = "x".join(map(str, e["mesh_shape"]))
    variant = e.get("variant", "")
    return (f"{e['op']}.{e['dtype']}.s{e['sample']}.m{mesh}.{placement_label(e['placements'])}"
            + (f".{variant}" if variant else "") + (".bwd" if e["grad_inputs"] else "")
            + (".in_float64" if e.get("in_float64") else ""))


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
            grad_inputs=grads, nonfinite=f.nonfinite, random=f.random, aten=f.aten, weak=f.weak,
            inplace=[0] if variant == "inplace" else f.inplace)))
    return [(what, x) for what, x in out if _valid(x)]


@functools.lru_cache(maxsize=1)
def _rules() -> Dict[str, str]:
    from .rules import registered_rules

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
