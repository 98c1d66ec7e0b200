"""One case of any kind run on this rank: the op pipeline, a scenario, or a training case.

The one place that knows every kind: :mod:`meshtest.rank.pipeline` (op and scenario cases) and
:mod:`meshtest.rank.train` (training cases, built on the pipeline's steps) do not import each
other's runners, so neither module depends on the other in both directions.
"""
from __future__ import annotations

import os
from typing import Any

from ..model.spec import ScenarioCase
from ..platforms.backend import ShardBackend
from .pipeline import OnStep, StepResult, run_case, run_scenario
from .train import run_train


def run(case: Any, backend: ShardBackend, mesh: Any, on_step: OnStep = None, phase: Any = None,
        files: Any = None) -> StepResult:
    """Run ``case`` of any kind on this rank (see :func:`meshtest.rank.pipeline.run_case`,
    :func:`meshtest.rank.pipeline.run_scenario`, :func:`meshtest.rank.train.run_train`;
    ``phase``: a :class:`meshtest.rank.train.PhaseRun` for one phase of a phased training case;
    ``files``: its :class:`meshtest.rank.train.CaseFiles`)."""
    if isinstance(case, ScenarioCase):
        return run_scenario(case, backend, mesh, on_step)
    if case.kind == "train":
        return run_train(case, backend, mesh, on_step, phase, files)
    return run_case(case, backend, mesh, on_step, None if files is None else os.path.join(files.case_dir, "checkpoint"))
