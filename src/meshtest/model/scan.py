"""Static scan of case files: the case list, meshes and tags, read from the syntax tree.

Planning and the build tool's targets both come from this scan, never from importing the
case files, so the planning process stays light (no torch import) and Pants can compute
tags inside its own process. The ranks later import the files and check what registered
against this scan (:func:`meshtest.model.registry.check_against_scan`): there is one case list.

What the scan accepts (rule ``static-scan``): ``register(OpShardCase(...))``,
``register(ScenarioCase(...))`` (also reading ``requires`` and ``spec_id``) and
``register_sweep(...)`` calls as top-level statements of the module, with keyword arguments.
For a sweep, the input shapes (``InputSpec((4, 8), ...)`` or ``shape=``) and the sweep's own
options are read too, and :func:`meshtest.model.sweep.plan_sweep` derives its cases. ``name``, ``mesh_shape``,
``mesh_dim_names``, ``tags``, ``needs_mesh``, ``solo_launcher`` and ``known_failure`` must be
literals (``known_failure``: a ``KnownFailure(...)`` call with literal keywords), or names bound
once at module top level to one (``MESH = (2, 2)``). Other arguments
(``fn``, ``inputs``, ...) are not read.

This module is imported by the Pants plugin running on CPython 3.9: keep it stdlib-only
and 3.9-compatible.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import CaseDeclarationError
from . import rules, schema
from .known import KnownFailure

#: Constructors whose calls inside ``register(...)`` declare cases (the schema table's kinds).
CASE_CONSTRUCTORS = tuple(schema.KINDS)
#: Registration functions the scan understands, as top-level statements.
REGISTER_CALLS = ("register", "register_sweep", "register_generated")


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
    #: ``"op"`` (:class:`meshtest.model.spec.OpShardCase`) or ``"scenario"`` (``ScenarioCase``)
    kind: str = "op"
    #: platform features a scenario requires
    requires: Tuple[str, ...] = ()
    #: test-plan ID the case implements, e.g. ``"A6"``
    spec_id: Optional[str] = None
    #: capability domains the case covers (:data:`meshtest.model.rules.CAPABILITIES`)
    capabilities: Tuple[str, ...] = ()
    #: its layer of the training quality net (0-4), or ``None``
    layer: Optional[int] = None
    #: a training case with phases (``TrainCase(phases=...)``): every phase's (mesh shape, axis
    #: names), phase 1 first; ``()`` for a case that runs in one launch
    phase_meshes: Tuple[Tuple[Tuple[int, ...], Optional[Tuple[str, ...]]], ...] = ()
    #: set by the planner on the copy of a phased case that one launch runs (1-based); that copy's
    #: ``mesh_shape`` and ``mesh_dim_names`` are the phase's
    phase: Optional[int] = None
    #: why the one-process lane cannot run the case (``OpShardCase(simulation_limit=...)``)
    simulation_limit: Optional[str] = None
    #: the failure the platform is known to have on the case (:class:`meshtest.model.known.KnownFailure`)
    known_failure: Optional[KnownFailure] = None

    @property
    def world_size(self) -> int:
        """``prod(mesh_shape)``."""
        return rules.world_size(self.mesh_shape)

    @property
    def id(self) -> str:
        """The case's ID, ``file::name`` (:func:`case_id`): what the ranks and the runner key it by."""
        return case_id(self.file, self.name)

    @property
    def device_need(self) -> int:
        """Ranks the case needs at once: its world size, or its largest phase's."""
        return max([self.world_size] + [rules.world_size(shape) for shape, _ in self.phase_meshes])

    def filter_tags(self, node_slots: int = rules.DEFAULT_NODE_SLOTS) -> Tuple[str, ...]:
        """The tags ``--tag`` filters see, on its build target and on the case itself: its gate
        tags, ``mesh:<world size>`` (of every phase), ``nodes:<n>`` when its largest mesh needs
        more than one node of ``node_slots`` slots (:func:`meshtest.model.rules.nodes_needed`),
        ``cap:<domain>`` for each capability, ``layer:<n>``, and
        :data:`meshtest.model.rules.LOCAL_LANE_TAG` (``cpu_local``) on a ``cpu_level0`` case the
        one-process lane runs."""
        sizes = sorted({self.world_size} | {rules.world_size(shape) for shape, _ in self.phase_meshes})
        nodes = rules.nodes_needed(self.device_need, node_slots)
        return (tuple(self.tags) + tuple(f"mesh:{n}" for n in sizes) + ((f"nodes:{nodes}",) if nodes > 1 else ())
                + tuple(f"cap:{c}" for c in self.capabilities)
                + ((f"layer:{self.layer}",) if self.layer is not None else ())
                + ((rules.LOCAL_LANE_TAG,) if self.local_lane else ()))

    @property
    def runs_locally(self) -> bool:
        """Whether the one-process lane can run the case (:func:`meshtest.model.rules.runs_locally`)."""
        return rules.runs_locally(self.kind, self.layer, bool(self.phase_meshes), self.simulation_limit)

    @property
    def local_lane(self) -> bool:
        """Whether ``--tag=cpu_local`` selects the case: it runs locally and is ``cpu_level0`` (or
        declares ``cpu_local`` as its gate)."""
        return self.runs_locally and (rules.LOCAL_LANE_GATE in self.tags or rules.LOCAL_LANE_TAG in self.tags)

    def to_json(self) -> dict:
        """JSON-able dict (tuples as lists); inverse of :meth:`from_json`."""
        doc = {k: _lists(v) for k, v in self.__dict__.items()}
        doc["known_failure"] = None if self.known_failure is None else self.known_failure.to_json()
        return doc

    @staticmethod
    def from_json(d: dict) -> "ScannedCase":
        """:raises ValueError: unknown fields; ``KeyError``: a required field is missing."""
        unknown = sorted(set(d) - set(ScannedCase.__dataclass_fields__))
        if unknown:
            raise ValueError(f"scanned case {d.get('name')!r}: unknown field(s) {', '.join(unknown)}")
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
            kind=d["kind"],
            requires=tuple(d["requires"]),
            spec_id=d["spec_id"],
            capabilities=tuple(d["capabilities"]),
            layer=d["layer"],
            phase_meshes=tuple((tuple(shape), None if names is None else tuple(names))
                               for shape, names in d.get("phase_meshes", ())),
            phase=d.get("phase"),
            simulation_limit=d.get("simulation_limit"),
            known_failure=None if d.get("known_failure") is None else KnownFailure.from_json(d["known_failure"]),
        )


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def case_id(file: str, name: str) -> str:
    """A case's ID: ``file::name`` (a name is unique within its file; two files may share it)."""
    return f"{file}::{name}"


def name_of(case: str) -> str:
    """The name in a case ID (``file::name`` → ``name``), for messages people read."""
    return case.rsplit("::", 1)[-1]


_OWN_FIELDS = ("file", "lineno", "kind", "phase_meshes", "phase")
if set(ScannedCase.__dataclass_fields__) != set(_OWN_FIELDS + schema.SCANNED_FIELDS):  # pragma: no cover
    raise TypeError(f"ScannedCase fields {sorted(ScannedCase.__dataclass_fields__)} differ from the schema's "
                    f"static fields {schema.SCANNED_FIELDS} + {_OWN_FIELDS}")


@dataclass(frozen=True)
class BrokenDeclaration:
    """One ``register(...)`` statement of a case file whose declaration breaks a rule: that case
    fails alone (``error`` at step ``scan``), the file's other cases run.

    :ivar name: the case's name when the scan could read it, else ``None``.
    :ivar lineno: the statement's first line (the ranks skip it when they import the file).
    :ivar error: the message, naming the file, the case and the rule.
    """

    file: str
    lineno: int
    name: Optional[str]
    error: str

    @property
    def label(self) -> str:
        """How reports name it: the case's name, or ``<line N>``."""
        return self.name or f"<line {self.lineno}>"


#: The tag a target gets when one of its cases (or the file) fails the scan, besides every gate.
SCAN_ERROR_TAG = "meshtest:parse_error"


@dataclass(frozen=True)
class FileScan:
    """Result of scanning one case file.

    :ivar cases: the valid cases in file order (empty when ``error`` is set).
    :ivar error: ``None``, or why the file as a whole cannot be read (a syntax error, a
        ``register`` call that is not a top-level statement): then no case of it can run.
    :ivar notes: one line per sweep: cases generated and combinations skipped by reason.
    :ivar broken: declarations that break a rule, each failing alone (:class:`BrokenDeclaration`).
    """

    path: str
    cases: Tuple[ScannedCase, ...]
    error: Optional[str] = None
    notes: Tuple[str, ...] = ()
    broken: Tuple[BrokenDeclaration, ...] = ()

    @property
    def errors(self) -> str:
        """Every message, the file's and each broken declaration's, one per line (``""``: none)."""
        return "\n".join([self.error] if self.error else [b.error for b in self.broken])

    @property
    def device_need(self) -> int:
        """Largest world size among the file's cases (0 when it has none)."""
        return max((c.device_need for c in self.cases), default=0)

    def target_tags(self, node_slots: int = rules.DEFAULT_NODE_SLOTS) -> Tuple[str, ...]:
        """Build-target tags: every tag a case answers to (:meth:`ScannedCase.filter_tags` with a
        node of ``node_slots`` slots); with a broken declaration, also every gate and
        :data:`SCAN_ERROR_TAG`, so that any gate's run selects the file and the broken case fails
        loudly instead of dropping out."""
        tags = {t for c in self.cases for t in c.filter_tags(node_slots)}
        if self.broken:
            tags |= set(rules.GATE_TAGS) | {SCAN_ERROR_TAG}
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
                    if _is_known_failure_call(value):
                        values[t.id] = value  # a KnownFailure(...) call: read where a case names it
    return {k: v for k, v in values.items() if seen[k] == 1}


def _is_known_failure_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _callee_name(node.func) == "KnownFailure"


def _known_failure(path: str, case: Optional[str], node: ast.Call, literals: Dict[str, object]) -> KnownFailure:
    """A ``KnownFailure(kind=..., ...)`` call with literal keywords (or names bound to literals)."""
    if node.args or any(k.arg is None for k in node.keywords):
        raise CaseDeclarationError(path, case, "known-failure",
                                   "KnownFailure(...) arguments must be given by keyword, as literals")
    kw = {k.arg: _literal(path, case, f"KnownFailure {k.arg}=", k.value, literals) for k in node.keywords}
    try:
        return KnownFailure(**kw)  # type: ignore[arg-type]
    except TypeError as e:
        raise CaseDeclarationError(path, case, "known-failure", f"KnownFailure(...): {e}") from None


def _is_register_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _callee_name(node.func) in REGISTER_CALLS


def scan_case_source(path: str, source: str, read: Optional[Callable[[str], str]] = None) -> FileScan:
    """Scan one case file's text.

    :param path: the file's path as it should appear in messages and in ``ScannedCase.file``.
    :param source: its text.
    :param read: ``read(path) -> text`` for the manifest a ``register_generated(manifest=...)``
        names (:mod:`meshtest.model.generated`); default: the file system.
    :returns: a :class:`FileScan`; never raises for bad input (errors go to ``.error``).
    """
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        return FileScan(path, (), f"{path}:{e.lineno}: rule syntax: {e.msg}")
    literals = _module_literals(tree)
    errors: List[str] = []
    cases: List[ScannedCase] = []
    notes: List[str] = []
    broken: List[BrokenDeclaration] = []
    seen: Dict[str, int] = {}
    top_level_calls = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and _is_register_call(stmt.value):
            top_level_calls.add(id(stmt.value))
            try:
                if _callee_name(stmt.value.func) == "register_sweep":
                    found, note = _scan_sweep_call(path, stmt.value, literals)
                elif _callee_name(stmt.value.func) == "register_generated":
                    found, note = _scan_generated_call(path, stmt.value, literals, read)
                else:
                    found, note = [_scan_register_call(path, stmt.value, literals)], None
                _check_unique(path, found, seen)
            except CaseDeclarationError as e:
                broken.append(BrokenDeclaration(path, stmt.lineno, e.case or _declared_name(stmt.value, literals),
                                                f"{e} (line {stmt.lineno})"))
                continue
            cases.extend(found)
            notes.extend([note] if note else [])
            seen.update((c.name, c.lineno) for c in found)
    for node in ast.walk(tree):
        if _is_register_call(node) and id(node) not in top_level_calls:
            errors.append(
                f"{path}:{node.lineno}: rule static-scan: register(...) must be a top-level statement "
                "of the case file (not inside a function, loop or expression) so the static scan sees it"
            )
    if errors:
        return FileScan(path, (), "\n".join(errors))
    return FileScan(path, tuple(cases), notes=tuple(notes), broken=tuple(broken))


def _check_unique(path: str, found: Sequence[ScannedCase], seen: Dict[str, int]) -> None:
    """Rule ``duplicate-name``: a name declared twice in one file (the same name in two files is
    two cases, ``file::name``); the later declaration is the broken one, naming both lines."""
    for c in found:
        if c.name in seen:
            raise CaseDeclarationError(path, c.name, "duplicate-name",
                                       f"declared at line {seen[c.name]} and again at line {c.lineno}")


def _declared_name(call: ast.Call, literals: Dict[str, object]) -> Optional[str]:
    """The ``name=`` a broken declaration gives (a literal string), if it can be read."""
    ctor = call.args[0] if call.args and isinstance(call.args[0], ast.Call) else call
    node = next((k.value for k in ctor.keywords if k.arg == "name"), None)
    try:
        value = ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = literals.get(node.id) if isinstance(node, ast.Name) else None
    return value if isinstance(value, str) and value else None


def _scan_generated_call(path: str, call: ast.Call, literals: Dict[str, object],
                         read: Optional[Callable[[str], str]]) -> Tuple[List[ScannedCase], str]:
    """The cases of ``register_generated(manifest="...")``: every entry of the manifest
    (:func:`meshtest.model.generated.read_manifest`), an op case declared at the call's line."""
    from .generated import read_manifest

    if call.args or [k.arg for k in call.keywords] != ["manifest"]:
        raise CaseDeclarationError(path, None, "static-scan", 'register_generated takes manifest="<file>.json" only')
    doc = read_manifest(path, _literal(path, None, "manifest=", call.keywords[0].value, literals), read)
    cases = []
    for entry in doc["cases"]:
        name = rules.check_name(path, entry["name"])
        mesh_shape = rules.check_mesh_shape(path, name, entry["mesh_shape"])
        known = entry["known_failure"]
        try:
            known = None if known is None else KnownFailure.from_json(known)
        except TypeError as e:
            raise CaseDeclarationError(path, name, "known-failure", f"manifest entry: {e}") from None
        values = {**schema.OP.fixed, "tags": entry["tags"], "known_failure": known,
                  "simulation_limit": entry.get("simulation_limit")}
        cases.append(_scanned(path, name, mesh_shape, values, call.lineno))
    return cases, f"{path}: {len(cases)} case(s) generated by {doc['generator']} ({doc['family']})"


def generated_manifest(path: str) -> Optional[str]:
    """The ``manifest=`` of the top-level ``register_generated(...)`` statement of the case file
    ``path`` (read as the scan reads it: a literal or a module-level name bound to one), or
    ``None``: a hand-written case file, or one that cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    literals = _module_literals(tree)
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and _callee_name(call.func) == "register_generated":
            node = next((k.value for k in call.keywords if k.arg == "manifest"), None)
            try:
                value = None if node is None else _literal(path, None, "manifest=", node, literals)
            except CaseDeclarationError:
                return None
            return value if isinstance(value, str) else None
    return None


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


def _check_known_fields(path: str, name: str, kind: schema.CaseKind, kw: Dict[str, ast.AST]) -> None:
    """Rule ``unknown-field``: a misspelt or foreign field (``needs_mesh=`` on a ScenarioCase)
    fails at target generation, naming the case."""
    unknown = sorted(set(kw) - set(kind.names))
    if unknown:
        raise CaseDeclarationError(path, name, "unknown-field",
                                   f"{kind.constructor} has no field(s) {', '.join(unknown)}; its fields are "
                                   f"{', '.join(kind.names)}")


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
    kind = schema.KINDS[_callee_name(ctor.func)]
    kw, values, name, mesh_shape = _keyword_call(path, ctor, kind.static_names, literals, kind.constructor)
    _check_known_fields(path, name, kind, kw)
    if kind is schema.OP:
        _check_placement_shapes(path, name, mesh_shape, kw)
    scanned = _scanned(path, name, mesh_shape, {**kind.fixed, **values}, lineno, kind=kind.kind)
    if kind is schema.TRAIN and "phases" in kw:
        scanned = replace(scanned, phase_meshes=_phase_meshes(path, scanned, kw["phases"], literals))
    return scanned


def _phase_meshes(path: str, case: ScannedCase, node: ast.AST, literals: Dict[str, object]):
    """Every phase's (mesh shape, axis names) of ``phases=(Phase(steps=..., mesh_shape=...), ...)``,
    written out as a tuple or list of ``Phase`` calls; a phase without ``mesh_shape=`` has the
    case's mesh; without ``mesh_dim_names=``, the case's axis names when its mesh has as many
    dimensions (:class:`meshtest.model.train.Phase`)."""
    if not isinstance(node, (ast.Tuple, ast.List)) or not node.elts:
        raise CaseDeclarationError(path, case.name, "static-scan",
                                   "phases= must be a tuple of Phase(...) calls written out, at least one")
    meshes = [(case.mesh_shape, case.mesh_dim_names)]
    for i, elt in enumerate(node.elts, start=2):
        if not (isinstance(elt, ast.Call) and _callee_name(elt.func) == "Phase") or elt.args:
            raise CaseDeclarationError(path, case.name, "static-scan",
                                       f"phase {i} must be written as Phase(steps=..., mesh_shape=...) with keywords")
        kw = {k.arg: k.value for k in elt.keywords if k.arg is not None}
        shape = case.mesh_shape
        if "mesh_shape" in kw:
            shape = rules.check_mesh_shape(path, case.name, _literal(path, case.name, f"phase {i} mesh_shape=",
                                                                      kw["mesh_shape"], literals))
        names = case.mesh_dim_names if len(shape) == len(case.mesh_shape) else None
        if "mesh_dim_names" in kw:
            names = _literal(path, case.name, f"phase {i} mesh_dim_names=", kw["mesh_dim_names"], literals)
        meshes.append((shape, rules.check_mesh_dim_names(path, case.name, shape, names)))
    return tuple(meshes)


def _keyword_call(path: str, call: ast.Call, fields: Sequence[str], literals: Dict[str, object], callee: str):
    """Keyword nodes, literal values of ``fields``, checked name and mesh shape of a declaring call."""
    if call.args:
        raise CaseDeclarationError(path, None, "static-scan", f"{callee}(...) arguments must be given by keyword")
    kw = {k.arg: k.value for k in call.keywords if k.arg is not None}
    values = _literal_fields(path, kw, fields, literals, callee)
    name = rules.check_name(path, values["name"])
    return kw, values, name, rules.check_mesh_shape(path, name, values["mesh_shape"])


def _scanned(path: str, name: str, mesh_shape: Tuple[int, ...], values: Dict[str, object], lineno: int,
             kind: str = "op") -> ScannedCase:
    return ScannedCase(
        file=path,
        name=name,
        mesh_shape=mesh_shape,
        mesh_dim_names=rules.check_mesh_dim_names(path, name, mesh_shape, values.get("mesh_dim_names")),
        tags=rules.check_tags(path, name, values.get("tags", ())),
        needs_mesh=rules.check_flag(path, name, "needs_mesh", values.get("needs_mesh", False)),
        solo_launcher=rules.check_flag(path, name, "solo_launcher", values.get("solo_launcher", False)),
        lineno=lineno,
        kind=kind,
        requires=rules.check_requires(path, name, values.get("requires", ())),
        spec_id=rules.check_spec_id(path, name, values.get("spec_id")),
        capabilities=rules.check_capabilities(path, name, values.get("capabilities", ())),
        layer=rules.check_layer(path, name, values.get("layer")),
        simulation_limit=rules.check_reason(path, name, "simulation_limit", values.get("simulation_limit")),
        known_failure=rules.check_known_failure(path, name, values.get("known_failure")),
    )


def _literal(path: str, case: Optional[str], what: str, node: ast.AST, literals: Dict[str, object]) -> object:
    if isinstance(node, ast.Name) and isinstance(literals.get(node.id), ast.Call):
        node = literals[node.id]  # type: ignore[assignment]
    if _is_known_failure_call(node):
        return _known_failure(path, case, node, literals)  # type: ignore[arg-type]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        if isinstance(node, ast.Name) and node.id in literals:
            return literals[node.id]
        text = ast.unparse(node) if hasattr(ast, "unparse") else type(node).__name__
        raise CaseDeclarationError(
            path, case, "static-scan",
            f"{what} must be a literal (or a name bound once at module top level to a literal) "
            f"so targets can be tagged without importing the file; got `{text}`",
        ) from None


def _literal_fields(path: str, kw: Dict[str, ast.AST], fields: Sequence[str], literals: Dict[str, object],
                    callee: str) -> Dict[str, object]:
    values: Dict[str, object] = {}
    case_name = None
    for fname in fields:
        if fname in kw:
            values[fname] = _literal(path, case_name, f"{fname}=", kw[fname], literals)
            if fname == "name" and isinstance(values["name"], str):
                case_name = values["name"]
    for required in ("name", "mesh_shape"):
        if required not in values:
            raise CaseDeclarationError(path, case_name, "static-scan", f"{callee} needs {required}=")
    return values


def _input_shapes(path: str, name: str, node: Optional[ast.AST], literals: Dict[str, object]) -> List[Tuple[int, ...]]:
    """Shapes of ``inputs=[InputSpec(shape, ...), ...]`` written as a list of InputSpec calls."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        raise CaseDeclarationError(path, name, "static-scan",
                                   "register_sweep inputs= must be a list of InputSpec(...) calls written out")
    shapes = []
    for i, elt in enumerate(node.elts):
        if not (isinstance(elt, ast.Call) and _callee_name(elt.func) == "InputSpec"):
            raise CaseDeclarationError(path, name, "static-scan",
                                       f"register_sweep inputs[{i}] must be an InputSpec(...) call")
        shape_node = elt.args[0] if elt.args else next((k.value for k in elt.keywords if k.arg == "shape"), None)
        if shape_node is None:
            raise CaseDeclarationError(path, name, "static-scan", f"register_sweep inputs[{i}] needs a shape")
        shape = _literal(path, name, f"inputs[{i}] shape", shape_node, literals)
        if not isinstance(shape, (tuple, list)):
            raise CaseDeclarationError(path, name, "input-shape", f"inputs[{i}] shape must be a tuple; got {shape!r}")
        shapes.append(tuple(shape))
    return shapes


def _scan_sweep_call(path: str, call: ast.Call, literals: Dict[str, object]) -> Tuple[List[ScannedCase], str]:
    """The cases a ``register_sweep(...)`` call registers, and its summary line."""
    from .sweep import plan_sweep

    kw, values, name, mesh_shape = _keyword_call(path, call, schema.OP.static_names + schema.SWEEP_FIELDS, literals,
                                                 "register_sweep")
    shapes = _input_shapes(path, name, kw.get("inputs"), literals)
    plan = plan_sweep(name, shapes, len(mesh_shape), values.get("partial_inputs"),
                      values.get("partial_ops", ("sum",)), values.get("max_partial_inputs"))
    values = {**schema.OP.fixed, **values}
    cases = [_scanned(path, case_name, mesh_shape, values, call.lineno) for case_name, _ in plan.cases]
    return cases, f"{path}: {plan.summary(name)}"
