"""The OpInfo samples both halves read: torch's ``op_db`` by name, each OpInfo's CPU samples
drawn from a fixed seed, how a sample is called (variants, self-seeding ops unseeded), and the
placement notation of the manifests.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import zlib
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from ....model.placement import Partial, Placement, Replicate, Shard

log = logging.getLogger(__name__)

GENERATOR = "torch-opinfo"
#: torch's global seed before a sample list is generated (``op.sample_inputs`` draws from it).
SAMPLE_SEED = 0
#: The first usable samples considered per OpInfo and dtype.
MAX_SAMPLES = 8
#: Meshes the cases run on.
MESHES_1D = ((2,), (3,), (4,))
MESH_2D = (2, 2)
#: torch dtype ↔ meshtest's dtype names (:data:`meshtest.model.dtypes.DTYPES`); samples with a
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


def entry_name(e: Dict[str, Any]) -> str:
    """The case name an entry's fields give: ``<op>.<dtype>.s<sample>.m<mesh>.<placements>``, then
    ``.inplace``/``.out`` for a variant, ``.bwd`` with backward (``add.float32.s0.m2x2.S0Psum_RR``)
    and ``.in_float64`` for a case a triage rule moved to float64."""
    mesh = "x".join(map(str, e["mesh_shape"]))
    variant = e.get("variant", "")
    return (f"{e['op']}.{e['dtype']}.s{e['sample']}.m{mesh}.{placement_label(e['placements'])}"
            + (f".{variant}" if variant else "") + (".bwd" if e["grad_inputs"] else "")
            + (".in_float64" if e.get("in_float64") else ""))
