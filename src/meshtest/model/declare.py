"""The declaration rules of a case that read more than one field (docs/cases.md, "Rules"):
``declared-steps``, ``module``, ``local``, ``timeout``, ``inputs``, ``derived`` and
``partial-split``. Each raises :class:`meshtest.errors.CaseDeclarationError` naming the file,
the case and the rule. Platform-free.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Sequence, Tuple

from ..errors import CaseDeclarationError
from . import rules
from .compare_spec import CompareSpec
from .dtypes import FLOAT_DTYPES
from .inputs import DerivedSpec, InputSpec
from .local_input import LocalInput
from .placement import Partial


def check_declared_steps(file: str, name: str, mesh_shape: Tuple[int, ...], inputs: Sequence[Any],
                          case: Any) -> dict:
    """Rule ``declared-steps``: ``redistribute_inputs`` and ``checkpoint_inputs`` have one entry
    per input (``None`` or placements valid for that input's shape); ``local_fn`` is callable and comes with
    ``local_output_placements`` (one placement per mesh dimension for each output), which
    nothing else may carry; ``redistribute_outputs`` entries are ``None`` or placements. Rules
    ``module`` (``module`` and ``plan`` together, not with ``local_fn``) and ``local``.

    :returns: the normalised fields, by name.
    """
    out: dict = {}
    value = case.redistribute_inputs
    if value is not None:
        if not isinstance(value, (tuple, list)) or len(value) != len(inputs):
            raise CaseDeclarationError(
                file, name, "declared-steps",
                f"redistribute_inputs must have one entry (None or placements) per input, {len(inputs)}; got {value!r}")
        entries = []
        for i, entry in enumerate(value):
            if entry is None:
                entries.append(None)
                continue
            (p,) = rules.check_placements(file, name, mesh_shape, [inputs[i].shape], [entry],
                                          what=f"redistribute_inputs[{i}]")
            entries.append(p)
        if all(e is None for e in entries):
            raise CaseDeclarationError(file, name, "declared-steps",
                                       "redistribute_inputs redistributes no input (every entry is None); leave it out")
        out["redistribute_inputs"] = tuple(entries)
    if (case.module is None) != (case.plan is None):
        raise CaseDeclarationError(file, name, "module",
                                   "module and plan go together: the module is built for the reference and "
                                   "parallelized by the plan for the distributed call")
    if case.module is not None:
        if not callable(case.module):
            raise CaseDeclarationError(file, name, "module", f"module must be callable as module(api); got "
                                                             f"{case.module!r}")
        if not (callable(case.plan) or (isinstance(case.plan, dict) and case.plan)):
            raise CaseDeclarationError(file, name, "module", "plan must be a non-empty {fqn: style} dict or "
                                                             f"plan(module, mesh, api); got {case.plan!r}")
        if case.local_fn is not None:
            raise CaseDeclarationError(file, name, "module", "module and local_fn exclude each other: local_fn "
                                                             "replaces the call of fn(module, *inputs)")
    if takes_local(case.fn) and case.local_fn is not None:
        raise CaseDeclarationError(file, name, "local",
                                   "fn(..., *, local) and local_fn exclude each other: local_fn replaces the whole "
                                   "distributed call, local() runs a part of it")
    fn, placements = case.local_fn, case.local_output_placements
    if fn is not None and not callable(fn):
        raise CaseDeclarationError(file, name, "declared-steps",
                                   f"local_fn must be callable as local_fn(*local_inputs, mesh=mesh); got {fn!r}")
    if (fn is None) != (placements is None):
        raise CaseDeclarationError(
            file, name, "declared-steps",
            "local_fn and local_output_placements go together: the platform wraps each local output of local_fn "
            "with its placements" + ("" if fn is None else "; add local_output_placements=((Shard(0),),) or the like"))
    if placements is not None:
        checked = rules.check_expected_placements(file, name, mesh_shape, placements, "local_output_placements")
        if any(p is None for p in checked):
            raise CaseDeclarationError(file, name, "declared-steps",
                                       "local_output_placements needs placements for every output (no None)")
        out["local_output_placements"] = checked
    out["redistribute_outputs"] = rules.check_expected_placements(file, name, mesh_shape, case.redistribute_outputs,
                                                                  "redistribute_outputs")
    value = case.checkpoint_inputs
    if value is not None:
        if not isinstance(value, (tuple, list)) or len(value) != len(inputs):
            raise CaseDeclarationError(
                file, name, "declared-steps",
                f"checkpoint_inputs must have one entry (None or the placements to load into) per input, "
                f"{len(inputs)}; got {value!r}")
        entries = [None if e is None else rules.check_placements(file, name, mesh_shape, [inputs[i].shape], [e],
                                                                 what=f"checkpoint_inputs[{i}]")[0]
                   for i, e in enumerate(value)]
        if all(e is None for e in entries):
            raise CaseDeclarationError(file, name, "declared-steps",
                                       "checkpoint_inputs checkpoints no input (every entry is None); leave it out")
        out["checkpoint_inputs"] = tuple(entries)
    return out


def check_timeout(file: str, name: str, timeout_s: Any) -> None:
    """Rule ``timeout``: ``None`` or a number of seconds > 0."""
    number = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
    if timeout_s is not None and (not number or timeout_s <= 0):
        raise CaseDeclarationError(file, name, "timeout",
                                   f"timeout_s must be a number of seconds > 0; got {timeout_s!r}")


def check_inputs(file: str, name: str, inputs: Any) -> Tuple[Any, ...]:
    """Rule ``inputs``: a list of :class:`InputSpec` / ``LocalInput``, each valid."""
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(s, (InputSpec, LocalInput)) for s in inputs):
        raise CaseDeclarationError(file, name, "inputs", "inputs must be a list of InputSpec or LocalInput")
    return tuple(s.validate(file, name, i) for i, s in enumerate(inputs))


def check_derived(file: str, name: str, mesh_shape: Tuple[int, ...], derived: Any) -> Tuple[DerivedSpec, ...]:
    out = []
    for i, d in enumerate(derived):
        if not isinstance(d, DerivedSpec) or not callable(d.fn):
            raise CaseDeclarationError(file, name, "derived",
                                       f"derived_inputs[{i}] must be a DerivedSpec with a callable fn")
        (p,) = rules.check_placements(file, name, mesh_shape, [(1,) * d.ndim], [d.placements],
                                      what=f"derived_inputs[{i}]")
        out.append(dataclasses.replace(d, placements=p))
    return tuple(out)


def check_partial_split(file: str, name: str, mesh_shape: Tuple[int, ...], inputs: Sequence[Any],
                         placements: Sequence[tuple], compare: Any) -> None:
    """Rule ``partial-split``: an :class:`InputSpec` placed ``Partial`` is split by the platform's
    rule (torch: ``v / n`` on every rank for ``sum``; ``v`` for ``avg``/``max``/``min``). That turns
    an integer ``sum`` into floats, and on a mesh dimension whose size is not a power of two
    ``v / n`` summed ``n`` times (or ``n`` copies of ``v`` averaged) is not bit-equal to ``v``, so
    ``equal()`` would fail for meshtest's own reason. Either is an error here, naming
    ``LocalInput`` (distinct partials that reduce exactly) as the way to declare it.
    """
    for i, (spec, per_input) in enumerate(zip(inputs, placements)):
        if not isinstance(spec, InputSpec):
            continue
        for k, p in enumerate(per_input):
            if not isinstance(p, Partial):
                continue
            if p.reduce_op == "sum" and spec.dtype not in FLOAT_DTYPES:
                raise CaseDeclarationError(
                    file, name, "partial-split",
                    f"inputs[{i}] is {spec.dtype} placed {p!r} on mesh dim {k}: the platform splits a full tensor "
                    "into partial sums as v / n, which is not an integer; declare the per-rank values with "
                    "LocalInput(shape=..., local=lambda coord: ..., dtype=...)")
            size = mesh_shape[k]
            inexact = p.reduce_op in ("sum", "avg") and size & (size - 1) != 0
            if inexact and isinstance(compare, CompareSpec) and compare.kind == "equal":
                raise CaseDeclarationError(
                    file, name, "partial-split",
                    f"inputs[{i}] placed {p!r} on mesh dim {k} of size {size}: the split v / {size} does not "
                    f"reduce back to v bit for bit, so equal() would fail; compare with allclose(...) or declare "
                    "exact partials with LocalInput")


def takes_local(fn: Any) -> bool:
    """Whether an op case's ``fn`` declares the keyword-only parameter ``local``
    (``fn(x, *, local)``): it then gets :class:`meshtest.rank.pipeline.LocalRegion`'s
    ``local(g, *out_placements)`` on both calls. ``False`` when Python cannot read the signature.

    :raises ValueError: ``local`` is a parameter of ``fn`` but not keyword-only."""
    try:
        param = inspect.signature(fn).parameters.get("local")
    except (TypeError, ValueError):
        return False
    if param is None:
        return False
    if param.kind is not inspect.Parameter.KEYWORD_ONLY:
        raise ValueError("fn's parameter local must be keyword-only: def fn(x, *, local)")
    return True
