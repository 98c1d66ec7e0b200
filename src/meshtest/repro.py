"""A standalone reproduction of an op or training case: ``python -m meshtest repro FILE::CASE``.

What a user pastes into an upstream issue: one script that imports only torch and numpy,
runnable with ``torchrun --nproc-per-node <world size> repro.py``. It builds the case's inputs
(an :class:`~meshtest.model.inputs.InputSpec` from its seed with the same NumPy calls; data, and
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
its sample's arguments (``fn.repro_source()``, :mod:`meshtest.platforms.torch.opinfo`).

A training case (``TrainCase``) becomes its model, data, loss, plan, optimizer and scheduler as
source (from the case file and the checkout's modules it imports: models, plans), the torch
platform's ``api`` namespace imported name by name, and the torch backend's loop, run as the
single-device baseline and in parallel, each step compared by the case's ``TrainCompare``
(:func:`_train_script`); phased cases and long runs are not exported.

Only the torch platform; a custom ``CompareSpec.check``, an ``expect_raises`` or
output/gradient placement checks are not carried over (said in the script's header); scenario
cases are not exported. Errors: ``ValueError`` naming the case and what cannot be exported.
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
from jinja2 import Environment, PackageLoader, StrictUndefined

from .model.inputs import numpy_dtype
from .model.local_input import LocalInput, assemble
from .model.placement import Partial, Placement, Replicate, Shard, StridedShard
from .model.registry import Registry, load_case_file
from .model.spec import OpShardCase
from .model.train import QUANTITIES, TrainCase

#: Arrays with at most this many elements are written as literals; larger ones as base64 ``.npy``
LITERAL_ELEMENTS = 256


def load_op_case(spec: str) -> Tuple[str, Any]:
    """``FILE::CASE`` → (file, the registered op or training case).

    :raises ValueError: no ``::``, no such file or case, or neither an op nor a training case.
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
    if not isinstance(case, (OpShardCase, TrainCase)):
        raise ValueError(f"{path}: case {name!r} is a {type(case).__name__}; repro exports op cases (OpShardCase) "
                         "and training cases (TrainCase)")
    return path, case


# ---------------------------------------------------------------------------------------------
# the op as source


def _code_names(code: types.CodeType) -> Set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _imports_of(path: str) -> Dict[str, str]:
    """Name bound by each top-level import of the file at ``path`` → that import's statement
    (meshtest's left out)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
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


def _lambda_source(fn: types.FunctionType) -> str:
    path = inspect.getsourcefile(fn) or ""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    line = fn.__code__.co_firstlineno
    args = list(fn.__code__.co_varnames[:fn.__code__.co_argcount])
    hits = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Lambda) and n.lineno == line
            and [a.arg for a in n.args.args] == args]
    if len(hits) != 1:
        raise ValueError(f"the lambda on line {line} cannot be told apart from {len(hits) - 1} other(s) on that line")
    return ast.get_source_segment(source, hits[0]) or ""


def _first_party(obj: Any, roots: Sequence[str]) -> bool:
    """Defined in a file under one of ``roots`` (the checkout, the case file's directory), not in
    an installed package."""
    path = inspect.getsourcefile(obj) if isinstance(obj, (types.FunctionType, type)) else None
    if not path:
        return False
    path = os.path.abspath(path)
    return any(path.startswith(os.path.abspath(r) + os.sep) for r in roots) and "site-packages" not in path


def function_sources(fns: Sequence[Tuple[str, Any]], roots: Sequence[str] = ()) -> Tuple[List[str], List[str]]:
    """(import statements, definitions) that make each ``(name, fn)`` callable as ``name`` in a
    script: the functions and classes of this checkout it reaches (the case file's, and those of
    modules it imports from the checkout: the training cases' models and plans), their constants,
    and the imports of installed packages they use (never meshtest's), each found from the code
    that uses it (its global names, nested functions and classes included).

    :param roots: directories whose files count as the checkout's (default: the working directory).
    :raises ValueError: a function uses something from meshtest, a value with no source, or two
        different objects under one name.
    """
    roots = tuple(roots) or (os.getcwd(),)
    imports: List[str] = []
    defs: Dict[str, str] = {}
    owners: Dict[str, Any] = {}
    aliases: List[str] = []
    import_maps: Dict[str, Dict[str, str]] = {}

    def imports_in(fn: Any) -> Dict[str, str]:
        path = inspect.getsourcefile(fn) or ""
        if path not in import_maps:
            import_maps[path] = _imports_of(path) if path.endswith(".py") else {}
        return import_maps[path]

    def define(name: str, value: Any, text: str) -> None:
        if name in owners and owners[name] is not value:
            raise ValueError(f"two different objects are named {name} (in {_where(owners[name])} and {_where(value)})")
        owners[name] = value
        defs[name] = text

    def need(name: str, value: Any, user: Any, why: str) -> None:
        if name in owners and owners[name] is value:
            return
        where = getattr(value, "__module__", "") or ""
        if where.split(".")[0] == "meshtest" or isinstance(value, types.ModuleType) and \
                value.__name__.split(".")[0] == "meshtest":
            raise ValueError(f"{name} ({why}) comes from meshtest: a standalone script cannot use it")
        if isinstance(value, (types.FunctionType, type)) and _first_party(value, roots):
            real = value.__name__
            if real == "<lambda>":
                define(name, value, f"{name} = {_lambda_source(value)}")
            else:
                define(real, value, textwrap.dedent(inspect.getsource(value)))
                if real != name:
                    aliases.append(f"{name} = {real}")
            code = value.__code__ if isinstance(value, types.FunctionType) else None
            deps = _code_names(code) if code is not None else _class_names(value)
            scope = value.__globals__ if code is not None else vars(inspect.getmodule(value))
            for dep in sorted(deps):
                if dep in scope and dep != real and not (dep.startswith("__") and dep.endswith("__")):
                    need(dep, scope[dep], value, f"{real} uses it")
            return
        statement = imports_in(user).get(name)
        if statement is not None:
            imports.append(statement)
            return
        if isinstance(value, (int, float, str, bool, type(None), tuple)) and _literal(value):
            define(name, value, f"{name} = {value!r}")
            return
        raise ValueError(f"{name} ({why}) is a {type(value).__name__} with no source to copy")

    for name, fn in fns:
        own = getattr(fn, "repro_source", None)
        if own is not None:
            defs[name] = own(name)
            continue
        if not isinstance(fn, types.FunctionType):
            raise ValueError(f"{name} is a {type(fn).__name__}, not a function of the case file")
        need(name, fn, fn, "the case's function")
    return imports, list(defs.values()) + aliases


def _class_names(cls: type) -> Set[str]:
    names: Set[str] = set()
    for value in vars(cls).values():
        if isinstance(value, types.FunctionType):
            names |= _code_names(value.__code__)
    return names | {b.__name__ for b in cls.__bases__}


def _where(obj: Any) -> str:
    return getattr(obj, "__module__", "?")


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

    path, case = load_op_case(spec)
    if isinstance(case, TrainCase):
        return _train_script(path, case)
    for what, present in (("module= / plan= (a module parallelized by a plan)", case.module is not None),
                          ("fn(..., *, local) (local code inside the distributed call)", case.takes_local)):
        if present:
            raise ValueError(f"{path}: case {case.name!r}: cannot export {what} yet: the script calls fn on "
                             "tensors only")
    fns = [("fn", case.fn)] + [(f"derived_{k}", d.fn) for k, d in enumerate(case.derived_inputs)]
    if case.local_fn is not None:
        fns.append(("local_fn", case.local_fn))
    try:
        imports, defs = function_sources(fns, (os.getcwd(), os.path.dirname(os.path.abspath(path))))
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
    body = _render("repro_op.py.j2",
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
        grad_seeds=[case.grad_seed(i) for i in range(16)], needs_mesh=bool(case.needs_mesh),
        redistribute_inputs=_placements_source(case.redistribute_inputs),
        local_out=_placements_source(case.local_output_placements),
        redistribute_outputs=_placements_source(case.redistribute_outputs),
        has_local_fn=case.local_fn is not None)
    compile(body, f"repro of {case.name}", "exec")  # a script that does not parse is meshtest's bug
    return body


def _placements_source(entries: Any) -> str:
    """``None``, or a list literal with one entry (``None`` or a placement list) per tensor."""
    if entries is None:
        return "None"
    return "[" + ", ".join("None" if e is None else "[" + ", ".join(placement_source(p) for p in e) + "]"
                           for e in entries) + "]"


def _spec_tuple(spec: Any) -> Any:
    return None if spec is None else (spec.kind, spec.rtol, spec.atol, spec.allow_nonfinite)


def _train_script(path: str, case: TrainCase) -> str:
    """The standalone script of a training case: its model, data, loss, plan, optimizer and
    scheduler as source, the platform's ``api`` namespace imported, the loop of meshtest's torch
    backend (zero_grad; per micro-batch: data, this rank's ``batch_split`` rows, the loss divided
    by ``grad_accum``, backward; the loss averaged over the split axis; ``clip_grad_norm_``;
    optimizer and scheduler steps) run as the single-device baseline and in parallel on every
    rank, and each step's loss, grad norm, gradients, parameters and optimizer state compared by
    the case's ``TrainCompare`` (the first difference printed, exit 1)."""
    from .platforms.registry import load_backend

    where = f"{path}: case {case.name!r}: cannot export"
    for what, present in (("phases", bool(case.phases)), ("a long run (stability=)", case.stability is not None)):
        if present:
            raise ValueError(f"{where} {what}: only a single-launch training case")
    for what, present in (("a pipeline (pipeline=)", case.pipeline is not None),
                          ("param_placements", case.param_placements is not None),
                          ("grad_sync='last'", case.grad_sync != "every")):
        if present:
            raise ValueError(f"{where} {what}: the script's loop has no counterpart of it yet")
    for quantity in QUANTITIES:
        got = case.compare.spec(quantity)
        if got is not None and got.kind == "check":
            raise ValueError(f"{where} a CompareSpec.check on {quantity}")
    fns = [("model", case.model), ("data", case.data), ("loss", case.loss)] + [
        (n, f) for n, f in (("parallelize", case.parallelize), ("optimizer", case.optimizer),
                            ("scheduler", case.scheduler), ("train_step", case.train_step)) if f is not None]
    try:
        imports, defs = function_sources(fns, (os.getcwd(), os.path.dirname(os.path.abspath(path))))
        api = load_backend("torch").repro_api_source()
    except (ValueError, NotImplementedError) as e:
        raise ValueError(f"{where}: {e}") from None
    unset = "\n".join(f"{n} = None" for n in ("parallelize", "optimizer", "scheduler", "train_step")
                      if n not in dict(fns))
    names = case.mesh_dim_names or tuple(f"d{k}" for k in range(len(case.mesh_shape)))
    world = int(np.prod(case.mesh_shape))
    known = case.known_failure.describe() if case.known_failure is not None else ""
    header = [f"Reproduction of meshtest training case {path}::{case.name}, standalone (torch and numpy only).",
              "", f"    torchrun --nproc-per-node {world} <this file>", "",
              f"Trains the model {case.steps} step(s) on one device and in parallel on a DeviceMesh "
              f"{tuple(case.mesh_shape)} {tuple(names)},",
              "then compares each step's loss, grad norm, gradients, parameters and optimizer state.",
              "Exit 0 when every comparison holds, 1 on the first difference (or the run's own error)."]
    if known:
        header += ["", "meshtest's known failure for it: " + known]
    body = _render("repro_train.py.j2",
        header="\n".join(header), api=api, imports="\n".join(sorted(set(imports) - _TEMPLATE_IMPORTS)),
        defs="\n\n".join(d.rstrip() for d in defs) + ("\n" + unset if unset else ""),
        mesh_shape=tuple(case.mesh_shape), names=tuple(names), steps=case.steps, grad_accum=case.grad_accum,
        batch_split=case.batch_split, clip=case.clip_grad_norm, seed=case.seed(),
        model_ctx=case.model_takes_context, loss_model=case.loss_takes_model,
        specs={q: _spec_tuple(case.compare.spec(q)) for q in QUANTITIES})
    compile(body, f"repro of {case.name}", "exec")
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


def _render(template: str, **values: Any) -> str:
    """``template`` of the package's ``templates/`` (jinja2; ``| py`` writes a value as a Python
    literal, ``repr``) rendered with ``values``; a value the template names but is not given is an
    error (``StrictUndefined``), never an empty string in the script."""
    env = Environment(loader=PackageLoader("meshtest", "templates"), keep_trailing_newline=True,
                      undefined=StrictUndefined, autoescape=False)
    env.filters["py"] = repr
    return env.get_template(template).render(**values)
