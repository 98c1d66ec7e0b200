"""A training case on one rank: ``features → baseline → parallel → compare`` (seed 001 §4.3).

The platform trains twice (:meth:`meshtest.platforms.backend.ShardBackend.train`): the plain
model, then the parallelized one, on the same seeded weights and data. The comparison — what,
in which order, with which tolerance, and what a failure says — is shared policy and lives here:
per step, in :data:`meshtest.model.train.QUANTITIES` order, every parameter by fully-qualified
name. A failure reads ``step 1 grads layers.0.weight: 3 of 16 elements outside rtol=1e-05
atol=1e-06; max abs diff ...`` (the report adds the ranks).
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from ..model.train import QUANTITIES, TrainCase
from ..platforms.backend import ShardBackend, TrainSnapshot
from ..status import Status
from .compare import CompareError, compare_arrays
from .pipeline import OnStep, StepResult, _completed, _from_exception, _Steps


def run_train(case: TrainCase, backend: ShardBackend, mesh: Any, on_step: OnStep = None) -> StepResult:
    """Run one training case on this rank (statuses as :mod:`meshtest.rank.pipeline`)."""
    missing = [f for f in ("training",) + tuple(case.requires) if f not in backend.features()]
    if missing:
        return StepResult(Status.UNSUPPORTED, "features",
                          f"unsupported on platform {backend.platform}: missing feature(s) {', '.join(missing)}")
    steps = _Steps(case.name, on_step)
    notes: List[str] = []
    try:
        steps.enter("baseline")
        base = backend.train(case, mesh, parallel=False)
        steps.enter("parallel")
        par = backend.train(case, mesh, parallel=True, notes=notes)
        steps.enter("compare")
        compare_runs(case, base, par)
    except (Exception, SystemExit) as e:  # a case's own error must not stop the others
        return _from_exception(e, steps.current, backend, None, None, tuple(notes))
    return _completed(steps.current, None, None, tuple(notes))


def compare_runs(case: TrainCase, base: List[TrainSnapshot], par: List[TrainSnapshot]) -> None:
    """Compare the parallel run with the baseline, step by step.

    :raises CompareError: at the first difference, naming the step, the quantity and the FQN.
    """
    if len(base) != len(par):
        raise CompareError(f"the baseline ran {len(base)} step(s), the parallel run {len(par)}")
    for i, (b, p) in enumerate(zip(base, par)):
        for quantity in QUANTITIES:
            spec = case.compare.spec(quantity)
            if spec is None:
                continue
            if quantity in ("loss", "grad_norm"):
                _compare_scalar(getattr(b, quantity), getattr(p, quantity), spec, f"step {i} {quantity}",
                                whole=not p.partial)
                continue
            _compare_named(getattr(b, quantity), getattr(p, quantity), spec, f"step {i} {quantity}",
                           whole=not p.partial)


def _compare_scalar(base, par, spec, label: str, whole: bool) -> None:
    """A per-step scalar; a rank that does not compute it (a pipeline stage before the last)
    has ``None``, which only a run with a custom ``train_step`` may have."""
    if par is None and base is not None and whole:
        raise CompareError(f"{label}: the baseline has one, the parallel run none")
    if par is not None:
        if base is None:
            raise CompareError(f"{label}: the parallel run has one, the baseline none")
        _compare(np.asarray(base), np.asarray(par), spec, label)


def _compare_named(base: Dict[str, np.ndarray], par: Dict[str, np.ndarray], spec, label: str, whole: bool) -> None:
    """Compare by name. With ``whole`` (every rank holds the whole model) the names must match;
    otherwise (a pipeline stage) this rank's names must be a non-empty subset of the baseline's."""
    extra = sorted(set(par) - set(base))
    missing = sorted(set(base) - set(par)) if whole else []
    if extra or missing:
        raise CompareError(f"{label}: names differ from the baseline: only in the parallel run {extra}, "
                           f"only in the baseline {missing}")
    if not par and base:
        raise CompareError(f"{label}: this rank holds none of the baseline's {len(base)} entries")
    for name in sorted(par):
        _compare(base[name], par[name], spec, f"{label} {name}")


def _compare(expected: np.ndarray, actual: np.ndarray, spec, label: str) -> None:
    compare_arrays(expected, actual, str(expected.dtype), str(actual.dtype), spec, label=label)
