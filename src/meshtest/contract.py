"""The contract between the parent (runner) and the rank processes of a launch, as types.

What crosses the process boundary, and in which file:

==========================  =====================================  ==============================
type                        written by → read by                   where
==========================  =====================================  ==============================
:class:`LaunchPlan`         runner → every rank of the launch      ``ranks/<group>/plan.json``
rank events (below)         rank *k* → runner's watcher            ``ranks/<group>/rank<k>.jsonl``
:class:`RankRecord`         rank *k* → runner (aggregation)        ``rank<k>.jsonl`` (``"result"``)
:class:`CaseOutcome`        runner → reports, ``tools/``, CI       ``results.jsonl``
==========================  =====================================  ==============================

Rank events, one JSON object per line with an ``"event"`` key: :class:`CaseStarted`
(``start``), :class:`StepEntered` (``step``), :class:`RankRecord` (``result``),
:class:`FenceEntered` (``fence``), :class:`Stopped` (``stopped``), :class:`RankDone`
(``rank_done``). Every type is a frozen dataclass with ``to_json()`` and ``from_json()``;
reading is strict: an unknown or missing field, an unknown event or status raises
:class:`ContractError`. The plan carries :data:`PLAN_VERSION`; a rank refuses a plan of
another version, naming both.

The protocol's timing constants live here too, since both sides rely on them.

Stdlib only and CPython 3.9-compatible (``tools/`` read ``results.jsonl`` with the system
``python3``).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple, Type, TypeVar, Union

from .errors import MeshtestError
from .model.scan import ScannedCase
from .status import Status

#: Version of the launch plan format. Bump it whenever a contract type changes shape.
PLAN_VERSION = 10

#: Environment variable telling a rank the node it runs on (``<index>:<node id>``), set by an
#: executor that places a launch across a cluster's nodes (:mod:`meshtest.parent.ray_executor`).
NODE_ENV = "MESHTEST_NODE"

#: Default deadline of one case, in seconds. A launch's process-group timeout is half the
#: longest deadline among its cases.
DEFAULT_CASE_TIMEOUT_S = 120.0
#: Seconds a rank that finished a case waits at the end-of-case fence beyond the case deadline:
#: more than :data:`DUMP_GRACE_S`, so a peer stuck inside the case is reported as that peer's
#: timeout (with stacks) before the waiting rank gives up.
FENCE_MARGIN_S = 15.0
#: Fraction of the run's case timeout a rank waits at the fence after an error that is not an
#: assertion failure (the health probe: a broken group ends the launch quickly).
HEALTH_PROBE_FRACTION = 0.25
#: Exit code of a rank that gave up its launch (its end-of-case fence failed); the runner
#: relaunches the cases not yet recorded by every rank.
GAVE_UP_EXIT = 3
#: Seconds a launch may go without any progress outside a case (start-up, between cases,
#: teardown). Measured start-up: 4-11 s for 2-8 ranks; generous for loaded CI machines.
LAUNCH_OVERHEAD_S = 120.0
#: Seconds between a case's deadline (when each rank dumps its stacks) and the kill.
DUMP_GRACE_S = 3.0
#: Seconds beyond a rank's fence timeout before the watcher judges it stuck (the fence's own
#: timeout normally ends it first: the rank then gives up the launch).
FENCE_SLACK_S = 10.0


class ContractError(MeshtestError, ValueError):
    """A contract document is malformed: unknown or missing field, unknown event or status,
    or a launch plan of another version."""


T = TypeVar("T")


def _fields_of(cls: type, doc: Any, what: str, ignore: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """``doc``'s fields, checked against ``cls``'s: no unknown, none required missing.

    :raises ContractError: naming ``what``, the unknown or missing fields and the known ones.
    """
    if not isinstance(doc, dict):
        raise ContractError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    body = {k: v for k, v in doc.items() if k not in ignore}
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise ContractError(f"{what}: unknown field(s) {', '.join(unknown)}; {cls.__name__} has {', '.join(known)}")
    missing = [n for n, f in known.items() if n not in body
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ContractError(f"{what}: missing field(s) {', '.join(missing)} of {cls.__name__}")
    return body


def _status(value: Any, what: str) -> Status:
    try:
        return Status(value)
    except ValueError:
        raise ContractError(f"{what}: unknown status {value!r}; known: {', '.join(s.value for s in Status)}") from None


def _coerce_status(obj: Any) -> None:
    """``__post_init__`` of types with a ``status``: accept the status's JSON value too.

    :raises ValueError: not a status (the message lists the known ones)."""
    if not isinstance(obj.status, Status):
        object.__setattr__(obj, "status", _status(obj.status, type(obj).__name__))


def _plain(obj: Any) -> Dict[str, Any]:
    """A contract dataclass as a JSON-able dict (statuses as their values, tuples as lists)."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = v.value if isinstance(v, Status) else list(v) if isinstance(v, tuple) else v
    return out


# --- launch plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the ranks of one launch need: one file per launch, passed by path
    (``--plan``). No setting travels through environment variables, except the platform's own
    device-visibility variable.

    :ivar group_id: the launch group (:class:`meshtest.parent.planner.Group`).
    :ivar mesh_shape: the DeviceMesh; the launch has ``prod(mesh_shape)`` ranks.
    :ivar out_dir: absolute directory of the launch's rank logs and JSONL streams.
    :ivar case_timeout_s: the run's default case deadline, seconds.
    :ivar slots: device slot ids the launch holds (device ids on NPU/CUDA).
    :ivar fail_fast: the ranks stop together after the first case that fails on any rank.
    :ivar collective_checks: the ranks turn on the platform's collective fingerprint checks
        (``ShardBackend.enable_collective_checks``), so ranks that enter different collectives
        fail at once, naming them, instead of waiting out the deadline.
    :ivar cases: the cases to run, in order (identical on every rank).
    :ivar cases_dir: absolute directory under which a case keeps files across launches
        (``<cases_dir>/<case name>/``: the checkpoints of a phased training case).
    :ivar lane: ``"ranks"`` (one process per rank) or ``"local"``: one process simulates every
        rank of each case's own mesh (``mesh_shape`` is then ``(1,)``), switching its simulated
        world between cases, and records each case once per simulated rank.
    :ivar workers: local lane: processes that share the cases out (worker ``w`` writes
        ``rank<w>.log`` / ``rank<w>.jsonl``); 1 otherwise.
    :ivar record_ops: record each case's sharding-rule calls (``ShardBackend.record_calls``)
        into ``ops<k>.jsonl`` (rank 0 of a launch, or each local-lane worker ``k``): one line
        ``{"case", "file", "calls": [...]}`` per case (sharding-rule coverage, ``docs/strength.md``).
    :ivar record_dispatch: record which module served each operator a case dispatched
        (``ShardBackend.record_dispatch``) into ``dispatch<k>.jsonl`` (every rank): one line
        ``{"case", "file", "served": {operator: module}}`` per case (the dispatch map,
        :mod:`meshtest.model.dispatch_map`). A case beside a ``dispatch_map.json`` is recorded
        and checked against it whether or not this is set.
    :ivar mutant: ``"operator:fault"``: the ranks activate this mutant of the platform's sharding
        rules (``ShardBackend.activate_mutant``) before the first case; ``""``: none.
    """

    group_id: str
    platform: str
    device_kind: str
    mesh_shape: Tuple[int, ...]
    mesh_dim_names: Tuple[str, ...]
    out_dir: str
    case_timeout_s: float
    cases: Tuple[ScannedCase, ...]
    slots: Tuple[int, ...] = ()
    fail_fast: bool = False
    collective_checks: bool = False
    cases_dir: str = ""
    lane: str = "ranks"
    workers: int = 1
    record_ops: bool = False
    mutant: str = ""
    record_dispatch: bool = False
    version: int = PLAN_VERSION

    def to_json(self) -> Dict[str, Any]:
        doc = _plain(self)
        doc["cases"] = [c.to_json() for c in self.cases]
        return doc

    @classmethod
    def from_json(cls, doc: Any, what: str = "launch plan") -> "LaunchPlan":
        """:raises ContractError: another version (both named), unknown or missing fields."""
        version = doc.get("version") if isinstance(doc, dict) else None
        if version != PLAN_VERSION:
            raise ContractError(f"{what}: launch plan version {version!r} (written by the runner), but this "
                                f"rank's meshtest reads version {PLAN_VERSION}; run the runner and the ranks from one "
                                "checkout")
        body = _fields_of(cls, doc, what)
        try:
            cases = tuple(ScannedCase.from_json(c) for c in body["cases"])
        except (KeyError, TypeError, ValueError) as e:
            raise ContractError(f"{what}: a case entry is malformed: {e}") from None
        return cls(**{**body, "mesh_shape": tuple(body["mesh_shape"]), "mesh_dim_names": tuple(body["mesh_dim_names"]),
                      "slots": tuple(body.get("slots", ())), "cases": cases,
                      "case_timeout_s": float(body["case_timeout_s"])})

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=1)

    @classmethod
    def read(cls, path: str) -> "LaunchPlan":
        """:raises ContractError: see :meth:`from_json` (the message starts with ``path``)."""
        with open(path, encoding="utf-8") as f:
            return cls.from_json(json.load(f), what=path)


# --- rank events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankStarted:
    """A rank process began: its ``pid``, so that a launcher slow to end after a worker died
    (msrun exits ~45 s later, at its scheduler's node timeout) does not hold the launch: the
    watcher sees the process gone and ends the launch at once
    (:class:`meshtest.parent.launch.RankWatcher`)."""

    EVENT: ClassVar[str] = "rank_started"
    rank: int
    pid: int
    #: the node it runs on, for a launch placed across a cluster (``<index>:<node id>``, from
    #: ``$MESHTEST_NODE``); ``""`` on this machine's own launches
    node: str = ""


@dataclass(frozen=True)
class CaseStarted:
    """A rank began a case; ``t`` is Unix time, ``timeout_s`` the case's deadline.

    In every rank event, ``case`` is the case's ID, ``file::name``
    (:attr:`meshtest.model.scan.ScannedCase.id`): two files may name a case alike."""

    EVENT: ClassVar[str] = "start"
    case: str
    t: float
    timeout_s: float


@dataclass(frozen=True)
class StepEntered:
    """A rank entered a pipeline step (``build``, ``compare``, a scenario's ``ctx.step``)."""

    EVENT: ClassVar[str] = "step"
    case: str
    step: str


@dataclass(frozen=True)
class RankRecord:
    """One rank's result for one case (``case``: its ID, ``file::name``).

    :ivar status: one of :data:`meshtest.status.RANK_STATUSES`, judged against the case's
        ``known_failure`` (:func:`meshtest.model.known.judge`).
    :ivar step: the last step reached (the failing one for fail/error).
    :ivar duration_s: wall-clock seconds of the whole case on this rank.
    :ivar detail: a scenario's notes (``ctx.note``), one per line.
    :ivar divergence: a scenario's stated divergence from the spec.
    """

    EVENT: ClassVar[str] = "result"
    case: str
    file: str
    group: str
    rank: int
    status: Status
    step: str
    duration_s: float
    error: str = ""
    detail: str = ""
    divergence: str = ""
    #: the node the rank ran on (:attr:`RankStarted.node`)
    node: str = ""

    def __post_init__(self) -> None:
        _coerce_status(self)


@dataclass(frozen=True)
class FenceEntered:
    """A rank recorded ``case`` and waits at its end-of-case fence, at most ``timeout_s``."""

    EVENT: ClassVar[str] = "fence"
    case: str
    timeout_s: float


@dataclass(frozen=True)
class Stopped:
    """The ranks agreed to stop after ``after`` failed (fail-fast gates)."""

    EVENT: ClassVar[str] = "stopped"
    after: str


@dataclass(frozen=True)
class RankDone:
    """A rank recorded every case of its plan."""

    EVENT: ClassVar[str] = "rank_done"
    rank: int


RankEvent = Union[RankStarted, CaseStarted, StepEntered, RankRecord, FenceEntered, Stopped, RankDone]
_EVENTS: Dict[str, Type[Any]] = {c.EVENT: c for c in (RankStarted, CaseStarted, StepEntered, RankRecord, FenceEntered,
                                                       Stopped, RankDone)}


def event_to_json(event: RankEvent) -> Dict[str, Any]:
    """One line of ``rank<k>.jsonl``: ``{"event": ..., **fields}``."""
    return {"event": event.EVENT, **_plain(event)}


def event_from_json(doc: Any, what: str = "rank event") -> RankEvent:
    """Read one line of ``rank<k>.jsonl``.

    :raises ContractError: unknown event, unknown or missing field, unknown status.
    """
    name = doc.get("event") if isinstance(doc, dict) else None
    cls = _EVENTS.get(name)  # type: ignore[arg-type]
    if cls is None:
        raise ContractError(f"{what}: unknown event {name!r}; known: {', '.join(_EVENTS)}")
    body = _fields_of(cls, doc, f"{what} ({name})", ignore=("event",))
    return cls(**body)


# --- aggregated outcome --------------------------------------------------------------------


@dataclass(frozen=True)
class RankFailure:
    """How one rank failed a case (an entry of :attr:`CaseOutcome.failures`).

    :ivar rank: the rank, or ``None`` when the entry is about the case as a whole (a file
        that could not be scanned, a case a fail-fast gate did not run).
    :ivar status: the rank's status (``waited``: it finished and waited at the fence).
    """

    rank: Optional[int]
    status: Status
    step: str
    error: str
    #: the node the rank ran on, for a launch placed across a cluster (``""`` otherwise)
    node: str = ""

    def __post_init__(self) -> None:
        _coerce_status(self)

    @property
    def rank_label(self) -> str:
        """The rank as reports print it (``-`` for none)."""
        return "-" if self.rank is None else str(self.rank)

    def to_json(self) -> Dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_json(cls, doc: Any, what: str = "rank failure") -> "RankFailure":
        return cls(**_fields_of(cls, doc, what))


C = TypeVar("C", bound="CaseOutcome")


@dataclass(frozen=True)
class CaseOutcome:
    """One case aggregated over its ranks (a line of ``results.jsonl``).

    :ivar world_size: ranks of the case's launch (0 for a file-level error).
    :ivar slowest_s: the slowest rank's wall-clock seconds for the case.
    :ivar failures: per failing rank (empty when the case passed).
    :ivar launch_dir: directory under ``ranks/`` of the launch that ran the case
        (``<group>`` or ``<group>.relaunch<k>``).
    :ivar spec_id: the test-plan ID the case implements, e.g. ``"A6"``.
    :ivar divergence: the case's stated divergence from the spec.
    :ivar detail: notes the case attached (``ctx.note``), from the first rank that wrote any.
    :ivar diagnosis: for a case that timed out, what a re-run with collective checks found (e.g.
        which collective each rank entered).
    :ivar kind: the case's kind from the static scan (``op``, ``scenario``, ``train``; ``""``
        when the run did not know it, e.g. a file that failed its scan).
    :ivar nodes: the node each rank ran on (index = rank), for a launch placed across a cluster;
        ``()`` on this machine's own launches — the only trace of placement in a report.
    """

    case: str
    file: str
    group: str
    world_size: int
    status: Status
    slowest_s: float = 0.0
    slowest_rank: Optional[int] = None
    failures: Tuple[RankFailure, ...] = ()
    known_failure: str = ""
    launch_dir: str = ""
    spec_id: str = ""
    divergence: str = ""
    detail: str = ""
    diagnosis: str = ""
    kind: str = ""
    nodes: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _coerce_status(self)
        if not isinstance(self.failures, tuple):
            object.__setattr__(self, "failures", tuple(self.failures))

    def to_json(self) -> Dict[str, Any]:
        doc = _plain(self)
        doc["failures"] = [f.to_json() for f in self.failures]
        return doc

    @classmethod
    def from_json(cls: Type[C], doc: Any, what: str = "case outcome") -> C:
        """:raises ContractError: unknown or missing field, unknown status."""
        body = _fields_of(cls, doc, what)
        return cls(**{**body, "failures": tuple(RankFailure.from_json(f, what) for f in body.get("failures", ())),
                      "nodes": tuple(body.get("nodes", ()))})
