"""A training case on one rank: ``features → baseline → parallel → compare`` (the training net's layer 2).

The platform trains twice (:meth:`meshtest.platforms.backend.ShardBackend.train`): the plain
model, then the parallelized one, on the same seeded weights and data. The comparison — what,
in which order, with which tolerance, and what a failure says — is shared policy and lives here:
per step, in :data:`meshtest.model.train.QUANTITIES` order, every parameter by fully-qualified
name. A failure reads ``step 1 grads layers.0.weight: 3 of 16 elements outside rtol=1e-05
atol=1e-06; max abs diff ...`` (the report adds the ranks).

Three variations (the training net's layer 4: long runs, resume, regressions): one phase of a case that trains across
launches
(:func:`run_phase`: save, stop, load, judged against the continuous run), a long run
(:func:`run_stability`: finite values, bounded peak RSS, a curve per rank), and the golden loss
curve every layer-2/3 case is compared with (:func:`check_golden`).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from .. import checkpoints
from ..model.compare_spec import CompareSpec
from ..model.rules import GOLDEN_LAYERS, NO_GOLDEN_NOTE
from ..model.train import QUANTITIES, TrainCase
from ..platforms.backend import ShardBackend
from ..platforms.ports import TrainSnapshot
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


@dataclass(frozen=True)
class CaseFiles:
    """Where a training case keeps files on this rank.

    :ivar case_dir: the case's directory (``<cases_dir>/<case name>``): ``losses_rank<r>.json``
        (every run: the parallel run's losses and grad norms per step and the single-device
        baseline's), ``curve_rank<r>.json`` (long runs), ``checkpoints/`` (phases).
    :ivar golden: the case's stored golden curve, ``<case file's dir>/golden/<case name>.json``.
    :ivar source: the case file (named in the command that regenerates its golden curve).
    """

    case_dir: str
    golden: str
    source: str = ""




def run_train(case: TrainCase, backend: ShardBackend, mesh: Any, on_step: OnStep = None,
              phase: Optional[PhaseRun] = None, files: Optional[CaseFiles] = None) -> StepResult:
    """Run one training case on this rank (statuses as :mod:`meshtest.rank.pipeline`); with
    ``phase``, one phase of it (:func:`run_phase`); with ``case.stability``, a long run
    (:func:`run_stability`). With ``files``, the parallel run's losses are written to the case's
    directory and, for a layer-2/3 case, compared with its golden curve (:func:`check_golden`)."""
    missing = [f for f in ("training",) + tuple(case.requires) if f not in backend.features()]
    if missing:
        return StepResult(Status.UNSUPPORTED, "features",
                          f"unsupported on platform {backend.platform}: missing feature(s) {', '.join(missing)}")
    if phase is not None:
        return run_phase(case, backend, mesh, phase, on_step, files)
    if case.stability is not None:
        return run_stability(case, backend, mesh, files, on_step)
    steps = _Steps(case.name, on_step)
    notes: List[str] = []
    expect = case.expect_raises
    try:
        steps.enter("baseline")
        base = backend.train(case, mesh, parallel=False)
        steps.enter("parallel")
        par = backend.train(case, mesh, parallel=True, notes=notes)
        if files is not None:  # the report draws losses and grad norms against the baseline's
            _write(files.case_dir, f"losses_rank{backend.rank()}.json",
                   {"case": case.name, "build": backend.build_info(), "losses": _losses(par),
                    "baseline": _losses(base), "grad_norm": _grad_norms(par), "baseline_grad_norm": _grad_norms(base)})
        steps.enter("compare")
        compare_runs(case, base, par)
        if files is not None and case.layer in GOLDEN_LAYERS:
            steps.enter("golden")
            check_golden(case, par, files.golden, backend.build_info(), notes, source=files.source)
    except (Exception, SystemExit) as e:  # a case's own error must not stop the others
        return _from_exception(e, steps.current, backend, expect, "parallel", tuple(notes))
    return _completed(steps.current, expect, "parallel", tuple(notes))


def _losses(snaps: List[TrainSnapshot]) -> List[Optional[float]]:
    """Per-step losses as Python floats (``repr`` round-trips a float32 value exactly)."""
    return [None if s.loss is None else float(np.float32(s.loss)) for s in snaps]


def _grad_norms(snaps: List[TrainSnapshot]) -> List[Optional[float]]:
    """Per-step total gradient norms (``clip_grad_norm``'s), ``None`` where a step has none."""
    return [None if s.grad_norm is None else float(np.float32(s.grad_norm)) for s in snaps]


def _write(directory: str, name: str, doc: Dict[str, Any]) -> None:
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(directory, name))


def check_golden(case: TrainCase, par: List[TrainSnapshot], path: str, build: Dict[str, str], notes: List[str],
                 start: int = 0, source: str = "") -> None:
    """Compare the parallel run's loss trajectory with the stored golden curve at ``path``
    (``par`` is global steps ``start`` .. ``start + len(par) - 1`` of it: one phase's steps; the
    curve has every step of the case, all phases).

    Exact (float32 equality) when the golden curve was recorded with the same build
    (:meth:`ShardBackend.build_info`) — a new torch release that changes a curve fails here,
    naming the case; when only the CPU code path differs (``cpu_capability``: AVX2 against
    AVX512 kernels round differently), within the case's loss tolerance. Every comparison made
    leaves a note (``golden curve: 3 step(s) equal to ...``), so a run's results show it happened.

    The curves of a case file live in its directory's ``golden/``. No curve for this case there —
    or no ``golden/`` at all, a case directory that has none yet — means the case is new: a note
    (:data:`meshtest.model.train.NO_GOLDEN_NOTE`) the closing summary lists once
    (``src/tests/test_golden.py`` requires a curve for every layer-2/3 case of the repository).
    A committed curve that a run could not read (a Pants target without its ``golden`` files)
    is caught where the repository is in view: ``tools/results_summary.py`` fails on a passing
    case whose committed curve its outcome does not record as compared.

    :raises CompareError: the file is unreadable, or at the first
        step whose loss differs, naming both values and builds, and the command that regenerates
        the curves of ``source`` (the case file).
    """
    regenerate = " ".join(["python3 tools/golden_curves.py --write", source]).rstrip()
    if not os.path.exists(path):  # its golden/ directory too: a new case directory has none yet
        notes.append(f"{NO_GOLDEN_NOTE} ({regenerate} records one)")
        return
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise CompareError(f"golden curve {path} cannot be read: {e}") from None
    mine = _losses(par)
    if all(v is None for v in mine):  # a pipeline stage before the last computes no loss
        return
    stored = doc.get("losses")
    fix = f"; if the change is expected, regenerate: {regenerate}"
    total = case.total_steps()
    if isinstance(stored, list) and len(stored) == total:
        stored = stored[start:start + len(mine)]
    else:
        what = f"no curve ({doc['no_curve']})" if "no_curve" in doc else f"{len(stored or ())} step(s)"
        raise CompareError(f"golden curve {path}: stores {what}, the case trains {total} step(s){fix}")
    recorded = doc.get("build", {})
    versions_equal = all(recorded.get(k) == v for k, v in build.items() if k != "cpu_capability")
    exact = recorded == build or not versions_equal
    for i, (got, want) in enumerate(zip(mine, stored), start=start):
        if got is None or want is None:
            continue
        if exact and np.float32(got) != np.float32(want):
            raise CompareError(f"golden curve {path}: step {i} loss {got!r} != stored {want!r} (stored with "
                               f"{recorded}; this run {build}){fix}")
        if not exact and case.compare.loss is not None:
            compare_arrays(np.float32(want), np.float32(got), "float32", "float32", case.compare.loss,
                           label=f"golden curve {path}: step {i} loss")
    compared = sum(got is not None and want is not None for got, want in zip(mine, stored))
    how = "equal to" if exact else f"within the loss tolerance of (recorded with {recorded}, this run {build})"
    notes.append(f"golden curve: {compared} step(s) from step {start} {how} {os.path.basename(path)}")


def run_stability(case: TrainCase, backend: ShardBackend, mesh: Any, files: Optional[CaseFiles],
                  on_step: OnStep = None) -> StepResult:
    """A long run (:class:`meshtest.model.train.Stability`): train ``case.steps`` steps, write
    ``curve_rank<r>.json`` (loss, peak RSS KiB, seconds per step), then check every step finite
    and the peak RSS growth after warm-up within the bound. Failures name the step."""
    steps = _Steps(case.name, on_step)
    notes: List[str] = []
    stab = case.stability
    try:
        steps.enter("long run")
        snaps = backend.train(case, mesh, parallel=True, notes=notes, light=True)
        rss = [s.rss_kb for s in snaps]
        if files is not None:
            _write(files.case_dir, f"curve_rank{backend.rank()}.json",
                   {"case": case.name, "rank": backend.rank(), "build": backend.build_info(),
                    "loss": _losses(snaps), "rss_kb": rss,
                    "wall_s": [s.wall_s for s in snaps], "warmup": stab.warmup, "rss_growth_mb": stab.rss_growth_mb})
        steps.enter("stability")
        for i, s in enumerate(snaps):
            if s.loss is not None and not math.isfinite(float(s.loss)):
                raise CompareError(f"step {i}: loss is {float(s.loss)}")
            if s.finite is False:
                raise CompareError(f"step {i}: a gradient or parameter of this rank is NaN/Inf")
        growth = (rss[-1] - rss[stab.warmup - 1]) / 1024
        after = snaps[stab.warmup:]
        rate = len(after) / max(sum(s.wall_s for s in after), 1e-9)
        notes.append(f"{len(snaps)} steps; {rate:.0f} steps/s after warm-up; peak RSS {rss[-1] / 1024:.0f} MiB, "
                     f"+{growth:.2f} MiB from step {stab.warmup} to {len(snaps) - 1}")
        if growth > stab.rss_growth_mb:
            raise CompareError(f"peak RSS grew {growth:.2f} MiB from step {stab.warmup} to step {len(snaps) - 1} "
                               f"(bound {stab.rss_growth_mb} MiB): {rss[stab.warmup - 1]} KiB -> {rss[-1]} KiB")
    except (Exception, SystemExit) as e:  # a case's own error must not stop the others
        return _from_exception(e, steps.current, backend, None, None, tuple(notes))
    return _completed(steps.current, None, None, tuple(notes))


def run_phase(case: TrainCase, backend: ShardBackend, mesh: Any, phase: PhaseRun, on_step: OnStep = None,
              files: Optional[CaseFiles] = None) -> StepResult:
    """Phase ``phase.phase`` of a phased case on this rank (collective over the launch).

    Phase 1 removes the case's old checkpoints, trains ``case.steps`` steps and saves. A later
    phase loads the newest committed checkpoint, trains its steps (global steps ``start`` ..
    ``end - 1``) and saves unless it is the last. Each phase is compared with the single-device
    baseline trained continuously to ``end`` (``case.compare``); a later phase first with the
    continuous run of its own parallel configuration trained from step 0 in this launch
    (:attr:`meshtest.model.train.Phase.continuity`, exact by default) — the resume check: the
    first step where the resumed run leaves the continuous one is named. With ``files``, the
    phase's losses go to ``losses_rank<r>.phase<i>.json`` and a layer-2/3 case compares them with
    its golden curve's steps ``start`` .. ``end - 1`` (the curve of the whole trajectory).
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
        if files is not None:
            _record_phase(case, backend, run, files, phase.phase, start, steps, notes)
    except (Exception, SystemExit) as e:  # a case's own error must not stop the others
        return _from_exception(e, steps.current, backend, None, None, tuple(notes))
    return _completed(steps.current, None, None, tuple(notes))


def _record_phase(case: TrainCase, backend: ShardBackend, run: List[TrainSnapshot], files: CaseFiles, phase: int,
                  start: int, steps: _Steps, notes: List[str]) -> None:
    """A phase's losses to ``losses_rank<r>.phase<i>.json``; a layer-2/3 case's golden check."""
    _write(files.case_dir, f"losses_rank{backend.rank()}.phase{phase}.json",
           {"case": case.name, "build": backend.build_info(), "start": start, "losses": _losses(run)})
    if case.layer in GOLDEN_LAYERS:
        steps.enter(f"phase{phase} golden")
        check_golden(case, run, files.golden, backend.build_info(), notes, start=start, source=files.source)


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
