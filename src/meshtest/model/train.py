"""Training cases: a capability under test, trained for a few steps, against a single-device
baseline of the same declaration (the training net's layer 2; the declarative form of torchtitan's
integration tests and Megatron's functional tests).

A :class:`TrainCase` says *what* to train — a seeded model builder, seeded data, a loss, an
optimizer, a number of steps, gradient accumulation — and *how to parallelize it*: one
``parallelize(model, ctx)`` step (a TP plan, ``fully_shard``, a pipeline stage split, CP, AC,
swap hooks, ...). On every rank meshtest trains the baseline (the plain model) and the
parallelized model on the same data and compares, step by step, the loss, each parameter's
gradient (gathered, by fully-qualified name), each parameter after the optimizer step and the
optimizer state, each with its own tolerance (:class:`TrainCompare`). A failure names the step,
the quantity, the parameter and the largest difference; the ranks are named by the report.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Tuple

from ..errors import CaseDeclarationError
from . import rules, schema
from .compare_spec import CompareSpec, check_expect_raises
from .declare import check_timeout
from .known import KnownFailure
from .placement import Placement
from .schedule import Pipeline
from .spec import _Case

#: Quantities a training case compares, in the order they are checked each step.
QUANTITIES = ("loss", "grad_norm", "grads", "params", "optim")

#: The steps of a training case of one launch (:func:`meshtest.rank.train.run_train`), in order
TRAIN_STEPS = ("baseline", "parallel", "compare", "golden")

#: What a resume restores from a checkpoint (:attr:`TrainCase.restore`): the model's and the
#: optimizer's state (DCP), the LR scheduler's state, each rank's RNG state, the data position
#: (the number of steps trained, so micro-batch ``i`` continues where it stopped).
RESTORABLE = ("model", "optim", "scheduler", "rng", "data")


#: How a phased case checkpoints between launches (:attr:`TrainCase.checkpoint`).
CHECKPOINTS = ("dcp", "full", "full_broadcast")

#: When the parallel run syncs gradients across its micro-batches (:attr:`TrainCase.grad_sync`).
GRAD_SYNCS = ("every", "last")

def _close() -> CompareSpec:
    return CompareSpec.allclose(rtol=1e-5, atol=1e-6)


@dataclass(frozen=True)
class TrainCompare:
    """Tolerance per compared quantity; ``None`` leaves a quantity out.

    Defaults: ``allclose(rtol=1e-5, atol=1e-6)``: float32 sums re-associated by sharding stay
    within it over a few steps of a small model; a case whose capability changes precision
    (mixed precision) loosens only what it must, and says why.
    """

    loss: Optional[CompareSpec] = field(default_factory=_close)
    grad_norm: Optional[CompareSpec] = field(default_factory=_close)
    grads: Optional[CompareSpec] = field(default_factory=_close)
    params: Optional[CompareSpec] = field(default_factory=_close)
    optim: Optional[CompareSpec] = field(default_factory=_close)

    def spec(self, quantity: str) -> Optional[CompareSpec]:
        return getattr(self, quantity)


def _exact() -> CompareSpec:
    return CompareSpec.allclose(rtol=0.0, atol=0.0)


@dataclass(frozen=True)
class Phase:
    """A later phase of a training case: a new launch (the processes of the phase before it have
    exited) that loads the checkpoint the phase before it saved and trains ``steps`` more steps.

    Declared inside ``TrainCase(phases=(Phase(...), ...))``; ``mesh_shape`` and
    ``mesh_dim_names`` are read by the static scan (literals), so that the case's build target
    needs the largest phase's mesh. ``None`` fields are the case's own.

    :param steps: optimizer steps this phase trains (≥ 1).
    :param mesh_shape: the phase's mesh (a cross-mesh restore: save on ``(4,)``, load on ``(2, 2)``).
    :param mesh_dim_names: its axis names (default: the case's, when the phase's mesh has as many
        dimensions). :param parallelize: its parallelize step.
    :param batch_split: its data-parallel axis (``None``: the case's).
    :param continuity: how the resumed steps must equal the *continuous* run (the same phase
        trained from step 0 without a stop, in the same launch): exact by default — on CPU a
        resume that restores everything reproduces the continuous run bit for bit (Megatron's
        resume check compares the two halves the same way); a cross-mesh restore re-associates
        sums in the steps before the stop and states its tolerance.
    """

    steps: int
    mesh_shape: Optional[Tuple[int, ...]] = None
    mesh_dim_names: Optional[Tuple[str, ...]] = None
    parallelize: Optional[Callable[..., Any]] = None
    batch_split: Optional[str] = None
    continuity: CompareSpec = field(default_factory=_exact)


@dataclass(frozen=True)
class Stability:
    """A long run (the training net's layer 4): the parallelized model trains ``TrainCase.steps``
    steps — no per-step baseline comparison (over hundreds of steps float32 re-association
    drifts past any per-step tolerance; the point is the run) — and must:

    - keep every step's loss, gradients and parameters finite (no NaN/Inf);
    - not grow its peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``, per rank process)
      by more than ``rss_growth_mb`` MiB from the end of step ``warmup`` to the last step: a
      leak of a few KiB per step (a tensor kept per step) shows over 200 steps;
    - finish inside the case deadline (a hang is a timeout).

    Each rank writes its curve (loss, peak RSS and seconds per step) as
    ``curve_rank<r>.json`` in the case's directory; the HTML report draws it.

    :param warmup: steps before the RSS baseline is taken (allocator and autograd caches fill).
    :param rss_growth_mb: allowed growth of the peak RSS after warm-up, MiB.
    """

    warmup: int = 20
    rss_growth_mb: float = 8.0


def required_positional(fn: Callable[..., Any]) -> Optional[int]:
    """How many positional parameters ``fn`` requires (those without a default); ``None`` when
    Python cannot tell (a builtin without a signature). Decides the form of a training case's
    ``model`` (``model(api)`` or ``model(api, ctx)``) and ``loss`` (``loss(output, target)`` or
    ``loss(output, target, model)``): a parameter with a default is never filled (``F.mse_loss``'s
    third positional parameter is ``size_average``); ``*args`` takes the first form."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
        return None  # takes any number: the first form
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty)


@schema.declares(schema.TRAIN)
@dataclass(frozen=True)
class TrainCase(_Case):
    """A training case (see the module docstring).

    :param name: unique across all case files.
    :param model: ``model(api) -> module``: builds the model; called after seeding every RNG
        with :meth:`seed`, once for the baseline and once for the parallelized run, so both
        start from the same weights. ``model(api, ctx)`` (two required parameters): the builder
        also gets the run's :class:`meshtest.platforms.ports.TrainContext`, the baseline's as the
        parallel run's, whose ``ctx.step`` and ``ctx.micro`` are set before each micro-batch's
        forward — for a model whose forward depends on the micro-batch (a parameter used on the
        last one only), the same in both runs.
    :param data: ``data(i, api) -> (inputs, target)``: global micro-batch ``i`` (``i = step *
        grad_accum + micro``), the same on every rank; ``inputs`` a tensor or a tuple of them.
    :param loss: ``loss(output, target) -> scalar tensor``; ``loss(output, target, model)``
        (three required parameters) also gets the model of the run (the plain one for the
        baseline, the parallelized one for the parallel run), for a loss that reads what the
        forward left on a submodule (auxiliary logits). Not with ``pipeline``: torch's schedule
        calls the loss on the last stage with ``(output, target)`` only (rule ``loss``).
    :param mesh_shape: mesh shape; the launch has ``prod(mesh_shape)`` ranks.
    :param parallelize: ``parallelize(model, ctx) -> model``: the capability under test, applied
        to the freshly built model (``ctx``: :class:`meshtest.platforms.ports.TrainContext` —
        ``mesh``, ``api``, ``rank``, ``build()`` for a fresh model, ``note()``). ``None``: the
        baseline against itself (a layer-0/1 sanity case).
    :param optimizer: ``optimizer(params, api) -> optimizer``; default SGD with ``lr=0.1``.
    :param steps: optimizer steps (≥ 1).
    :param grad_accum: micro-batches per step (≥ 1); the loss is divided by it.
    :param batch_split: a mesh axis name: its ranks take distinct row-chunks of every
        micro-batch (data parallel; the batch dim must divide evenly) and the compared loss is
        their mean. ``None``: every rank trains on the whole batch (TP, PP, ...).
    :param train_step: ``train_step(model, inputs, target, loss_fn, ctx) -> loss or None``: a
        custom forward and backward of the parallel run (a pipeline schedule, kept in
        ``ctx.state`` by ``parallelize``: the loss exists on the last stage only, ``None``
        elsewhere; ``parallelize`` sets ``ctx.partial`` so that each rank compares the
        parameters it holds). Default: ``loss_fn(model(*inputs), target).backward()``.
    :param clip_grad_norm: clip the gradients' global 2-norm to this value before each optimizer
        step, in both runs (the platform's ``clip_grad_norm_``; a rank holding part of the model
        adds every rank's part to the norm); the total norm is compared (quantity
        ``grad_norm``) and the compared gradients are the clipped ones.
    :param compare: :class:`TrainCompare`.
    :param scheduler: ``scheduler(optimizer, api) -> LR scheduler``, stepped after each
        optimizer step in both runs (its state is checkpointed by phases).
    :param phases: later :class:`Phase` s: the case's own fields describe phase 1, which trains
        ``steps`` steps and saves a checkpoint (DCP: model and optimizer; the scheduler, each
        rank's RNG and the data position beside it); each later phase runs in a launch of its
        own, loads the checkpoint the phase before saved, trains on and, unless it is the last,
        saves. Each phase is compared with the single-device baseline trained continuously to the
        same step (``compare``) and, from phase 2, with the continuous run of its own parallel
        configuration (:attr:`Phase.continuity`). A failure names the phase and the global step.
    :param restore: what a resume restores (a subset of :data:`RESTORABLE`); a test fixture drops
        one to prove the phase cases catch it.
    :param stability: a long run (:class:`Stability`) instead of the per-step comparison.
    :param mesh_dim_names: real axis names (the capability reads them).
    :param tags: gate tags. :param capabilities: capability domains covered
        (:data:`meshtest.model.rules.CAPABILITIES`); targets are tagged ``cap:<domain>``.
    :param layer: layer of the training quality net (2: single capability, 3: combination, 4: resume/long run).
    :param requires: platform features needed (e.g. ``fsdp2``); missing → ``unsupported``.
    :param spec_id: a test-plan ID. :param known_failure: as op cases (xfail/xpass).
    :param divergence: the platform differs from the spec and the case asserts its behaviour.
    :param solo_launcher: a launch of its own. :param timeout_s: deadline in seconds.
    :param expect_raises: ``(ExceptionClass, "regex"[, "step"])``: the training must raise it
        (the step ``parallel`` by default: building, parallelizing or training the parallel
        model), which is the case's pass; a fix in the platform that made it raise is pinned this
        way. Only a case of one launch (no ``phases``, no ``stability``); not with
        ``known_failure``. ``ExpectRaises(..., or_pass=True)``: the raise, or runs that agree.
    :param pipeline: a :class:`Pipeline`: the parallel run trains through a pipeline schedule
        (meshtest builds the stages and the schedule; not with ``train_step``); ``parallelize``,
        if any, is applied to each stage's module. Needs ``"pipelining"`` in ``requires``.
    :param grad_sync: ``"every"`` (default): gradients are synchronised after every micro-batch's
        backward; ``"last"``: gradient accumulation without synchronisation (torch: FSDP2's
        ``set_requires_gradient_sync(False)`` on every FSDP module until the last micro-batch of
        the step); needs ``grad_accum >= 2`` and a parallelized model with such modules.
    :param checkpoint: how a phased case saves and loads between launches: ``"dcp"`` (default:
        sharded, each rank writes and reads its shards), ``"full"`` (the full state dict,
        gathered and written by rank 0, read by every rank: torch's ``get_state_dict`` /
        ``set_state_dict`` with ``full_state_dict=True``) or ``"full_broadcast"`` (the same file,
        read by rank 0 only and broadcast: ``broadcast_from_rank0=True``). Needs ``phases``.
    :param param_placements: the plan "place every parameter as P": ``{fnmatch pattern of the
        FQN: placements}`` (one placement per mesh dimension; the first matching pattern wins,
        an unmatched parameter is replicated); every parameter becomes a distributed tensor so
        placed, the inputs are replicated and the output gathered (torch: ``distribute_module``),
        and after each backward every gradient is redistributed to its parameter's placements (a
        note names each one that was not), so that the optimizer's in-place update meets equal
        placements. Applied before ``parallelize``.
    """

    name: str
    model: Callable[..., Any]
    data: Callable[..., Any]
    loss: Callable[..., Any]
    mesh_shape: Tuple[int, ...]
    parallelize: Optional[Callable[..., Any]] = None
    optimizer: Optional[Callable[..., Any]] = None
    steps: int = 2
    grad_accum: int = 1
    batch_split: Optional[str] = None
    train_step: Optional[Callable[..., Any]] = None
    clip_grad_norm: Optional[float] = None
    compare: TrainCompare = field(default_factory=TrainCompare)
    scheduler: Optional[Callable[..., Any]] = None
    phases: Tuple[Phase, ...] = ()
    restore: Tuple[str, ...] = RESTORABLE
    stability: Optional[Stability] = None
    mesh_dim_names: Optional[Tuple[str, ...]] = None
    tags: Tuple[str, ...] = ()
    capabilities: Tuple[str, ...] = ()
    layer: Optional[int] = None
    requires: Tuple[str, ...] = ()
    spec_id: Optional[str] = None
    known_failure: Optional[KnownFailure] = None
    divergence: Optional[str] = None
    solo_launcher: bool = False
    timeout_s: Optional[float] = None
    expect_raises: Optional[Any] = None
    pipeline: Optional[Pipeline] = None
    grad_sync: str = "every"
    checkpoint: str = "dcp"
    param_placements: Optional[Any] = None

    #: training cases parallelize on the real mesh (axis names kept when planned)
    needs_mesh = True
    simulation_limit = None

    @property
    def model_takes_context(self) -> bool:
        """Whether ``model`` is ``model(api, ctx)`` (:func:`required_positional`)."""
        return required_positional(self.model) == 2

    @property
    def loss_takes_model(self) -> bool:
        """Whether ``loss`` is ``loss(output, target, model)`` (:func:`required_positional`)."""
        return required_positional(self.loss) == 3

    def seed(self) -> int:
        """The seed of model building: ``crc32(f"{name}:model")``, the same for both runs."""
        return zlib.crc32(f"{self.name}:model".encode())

    def validated(self, file: str) -> "TrainCase":
        """Check every declaration rule; return a normalised copy.

        :raises CaseDeclarationError: naming ``file``, this case and the broken rule.
        """
        name = rules.check_name(file, self.name)
        for fname in ("model", "data", "loss"):
            if not callable(getattr(self, fname)):
                raise CaseDeclarationError(file, name, "train",
                                           f"{fname} must be callable; got {getattr(self, fname)!r}")
        forms = {"model": ((1, 2), "model(api) or model(api, ctx)"),
                 "loss": ((2, 3), "loss(output, target) or loss(output, target, model)")}
        for fname, (counts, said) in forms.items():
            required = required_positional(getattr(self, fname))
            if required is not None and required not in counts:
                raise CaseDeclarationError(file, name, fname, f"{fname} must be {said}: it requires {required} "
                                                              "positional parameter(s)")
        if self.pipeline is not None and self.loss_takes_model:
            raise CaseDeclarationError(file, name, "loss", "a pipeline's schedule calls the loss on the last stage "
                                                           "with (output, target) only: loss(output, target, model) "
                                                           "is not for a pipeline case")
        for fname in ("parallelize", "optimizer", "train_step", "scheduler"):
            value = getattr(self, fname)
            if value is not None and not callable(value):
                raise CaseDeclarationError(file, name, "train", f"{fname} must be callable or None; got {value!r}")
        for fname in ("steps", "grad_accum"):
            value = getattr(self, fname)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CaseDeclarationError(file, name, "train", f"{fname} must be an integer >= 1; got {value!r}")
        clip = self.clip_grad_norm
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or clip <= 0):
            raise CaseDeclarationError(file, name, "train", f"clip_grad_norm must be a number > 0; got {clip!r}")
        mesh_shape = rules.check_mesh_shape(file, name, self.mesh_shape)
        names = rules.check_mesh_dim_names(file, name, mesh_shape, self.mesh_dim_names)
        if self.batch_split is not None and self.batch_split not in (names or ()):
            raise CaseDeclarationError(file, name, "train",
                                       f"batch_split {self.batch_split!r} is not one of the mesh axis names {names}")
        if not isinstance(self.compare, TrainCompare) or not all(
                isinstance(self.compare.spec(q), (CompareSpec, type(None))) for q in QUANTITIES):
            raise CaseDeclarationError(file, name, "compare", "compare must be TrainCompare(loss=..., grads=..., ...)")
        check_timeout(file, name, self.timeout_s)
        phases = _validated_phases(self, file, name, mesh_shape)
        _check_stability(self, file, name, phases)
        restore = tuple(self.restore) if isinstance(self.restore, (tuple, list)) else self.restore
        if not isinstance(restore, tuple) or any(r not in RESTORABLE for r in restore):
            raise CaseDeclarationError(file, name, "restore",
                                       f"restore must be a tuple of names from {RESTORABLE} (what a resume "
                                       f"restores); got {restore!r}")
        expect = check_expect_raises(file, name, self.expect_raises)
        if expect is not None and (phases or self.stability is not None):
            raise CaseDeclarationError(file, name, "expect-raises", "expect_raises is for a training case of one "
                                                                    "launch: not with phases= or stability=")
        if expect is not None and expect.step is not None and expect.step not in TRAIN_STEPS:
            raise CaseDeclarationError(file, name, "expect-raises",
                                       f"the step of expect_raises must be one of {TRAIN_STEPS}; got {expect.step!r}")
        return dataclasses.replace(
            self, **_validated_plan(self, file, name, mesh_shape, names, phases),
            phases=phases, restore=restore, expect_raises=expect,
            mesh_shape=mesh_shape, mesh_dim_names=names, tags=rules.check_tags(file, name, self.tags),
            capabilities=rules.check_capabilities(file, name, self.capabilities),
            layer=rules.check_layer(file, name, self.layer), requires=rules.check_requires(file, name, self.requires),
            spec_id=rules.check_spec_id(file, name, self.spec_id),
            known_failure=rules.check_known_failure(file, name, self.known_failure, expect),
            divergence=rules.check_reason(file, name, "divergence", self.divergence),
            solo_launcher=rules.check_flag(file, name, "solo_launcher", self.solo_launcher))

    def phase_meshes(self) -> Tuple[Tuple[Tuple[int, ...], Optional[Tuple[str, ...]]], ...]:
        """Every phase's (mesh shape, axis names), phase 1 first; ``()`` without later phases —
        what the static scan reads (:attr:`meshtest.model.scan.ScannedCase.phase_meshes`)."""
        if not self.phases:
            return ()
        return ((self.mesh_shape, self.mesh_dim_names),) + tuple((p.mesh_shape, p.mesh_dim_names)
                                                                 for p in self.phases)

    def phase_case(self, phase: int) -> "TrainCase":
        """The case as phase ``phase`` (1-based) trains it: that phase's mesh, parallelize, batch
        split and steps (the other fields are the case's)."""
        if phase == 1:
            return self
        p = self.phases[phase - 2]
        return dataclasses.replace(self, mesh_shape=p.mesh_shape, mesh_dim_names=p.mesh_dim_names,
                                   parallelize=p.parallelize, batch_split=p.batch_split, steps=p.steps)

    def total_steps(self) -> int:
        """Steps of the whole trajectory: ``steps`` plus every later phase's."""
        return self.steps + sum(p.steps for p in self.phases)

    def phase_start(self, phase: int) -> int:
        """Global index of phase ``phase``'s first step: the steps of the phases before it."""
        return self.steps + sum(p.steps for p in self.phases[: phase - 2]) if phase > 1 else 0

    def to_scanned(self, file: str, lineno: int):
        return dataclasses.replace(super().to_scanned(file, lineno), phase_meshes=self.phase_meshes())


def _validated_plan(case: "TrainCase", file: str, name: str, mesh_shape: Tuple[int, ...],
                    names: Optional[Tuple[str, ...]], phases: Tuple[Phase, ...]) -> dict:
    """Rules ``pipeline``, ``grad-sync``, ``checkpoint`` and ``param-placements``; the
    normalised fields by name."""
    out: dict = {}
    if case.pipeline is not None:
        if not isinstance(case.pipeline, Pipeline):
            raise CaseDeclarationError(file, name, "pipeline", f"pipeline must be Pipeline(...); got "
                                                               f"{case.pipeline!r}")
        if case.train_step is not None:
            raise CaseDeclarationError(file, name, "pipeline", "pipeline and train_step exclude each other: the "
                                                               "pipeline's schedule is the step")
        if phases and case.pipeline.stages_per_rank != 1:
            raise CaseDeclarationError(file, name, "pipeline", "phases save and load each rank's stage by FQN: "
                                                               "a phased pipeline runs one stage per rank")
        if not any(str(r).startswith("pipelining") for r in tuple(case.requires or ())):
            raise CaseDeclarationError(file, name, "pipeline", "a pipeline case needs the platform feature: add "
                                                               "requires=('pipelining',)")
        out["pipeline"] = case.pipeline.validated(file, name, mesh_shape, names)
    if case.grad_sync not in GRAD_SYNCS:
        raise CaseDeclarationError(file, name, "grad-sync", f"grad_sync must be one of {GRAD_SYNCS}; got "
                                                            f"{case.grad_sync!r}")
    if case.grad_sync == "last" and (case.grad_accum < 2 or case.pipeline is not None):
        raise CaseDeclarationError(file, name, "grad-sync",
                                   "grad_sync='last' skips the sync of every micro-batch but the last: it needs "
                                   "grad_accum >= 2, and no pipeline (a schedule syncs its stages itself)")
    if case.checkpoint not in CHECKPOINTS:
        raise CaseDeclarationError(file, name, "checkpoint", f"checkpoint must be one of {CHECKPOINTS}; got "
                                                             f"{case.checkpoint!r}")
    if case.checkpoint != "dcp" and not phases:
        raise CaseDeclarationError(file, name, "checkpoint", f"checkpoint={case.checkpoint!r} says how phases "
                                                             "save and load: add phases=(Phase(...),)")
    out["param_placements"] = _check_param_placements(file, name, mesh_shape, case.param_placements)
    return out


def _check_stability(case: "TrainCase", file: str, name: str, phases: Tuple[Phase, ...]) -> None:
    """Rule ``stability``: ``Stability(warmup=w, rss_growth_mb=m)`` with ``0 < w < steps`` and
    ``m > 0``, and no phases."""
    stab = case.stability
    if stab is None:
        return
    if (not isinstance(stab, Stability) or not isinstance(stab.warmup, int) or not 0 < stab.warmup < case.steps
            or not stab.rss_growth_mb > 0):
        raise CaseDeclarationError(file, name, "stability",
                                   f"stability must be Stability(warmup=w, rss_growth_mb=m) with 0 < w < steps "
                                   f"({case.steps}) and m > 0; got {stab!r}")
    if phases:
        raise CaseDeclarationError(file, name, "stability", "a long run has no phases")


def _validated_phases(case: "TrainCase", file: str, name: str, mesh_shape: Tuple[int, ...]) -> Tuple[Phase, ...]:
    """Rule ``phase``: each later phase is a :class:`Phase` with ``steps >= 1``, a valid mesh,
    and a ``batch_split`` among its axis names; a pipeline ``train_step`` is the case's, so
    every phase keeps the case's."""
    if not isinstance(case.phases, (tuple, list)) or not all(isinstance(p, Phase) for p in case.phases):
        raise CaseDeclarationError(file, name, "phase",
                                   f"phases must be a tuple of Phase(...); got {case.phases!r}")
    out = []
    for i, p in enumerate(case.phases, start=2):
        if not isinstance(p.steps, int) or isinstance(p.steps, bool) or p.steps < 1:
            raise CaseDeclarationError(file, name, "phase", f"phase {i}: steps must be an integer >= 1; got "
                                                            f"{p.steps!r}")
        shape = rules.check_mesh_shape(file, name, p.mesh_shape if p.mesh_shape is not None else mesh_shape)
        names = rules.check_mesh_dim_names(file, name, shape, p.mesh_dim_names if p.mesh_dim_names is not None
                                           else (case.mesh_dim_names if len(shape) == len(mesh_shape) else None))
        split = p.batch_split if p.batch_split is not None else case.batch_split
        if split is not None and split not in (names or ()):
            raise CaseDeclarationError(file, name, "phase", f"phase {i}: batch_split {split!r} is not one of its "
                                                            f"mesh axis names {names}")
        if p.parallelize is not None and not callable(p.parallelize):
            raise CaseDeclarationError(file, name, "phase", f"phase {i}: parallelize must be callable")
        if not isinstance(p.continuity, CompareSpec):
            raise CaseDeclarationError(file, name, "phase", f"phase {i}: continuity must be a CompareSpec")
        out.append(dataclasses.replace(p, mesh_shape=shape, mesh_dim_names=names, batch_split=split,
                                       parallelize=p.parallelize or case.parallelize))
    return tuple(out)


def _check_param_placements(file: str, name: str, mesh_shape: Tuple[int, ...],
                            value: Any) -> Optional[Tuple[Tuple[str, Tuple[Placement, ...]], ...]]:
    """Rule ``param-placements``: ``None`` or ``{pattern: placements}`` with one placement per
    mesh dimension; returned as (pattern, placements) pairs in declaration order."""
    if value is None:
        return None
    pairs = list(value.items()) if isinstance(value, Mapping) else value
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise CaseDeclarationError(file, name, "param-placements", "param_placements must be a non-empty "
                                                                   f"{{'fqn pattern': placements}}; got {value!r}")
    out = []
    for pair in pairs:
        pattern, placements = pair if isinstance(pair, tuple) and len(pair) == 2 else (None, None)
        if not isinstance(pattern, str) or not isinstance(placements, (tuple, list)) or len(placements) != len(
                mesh_shape) or not all(isinstance(p, Placement) and type(p) is not Placement for p in placements):
            raise CaseDeclarationError(file, name, "param-placements",
                                       f"param_placements entry {pair!r}: a FQN pattern (fnmatch, e.g. '*.weight') "
                                       f"and one placement per mesh dimension (mesh_shape {mesh_shape!r})")
        fnmatch.translate(pattern)
        out.append((pattern, tuple(placements)))
    return tuple(out)


def placements_for(param_placements: Tuple[Tuple[str, Tuple[Placement, ...]], ...], fqn: str) -> Optional[tuple]:
    """The placements of parameter ``fqn`` under ``param_placements``: the first pattern that
    matches (``fnmatch.fnmatchcase``), else ``None`` (replicated)."""
    for pattern, placements in param_placements:
        if fnmatch.fnmatchcase(fqn, pattern):
            return placements
    return None
