"""A training case on one rank: ``features → baseline → parallel → compare`` (seed 001 §4.3).

The platform trains twice (:meth:`meshtest.platforms.backend.ShardBackend.train`): the plain
model, then the parallelized one, on the same seeded weights and data. The comparison — what,
in which order, with which tolerance, and what a failure says — is shared policy and lives here:
per step, in :data:`meshtest.model.train.QUANTITIES` order, every parameter by fully-qualified
name. A failure reads ``step 1 grads layers.0.weight: 3 of 16 elements outside rtol=1e-05
atol=1e-06; max abs diff ...`` (the report adds the ranks).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from .. import checkpoints
from ..model.spec import CompareSpec
from ..model.train import QUANTITIES, TrainCase
from ..platforms.backend import ShardBackend, TrainSnapshot
from ..status import Status
from .compare import CompareError, compare_arrays
from .pipeline import OnStep, StepResult, _completed, _from_exception, _Steps


@dataclass(frozen=True)
class PhaseRun:
    """Which phase of a phased training case this launch runs.

    :ivar phase: 1-based. :ivar count: the case's phases. :ivar case_dir: the case's directory
        shared by its launches (:attr:`meshtest.contract.LaunchPlan.cases_dir` / case name);
        checkpoints live in its ``checkpoints/``.
    """

    phase: int
    count: int
    case_dir: str


def run_train(case: TrainCase, backend: ShardBackend, mesh: Any, on_step: OnStep = None,
              phase: Optional[PhaseRun] = None) -> StepResult:
    """Run one training case on this rank (statuses as :mod:`meshtest.rank.pipeline`); with
    ``phase``, one phase of it (:func:`run_phase`)."""
    missing = [f for f in ("training",) + tuple(case.requires) if f not in backend.features()]
    if missing:
        return StepResult(Status.UNSUPPORTED, "features",
                          f"unsupported on platform {backend.platform}: missing feature(s) {', '.join(missing)}")
    if phase is not None:
        return run_phase(case, backend, mesh, phase, on_step)
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


def run_phase(case: TrainCase, backend: ShardBackend, mesh: Any, phase: PhaseRun, on_step: OnStep = None) -> StepResult:
    """Phase ``phase.phase`` of a phased case on this rank (collective over the launch).

    Phase 1 removes the case's old checkpoints, trains ``case.steps`` steps and saves. A later
    phase loads the newest committed checkpoint, trains its steps (global steps ``start`` ..
    ``end - 1``) and saves unless it is the last. Each phase is compared with the single-device
    baseline trained continuously to ``end`` (``case.compare``); a later phase first with the
    continuous run of its own parallel configuration trained from step 0 in this launch
    (:attr:`meshtest.model.train.Phase.continuity`, exact by default) — the resume check: the
    first step where the resumed run leaves the continuous one is named.
    """
    steps = _Steps(case.name, on_step)
    notes: List[str] = []
    this = case.phase_case(phase.phase)
    start = case.phase_start(phase.phase)
    end = start + this.steps
    root = os.path.join(phase.case_dir, "checkpoints")
    label = f"phase {phase.phase}/{phase.count} (mesh {tuple(this.mesh_shape)})"
    try:
        if phase.phase == 1:
            if backend.rank() == 0:
                checkpoints.wipe(root)
            backend.any_rank(False)  # every rank past the wipe before any saves
        steps.enter(f"phase{phase.phase} baseline")
        base = backend.train(case, mesh, parallel=False, steps=end)
        cont = None
        if phase.phase > 1:
            steps.enter(f"phase{phase.phase} continuous")
            cont = backend.train(this, mesh, parallel=True, steps=end)
        steps.enter(f"phase{phase.phase} {'resume' if phase.phase > 1 else 'train'}")
        run = backend.train(this, mesh, parallel=True, notes=notes, start=start, steps=end,
                            load=root if phase.phase > 1 else None,
                            save=root if phase.phase < phase.count else None)
        steps.enter(f"phase{phase.phase} compare")
        if cont is not None:
            continuity = case.phases[phase.phase - 2].continuity
            compare_runs(case, cont[start:], run, offset=start, spec=continuity,
                         prefix=f"{label}: resumed run vs the continuous run: ")
        compare_runs(case, base[start:], run, offset=start, prefix=f"{label}: vs the single-device baseline: ")
    except (Exception, SystemExit) as e:  # a case's own error must not stop the others
        return _from_exception(e, steps.current, backend, None, None, tuple(notes))
    return _completed(steps.current, None, None, tuple(notes))


def compare_runs(case: TrainCase, base: List[TrainSnapshot], par: List[TrainSnapshot], offset: int = 0,
                 spec: Optional[CompareSpec] = None, prefix: str = "") -> None:
    """Compare the parallel run with the baseline, step by step.

    :param offset: global index of the first step (a later phase's steps are numbered on).
    :param spec: one tolerance for every quantity (a phase's continuity), instead of ``case.compare``.
    :param prefix: text before ``step <i> <quantity> <fqn>: ...`` (the phase and the reference).
    :raises CompareError: at the first difference, naming the step, the quantity and the FQN.
    """
    if len(base) != len(par):
        raise CompareError(f"{prefix}the reference ran {len(base)} step(s), the parallel run {len(par)}")
    for i, (b, p) in enumerate(zip(base, par)):
        for quantity in QUANTITIES:
            tol = case.compare.spec(quantity) if spec is None else spec
            if tol is None:
                continue
            label = f"{prefix}step {offset + i} {quantity}"
            if quantity in ("loss", "grad_norm"):
                _compare_scalar(getattr(b, quantity), getattr(p, quantity), tol, label, whole=not p.partial)
                continue
            _compare_named(getattr(b, quantity), getattr(p, quantity), tol, label, whole=not p.partial)


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
