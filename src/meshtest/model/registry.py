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
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

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
    """Cases registered while loading one or more case files, keyed by ``(file, name)``: a name is
    unique within its file (a case's ID is ``file::name``).

    :param keep_broken: a case whose declaration breaks a rule (other than an unusable name or a
        duplicate) is kept as a :class:`BrokenCase` instead of failing the whole file — how the
        ranks load files, so one bad case does not stop its neighbours.
    """

    def __init__(self, keep_broken: bool = False) -> None:
        self._cases: Dict[Tuple[str, str], Union[Case, BrokenCase]] = {}
        self.keep_broken = keep_broken

    def add(self, case: Case, file: str) -> Case:
        """Validate and add ``case`` declared in ``file``.

        :raises CaseDeclarationError: a rule is broken (unless ``keep_broken`` and the case has a
            usable name), or rule ``duplicate-name`` when ``file`` already registered the name.
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
        if (file, entry.name) in self._cases:
            raise CaseDeclarationError(file, case.name, "duplicate-name", f"{file} already registered it")
        self._cases[(file, entry.name)] = entry
        return case if isinstance(entry, BrokenCase) else entry

    def add_broken(self, file: str, name: str, kind: str, error: str) -> None:
        """Keep ``name`` of ``file`` as a :class:`BrokenCase` (its declaring statement raised)."""
        self._cases[(file, name)] = BrokenCase(name, kind, error)

    def cases(self, file: Optional[str] = None) -> List[Union[Case, BrokenCase]]:
        """Registered cases in registration order, optionally only those of ``file``."""
        return [c for (f, _), c in self._cases.items() if file is None or f == file]


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


def register_generated(*, manifest: str) -> int:
    """Register every case of a generator's manifest (:mod:`meshtest.model.generated`), named
    relative to the case file being loaded: each entry is built by the generator's platform
    module (``materialize(entry, manifest_doc)`` → :class:`OpShardCase`), imported only here, on
    the ranks. The static scan reads the same manifest.

    :returns: how many cases were registered.
    :raises CaseDeclarationError: rule ``manifest`` (see :func:`meshtest.model.generated.read_manifest`),
        or as :func:`register` for any entry.
    """
    import importlib

    from .generated import GENERATORS, read_manifest

    if not _ACTIVE:
        raise CaseDeclarationError(inspect.stack()[1].filename, None, "manifest",
                                   "register_generated() must be called from a case file that meshtest loads")
    file = _ACTIVE[-1][1]
    doc = read_manifest(file, manifest)
    materialize = importlib.import_module(GENERATORS[doc["generator"]]).materialize
    for entry in doc["cases"]:
        register(materialize(entry, doc))
    return len(doc["cases"])


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


def load_case_file(path: str, registry: Registry, scan: Optional[FileScan] = None) -> List[Case]:
    """Import the case file at ``path`` and return the cases it registered into ``registry``.

    With ``scan`` (its static scan), the module runs one top-level statement at a time: the
    ``register(...)`` statements the scan found broken (:attr:`FileScan.broken`) are skipped —
    reported on their own, at step ``scan`` — and a ``register(...)`` statement that raises
    (a field the constructor does not take, a helper that fails) makes its cases
    :class:`BrokenCase` (step ``register``, with the traceback) while the file's other cases load.

    :raises CaseDeclarationError: a declaration breaks a rule (without ``scan``, or when the
        registry does not keep broken cases).
    :raises CaseFileError: rule ``import``: a statement other than a registration raised while the
        file was imported (the traceback is in the message).
    """
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CaseFileError(path, "import", "not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    with _activate(registry, path):
        try:
            if scan is None:
                spec.loader.exec_module(module)
            else:
                _exec_statements(path, module, registry, scan)
        except CaseDeclarationError:
            raise
        except Exception:  # the user's file failed: keep its traceback for the report
            raise CaseFileError(path, "import", "importing the case file raised:\n" + traceback.format_exc()) from None
    return registry.cases(path)


def _exec_statements(path: str, module: Any, registry: Registry, scan: FileScan) -> None:
    """Run the module's top-level statements in order (see :func:`load_case_file`)."""
    import __future__

    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    skip = {b.lineno for b in scan.broken}
    declared: Dict[int, List[Any]] = {}
    for c in scan.cases:
        declared.setdefault(c.lineno, []).append(c)
    flags = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            flags |= sum(getattr(__future__, a.name).compiler_flag for a in stmt.names)
        if stmt.lineno in skip:
            continue
        code = compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec", flags=flags, dont_inherit=True)
        if stmt.lineno not in declared or not registry.keep_broken:
            exec(code, module.__dict__)
            continue
        try:
            exec(code, module.__dict__)
        except CaseDeclarationError as e:
            if e.rule == "name":
                raise
            for c in declared[stmt.lineno]:
                registry.add_broken(path, c.name, c.kind, str(e))
        except Exception as e:  # this registration failed: its cases are broken, the others load
            error = (f"{type(e).__name__}: {e} (registering the case at line {stmt.lineno} of {path})\n"
                     f"{traceback.format_exc(limit=-2)}")
            for c in declared[stmt.lineno]:
                registry.add_broken(path, c.name, c.kind, error)


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
