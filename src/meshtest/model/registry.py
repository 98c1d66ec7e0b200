"""Registration and loading of case files on the rank side.

``register()`` is what case files call. :func:`load_case_file` imports one file by path and
returns the cases it registered; :func:`check_against_scan` then compares them with the
static scan that planned the run (:mod:`meshtest.model.scan`) and fails loudly on any
difference, so the planner and the ranks can never work from two drifting case lists.
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Union

from ..errors import CaseDeclarationError, CaseFileError
from .scan import FileScan
from .spec import OpShardCase, ScenarioCase
from .train import TrainCase

#: What a case file may register.
Case = Union[OpShardCase, ScenarioCase, TrainCase]


@dataclass(frozen=True)
class BrokenCase:
    """A registered case whose declaration broke a rule (kept by a :class:`Registry` with
    ``keep_broken``): the ranks report it ``error`` at step ``register`` with ``error``, and the
    file's other cases still run.
    """

    name: str
    kind: str
    error: str
    known_failure = None
    timeout_s = None


class Registry:
    """Cases registered while loading one or more case files, keyed by name (unique).

    :param keep_broken: a case whose declaration breaks a rule (other than an unusable name or a
        duplicate) is kept as a :class:`BrokenCase` instead of failing the whole file — how the
        ranks load files, so one bad case does not stop its neighbours.
    """

    def __init__(self, keep_broken: bool = False) -> None:
        self._cases: Dict[str, Union[Case, BrokenCase]] = {}
        self._files: Dict[str, str] = {}
        self.keep_broken = keep_broken

    def add(self, case: Case, file: str) -> Case:
        """Validate and add ``case`` declared in ``file``.

        :raises CaseDeclarationError: a rule is broken (unless ``keep_broken`` and the case has a
            usable name), or rule ``duplicate-name`` when the name is already registered (the
            message names both files).
        """
        if not isinstance(case, (OpShardCase, ScenarioCase, TrainCase)):
            raise CaseDeclarationError(file, None, "register", "register() takes an OpShardCase, a ScenarioCase or a "
                                                               f"TrainCase; got {type(case).__name__}")
        try:
            entry: Union[Case, BrokenCase] = case.validated(file)
        except CaseDeclarationError as e:
            if not self.keep_broken or e.rule == "name":
                raise
            entry = BrokenCase(case.name, case.kind, str(e))
        if entry.name in self._cases:
            raise CaseDeclarationError(
                file, case.name, "duplicate-name", f"already registered by {self._files[case.name]}"
            )
        self._cases[entry.name] = entry
        self._files[entry.name] = file
        return case if isinstance(entry, BrokenCase) else entry

    def cases(self, file: Optional[str] = None) -> List[Union[Case, BrokenCase]]:
        """Registered cases in registration order, optionally only those of ``file``."""
        return [c for n, c in self._cases.items() if file is None or self._files[n] == file]


_ACTIVE: List[tuple] = []  # stack of (registry, file) while a case file is being imported
_DEFAULT = Registry()


def register(case: Case) -> Case:
    """Register ``case`` with the registry of the case file being loaded.

    Case files call this at module top level (the static scan requires it). Outside
    :func:`load_case_file` the case goes to a process-wide default registry.

    :returns: the validated case.
    :raises CaseDeclarationError: see :meth:`Registry.add`.
    """
    if _ACTIVE:
        registry, file = _ACTIVE[-1]
    else:
        registry = _DEFAULT
        file = inspect.stack()[1].filename
    return registry.add(case, file)


def register_sweep(
    *,
    name: str,
    fn,
    inputs,
    mesh_shape,
    partial_inputs=None,
    partial_ops=("sum",),
    max_partial_inputs=None,
    **case_fields,
):
    """Register one :class:`OpShardCase` per valid placement combination of ``inputs`` on the mesh.

    Names, order and skip rules come from :func:`meshtest.model.sweep.plan_sweep` (see there); the
    static scan reads the same call and derives the same cases, so ``name``, ``mesh_shape``,
    ``mesh_dim_names``, ``tags``, ``partial_inputs``, ``partial_ops``, ``max_partial_inputs``
    and each input's shape must be literals. Other keyword arguments (``compare``,
    ``mesh_dim_names``, ``tags``, ``grad_compare``, ...) are passed to every case.

    :returns: the :class:`meshtest.model.sweep.SweepPlan` (cases registered, skips counted by reason).
    :raises CaseDeclarationError: as :func:`register`, for any generated case.
    """
    from .sweep import plan_sweep

    plan = plan_sweep(name, [s.shape for s in inputs], len(mesh_shape), partial_inputs, partial_ops, max_partial_inputs)
    for case_name, placements in plan.cases:
        register(OpShardCase(name=case_name, fn=fn, inputs=inputs, placements=placements, mesh_shape=mesh_shape,
                             **case_fields))
    return plan


@contextlib.contextmanager
def _activate(registry: Registry, file: str) -> Iterator[None]:
    _ACTIVE.append((registry, file))
    try:
        yield
    finally:
        _ACTIVE.pop()


def _module_name(path: str) -> str:
    stem = os.path.splitext(os.path.normpath(path))[0]
    return "meshtest_cases." + "".join(ch if ch.isalnum() else "_" for ch in stem)


def load_case_file(path: str, registry: Registry) -> List[Case]:
    """Import the case file at ``path`` and return the cases it registered into ``registry``.

    :raises CaseDeclarationError: a declaration breaks a rule.
    :raises CaseFileError: rule ``import``: the file raised while being imported (the
        traceback is in the message).
    """
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CaseFileError(path, "import", "not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    with _activate(registry, path):
        try:
            spec.loader.exec_module(module)
        except CaseDeclarationError:
            raise
        except Exception:  # the user's file failed: keep its traceback for the report
            raise CaseFileError(path, "import", "importing the case file raised:\n" + traceback.format_exc()) from None
    return registry.cases(path)


def check_against_scan(scan: FileScan, loaded: List[Case]) -> None:
    """Fail when what ``loaded`` registered differs from what the static scan declared.

    Compares, per case: presence, order, kind, and every static field of the schema
    (:data:`meshtest.model.schema.SCANNED_FIELDS`: mesh shape, axis names, tags, ``needs_mesh``,
    ``solo_launcher``, a scenario's ``requires`` and ``spec_id``).

    :raises CaseFileError: rule ``scan-mismatch``, listing every difference.
    """
    problems = []
    scanned = [c.name for c in scan.cases]
    names = [c.name for c in loaded]
    if scanned != names:
        problems.append(f"static scan found cases {scanned} but importing the file registered {names}")
    by_name = {c.name: c for c in loaded}
    for sc in scan.cases:
        case = by_name.get(sc.name)
        if case is None or isinstance(case, BrokenCase):  # reported on its own, at step `register`
            continue
        got = case.to_scanned(sc.file, sc.lineno)
        if got != sc:
            problems.append(f"case {sc.name!r}: scanned {sc.to_json()} but registered {got.to_json()}")
    if problems:
        raise CaseFileError(scan.path, "scan-mismatch", "; ".join(problems))
