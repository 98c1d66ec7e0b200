"""The case schema: one table of the fields each case kind declares.

Read by both sides of the model: the static scan (:mod:`meshtest.model.scan`, which must know
which keyword arguments are allowed and which must be literals, without importing NumPy or
the platform) and the case dataclasses (:mod:`meshtest.model.spec`, whose fields
:func:`declares` checks against this table when the class is defined, so the two cannot drift).

A field is *static* when build targets are tagged and launches planned from it: the scan reads
it from the syntax tree, so it must be a literal (or a module-level name bound once to one),
and the ranks check that the imported case has the same value
(:func:`meshtest.model.registry.check_against_scan`).

Stdlib only and CPython 3.9-compatible (the Pants plugin imports the scan inside Pants).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Tuple


@dataclass(frozen=True)
class CaseField:
    """One declared field of a case kind.

    :ivar static: read by the static scan (a literal); part of :class:`~meshtest.model.scan.ScannedCase`.
    """

    name: str
    static: bool = False


@dataclass(frozen=True)
class CaseKind:
    """A case constructor and its fields, in the dataclass's order.

    :ivar kind: the short kind name carried by scanned cases (``"op"``, ``"scenario"``).
    :ivar constructor: the name case files call inside ``register(...)``.
    :ivar fixed: values of scanned fields this kind does not declare (e.g. a scenario always
        reads its real mesh: ``needs_mesh`` is ``True``); the dataclass has them as class
        attributes.
    """

    kind: str
    constructor: str
    fields: Tuple[CaseField, ...]
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def static_names(self) -> Tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.static)


def _f(name: str, static: bool = False) -> CaseField:
    return CaseField(name, static)


OP = CaseKind("op", "OpShardCase", (
    _f("name", True), _f("fn"), _f("inputs"), _f("placements"), _f("mesh_shape", True), _f("mesh_dim_names", True),
    _f("compare"), _f("tags", True), _f("derived_inputs"), _f("compare_outputs"), _f("needs_mesh", True),
    _f("solo_launcher", True), _f("known_failure", True), _f("grad_compare"), _f("timeout_s"), _f("output_placements"),
    _f("grad_placements"), _f("expect_raises"), _f("simulation_limit", True), _f("redistribute_inputs"),
    _f("local_fn"), _f("local_output_placements"), _f("redistribute_outputs"), _f("checkpoint_inputs"),
    _f("module"), _f("plan"),
), fixed={"requires": (), "spec_id": None, "capabilities": (), "layer": None})

SCENARIO = CaseKind("scenario", "ScenarioCase", (
    _f("name", True), _f("fn"), _f("mesh_shape", True), _f("mesh_dim_names", True), _f("tags", True),
    _f("requires", True), _f("spec_id", True), _f("divergence"), _f("known_failure", True), _f("solo_launcher", True),
    _f("timeout_s"), _f("expect_raises"), _f("capabilities", True), _f("layer", True),
), fixed={"needs_mesh": True, "simulation_limit": None})

TRAIN = CaseKind("train", "TrainCase", (
    _f("name", True), _f("model"), _f("data"), _f("loss"), _f("mesh_shape", True), _f("parallelize"),
    _f("optimizer"), _f("steps"), _f("grad_accum"), _f("batch_split"), _f("train_step"), _f("clip_grad_norm"),
    _f("compare"), _f("scheduler"), _f("phases"), _f("restore"), _f("stability"),
    _f("mesh_dim_names", True), _f("tags", True), _f("capabilities", True), _f("layer", True), _f("requires", True),
    _f("spec_id", True), _f("known_failure", True), _f("divergence"), _f("solo_launcher", True), _f("timeout_s"),
    _f("expect_raises"), _f("pipeline"), _f("grad_sync"), _f("checkpoint"), _f("param_placements"),
), fixed={"needs_mesh": True, "simulation_limit": None})

#: Every case kind, by constructor name.
KINDS: Dict[str, CaseKind] = {k.constructor: k for k in (OP, SCENARIO, TRAIN)}

#: Extra static fields of ``register_sweep(...)`` (besides the op fields it passes on).
SWEEP_FIELDS = ("partial_inputs", "partial_ops", "max_partial_inputs")

#: Static fields over all kinds, in a fixed order: what a scanned case carries.
SCANNED_FIELDS: Tuple[str, ...] = tuple(dict.fromkeys(n for k in KINDS.values() for n in k.static_names))


def declares(kind: CaseKind) -> Callable[[type], type]:
    """Class decorator for a case dataclass: check it against ``kind`` and set ``cls.kind``.

    :raises TypeError: (at import) the dataclass's fields are not ``kind``'s, in order, or a
        fixed value differs from the class attribute.
    """
    def check(cls: type) -> type:
        names = tuple(f.name for f in dataclasses.fields(cls))
        if names != kind.names:
            raise TypeError(f"{cls.__name__} fields {names} differ from the schema table's {kind.names} "
                            "(meshtest/model/schema.py): change both together")
        for name, value in kind.fixed.items():
            if getattr(cls, name, object()) != value:
                raise TypeError(f"{cls.__name__}.{name} must be {value!r} as the schema table says")
        missing = [n for n in SCANNED_FIELDS if n not in names and n not in kind.fixed]
        if missing:
            raise TypeError(f"schema table: kind {kind.kind!r} neither declares nor fixes scanned field(s) {missing}")
        cls.kind = kind.kind
        return cls
    return check
