"""The generator's half (``python -m meshtest generate opinfo``): each usable sample run once on
plain tensors (:class:`SampleFacts`), the placement patterns and gates of its cases
(:func:`placement_patterns`, :func:`tiers`), and the manifest entries (:func:`generate`).
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .samples import (
    DTYPE_NAMES,
    FLOATS,
    HOST_READ_ARGS,
    MAX_SAMPLES,
    MESH_2D,
    MESHES_1D,
    PARTIAL_OPS,
    SAMPLE_SEED,
    SECOND_DTYPES,
    TOLERANCES,
    VARIANTS,
    call,
    entry_name,
    kind_of,
    opinfos,
    samples,
    signature,
    tensors_of,
    unseeded,
)


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
    random: bool = False  # runs from two seeds differ (a random op)
    uninitialised: bool = False  # not random, but a run with filled memory differs (``empty_like``)
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
            torch.manual_seed(SAMPLE_SEED + 1)  # and from another seed: garbage memory alone differs no more
            filled_again = _with_filled_memory(op, sample, ts)
    except Exception as e:  # the op rejects the sample on one device: nothing to compare with
        return None, f"raises on one device: {type(e).__name__}"
    outs = _outputs(out)
    if outs is None:
        return None, f"returns {type(out).__name__}"
    if any(o.dtype not in DTYPE_NAMES or o.layout != torch.strided for _, o in outs):
        return None, "an output of an unsupported dtype or layout"
    aten = [a for a in rec.ops if a in rules]

    def differ(x: Any, y: Any) -> bool:
        return not all(_close(o, a) for (_, o), (_, a) in zip(_outputs(x) or [], _outputs(y) or []))

    # random: two seeds give other values, also with filled memory (else the difference was garbage memory)
    seeded = differ(out, again) and (filled is None or filled_again is None or differ(filled, filled_again))
    uninitialised = not seeded and (differ(out, again) or filled is not None and differ(out, filled))
    random_ = seeded or uninitialised  # its values cannot be compared place for place
    nonfinite = not random_ and any(o.is_floating_point() and not bool(torch.isfinite(o).all()) for _, o in outs)
    facts = SampleFacts(index, signature(sample), [list(t.shape) for t in ts], [DTYPE_NAMES[t.dtype] for t in ts],
                        [i for i, _ in outs], [DTYPE_NAMES[o.dtype] for _, o in outs], aten=aten,
                        nonfinite=nonfinite, random=seeded, uninitialised=uninitialised,
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
        "nonfinite": f.nonfinite, "random": f.random, "uninitialised": f.uninitialised,
        "inplace": [0] if p.variant == "inplace" else f.inplace,
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
