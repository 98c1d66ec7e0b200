"""A standalone reproduction of an op case: ``python -m meshtest repro FILE::CASE``.

What a user pastes into an upstream issue: one script that imports only torch and numpy,
runnable with ``torchrun --nproc-per-node <world size> repro.py``. It builds the case's inputs
(an :class:`~meshtest.model.spec.InputSpec` from its seed with the same NumPy calls; data, and
every rank's local of a :class:`~meshtest.model.local_input.LocalInput` — distinct ``Partial``
parts included — as literal arrays), makes the DeviceMesh, distributes each input with its
placements (``distribute_tensor``, or ``DTensor.from_local`` of this rank's local), runs the op
distributed and on the full tensors, gathers (``full_tensor``), and compares as the case does
(``allclose``: ``|got - want| <= atol + rtol * |want|`` in float64, NumPy's rule, after the same
shape, dtype and finite-reference checks; ``equal``; ``shape``), backward included (the loss
``sum(out_i * G_i)`` with ``G_i`` drawn from the case's grad seeds). It prints each difference
as meshtest's report words it and exits 1; 0 when every comparison holds. An error the op raises
propagates (its traceback, exit 1).

The op comes as source: the case file's function (a ``def`` or a ``lambda``) and what it uses
from its module — the file's functions, constants and ``import`` statements (never
meshtest's) — found from the function's code; a generated case's op is its OpInfo, called on
its sample's arguments (``fn.repro_source()``, :mod:`meshtest.platforms.torch_opinfo`).

Only op cases (``OpShardCase``) on the torch platform; a custom ``CompareSpec.check``, an
``expect_raises`` or output/gradient placement checks are not carried over (said in the script's
header). Errors: ``ValueError`` naming the case and what cannot be exported.
"""
from __future__ import annotations

import ast
import base64
import inspect
import io
import os
import textwrap
import types
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from .model.local_input import LocalInput, assemble
from .model.placement import Partial, Placement, Replicate, Shard, StridedShard
from .model.registry import Registry, _module_name, load_case_file
from .model.spec import OpShardCase, numpy_dtype

#: Arrays with at most this many elements are written as literals; larger ones as base64 ``.npy``
LITERAL_ELEMENTS = 256


def load_op_case(spec: str) -> Tuple[str, OpShardCase]:
    """``FILE::CASE`` → (file, the registered case).

    :raises ValueError: no ``::``, no such file or case, or not an op case.
    """
    path, sep, name = spec.partition("::")
    if not sep or not name:
        raise ValueError(f"{spec!r}: expected FILE::CASE, e.g. cases/torch/case_sort.py::sort_dim1_s0_mesh2")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such case file")
    found = [c for c in load_case_file(path, Registry()) if c.name == name]
    if not found:
        raise ValueError(f"{path}: no case {name!r}")
    case = found[0]
    if not isinstance(case, OpShardCase):
        raise ValueError(f"{path}: case {name!r} is a {type(case).__name__}; repro exports op cases (OpShardCase)")
    return path, case


# ---------------------------------------------------------------------------------------------
# the op as source


def _code_names(code: types.CodeType) -> Set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _imports_of(tree: ast.Module, source: str) -> Dict[str, str]:
    """Name bound by each top-level import of the file → that import's statement (meshtest's left out)."""
    bound: Dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "meshtest":
                    continue
                bound[a.asname or a.name.split(".")[0]] = (f"import {a.name} as {a.asname}" if a.asname
                                                           else f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] != "meshtest":
            for a in node.names:
                bound[a.asname or a.name] = f"from {node.module} import {a.name}" + (f" as {a.asname}" if a.asname
                                                                                     else "")
    return bound


def _lambda_source(fn: types.FunctionType, tree: ast.Module, source: str) -> str:
    line = fn.__code__.co_firstlineno
    args = list(fn.__code__.co_varnames[:fn.__code__.co_argcount])
    hits = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line
            and [a.arg for a in n.args.args] == args]
    if len(hits) != 1:
        raise ValueError(f"the lambda on line {line} cannot be told apart from {len(hits) - 1} other(s) on that line")
    return ast.get_source_segment(source, hits[0]) or ""


def function_sources(fns: Sequence[Tuple[str, Any]], module: types.ModuleType,
                     path: str) -> Tuple[List[str], List[str]]:
    """(import statements, definitions) that make each ``(name, fn)`` callable as ``name`` in a
    script: the file's functions and constants it reaches, its imports (never meshtest's).

    :raises ValueError: ``fn`` uses something from meshtest, or a value that has no source.
    """
    with open(path, encoding="utf-8") as f:
        source = f.read()
    tree = ast.parse(source)
    imports_of = _imports_of(tree, source)
    imports: List[str] = []
    defs: Dict[str, str] = {}
    aliases: List[str] = []

    def need(name: str, value: Any, why: str) -> None:
        if name in defs or name in imports_of and imports_of[name] in imports:
            return
        if name in imports_of:
            imports.append(imports_of[name])
            return
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            if value.__name__ == "<lambda>":
                defs[name] = f"{name} = {_lambda_source(value, tree, source)}"
            else:
                defs[name] = textwrap.dedent(inspect.getsource(value))
            for dep in sorted(_code_names(value.__code__)):
                if dep in module.__dict__ and dep != name:
                    need(dep, module.__dict__[dep], f"{name} uses it")
            return
        if isinstance(value, (int, float, str, bool, type(None), tuple)) and _literal(value):
            defs[name] = f"{name} = {value!r}"
            return
        where = getattr(value, "__module__", "") or ""
        if where.split(".")[0] == "meshtest" or isinstance(value, types.ModuleType) and \
                value.__name__.split(".")[0] == "meshtest":
            raise ValueError(f"{name} ({why}) comes from meshtest: a standalone script cannot use it")
        raise ValueError(f"{name} ({why}) is a {type(value).__name__} with no source to copy")

    for name, fn in fns:
        own = getattr(fn, "repro_source", None)
        if own is not None:
            text = own(name)
            defs[name] = text
            continue
        if not isinstance(fn, types.FunctionType):
            raise ValueError(f"{name} is a {type(fn).__name__}, not a function of the case file")
        real = fn.__name__ if fn.__name__ != "<lambda>" else name
        need(real, fn, "the case's function")
        if real != name:
            aliases.append(f"{name} = {real}")
    return imports, list(defs.values()) + aliases


def _literal(value: Any) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        return False


# ---------------------------------------------------------------------------------------------
# data


def array_source(arr: np.ndarray) -> str:
    """Python source of ``arr`` for the script: a literal ``np.array(...)`` when small, else a
    base64 ``.npy`` blob (exact either way)."""
    arr = np.asarray(arr)
    if arr.size <= LITERAL_ELEMENTS:
        return f"np.array({arr.tolist()!r}, dtype={str(arr.dtype)!r}).reshape({tuple(arr.shape)!r})"
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    blob = base64.b64encode(buf.getvalue()).decode()
    return f"_npy({blob!r})"


def placement_source(p: Placement) -> str:
    if isinstance(p, StridedShard):
        return f"_StridedShard({p.dim}, split_factor={p.split_factor})"
    if isinstance(p, Shard):
        return f"Shard({p.dim})"
    if isinstance(p, Replicate):
        return "Replicate()"
    if isinstance(p, Partial):
        return f"Partial({p.reduce_op!r})"
    raise ValueError(f"placement {p!r} has no torch spelling")


def _input_source(case: OpShardCase, i: int, spec: Any) -> Tuple[str, Optional[str]]:
    """(source of the full input i as a NumPy array, source of {coord: local} or None)."""
    if isinstance(spec, LocalInput):
        whole, locals_ = assemble(spec, case.mesh_shape, case.placements[i], numpy_dtype(spec.dtype))
        parts = ", ".join(f"{coord!r}: {array_source(a)}" for coord, a in sorted(locals_.items()))
        return array_source(whole), "{" + parts + "}"
    if spec.data is not None:
        return array_source(spec.build_numpy(case.input_seed(i))), None
    seed = case.input_seed(i) if spec.seed is None else spec.seed
    dt = str(numpy_dtype(spec.dtype))
    shape = tuple(spec.shape)
    rng = f"np.random.default_rng({seed})"
    if spec.init == "randn":
        expr = f"{rng}.standard_normal({shape!r})"
    elif spec.init == "uniform":
        if spec.dtype == "bool":
            expr = f"{rng}.random({shape!r}) < 0.5"
        elif np.dtype(dt).kind in "iu":
            expr = f"{rng}.integers({int(spec.low)}, {int(spec.high)}, size={shape!r})"
        else:
            expr = f"{rng}.uniform({spec.low!r}, {spec.high!r}, size={shape!r})"
    elif spec.init in ("ones", "zeros"):
        expr = f"np.{spec.init}({shape!r})"
    else:
        expr = f"np.arange({int(np.prod(shape, dtype=np.int64))}).reshape({shape!r})"
    return f"np.asarray({expr}).astype({dt!r})", None


# ---------------------------------------------------------------------------------------------
# the script


def script(spec: str) -> str:
    """The standalone script of op case ``spec`` (``FILE::CASE``), as text.

    :raises ValueError: see :func:`load_op_case` and :func:`function_sources`.
    """
    import sys

    path, case = load_op_case(spec)
    module = sys.modules[_module_name(path)]
    fns = [("fn", case.fn)] + [(f"derived_{k}", d.fn) for k, d in enumerate(case.derived_inputs)]
    try:
        imports, defs = function_sources(fns, module, path)
    except ValueError as e:
        raise ValueError(f"{path}: case {case.name!r}: cannot export: {e}") from None
    if case.compare.kind == "check":
        raise ValueError(f"{path}: case {case.name!r}: cannot export a CompareSpec.check (a custom property)")
    inputs, locals_src = [], []
    for i, s in enumerate(case.inputs):
        full, locs = _input_source(case, i, s)
        inputs.append(f"    ({full}, {s.dtype!r}, {bool(s.requires_grad)}),")
        if locs is not None:
            locals_src.append(f"    {i}: {locs},")
    grad_spec = case.grad_compare or case.compare
    names = case.mesh_dim_names or tuple(f"d{k}" for k in range(len(case.mesh_shape)))
    not_carried = [what for what, present in (("expect_raises", case.expect_raises is not None),
                                              ("output_placements", case.output_placements is not None),
                                              ("grad_placements", case.grad_placements is not None)) if present]
    known = case.known_failure.describe() if case.known_failure is not None else ""
    world = int(np.prod(case.mesh_shape))
    header = [f"Reproduction of meshtest case {path}::{case.name}, standalone (torch and numpy only).",
              "", f"    torchrun --nproc-per-node {world} <this file>", "",
              f"The op on a DeviceMesh {tuple(case.mesh_shape)} {tuple(names)} with the placements below, and on",
              "the full tensors; gathered and compared as the case does. Exit 0 when every comparison",
              "holds, 1 on a difference (or the op's own error)."]
    if known:
        header += ["", "meshtest's known failure for it: " + known]
    if not_carried:
        header += ["", "Not carried over: " + ", ".join(not_carried) + "."]
    body = _TEMPLATE.format(
        header="\n".join(header),
        imports="\n".join(sorted(set(imports) - _TEMPLATE_IMPORTS)),
        defs="\n\n".join(d.rstrip() for d in defs),
        mesh_shape=tuple(case.mesh_shape), names=tuple(names),
        placements="\n".join("    [" + ", ".join(placement_source(p) for p in per) + "]," for per in case.placements),
        derived="\n".join(f"    (derived_{k}, [" + ", ".join(placement_source(p) for p in d.placements) + "]),"
                          for k, d in enumerate(case.derived_inputs)),
        inputs="\n".join(inputs), locals="\n".join(locals_src),
        compare=(case.compare.kind, case.compare.rtol, case.compare.atol, case.compare.allow_nonfinite),
        grad_compare=(grad_spec.kind, grad_spec.rtol, grad_spec.atol, grad_spec.allow_nonfinite),
        outputs=None if case.compare_outputs is None else tuple(case.compare_outputs),
        grad_seeds=[case.grad_seed(i) for i in range(16)], needs_mesh=bool(case.needs_mesh))
    compile(body, f"repro of {case.name}", "exec")  # a script that does not parse is meshtest's bug
    return body


def cmd_repro(spec: str, out: str) -> int:
    """Write the script to ``out`` (default ``repro_<case>.py``) and say how to run it."""
    text = script(spec)
    name = spec.partition("::")[2]
    target = out or f"repro_{''.join(ch if ch.isalnum() or ch in '_-' else '_' for ch in name)}.py"
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    world = text.split("--nproc-per-node ", 1)[1].split()[0]
    print(f"wrote {target}; run it with: torchrun --nproc-per-node {world} {target}")
    return 0


#: What the template imports itself (a case file's same import is not repeated)
_TEMPLATE_IMPORTS = {"import base64", "import io", "import sys", "import numpy as np", "import torch",
                     "import torch.distributed as dist"}

_TEMPLATE = '''#!/usr/bin/env python3
"""{header}
"""
import base64
import io
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

{imports}


nan, inf = float("nan"), float("inf")  # as the literal arrays below write them


def _npy(blob):
    return np.load(io.BytesIO(base64.b64decode(blob)), allow_pickle=False)


{defs}


MESH_SHAPE = {mesh_shape!r}
MESH_DIM_NAMES = {names!r}
PLACEMENTS = [  # one list per input, one placement per mesh dim
{placements}
]
DERIVED = [  # extra inputs computed from the full inputs, then distributed
{derived}
]
INPUTS = [  # (the full input, its dtype, requires_grad)
{inputs}
]
LOCALS = {{  # input index -> this input's local tensor on each mesh coordinate
{locals}
}}
COMPARE = {compare!r}  # (kind, rtol, atol, NaN/Inf allowed in the reference)
GRAD_COMPARE = {grad_compare!r}
COMPARE_OUTPUTS = {outputs!r}  # None: every output
GRAD_SEEDS = {grad_seeds!r}  # seed of the upstream gradient of output i
NEEDS_MESH = {needs_mesh!r}
TORCH_DTYPES = {{"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64, "complex64": torch.complex64, "complex128": torch.complex128,
                "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
                "uint8": torch.uint8, "bool": torch.bool}}


def tensor(array, dtype, requires_grad=False):
    t = torch.from_numpy(np.array(array, order="C")).to(TORCH_DTYPES[dtype])
    return t.requires_grad_(True) if requires_grad else t


def as_tuple(out, what):
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and out:
        return tuple(out)
    raise TypeError(f"{{what}} returned {{type(out).__name__}}, not a tensor or a tuple of tensors")


def numpy_of(t):
    t = t.detach()
    if t._is_zerotensor():
        t = torch.zeros(t.shape, dtype=t.dtype)
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t.contiguous().numpy()


def compare(label, want, got, spec):
    """meshtest's comparison: shape, dtype, a finite reference, then equal or allclose."""
    kind, rtol, atol, nonfinite = spec
    if tuple(want.shape) != tuple(got.shape):
        return f"{{label}}: shape {{tuple(got.shape)}} != reference shape {{tuple(want.shape)}}"
    if want.dtype != got.dtype:
        return f"{{label}}: dtype {{got.dtype}} != reference dtype {{want.dtype}}"
    if kind == "shape":
        return None
    e, a = numpy_of(want), numpy_of(got)
    if e.dtype.kind in "fc" and not nonfinite and not np.isfinite(e).all():
        return f"{{label}}: the reference holds NaN/Inf"
    if kind == "equal":
        bad = ~((e == a) | (np.isnan(e) & np.isnan(a) if e.dtype.kind in "fc" else False))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"{{label}}: {{int(bad.sum())}} of {{bad.size}} elements differ; first at {{idx}} "
                    f"(got {{a[idx]}}, expected {{e[idx]}})")
        return None
    close = np.isclose(a.astype(np.complex128 if e.dtype.kind == "c" else np.float64),
                       e.astype(np.complex128 if e.dtype.kind == "c" else np.float64),
                       rtol=rtol, atol=atol, equal_nan=nonfinite)
    if not close.all():
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64)) if e.dtype.kind != "c" else np.abs(a - e)
        diff = np.where(close, 0, np.nan_to_num(diff, nan=np.inf))
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.ndim else ()
        return (f"{{label}}: {{int((~close).sum())}} of {{close.size}} elements outside "
                f"rtol={{rtol:g}} atol={{atol:g}}; "
                f"max abs diff {{float(diff[idx]):g}} at index {{idx}} (got {{a[idx]}}, expected {{e[idx]}})")
    return None


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", MESH_SHAPE, mesh_dim_names=MESH_DIM_NAMES)
    coord = tuple(mesh.get_coordinate())
    full = [tensor(a, dtype, rg) for a, dtype, rg in INPUTS]
    derived = [d(*[t.detach().clone() for t in full]) for d, _ in DERIVED]
    ref_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in full + derived]
    ref = as_tuple(fn(*ref_in, **({{"mesh": None}} if NEEDS_MESH else {{}})), "fn (reference)")
    dist_in = []
    for i, t in enumerate(full):
        if i in LOCALS:
            local = tensor(LOCALS[i][coord], INPUTS[i][1])
            d = DTensor.from_local(local, mesh, PLACEMENTS[i], run_check=False, shape=t.shape,
                                   stride=torch.empty(t.shape, device="meta").stride())
            dist_in.append(d.detach().requires_grad_(True) if t.requires_grad else d)
        else:
            dist_in.append(distribute_tensor(t.detach(), mesh, PLACEMENTS[i]).requires_grad_(t.requires_grad))
    dist_in += [distribute_tensor(t, mesh, p) for t, (_, p) in zip(derived, DERIVED)]
    out = as_tuple(fn(*dist_in, **({{"mesh": mesh}} if NEEDS_MESH else {{}})), "fn (distributed)")
    if len(out) != len(ref):
        raise ValueError(f"fn returned {{len(out)}} output(s) distributed but {{len(ref)}} on the reference")
    chosen = range(len(out)) if COMPARE_OUTPUTS is None else COMPARE_OUTPUTS
    gathered = [(i, out[i].full_tensor() if isinstance(out[i], DTensor) else out[i]) for i in chosen]
    failures = [m for i, g in gathered for m in [compare(f"output[{{i}}]", ref[i], g, COMPARE)] if m]
    if not failures and any(t.requires_grad for t in full):
        floats = [(i, g) for i, g in gathered if ref[i].is_floating_point()]
        grads = [tensor(np.random.default_rng(GRAD_SEEDS[i]).standard_normal(tuple(ref[i].shape))
                        .astype("float32" if ref[i].dtype == torch.bfloat16 else str(ref[i].dtype).split(".")[1]),
                        str(ref[i].dtype).split(".")[1]) for i, _ in floats]
        torch.autograd.backward([ref[i] for i, _ in floats], grad_tensors=grads)
        torch.autograd.backward([g for _, g in floats], grad_tensors=[g.clone() for g in grads])
        for k, t in enumerate(full):
            if t.requires_grad:
                want, got = ref_in[k].grad, dist_in[k].grad
                if want is None or got is None:
                    path = "reference" if want is None else "distributed"
                    failures.append(f"input {{k}}: no gradient on the {{path}} path")
                    continue
                got = got.full_tensor() if isinstance(got, DTensor) else got
                failures += [m for m in [compare(f"grad of input {{k}}", want, got, GRAD_COMPARE)] if m]
    for m in failures:
        print(f"rank {{rank}}: {{m}}", flush=True)
    if not failures:
        print(f"rank {{rank}}: every comparison holds", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
'''
