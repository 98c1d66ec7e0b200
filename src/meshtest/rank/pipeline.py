"""The per-case pipeline on one rank, free of process concerns (seed 000 §3.3, §8.7).

An op case runs ``build → (derive) → reference → distribute → run → gather → compare``, then
``backward`` when an input ``requires_grad``; a scenario runs its function after the
platform-feature check. Both return a :class:`StepResult`; neither raises for a case's own
failure, so the harness (:mod:`meshtest.rank.entry`) runs the next case whatever happened.
"""
from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..model.spec import OpShardCase, ScenarioCase, numpy_dtype
from ..platforms.backend import ShardBackend
from ..status import Status
from .compare import CompareError, compare_arrays
from .scenario import ScenarioContext

log = logging.getLogger("meshtest.rank")

#: Called with each step's name as the step starts (the harness emits it for the watcher).
OnStep = Optional[Callable[[str], None]]


@dataclass(frozen=True)
class StepResult:
    """How one case went on this rank, before the ``known_failure`` mapping.

    :ivar status: ``pass``, ``fail`` (a comparison or assertion), ``error`` (any other
        exception) or ``unsupported`` (a scenario needs a feature the platform lacks).
    :ivar step: the last step reached (the failing one for fail/error).
    :ivar error: the message, with the last frames of the traceback for errors.
    :ivar notes: a scenario's ``ctx.note`` lines.
    """

    status: Status
    step: str
    error: str = ""
    notes: Tuple[str, ...] = ()

    @property
    def detail(self) -> str:
        return "\n".join(self.notes)


def _trace(e: BaseException, limit: int = -4) -> str:
    """``Type: message`` and the last ``-limit`` frames of the traceback being handled."""
    return f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=limit)}"


def run(case: Any, backend: ShardBackend, mesh: Any, on_step: OnStep = None) -> StepResult:
    """Run ``case`` of any kind on this rank (see :func:`run_case`, :func:`run_scenario`)."""
    if isinstance(case, ScenarioCase):
        return run_scenario(case, backend, mesh, on_step)
    return run_case(case, backend, mesh, on_step)


def run_case(case: OpShardCase, backend: ShardBackend, mesh: Any, on_step: OnStep = None) -> StepResult:
    """Run one op case's pipeline on this rank.

    A :class:`CompareError` is ``fail`` at its step; any other exception is ``error`` at the
    step it happened in.
    """
    step = "build"

    def enter(name: str) -> str:  # each step is logged, so a hang's rank log shows where it is
        log.info("case %s: step %s", case.name, name)
        if on_step is not None:
            on_step(name)
        return name

    try:
        enter(step)
        full = [backend.make_tensor(s.build_numpy(case.input_seed(i)), s.dtype, s.requires_grad)
                for i, s in enumerate(case.inputs)]
        step = enter("derive")
        derived = [d.fn(*[backend.clone(t) for t in full]) for d in case.derived_inputs]
        step = enter("reference")
        ref_inputs = [backend.clone(t) for t in full + derived]
        expected = _outputs(case.fn(*ref_inputs, **({"mesh": None} if case.needs_mesh else {})), backend,
                            "fn (reference)")
        step = enter("distribute")
        placements = list(case.placements) + [d.placements for d in case.derived_inputs]
        dist_inputs = [backend.distribute(t, mesh, p) for t, p in zip(full + derived, placements)]
        step = enter("run")
        actual = _outputs(case.fn(*dist_inputs, **({"mesh": mesh} if case.needs_mesh else {})), backend,
                          "fn (distributed)")
        if len(actual) != len(expected):
            raise ValueError(f"fn returned {len(actual)} output(s) distributed but {len(expected)} on the reference")
        step = enter("gather")
        gathered = [(i, backend.local_to_global(o)) for i, o in _select(actual, case)]
        step = enter("compare")
        for i, g in gathered:
            if not backend.is_tensor(expected[i]) or not backend.is_tensor(g):
                raise TypeError(f"output[{i}] is {type(g).__name__}, not a tensor; compare_outputs can leave it out")
            _compare(backend, expected[i], g, case.compare, f"output[{i}]")
        if case.needs_grad:
            step = enter("backward")
            _check_gradients(case, backend, expected, gathered, ref_inputs, dist_inputs)
        return StepResult(Status.PASS, step)
    except CompareError as e:
        return StepResult(Status.FAIL, step, str(e))
    except Exception as e:  # a case's own error must not stop the others
        return StepResult(Status.ERROR, step, _trace(e))


def run_scenario(case: ScenarioCase, backend: ShardBackend, mesh: Any, on_step: OnStep = None) -> StepResult:
    """Run one scenario on this rank.

    Before anything runs, ``case.requires`` is checked against ``backend.features()``: a
    missing feature gives ``unsupported`` at step ``features``, naming it. Then ``case.fn(ctx)``:
    ``AssertionError`` → ``fail``, any other exception → ``error``, at ``ctx``'s current step.
    """
    try:
        missing = [f for f in case.requires if f not in backend.features()]
        if missing:
            return StepResult(Status.UNSUPPORTED, "features",
                              f"unsupported on platform {backend.platform}: missing feature(s) {', '.join(missing)}")
        api = backend.scenario_api()
    except NotImplementedError as e:  # an op-only platform
        return StepResult(Status.UNSUPPORTED, "features", f"unsupported on platform {backend.platform}: {e}")
    except Exception as e:
        return StepResult(Status.ERROR, "features", _trace(e))
    ctx = ScenarioContext(case=case.name, mesh=mesh, backend=backend, api=api, on_step=on_step)
    log.info("case %s: step run", case.name)
    ctx.step("run")
    try:
        case.fn(ctx)
        return StepResult(Status.PASS, ctx.current_step, "", tuple(ctx.notes))
    except AssertionError as e:
        return StepResult(Status.FAIL, ctx.current_step, _trace(e, limit=-3), tuple(ctx.notes))
    except Exception as e:  # a case's own error must not stop the others
        return StepResult(Status.ERROR, ctx.current_step, _trace(e), tuple(ctx.notes))


def _outputs(obj: Any, backend: ShardBackend, what: str) -> Tuple[Any, ...]:
    if backend.is_tensor(obj):
        return (obj,)
    if isinstance(obj, (tuple, list)) and obj:
        return tuple(obj)
    raise TypeError(f"{what} returned {type(obj).__name__}, not a tensor or a tuple of tensors")


def _select(outs: Tuple[Any, ...], case: OpShardCase) -> List[Tuple[int, Any]]:
    idx = case.compare_outputs if case.compare_outputs is not None else tuple(range(len(outs)))
    bad = [i for i in idx if i >= len(outs)]
    if bad:
        raise IndexError(
            f"case {case.name!r}: compare_outputs {case.compare_outputs} out of range: fn returned {len(outs)} "
            "output(s)"
        )
    return [(i, outs[i]) for i in idx]


def _compare(backend: ShardBackend, expected: Any, actual: Any, spec, label: str) -> None:
    compare_arrays(backend.to_numpy(expected), backend.to_numpy(actual), backend.dtype_name(expected),
                   backend.dtype_name(actual), spec, label=label)


def _check_gradients(case: OpShardCase, backend: ShardBackend, expected, gathered, ref_inputs, dist_inputs) -> None:
    """Back-propagate ``L = sum_i sum(out_i * G_i)`` on both paths and compare input gradients.

    Only float outputs enter the loss (integer outputs such as indices have no gradient).
    :raises CompareError: a gradient differs; ``ValueError``: no float output to differentiate.
    """
    ref_outs, dist_outs, grads = [], [], []
    for i, g in gathered:
        dtype = backend.dtype_name(expected[i])
        if numpy_dtype(dtype).kind != "f":
            continue
        seed_arr = np.random.default_rng(case.grad_seed(i)).standard_normal(backend.to_numpy(expected[i]).shape)
        ref_outs.append(expected[i])
        dist_outs.append(g)
        grads.append(backend.make_tensor(seed_arr.astype(numpy_dtype(dtype)), dtype))
    if not ref_outs:
        raise ValueError("requires_grad inputs but no compared float output to back-propagate from")
    backend.backward(ref_outs, grads)
    backend.backward(dist_outs, [backend.clone(g) for g in grads])
    spec = case.grad_compare or case.compare
    for k, spec_in in enumerate(case.inputs):
        if not spec_in.requires_grad:
            continue
        ref_grad, dist_grad = backend.grad_of(ref_inputs[k]), backend.grad_of(dist_inputs[k])
        if ref_grad is None or dist_grad is None:
            raise ValueError(f"input {k}: no gradient on the {'reference' if ref_grad is None else 'distributed'} path")
        _compare(backend, ref_grad, backend.local_to_global(dist_grad), spec, f"grad of input {k}")
