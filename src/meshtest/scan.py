"""Static scan of case files: the case list, meshes and tags, read from the syntax tree.

Planning and the build tool's targets both come from this scan, never from importing the
case files, so the planning process stays light (no torch import) and Pants can compute
tags inside its own process. The ranks later import the files and check what registered
against this scan (:func:`meshtest.registry.check_against_scan`): there is one case list.

What the scan accepts (rule ``static-scan``): ``register(OpShardCase(...))`` calls as
top-level statements of the module, with keyword arguments. ``name``, ``mesh_shape``,
``mesh_dim_names``, ``tags``, ``needs_mesh`` and ``solo_launcher`` must be literals, or
names bound once at module top level to a literal (``MESH = (2, 2)``). Other arguments
(``fn``, ``inputs``, ...) are not read.

This module is imported by the Pants plugin running on CPython 3.9: keep it stdlib-only
and 3.9-compatible.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from . import rules
from .errors import CaseDeclarationError

#: Constructors whose calls inside ``register(...)`` declare cases.
CASE_CONSTRUCTORS = ("OpShardCase",)
_SCANNED_FIELDS = ("name", "mesh_shape", "mesh_dim_names", "tags", "needs_mesh", "solo_launcher")


@dataclass(frozen=True)
class ScannedCase:
    """What the static scan knows of one case (enough to plan and tag it)."""

    file: str
    name: str
    mesh_shape: Tuple[int, ...]
    mesh_dim_names: Optional[Tuple[str, ...]]
    tags: Tuple[str, ...]
    needs_mesh: bool
    solo_launcher: bool
    lineno: int

    @property
    def world_size(self) -> int:
        """``prod(mesh_shape)``."""
        return rules.world_size(self.mesh_shape)

    def to_json(self) -> dict:
        """JSON-able dict; inverse of :meth:`from_json`."""
        return {
            "file": self.file,
            "name": self.name,
            "mesh_shape": list(self.mesh_shape),
            "mesh_dim_names": None if self.mesh_dim_names is None else list(self.mesh_dim_names),
            "tags": list(self.tags),
            "needs_mesh": self.needs_mesh,
            "solo_launcher": self.solo_launcher,
            "lineno": self.lineno,
        }

    @staticmethod
    def from_json(d: dict) -> "ScannedCase":
        names = d.get("mesh_dim_names")
        return ScannedCase(
            file=d["file"],
            name=d["name"],
            mesh_shape=tuple(d["mesh_shape"]),
            mesh_dim_names=None if names is None else tuple(names),
            tags=tuple(d["tags"]),
            needs_mesh=bool(d["needs_mesh"]),
            solo_launcher=bool(d["solo_launcher"]),
            lineno=int(d["lineno"]),
        )


@dataclass(frozen=True)
class FileScan:
    """Result of scanning one case file.

    :ivar cases: scanned cases in file order (empty when ``error`` is set).
    :ivar error: ``None``, or one message per broken rule (newline-separated), each naming
        the file, the case and the rule.
    """

    path: str
    cases: Tuple[ScannedCase, ...]
    error: Optional[str] = None

    @property
    def device_need(self) -> int:
        """Largest world size among the file's cases (0 when it has none)."""
        return max((c.world_size for c in self.cases), default=0)

    def target_tags(self) -> Tuple[str, ...]:
        """Build-target tags: every gate tag of a case, and ``mesh:N`` for each world size N."""
        tags = {t for c in self.cases for t in c.tags}
        tags.update(f"mesh:{c.world_size}" for c in self.cases)
        return tuple(sorted(tags))


def _callee_name(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _module_literals(tree: ast.Module) -> Dict[str, object]:
    """Names bound exactly once at module top level to a literal."""
    seen: Dict[str, int] = {}
    values: Dict[str, object] = {}
    for stmt in tree.body:
        targets: List[ast.AST] = []
        value = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for t in targets:
            if isinstance(t, ast.Name):
                seen[t.id] = seen.get(t.id, 0) + 1
                try:
                    values[t.id] = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    values.pop(t.id, None)
    return {k: v for k, v in values.items() if seen[k] == 1}


def _is_register_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _callee_name(node.func) == "register"


def scan_case_source(path: str, source: str) -> FileScan:
    """Scan one case file's text.

    :param path: the file's path as it should appear in messages and in ``ScannedCase.file``.
    :param source: its text.
    :returns: a :class:`FileScan`; never raises for bad input (errors go to ``.error``).
    """
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        return FileScan(path, (), f"{path}:{e.lineno}: rule syntax: {e.msg}")
    literals = _module_literals(tree)
    errors: List[str] = []
    cases: List[ScannedCase] = []
    top_level_calls = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and _is_register_call(stmt.value):
            top_level_calls.add(id(stmt.value))
            try:
                cases.append(_scan_register_call(path, stmt.value, literals))
            except CaseDeclarationError as e:
                errors.append(f"{e} (line {stmt.lineno})")
    for node in ast.walk(tree):
        if _is_register_call(node) and id(node) not in top_level_calls:
            errors.append(
                f"{path}:{node.lineno}: rule static-scan: register(...) must be a top-level statement "
                "of the case file (not inside a function, loop or expression) so the static scan sees it"
            )
    seen: Dict[str, int] = {}
    for c in cases:
        if c.name in seen:
            errors.append(
                f"{path}: case {c.name!r}: rule duplicate-name: declared at line {seen[c.name]} and again at line {c.lineno}"
            )
        seen.setdefault(c.name, c.lineno)
    if errors:
        return FileScan(path, (), "\n".join(errors))
    return FileScan(path, tuple(cases))


def scan_case_file(path: str) -> FileScan:
    """Read and scan ``path`` (see :func:`scan_case_source`); unreadable files give ``.error``."""
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        return FileScan(path, (), f"{path}: rule readable: cannot read case file: {e.strerror}")
    return scan_case_source(path, source)


def _check_placement_shapes(path: str, name: str, mesh_shape: Tuple[int, ...], kw: Dict[str, ast.AST]) -> None:
    """Rules ``placement-count`` and ``placement-arity`` where ``placements=`` (and ``inputs=``)
    are written as list/tuple displays, so such mistakes fail at target generation rather than
    after a launch. Anything else is left to registration on the ranks."""
    placements = kw.get("placements")
    if not isinstance(placements, (ast.List, ast.Tuple)):
        return
    inputs = kw.get("inputs")
    if isinstance(inputs, (ast.List, ast.Tuple)) and len(inputs.elts) != len(placements.elts):
        raise rules.placement_count_error(path, name, len(inputs.elts), len(placements.elts))
    for i, per_input in enumerate(placements.elts):
        if isinstance(per_input, (ast.List, ast.Tuple)) and len(per_input.elts) != len(mesh_shape):
            text = ast.unparse(per_input) if hasattr(ast, "unparse") else f"with {len(per_input.elts)} placement(s)"
            raise rules.placement_arity_error(path, name, f"inputs[{i}]", text, mesh_shape)


def _scan_register_call(path: str, call: ast.Call, literals: Dict[str, object]) -> ScannedCase:
    lineno = call.lineno
    if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Call):
        raise CaseDeclarationError(path, None, "static-scan", "register() takes exactly one OpShardCase(...) call")
    ctor = call.args[0]
    if _callee_name(ctor.func) not in CASE_CONSTRUCTORS:
        raise CaseDeclarationError(
            path, None, "static-scan",
            f"register() argument must be written as {' or '.join(CASE_CONSTRUCTORS)}(...) directly",
        )
    if ctor.args:
        raise CaseDeclarationError(path, None, "static-scan", "OpShardCase(...) arguments must be given by keyword")
    kw = {k.arg: k.value for k in ctor.keywords if k.arg is not None}
    values: Dict[str, object] = {}
    case_name = None
    for fname in _SCANNED_FIELDS:
        if fname not in kw:
            continue
        node = kw[fname]
        try:
            values[fname] = ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            if isinstance(node, ast.Name) and node.id in literals:
                values[fname] = literals[node.id]
            else:
                raise CaseDeclarationError(
                    path, case_name, "static-scan",
                    f"{fname}= must be a literal (or a name bound once at module top level to a literal) "
                    f"so targets can be tagged without importing the file; got `{ast.unparse(node) if hasattr(ast, 'unparse') else type(node).__name__}`",
                )
        if fname == "name":
            case_name = values["name"] if isinstance(values["name"], str) else None
    for required in ("name", "mesh_shape"):
        if required not in values:
            raise CaseDeclarationError(path, case_name, "static-scan", f"OpShardCase needs {required}=")
    name = rules.check_name(path, values["name"])
    mesh_shape = rules.check_mesh_shape(path, name, values["mesh_shape"])
    _check_placement_shapes(path, name, mesh_shape, kw)
    return ScannedCase(
        file=path,
        name=name,
        mesh_shape=mesh_shape,
        mesh_dim_names=rules.check_mesh_dim_names(path, name, mesh_shape, values.get("mesh_dim_names")),
        tags=rules.check_tags(path, name, values.get("tags", ())),
        needs_mesh=rules.check_flag(path, name, "needs_mesh", values.get("needs_mesh", False)),
        solo_launcher=rules.check_flag(path, name, "solo_launcher", values.get("solo_launcher", False)),
        lineno=lineno,
    )
