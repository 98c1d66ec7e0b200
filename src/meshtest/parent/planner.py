"""Suite planning: select cases and group them into launches (one launch per mesh size, packed onto 8 device slots).

One group is one launch of ``w`` ranks that runs its cases in a fixed order. Cases share a
group when their meshes have the same number of ranks (``w = prod(mesh_shape)``), whatever
their shapes and axis names: every rank makes each case's mesh (its shape; its axis names, or
``d0, d1, ...`` when the names are labels only) once per launch, in plan order, over the same
ranks (:func:`meshtest.rank.entry.run_plan`). So ``(2, 2)`` and ``(4,)`` op cases, a 2-rank
``tp`` scenario and a 2-rank ``dp`` training case share their launches: on a device node a
launch's start-up (HCCL initialisation) costs more than dozens of cases (the measured HCCL start-up of the old
framework), and
``tools/packing_model.py`` measures what each launch saved is worth. ``solo_launcher=True``
cases get a group of their own.

A training case with phases (``TrainCase(phases=...)``) runs each phase in processes of its own:
phase 1 is a case of the launch of its world size, before that launch's other cases; every later
phase is a launch of its own on the phase's mesh, which starts once the phase before it passed on
every rank — its checkpoint committed — even while that phase's launch goes on with other cases
(:class:`LaunchSchedule`). A later phase never shares a process with an earlier one: a real stop,
not an in-process reload. Sharing phase 1's launch saves one launch start-up per phased case and
lets the chain of phases overlap other work (``tools/packing_model.py``).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import heapq
from dataclasses import dataclass, replace
from typing import Callable, Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..errors import SelectionError
from ..model import rules
from ..model.scan import ScannedCase

normalised_dim_names = rules.normalised_dim_names


@dataclass(frozen=True)
class Group:
    """One launch: a mesh and the cases that run on it, in order.

    :ivar group_id: stable, filesystem-safe id, e.g. ``w4-2x2`` or ``w4-2x2-dp.tp-solo-foo``;
        used for artifact paths (never derived from Python's salted ``hash``).
    """

    group_id: str
    mesh_shape: Tuple[int, ...]
    mesh_dim_names: Tuple[str, ...]
    cases: Tuple[ScannedCase, ...]
    #: ``(phase, phases)`` for a group that runs one later phase of a phased case (its only case),
    #: else ``None`` (phase 1 of a phased case is among a ``w<n>`` group's cases: :meth:`phase_units`)
    phase: Optional[Tuple[int, int]] = None
    #: ``"ranks"``: one process per rank (torchrun); ``"local"``: one process simulates every rank
    #: of each case's own mesh (:data:`LANES`); its cases may have different meshes
    lane: str = "ranks"
    #: local lane: processes that share the group's cases out (one device slot each)
    workers: int = 1

    @property
    def world_size(self) -> int:
        """Ranks of the launch's mesh (a local group: of its largest case)."""
        if self.lane == "local":
            return max((rules.world_size(c.mesh_shape) for c in self.cases), default=1)
        return rules.world_size(self.mesh_shape)

    def phase_units(self) -> List[ScannedCase]:
        """The cases of this group that run one phase of a phased case (``case.phase`` set)."""
        return [c for c in self.cases if c.phase is not None]

    @property
    def processes(self) -> int:
        """Processes (and device slots) the launch takes: its world size, or its workers in the local lane."""
        return self.workers if self.lane == "local" else self.world_size

    def ranks_of(self, case: ScannedCase) -> int:
        """Ranks whose records make ``case`` complete: the group's world size, or the case's own
        in the local lane."""
        return case.world_size if self.lane == "local" else self.world_size


#: The lanes a run can take: real rank processes, or every rank simulated in one process.
LANES = ("ranks", "local")


lane_of = rules.lane_of


def plan_local_groups(cases: Sequence[ScannedCase], parts: int, failed_first: Collection[str] = ()) -> List[Group]:
    """The one-process lane's launch: one group ``local`` of every case, ordered by world size,
    largest first (the costliest simulations early, the cheap ones to even out the end), then
    file and line, so a worker switches its simulated world as rarely as possible; shared out at
    run time among ``min(parts, cases)`` worker processes (:class:`meshtest.rank.entry.CaseQueue`:
    a free worker takes the next case, so they end together whatever the cases cost). Cases whose
    ID is in ``failed_first`` (``--ff``: they failed last time) come before all others.

    :raises SelectionError: a case the lane cannot run (:attr:`ScannedCase.runs_locally`) was selected.
    """
    refused = [c for c in cases if not c.runs_locally]
    if refused:
        c = refused[0]
        why = c.simulation_limit or f"a {c.kind} case" + (f" of layer {c.layer}" if c.layer is not None else "")
        raise SelectionError(f"{c.file}: case {c.name!r} cannot run in the one-process lane ({why}); "
                             f"{len(refused)} such case(s) selected — select with --tag={rules.LOCAL_LANE_TAG}")
    if not cases:
        return []
    failed_first = set(failed_first)
    ordered = tuple(sorted(cases, key=lambda c: (c.id not in failed_first, -c.world_size,
                                                 c.name if c.solo_launcher else "", c.file, c.lineno)))
    return [Group("local", (1,), ("d0",), ordered, lane="local", workers=max(1, min(parts, len(ordered))))]


def _group_key(c: ScannedCase) -> tuple:
    solo = c.name if c.solo_launcher else ""
    return (c.world_size, solo)


def plan_groups(cases: Iterable[ScannedCase], failed_first: Collection[str] = ()) -> List[Group]:
    """Group ``cases`` into launches: ``w<ranks>`` (``w4``), ``w<ranks>-solo-<case>``, and the
    later phases of phased cases (:func:`phase_groups`); phase 1 of a phased case is a case of
    the ``w<ranks>`` group of its world size, before the others.

    Order is deterministic: groups by (world size, solo case name), then the later phases by
    (file, line); cases inside a group by (file, line), phase-1 cases first. A group's
    ``mesh_shape`` is its first case's (the launch's first mesh). Every rank of a launch reads
    the same plan file, so all ranks run the same cases in the same order (ranks of a launch run their cases in one
    order, or a collective deadlocks).
    ``failed_first`` (``--ff``): case IDs that go first in their group (after its phase-1
    cases), and the groups holding one go first.
    """
    buckets: Dict[tuple, List[ScannedCase]] = {}
    later: List[Group] = []
    for c in sorted(cases, key=lambda c: (c.file, c.lineno)):
        if c.phase_meshes:
            first, *rest = phase_groups(c)
            c = first.cases[0]
            later.extend(rest)
        buckets.setdefault(_group_key(c), []).append(c)
    groups = []
    for key in sorted(buckets):
        ws, solo = key
        gid = f"w{ws}"
        if solo:
            gid += "-solo-" + "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in solo)
        members = tuple(sorted(buckets[key], key=lambda c: (c.phase is None, c.id not in failed_first, c.file,
                                                                c.lineno)))
        shape = members[0].mesh_shape
        groups.append(Group(gid, shape, normalised_dim_names(len(shape)), members))
    if failed_first:
        groups.sort(key=lambda g: not any(c.id in failed_first for c in g.cases))
    return groups + later


def split_groups(groups: Sequence[Group], slots: int, durations: Optional[Mapping[str, float]] = None,
                 startup_s: Callable[[int], float] = lambda w: 0.0, fill_idle: bool = False) -> List[Group]:
    """Split long launch groups so that their parts run at once on free slots (``--pack fill``).

    A group of ``w`` ranks whose cases take ``T`` seconds in all becomes ``k`` launches,
    ``k = min(slots // w, cases, floor(T / startup_s(w)))`` (at least 1): a part carries at
    least one launch start-up's worth of case time, so splitting never spends more on start-up
    than it saves. Case time is the recorded duration (``durations``, seconds by case name), or
    the mean of the recorded ones, or 1 s per case. The parts are balanced longest case first,
    each keeping plan order, and named ``<group>.part<i>of<k>``. Phase groups and solo
    launchers are kept whole; so is every group when ``startup_s`` is 0 (nothing to weigh).

    ``fill_idle`` (slots that are devices of their own: a start-up on a slot that would idle
    takes nothing from the other launches): starting from that split, each group's ``k`` is
    then changed one group at a time, ``1 <= k <= min(slots // w, cases)``, keeping a change
    when the run it predicts (:func:`simulate_schedule`, with costs ``startup_s(w)`` plus case
    time) ends sooner, or as soon with its cases done sooner in sum (issue 14: split a group
    "when free slots would otherwise idle"), until no change improves it. Not for CPU ranks,
    which share the machine's cores: there an extra launch's start-up slows the running ones,
    which the prediction does not see.
    """
    weight = _case_time(groups, durations)

    def splittable(g: Group) -> bool:
        return _plain_launch(g) and startup_s(g.world_size) > 0

    ks = [max(1, min(slots // g.world_size, len(g.cases), int(sum(weight(c) for c in g.cases)
                                                              // startup_s(g.world_size))))
          if splittable(g) else 1 for g in groups]
    if fill_idle:
        ks = _fill_idle_slots(groups, ks, [min(slots // g.world_size, len(g.cases)) if splittable(g) else 1
                                           for g in groups], slots, weight, startup_s)
    return [p for g, k in zip(groups, ks) for p in _parts(g, k, weight)]


def merge_small_groups(groups: Sequence[Group], startup_s: Callable[[int], float],
                       durations: Optional[Mapping[str, float]] = None) -> List[Group]:
    """Run the op cases of a small launch group in a larger launch instead, on replicas of their
    mesh, when that costs less than the small group's own launch start-up.

    A group of ``w`` ranks whose cases are all op cases joins the smallest other group of ``W``
    ranks with ``W % w == 0`` (its cases after that group's): the launch's ``W`` ranks form
    ``W / w`` disjoint meshes of each such case's shape (the mesh ``(W / w, *shape)`` sliced, its
    first dimension :data:`meshtest.model.rules.REPLICA_DIM`), each running the case on its own,
    so every rank records it and each replica is checked. The rule: ``T * W / w <
    startup_s(w)``, ``T`` the group's case time (recorded durations, else their mean, else 1 s
    per case), ``W / w`` the work the replicas multiply (on CPU ranks share the cores). Scenario
    and training cases (which may use the whole world's process group), phases, solo launchers,
    and a case naming an axis :data:`~meshtest.model.rules.REPLICA_DIM` are never merged. Groups
    are taken smallest world size first, so a merged group can in turn join a larger one. Only
    for platforms whose backend makes sub-meshes (``BackendInfo.submeshes``).
    """
    weight = _case_time(groups, durations)
    out = list(groups)
    for g in sorted(groups, key=lambda g: g.world_size):
        if not _plain_launch(g) or g not in out or any(c.kind != "op" or c.phase is not None
                                               or rules.REPLICA_DIM in (c.mesh_dim_names or ()) for c in g.cases):
            continue
        hosts = [h for h in out if h is not g and _plain_launch(h) and h.world_size > g.world_size
                 and h.world_size % g.world_size == 0]
        if not hosts:
            continue
        host = min(hosts, key=lambda h: (h.world_size, h.group_id))
        case_time = sum(map(weight, g.cases))
        if case_time * host.world_size / g.world_size >= startup_s(g.world_size):
            continue
        out[out.index(host)] = replace(host, cases=host.cases + g.cases)
        out.remove(g)
    return out


def _case_time(groups: Sequence[Group], durations: Optional[Mapping[str, float]]) -> Callable[[ScannedCase], float]:
    """A case's estimated seconds: its recorded duration, else the mean of the recorded ones among
    ``groups``' cases, else 1 s."""
    known = [durations[c.name] for g in groups for c in g.cases if durations and c.name in durations]
    default = sum(known) / len(known) if known else 1.0
    return lambda c: (durations or {}).get(c.name, default)


def _plain_launch(g: Group) -> bool:
    """A launch of rank processes that is neither one phase of a phased case nor a solo launcher's:
    one :func:`split_groups` may split and :func:`merge_small_groups` may merge."""
    return g.lane == "ranks" and g.phase is None and "-solo-" not in g.group_id


def _parts(g: Group, k: int, weight: Callable[[ScannedCase], float]) -> List[Group]:
    """``g`` as ``k`` launches balanced by ``weight``, longest case first, each in plan order."""
    if k == 1:
        return [g]
    loads, parts = [0.0] * k, [[] for _ in range(k)]
    for c in sorted(g.cases, key=lambda c: -weight(c)):
        i = loads.index(min(loads))
        parts[i].append(c)
        loads[i] += weight(c)
    position = {c.name: n for n, c in enumerate(g.cases)}
    return [replace(g, group_id=f"{g.group_id}.part{i}of{k}", cases=tuple(sorted(p, key=lambda c: position[c.name])))
            for i, p in enumerate(parts, start=1)]


def _fill_idle_slots(groups: Sequence[Group], ks: List[int], most: List[int], slots: int,
                     weight: Callable[[ScannedCase], float], startup_s: Callable[[int], float]) -> List[int]:
    """The parts per group :func:`split_groups` settles on with ``fill_idle``: from ``ks``, the
    best single change of one group's count at a time (``1..most[i]``) while one improves the
    predicted (end of the run, sum of case ends, launches)."""

    def score(trial: List[int]) -> Tuple[float, float, int]:
        plan = [p for g, k in zip(groups, trial) for p in _parts(g, k, weight)]
        offsets = {p.group_id: case_offsets(p, weight, startup_s(p.world_size)) for p in plan}
        try:
            spans = simulate_schedule(plan, slots, lambda p: startup_s(p.world_size) + sum(map(weight, p.cases)),
                                      lambda p: offsets[p.group_id])
        except RuntimeError:  # a group that does not fit: the runner reports it; nothing to choose
            return (float("inf"), float("inf"), len(plan))
        ends = sum(s + at for s, _, p in spans for at in offsets[p.group_id].values())
        return (round(max(e for _, e, _ in spans), 6), round(ends, 6), len(plan))

    best, best_score = list(ks), score(ks)
    for _ in range(sum(most)):  # each round improves the score strictly: bounded by the states
        trials = [best[:i] + [k] + best[i + 1:] for i in range(len(groups)) for k in range(1, most[i] + 1)
                  if k != best[i]]
        scored = min(((score(t), t) for t in trials), default=None)
        if scored is None or scored[0] >= best_score:
            break
        best_score, best = scored
    return best


def case_offsets(g: Group, weight: Callable[[ScannedCase], float], startup: float) -> Dict[str, float]:
    """Seconds from a launch's start until each of its cases is done: ``startup``, then its cases
    in plan order, each ``weight(case)`` seconds."""
    t, out = startup, {}
    for c in g.cases:
        t += weight(c)
        out[c.name] = t
    return out


def simulate_schedule(groups: Sequence[Group], slots: int, cost: Callable[[Group], float],
                      done_at: Callable[[Group], Mapping[str, float]] = lambda g: {}) -> List[
        Tuple[float, float, Group]]:
    """The runner's schedule of ``groups`` on ``slots`` slots (:class:`LaunchSchedule`) replayed
    from time 0 with estimated costs: ``[(start s, end s, group)]`` in start order. A launch
    takes ``cost(group)`` seconds; every phase is taken to pass, a phase unit of a launch at
    ``done_at(group)[case]`` seconds after the launch starts (default: when it ends).

    :raises RuntimeError: a group needs more processes than ``slots``.
    """
    sched = LaunchSchedule(list(groups), list(range(slots)), cost)
    events: List[Tuple[float, int, Optional[Group], str, int]] = []  # (time, seq, ended group | None, case, phase)
    spans: List[Tuple[float, float, Group]] = []
    t, seq = 0.0, 0
    while sched.pending or sched.running:
        while (g := sched.startable()) is not None:
            sched.take(g)
            spans.append((t, t + cost(g), g))
            for c in g.phase_units():
                if c.phase < len(c.phase_meshes):
                    heapq.heappush(events, (t + done_at(g).get(c.name, cost(g)), seq, None, c.id, c.phase))
                    seq += 1
            heapq.heappush(events, (t + cost(g), seq, g, "", 0))
            seq += 1
        if not events:
            raise RuntimeError(f"launch group {sched.pending[0].group_id} does not fit {slots} slot(s)")
        t, _, g, case, phase = heapq.heappop(events)
        if g is None:
            sched.phase_passed(case, phase)
        else:
            sched.give_back(g.group_id)
    return spans


#: Seconds a launch's start-up costs, by device kind, then world size (``None``: any other):
#: what :func:`split_groups` and :class:`LaunchSchedule` weigh case time against. ``cpu``:
#: launch to first case on the project's 2-core machines (WORKSPACE-notes.md, "Batching"): one
#: rank, started by the runner, imports torch itself (4.4 s); more, forked by
#: :mod:`meshtest.rank.torch_launcher` after one import, 4.2 / 4.6 / 4.2 s for 2 / 4 / 8
#: (``MESHTEST_RANK_START=spawn``, torchrun itself: 5.6 / 9.7 / 17.5 s); ``npu``: the old
#: one-launch-per-case framework, measured, took 158 s for 6 cases on Torch NPU (hccl), so a
#: launch's start-up is about 26.3 s.
LAUNCH_STARTUP_S: Dict[str, Dict[Optional[int], float]] = {
    "cpu": {1: 4.4, 2: 4.2, 4: 4.6, None: 4.2},
    "npu": {None: 158.0 / 6},
    "cuda": {None: 158.0 / 6},
}

#: The same for msrun launches on CPU (MindSpore): msrun + scheduler + ``communication.init()`` +
#: one all-reduce, ~16 s for 2 workers and ~20 s for 4 on the project's 2-core machines
#: (../shared/notes/offline-pants.md, "MindSpore on CPU"); other device kinds as torchrun's.
MSRUN_STARTUP_S: Dict[str, Dict[Optional[int], float]] = {"cpu": {1: 16.0, 2: 16.0, 4: 20.0, None: 28.0}}


def startup_s(device_kind: str, world_size: int, launcher: str = "torchrun") -> float:
    """A launch's start-up in seconds (:data:`LAUNCH_STARTUP_S`; :data:`MSRUN_STARTUP_S` for msrun)."""
    tables = MSRUN_STARTUP_S if launcher == "msrun" and device_kind in MSRUN_STARTUP_S else LAUNCH_STARTUP_S
    table = tables.get(device_kind, LAUNCH_STARTUP_S["npu"])
    return table.get(world_size, table[None])


def launch_cost(group: Group, durations: Optional[Mapping[str, float]], device_kind: str,
                launcher: str = "torchrun") -> float:
    """Estimated seconds of a launch: its start-up plus its cases' recorded durations (the mean of
    the recorded ones, or 1 s, for a case without)."""
    known = list((durations or {}).values())
    default = sum(known) / len(known) if known else 1.0
    return startup_s(device_kind, group.world_size, launcher) + sum((durations or {}).get(c.name, default)
                                                                    for c in group.cases)


@dataclass
class LaunchSchedule:
    """Which launch starts next on a run's slots: the groups not started yet, the slots free, and
    what runs on which slots (the runner's, and ``tools/packing_model.py``'s replay of it).

    A group starts as soon as its processes fit in the free slots, highest priority first: the
    longest chain of work it heads — its ``cost`` (estimated seconds; default: its case count)
    times one plus the later phases of the phased cases it runs, a phased case's launches being a
    chain that cannot overlap — then the largest. A later phase starts only once the phase before
    it passed (:meth:`phase_passed`, which the runner calls as soon as every rank recorded that
    phase's pass, even while its launch goes on with other cases); a later phase whose earlier
    phase ended without passing is dropped from ``pending`` (the case's outcome is that phase's).
    """

    pending: List[Group]
    free: List[int]
    cost: Optional[Callable[[Group], float]] = None
    running: Dict[str, Tuple[Group, List[int]]] = dataclasses.field(default_factory=dict)
    #: phased case ID → the last of its phases that passed
    passed: Dict[str, int] = dataclasses.field(default_factory=dict)

    def _priority(self, g: Group) -> tuple:
        later = max((len(c.phase_meshes) - c.phase for c in g.phase_units()), default=0)
        cost = self.cost(g) if self.cost is not None else len(g.cases)
        return (-cost * (1 + later), -g.processes, g.group_id)

    def phase_passed(self, case: str, phase: int) -> None:
        """Phase ``phase`` of the case with ID ``case`` passed on every rank: its next phase may start."""
        self.passed[case] = max(phase, self.passed.get(case, 0))

    def startable(self) -> Optional[Group]:
        """The next group to start now, or ``None`` (nothing fits or may start yet)."""
        for g in sorted(self.pending, key=self._priority):
            if g.phase is not None and g.phase[0] > 1:
                if self.passed.get(g.cases[0].id, 0) < g.phase[0] - 1:
                    if self._earlier_phase_open(g):
                        continue
                    self.pending.remove(g)  # the earlier phase ended without passing
                    return self.startable()
            if g.processes <= len(self.free):
                return g
        return None

    def _earlier_phase_open(self, g: Group) -> bool:
        """Whether an earlier phase of ``g``'s case, not passed yet, is still to run or running."""
        key = g.cases[0].id
        done = self.passed.get(key, 0)
        return any(c.id == key and done < c.phase < g.phase[0]
                   for o in self.pending + [og for og, _ in self.running.values()] for c in o.phase_units())

    def take(self, g: Group) -> List[int]:
        """Start ``g``: its slots (the lowest free ones)."""
        self.pending.remove(g)
        slots, self.free = self.free[:g.processes], self.free[g.processes:]
        self.running[g.group_id] = (g, slots)
        return slots

    def give_back(self, group_id: str) -> None:
        """``group_id`` ended: its slots are free again."""
        _, slots = self.running.pop(group_id)
        self.free = sorted(self.free + slots)


def phase_groups(case: ScannedCase) -> List[Group]:
    """The launches of a phased case, in phase order: group ``w<n>-<shape>-phase<i>of<k>-<case>``
    runs a copy of the case with ``phase=i`` and the phase's mesh."""
    out = []
    count = len(case.phase_meshes)
    safe = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in case.name)
    for i, (shape, names) in enumerate(case.phase_meshes, start=1):
        unit = replace(case, mesh_shape=tuple(shape), mesh_dim_names=names, phase=i)
        gid = f"w{unit.world_size}-" + "x".join(map(str, shape)) + f"-phase{i}of{count}-{safe}"
        out.append(Group(gid, unit.mesh_shape, names or normalised_dim_names(len(shape)), (unit,), phase=(i, count)))
    return out


def case_tags(c: ScannedCase, node_slots: int = rules.DEFAULT_NODE_SLOTS) -> Tuple[str, ...]:
    """Tags a case answers to in filters (:meth:`ScannedCase.filter_tags`, nodes of ``node_slots``)."""
    return c.filter_tags(node_slots)


def tag_clause_matches(clause: str, tags: Sequence[str]) -> bool:
    """Pants' ``--tag`` rule for one clause (``pants.util.filtering.create_filter``, 2.17.1):
    comma-separated tags are ORed; a leading ``-`` negates the whole clause; ``+`` is the
    same as no prefix."""
    negate = clause.startswith("-")
    body = clause[1:] if clause[:1] in ("+", "-") else clause
    hit = any(t in tags for t in body.split(",") if t)
    return not hit if negate else hit


def gate_is_fail_fast(tag_filters: Sequence[str]) -> bool:
    """Whether a run selected by these ``--tag`` clauses is a fail-fast gate (the gate rules:
    ``*_level0`` gates stop at the first failure, ``*_level1`` gates collect every failure):
    true when some positive clause names only level0 gate tags, e.g. ``cpu_level0``."""
    for clause in tag_filters:
        if clause.startswith("-"):
            continue
        tags = [t for t in clause.lstrip("+").split(",") if t]
        if tags and all(t in rules.GATE_TAGS and t.endswith("_level0") for t in tags):
            return True
    return False


def device_kind_mismatch(tag_filters: Sequence[str], device_kind: str) -> Optional[str]:
    """Why ``--tag`` clauses and ``--device-kind`` disagree, or ``None``: a positive clause that
    names only gate tags of other device kinds (``--tag=npu_level0`` on device kind ``cpu``)
    would otherwise run those cases' CPU twins on the CPU and call it the NPU gate."""
    for clause in tag_filters:
        if clause.startswith("-"):
            continue
        tags = [t for t in clause.lstrip("+").split(",") if t]
        kinds = {rules.device_kind_of(t) for t in tags if t in rules.GATE_TAGS}
        if tags and all(t in rules.GATE_TAGS for t in tags) and device_kind not in kinds:
            return (f"--tag={clause} selects {'/'.join(sorted(kinds))} gate(s) but the device kind is {device_kind!r}: "
                    f"run with --device-kind={sorted(kinds)[0]} (Pants: --meshtest-device-kind, or "
                    f"PANTS_CONFIG_FILES=pants.npu.toml on an Ascend node)")
    return None


def select_cases(
    cases: Sequence[ScannedCase],
    device_kind: str,
    tag_filters: Sequence[str] = (),
    name_patterns: Sequence[str] = (),
    file_patterns: Optional[Mapping[str, Sequence[str]]] = None,
    node_slots: int = rules.DEFAULT_NODE_SLOTS,
) -> List[ScannedCase]:
    """Pick the cases to run.

    :param device_kind: ``"cpu"`` or ``"npu"``: only cases with a gate tag of this kind run.
    :param tag_filters: Pants ``--tag`` clauses, applied to each case's :func:`case_tags`
        exactly as Pants applies them to targets (see :func:`tag_clause_matches`; clauses
        are ANDed), so a target selected by ``--tag`` runs exactly its matching cases.
    :param name_patterns: ``fnmatch`` patterns on case names, for every file; a case runs if any
        matches (empty: all).
    :param file_patterns: file → patterns that apply to that file only (``A.py B.py::case`` runs
        all of A and only ``case`` of B).
    :param node_slots: slots of one node, for the ``nodes:<n>`` tag (the build targets' node size).
    :raises SelectionError: a pattern matches no selected case.
    """
    out = [
        c for c in cases
        if any(rules.device_kind_of(t) == device_kind for t in c.tags)
        and all(tag_clause_matches(clause, case_tags(c, node_slots)) for clause in tag_filters)
    ]
    scoped = [("", tuple(name_patterns))] + sorted((f, tuple(p)) for f, p in (file_patterns or {}).items())
    for file, patterns in scoped:
        if not patterns:
            continue
        pool = [c for c in out if not file or c.file == file]
        unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(c.name, p) for c in pool)]
        if unmatched:
            where = f" in {file}" if file else ""
            raise SelectionError(
                f"case filter {unmatched}{where} matches no selected case (device kind {device_kind!r}, "
                f"tags {list(tag_filters) or 'any'}); known cases: {sorted(c.name for c in cases)[:20]}"
            )
        out = [c for c in out if (file and c.file != file) or any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
    return out
