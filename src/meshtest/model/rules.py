"""The declaration rules, shared by registration (:mod:`meshtest.model.spec`) and the static scan
(:mod:`meshtest.model.scan`), so both reject the same files with the same words.

Each ``check_*`` function raises :class:`meshtest.errors.CaseDeclarationError` with the
rule id in its name, e.g. ``check_mesh_shape`` → rule ``mesh-shape``.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional, Sequence, Tuple

from ..errors import CaseDeclarationError

#: Gate tags, ``{platform}_{level}`` (the gate rules). ``*_level0`` gates are PR gates
#: (fail-fast); ``*_level1`` gates are extended regressions (collect every failure);
#: ``*_nightly`` gates are long runs (the training net's layer 4: stability over hundreds of steps), which
#: no level0/level1 selection picks.
#: ``*_faults`` marks the fault-injection package (cases/faults): selected only by name.
#: ``cpu_level*`` are Torch CPU (gloo) gates, as the gate rules define them; MindSpore on CPU
#: (msrun over ``mccl``, which the gate rules do not name: its MindSpore runs on Ascend) has
#: gates of its own, ``cpu_ms_level0/1``, so the Torch CPU job's selection stays what the gate rules
#: says. ``npu_level*`` select Torch and MindSpore on Ascend alike (the gate rules), ``cuda_level*``
#: Torch on CUDA (nccl).
GATE_TAGS = ("cpu_level0", "cpu_level1", "cpu_nightly", "npu_level0", "npu_level1", "npu_nightly", "cpu_faults",
             "npu_faults", "cpu_ms_level0", "cpu_ms_level1", "cuda_level0", "cuda_level1", "cpu_local")

#: Device kinds a gate tag's prefix may name.
DEVICE_KINDS = ("cpu", "npu", "cuda")

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-\[\],=+()]+$")


def device_kind_of(tag: str) -> str:
    """``"cpu_level0"`` → ``"cpu"``."""
    return tag.split("_", 1)[0]


def check_name(file: str, name: Any) -> str:
    """Rule ``name``: a non-empty string of letters, digits and ``_.-[],=+()`` (no spaces, no ``::``)."""
    if not isinstance(name, str) or not name or not _NAME_RE.match(name):
        raise CaseDeclarationError(
            file, None if not isinstance(name, str) else name, "name",
            f"case name must be a non-empty string of letters, digits and _.-[],=+() ; got {name!r}",
        )
    return name


def check_mesh_shape(file: str, case: str, mesh_shape: Any) -> Tuple[int, ...]:
    """Rule ``mesh-shape``: a non-empty tuple of ints ≥ 1; world size = prod(mesh_shape)."""
    if (
        not isinstance(mesh_shape, (tuple, list))
        or not mesh_shape
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in mesh_shape)
    ):
        raise CaseDeclarationError(
            file, case, "mesh-shape",
            f"mesh_shape must be a non-empty tuple of integers >= 1, e.g. (2, 2); got {mesh_shape!r}",
        )
    return tuple(mesh_shape)


def check_mesh_dim_names(file: str, case: str, mesh_shape: Tuple[int, ...], names: Any) -> Optional[Tuple[str, ...]]:
    """Rule ``mesh-dim-names``: ``None`` or one distinct non-empty string per mesh dimension."""
    if names is None:
        return None
    if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) and n for n in names):
        raise CaseDeclarationError(
            file, case, "mesh-dim-names", f"mesh_dim_names must be a tuple of strings; got {names!r}"
        )
    if len(names) != len(mesh_shape):
        raise CaseDeclarationError(
            file, case, "mesh-dim-names",
            f"mesh_dim_names has {len(names)} name(s) {tuple(names)!r} but mesh_shape "
            f"{mesh_shape!r} has {len(mesh_shape)} dimension(s); give one name per mesh dimension",
        )
    if len(set(names)) != len(names):
        raise CaseDeclarationError(file, case, "mesh-dim-names", f"mesh_dim_names must be distinct; got {names!r}")
    return tuple(names)


def check_tags(file: str, case: str, tags: Any) -> Tuple[str, ...]:
    """Rule ``gate-tag``: at least one tag, each one of :data:`GATE_TAGS` (a case no gate
    selects would never run, silently)."""
    if isinstance(tags, str) or not isinstance(tags, (tuple, list)):
        raise CaseDeclarationError(
            file, case, "gate-tag", f"tags must be a tuple of gate tags such as ('cpu_level0',); got {tags!r}"
        )
    if not tags:
        raise CaseDeclarationError(
            file, case, "gate-tag", f"the case has no gate tag, so no gate would ever run it; add tags= with one or "
                                    f"more of {', '.join(GATE_TAGS)}")
    for tag in tags:
        if tag not in GATE_TAGS:
            raise CaseDeclarationError(
                file, case, "gate-tag",
                f"unknown gate tag {tag!r}; gate tags are {', '.join(GATE_TAGS)}",
            )
    return tuple(tags)


def check_flag(file: str, case: str, field: str, value: Any) -> bool:
    """Rule ``flag``: ``needs_mesh`` / ``solo_launcher`` are plain booleans."""
    if not isinstance(value, bool):
        raise CaseDeclarationError(file, case, "flag", f"{field} must be True or False; got {value!r}")
    return value


def placement_arity_error(file: str, case: str, where: str, written: str,
                          mesh_shape: Tuple[int, ...]) -> CaseDeclarationError:
    """Rule ``placement-arity`` (shared with the static scan, which sees placements as text)."""
    return CaseDeclarationError(
        file, case, "placement-arity",
        f"{where} placements {written} must have one placement per mesh dimension: "
        f"mesh_shape {mesh_shape!r} has {len(mesh_shape)} (placements follow the mesh, not the tensor's dimensions)",
    )


def placement_count_error(file: str, case: str, n_inputs: int, n_placements: object,
                          what: str = "inputs") -> CaseDeclarationError:
    """Rule ``placement-count`` (shared with the static scan)."""
    return CaseDeclarationError(
        file, case, "placement-count",
        f"{n_inputs} {what} but {n_placements!r} placement tuple(s); give one placement tuple per input",
    )


def check_placements(
    file: str,
    case: str,
    mesh_shape: Tuple[int, ...],
    shapes: Sequence[Tuple[int, ...]],
    placements: Any,
    what: str = "inputs",
) -> Tuple[tuple, ...]:
    """Rules ``placement-count``, ``placement-arity``, ``placement-kind`` and ``shard-dim``.

    ``Shard(d)`` on a dimension of size 0 is allowed (every rank holds an empty piece).

    :param shapes: the full shape of each input the placements apply to.
    :param placements: one tuple per input, each with one placement per mesh dimension.
    :returns: the placements with every ``Shard(d)`` normalised to ``d >= 0``.
    """
    from .placement import PARTIAL_REDUCE_OPS, Partial, Placement, Replicate, Shard, StridedShard

    if not isinstance(placements, (tuple, list)) or len(placements) != len(shapes):
        n = len(placements) if isinstance(placements, (tuple, list)) else placements
        raise placement_count_error(file, case, len(shapes), n, what)
    out = []
    for i, (shape, per_input) in enumerate(zip(shapes, placements)):
        if not isinstance(per_input, (tuple, list)) or len(per_input) != len(mesh_shape):
            raise placement_arity_error(file, case, f"{what}[{i}]", repr(per_input), mesh_shape)
        normalised = []
        for p in per_input:
            if not isinstance(p, Placement) or type(p) is Placement:
                raise CaseDeclarationError(
                    file, case, "placement-kind",
                    f"{what}[{i}]: {p!r} is not a placement; use meshtest.Shard(d), Replicate(), Partial(op) or "
                    "StridedShard(d, split_factor)",
                )
            if isinstance(p, (Shard, StridedShard)):
                p = _check_shard_dim(file, case, f"{what}[{i}]", shape, p)
            elif isinstance(p, Partial) and p.reduce_op not in PARTIAL_REDUCE_OPS:
                raise CaseDeclarationError(
                    file, case, "placement-kind",
                    f"{what}[{i}]: Partial reduce_op {p.reduce_op!r} unknown; use one of {PARTIAL_REDUCE_OPS}",
                )
            elif not isinstance(p, (Replicate, Partial)):
                raise CaseDeclarationError(file, case, "placement-kind", f"{what}[{i}]: unknown placement {p!r}")
            normalised.append(p)
        out.append(tuple(normalised))
    return tuple(out)


def _check_shard_dim(file: str, case: str, where: str, shape: Sequence[int], p: Any) -> Any:
    """Rule ``shard-dim`` for ``Shard(d)`` / ``StridedShard(d, k)``; returns it with ``d >= 0``."""
    import dataclasses

    ndim = len(shape)
    if not isinstance(p.dim, int) or isinstance(p.dim, bool) or not -ndim <= p.dim < ndim:
        raise CaseDeclarationError(
            file, case, "shard-dim",
            f"{where} has shape {tuple(shape)!r} (rank {ndim}) but is placed {p!r}; "
            f"Shard(d) needs -{ndim} <= d < {ndim}",
        )
    factor = getattr(p, "split_factor", 1)
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 1:
        raise CaseDeclarationError(file, case, "shard-dim", f"{where}: {p!r} needs an integer split_factor >= 1")
    return dataclasses.replace(p, dim=p.dim % ndim)


def check_expected_placements(file: str, case: str, mesh_shape: Tuple[int, ...], value: Any,
                              what: str) -> Optional[Tuple[Optional[tuple], ...]]:
    """Rule ``expected-placements``: ``None``, or one entry per output (or input), each ``None``
    (not checked) or one placement per mesh dimension."""
    from .placement import Placement

    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or not value:
        raise CaseDeclarationError(file, case, "expected-placements",
                                   f"{what} must be a tuple with one entry per tensor; got {value!r}")
    out = []
    for i, entry in enumerate(value):
        if entry is None:
            out.append(None)
            continue
        if not isinstance(entry, (tuple, list)) or len(entry) != len(mesh_shape) or not all(
                isinstance(p, Placement) and type(p) is not Placement for p in entry):
            raise CaseDeclarationError(
                file, case, "expected-placements",
                f"{what}[{i}] = {entry!r} must be None or one placement per mesh dimension "
                f"(mesh_shape {mesh_shape!r}), e.g. (Shard(0),)")
        out.append(tuple(entry))
    return tuple(out)


#: Platform features a scenario case may require (``ScenarioCase.requires``). A platform's
#: backend declares the ones it provides (:meth:`meshtest.platforms.backend.ShardBackend.features`); a
#: case needing one it lacks is reported ``unsupported`` naming the feature, never passed.
FEATURES = {
    "dtensor": "DeviceMesh, DTensor, distribute_tensor, redistribute, Shard/Replicate/Partial",
    "tp.styles": "ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput, "
                 "PrepareModuleOutput, PrepareModuleInputOutput and parallelize_module (the TP plan's styles)",
    "tp.no_parallel": "the NoParallel style (in the TP plan's constructor parameters)",
    "tp.reduce_dtype": "reduce_dtype= on RowwiseParallel and PrepareModuleOutput (the TP plan's I/O hooks)",
    "comm_debug_mode": "counting collectives per kind while a block runs (CommDebugMode)",
    "fsdp2": "fully_shard over a DeviceMesh (FSDP2)",
    "loss_parallel": "cross-entropy on a vocabulary-sharded logits DTensor (loss_parallel)",
    "training": "training cases: a TrainCase's baseline and parallelized runs (ShardBackend.train)",
    "fsdp2.mixed_precision": "fully_shard(mp_policy=MixedPrecisionPolicy(...))",
    "pipelining": "torch.distributed.pipelining: PipelineStage and schedules",
    "pipelining.zero_bubble": "the zero-bubble pipeline schedules (ScheduleInterleavedZeroBubble, ZBVZeroBubble)",
    "context_parallel": "context_parallel attention (ring attention over a sequence-sharded mesh): DTensor must "
                        "shard the device's SDPA kernel (CUDA flash/efficient; the CPU flash kernel has no strategy)",
    "dtensor_rng": "DTensor random ops (OffsetBasedRNGTracker): a device RNG DTensor supports (CUDA-like; not CPU)",
    "checkpoint": "activation checkpoint (torch.utils.checkpoint) and saved-tensor hooks",
    "dcp": "torch.distributed.checkpoint save/load of sharded state",
    "symmetric_memory": "symmetric memory (torch.distributed._symmetric_memory): device peer memory (CUDA), not "
                        "CPU/gloo",
    "meta_init": "meta-device module construction and to_empty materialization",
    "collectives": "the platform's own collectives on each rank's plain tensors, as ctx.api.comm: all_reduce, "
                   "all_gather, broadcast, reduce_scatter, barrier",
}

_FEATURE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
_SPEC_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def check_requires(file: str, case: str, requires: Any) -> Tuple[str, ...]:
    """Rule ``feature``: ``requires`` is a tuple of names from :data:`FEATURES`."""
    if isinstance(requires, str) or not isinstance(requires, (tuple, list)):
        raise CaseDeclarationError(
            file, case, "feature", f"requires must be a tuple of feature names such as ('tp.styles',); got {requires!r}"
        )
    for f in requires:
        if not isinstance(f, str) or not _FEATURE_RE.match(f) or f not in FEATURES:
            raise CaseDeclarationError(
                file, case, "feature",
                f"unknown platform feature {f!r}; known features are {', '.join(sorted(FEATURES))}"
            )
    return tuple(requires)


#: Capability domains of distributed training a case can cover (the training net's capability domains; HSDP and
#: torch.compile are out of its scope). Build targets are tagged ``cap:<domain>``.
CAPABILITIES = {
    "comms": "process groups, collectives, P2P, mesh slicing",
    "dtensor": "DeviceMesh, DTensor, layouts, redistribute",
    "shard": "declarative sharding plans: module input/output layout injection",
    "tp": "tensor parallel (parallelize_module, ParallelStyle)",
    "fsdp": "fully_shard (FSDP2): unshard, reduce-scatter, reshard",
    "pp": "pipeline parallel: stages, schedules, P2P",
    "cp": "context parallel attention",
    "ac": "activation checkpoint (full and selective recompute)",
    "swap": "activation swap / offload through saved-tensor hooks",
    "dcp": "distributed checkpoint: save, load, planner, metadata",
    "resume": "training resume: model, optimizer, scheduler, RNG, data position",
    "clip_grad": "gradient norm clipping",
    "init": "init weights / meta-device init and materialization",
    "moe": "expert parallel / MoE all-to-all dispatch and combine",
    "symm_mem": "symmetric memory (one-sided communication)",
    "rng": "distributed random numbers and seed management",
    "mixed_precision": "mixed precision policy",
}
#: The five layers of the training quality net: 0 pure logic, 1 PyTorch mechanism guards, 2 single capability vs
#: a single-device baseline, 3 combinations, 4 long runs, resume and regressions.
LAYERS = (0, 1, 2, 3, 4)


def check_capabilities(file: str, case: str, value: Any) -> Tuple[str, ...]:
    """Rule ``capability``: a tuple of names from :data:`CAPABILITIES`."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise CaseDeclarationError(file, case, "capability",
                                   f"capabilities must be a tuple of domain names such as ('fsdp',); got {value!r}")
    unknown = [c for c in value if c not in CAPABILITIES]
    if unknown:
        raise CaseDeclarationError(file, case, "capability",
                                   f"unknown capability domain(s) {unknown}; known: {', '.join(CAPABILITIES)}")
    return tuple(value)


def check_layer(file: str, case: str, value: Any) -> Optional[int]:
    """Rule ``layer``: ``None`` or one of :data:`LAYERS` (the training net's five layers)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value in LAYERS):
        return value
    raise CaseDeclarationError(file, case, "layer",
                               f"layer must be one of {LAYERS} (the training net's five layers); got {value!r}")


def check_spec_id(file: str, case: str, spec_id: Any) -> Optional[str]:
    """Rule ``spec-id``: ``None`` or the ID of the test-plan item the case implements, e.g. ``"A6"``."""
    if spec_id is None:
        return None
    if not isinstance(spec_id, str) or not _SPEC_ID_RE.match(spec_id):
        raise CaseDeclarationError(
            file, case, "spec-id",
            f"spec_id must be a short ID of letters, digits and _.- such as 'A6'; got {spec_id!r}"
        )
    return spec_id


#: The one-process lane's tag: on the build target and the cases of every ``cpu_level0`` case
#: the lane can run (:func:`runs_locally`); ``--tag=cpu_local`` selects them and runs them with
#: every rank simulated in one process (:mod:`meshtest.platforms.torch.local_lane`). A case may also
#: declare it as its gate: it is then in the lane's signal but not in the ``cpu_level0`` job on
#: real ranks (the generated level-0 sample, whose real-rank run is at ``cpu_level1``).
LOCAL_LANE_TAG = "cpu_local"
#: The gate whose cases the one-process lane takes.
LOCAL_LANE_GATE = "cpu_level0"


#: Device slots of one node when nothing else says (``[meshtest].slots``' default): a case
#: whose ranks exceed it is tagged ``nodes:<n>`` (:func:`nodes_needed`).
DEFAULT_NODE_SLOTS = 8


def nodes_needed(ranks: int, node_slots: int) -> int:
    """Nodes of ``node_slots`` slots a launch of ``ranks`` ranks spans: 1 when it fits one node,
    else the fewest ``n`` that hold it with the same number of ranks on every node (torchrun's and
    msrun's static rendezvous give each node ``ranks / n``), or ``ceil(ranks / node_slots)`` when
    no such ``n`` exists below ``ranks`` (then the launch cannot be placed evenly).

    >>> nodes_needed(8, 8), nodes_needed(8, 4), nodes_needed(12, 8), nodes_needed(16, 8)
    (1, 2, 2, 2)
    """
    if node_slots <= 0 or ranks <= node_slots:
        return 1
    least = -(-ranks // node_slots)
    return next((n for n in range(least, ranks + 1) if ranks % n == 0 and ranks // n <= node_slots), least)


def runs_locally(kind: str, layer: Optional[int], phased: bool, simulation_limit: Optional[str]) -> bool:
    """Whether the one-process lane can run a case: an op case without a declared
    ``simulation_limit``, or a layer-0 scenario (the training net's layer 0: logic checked with no
    collective). Scenarios of other layers and training cases need real ranks (process groups
    of their own, checkpoints, hooks on collectives); phased cases need a real stop."""
    if phased or simulation_limit is not None:
        return False
    return kind == "op" or (kind == "scenario" and layer == 0)


def lane_of(tag_filters: Sequence[str]) -> str:
    """The lane a ``--tag`` selection asks for: ``"local"`` when some positive clause names only
    the one-process lane's tag (``--tag=cpu_local``), else ``"ranks"``."""
    for clause in tag_filters:
        if clause.startswith("-"):
            continue
        tags = [t for t in clause.lstrip("+").split(",") if t]
        if tags and all(t == LOCAL_LANE_TAG for t in tags):
            return "local"
    return "ranks"


def check_known_failure(file: str, case: str, value: Any, expect_raises: Any = None) -> Any:
    """Rule ``known-failure``: ``None`` or a valid :class:`meshtest.model.known.KnownFailure`
    (not a plain reason string: the mark must say which failure it expects), and not together
    with ``expect_raises`` (a case either expects a raise as its pass, or a platform bug)."""
    from .known import KnownFailure

    if value is None:
        return None
    if not isinstance(value, KnownFailure):
        raise CaseDeclarationError(
            file, case, "known-failure",
            "known_failure must be KnownFailure(kind='mismatch'|'raises'|'crash', step=..., match='regex', "
            f"reason=..., upstream='pytorch/pytorch#123') saying which failure is expected; got {value!r}")
    if expect_raises is not None:
        raise CaseDeclarationError(file, case, "known-failure",
                                   "known_failure and expect_raises exclude each other: expect_raises declares the "
                                   "raise the case passes with, known_failure a platform bug it fails with")
    return value.validated(file, case)


def check_reason(file: str, case: str, field: str, value: Any) -> Optional[str]:
    """Rule ``reason``: ``None`` or a non-empty text (``divergence``, ``simulation_limit``)."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise CaseDeclarationError(file, case, "reason", f"{field} must be a non-empty reason string; got {value!r}")
    return value


#: Name of the leading mesh dimension over the replicas of a case's mesh run in a larger launch
#: (:func:`meshtest.parent.planner.merge_small_groups`); a case naming an axis so is never merged.
REPLICA_DIM = "_replica"


def normalised_dim_names(ndim: int) -> Tuple[str, ...]:
    """Axis names given to a mesh whose cases use names only as labels: ``("d0", "d1", ...)``."""
    return tuple(f"d{i}" for i in range(ndim))


def world_size(mesh_shape: Sequence[int]) -> int:
    """Number of ranks a mesh needs: ``prod(mesh_shape)`` (one rank per mesh device)."""
    return math.prod(mesh_shape)


#: Layers whose training cases have a golden loss curve in the repository (the training net's layer 4:
#: regressions pinned to the platform release; ``tools/golden_curves.py`` records them).
GOLDEN_LAYERS = (2, 3)
#: How every note of the golden-curve check starts (``meshtest.rank.train.check_golden``): a
#: comparison made (``golden curve: 3 step(s) from step 0 equal to <case>.json``) or none
#: recorded yet (:data:`NO_GOLDEN_NOTE`, which the closing summary lists once, not per case).
GOLDEN_NOTE = "golden curve:"
NO_GOLDEN_NOTE = "golden curve: none recorded yet"
#: How the note of a case that came near its deadline starts (``meshtest.rank.slow``): the closing
#: summary lists those cases once.
NEAR_DEADLINE_NOTE = "near its deadline:"

#: An op case's steps in the order a rank runs them (:mod:`meshtest.rank.pipeline`).
OP_STEPS = ("build", "derive", "reference", "distribute", "redistribute", "checkpoint", "parallelize", "run",
            "redistribute-output", "placement", "output-metadata", "gather", "compare", "backward")


def after_step(step: str, than: str) -> bool:
    """Whether op step ``step`` comes after ``than`` (:data:`OP_STEPS`); ``False`` for a step
    that is not an op step (a scenario's or a training case's own)."""
    return step in OP_STEPS and than in OP_STEPS and OP_STEPS.index(step) > OP_STEPS.index(than)
