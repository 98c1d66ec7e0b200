"""The declarative model: what to test, not how to launch it (the declaration rules).

A case file registers :class:`OpShardCase` objects; the runner plans them into launches and
each rank runs the pipeline ``build → (derive) → reference → distribute → run → gather →
compare`` (see :mod:`meshtest.rank.pipeline`). Everything here is platform-agnostic: tensors are
described by :class:`InputSpec` and built as NumPy arrays, which the platform's
:class:`meshtest.platforms.backend.ShardBackend` turns into its own tensors.
"""
from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Tuple

from ..errors import CaseDeclarationError
from . import rules, schema
from .compare_spec import CompareSpec, check_expect_raises
from .declare import check_declared_steps, check_derived, check_inputs, check_partial_split, check_timeout, takes_local
from .inputs import DerivedSpec
from .known import KnownFailure
from .scan import ScannedCase


class _Case:
    """What every case kind has beyond its declared fields (see :mod:`meshtest.model.schema`)."""

    kind: str  # set by schema.declares

    @property
    def world_size(self) -> int:
        """Ranks needed: ``prod(mesh_shape)``."""
        return rules.world_size(self.mesh_shape)  # type: ignore[attr-defined]

    def to_scanned(self, file: str, lineno: int) -> ScannedCase:
        """What the static scan must have read for this (validated) case, declared in ``file``
        at ``lineno``: its static fields (:data:`meshtest.model.schema.SCANNED_FIELDS`)."""
        return ScannedCase(file=file, lineno=lineno, kind=self.kind,
                           **{n: getattr(self, n) for n in schema.SCANNED_FIELDS})


@schema.declares(schema.OP)
@dataclass(frozen=True)
class OpShardCase(_Case):
    """One distributed-op test case: an op, its full inputs, their placements, a comparison.

    :param name: unique across all case files; used in CLI filters and reports.
    :param fn: the op under test, ``fn(*inputs, *derived)`` → tensor or tuple of tensors.
        Called once on the full inputs (reference) and once on the distributed inputs.
        With ``needs_mesh=True`` the distributed call also gets ``mesh=<DeviceMesh>`` and the
        reference call gets ``mesh=None``. ``fn(..., *, local)`` (a keyword-only ``local``) runs a
        part of the distributed call on local tensors: ``local(g, *out_placements,
        reference=None)(*tensors)`` calls ``g(*local_tensors, mesh=mesh)`` on each rank's local
        parts and wraps its outputs with ``out_placements`` (one tuple per output; torch:
        ``to_local`` in, ``from_local`` out, differentiable), and on the reference call runs
        ``reference`` (default ``g``) on the full tensors with ``mesh=None``; the DTensor ops
        after it, and the backward, go through it (rule ``local``: keyword-only, not with
        ``local_fn``).
    :param inputs: the inputs: an :class:`InputSpec` (the full tensor, split by the platform) or a
        :class:`meshtest.model.local_input.LocalInput` (each rank's local tensor).
    :param placements: one tuple per input, each with one placement per mesh dimension.
    :param mesh_shape: mesh shape; the launch has ``prod(mesh_shape)`` ranks.
    :param mesh_dim_names: mesh axis names. For ordinary ops they are labels only: the planner
        normalises them by ndim so cases with the same shape share a launch. With
        ``needs_mesh=True`` the case reads real axis names from the mesh (e.g. to find a
        communication group), so the names are kept and only cases with the same names share.
    :param compare: a :class:`CompareSpec`.
    :param tags: gate tags from :data:`meshtest.model.rules.GATE_TAGS`.
    :param derived_inputs: :class:`DerivedSpec` list, see there.
    :param compare_outputs: indices of the outputs to gather and compare when ``fn`` returns
        several (others are ignored); ``None`` compares all. Range is checked at run time.
    :param needs_mesh: see ``mesh_dim_names``.
    :param solo_launcher: run this case in a launch of its own.
    :param simulation_limit: why the one-process lane (``--tag=cpu_local``,
        :mod:`meshtest.platforms.torch.local_lane`) cannot give this case the real lane's verdict (a
        known limit of torch's rank simulation, as measured by ``tools/lane_diff.py``): the
        case then runs on real ranks only and is not tagged ``cpu_local``.
    :param known_failure: the failure the platform is known to have on this case
        (:class:`meshtest.model.known.KnownFailure`: kind, step, message pattern, reason and the
        upstream report). The case still runs; failing *that way* is reported ``xfail``, failing
        another way ``fail`` (naming both), passing ``xpass``, which fails the run so the mark
        gets removed. A static field: the scan reads it (a ``KnownFailure(...)`` call with
        literal keywords, or a module-level name bound once to one).
    :param timeout_s: this case's deadline in seconds (default: the run's ``--case-timeout``,
        120 s). Past it every rank dumps its Python stacks into its log, the launch is killed,
        the case is reported ``timeout`` and the cases after it run in a fresh launch.
    :param grad_compare: comparison of input gradients (default: ``compare``). Gradients are
        checked when any input has ``requires_grad=True``: after the forward comparison, both
        paths back-propagate the loss ``L = sum_i sum(out_i * G_i)`` over the compared float
        outputs, where ``G_i`` is a fixed standard-normal tensor of ``out_i``'s shape (seed
        :meth:`grad_seed`), identical on every rank. The distributed loss is taken on the
        gathered output (``full_tensor``, which is differentiable), so each rank optimises the
        same full loss and ``dL/dx`` is the reference's ``x.grad``; every ``requires_grad``
        input's gathered gradient is compared with it.
    :param output_placements: the placements each compared output must have, checked on every
        rank before the gather (step ``placement``): one entry per output of ``fn`` (``None``
        skips one), each one placement per mesh dimension. A wrong placement that still gathers
        to the right values fails here.
    :param grad_placements: the same for the gradient of each input (``None`` skips one),
        checked after the backward.
    :param expect_raises: ``(ExceptionClass, "regex")`` or ``(ExceptionClass, "regex", "step")``
        (see :class:`ExpectRaises`): the case passes when every rank raises it at that step
        (default ``run``), and fails naming what happened instead.
    :param redistribute_inputs: the declared step between placement and op (step
        ``redistribute``, distributed path only): one entry per input, each ``None`` (left as
        placed) or the placements (one per mesh dimension) the distributed input is
        redistributed to (``DTensor.redistribute``) before ``fn`` runs. The reference call is
        unchanged, since a redistribute keeps the global values: the case tests the
        redistribution and the op on what it produced.
    :param local_fn: the distributed call written on local tensors (step ``run``):
        ``local_fn(*local_inputs, mesh=<DeviceMesh>)`` gets each rank's local shard of every
        input (after ``redistribute_inputs``) and the mesh with the case's axis names (for
        ``mesh.get_group("tp")``), and returns local tensors, which the platform wraps as
        distributed tensors with ``local_output_placements`` (torch:
        ``torch.distributed.tensor.experimental.local_map``, i.e. ``to_local`` in and
        ``DTensor.from_local(..., run_check=False)`` out). ``fn`` stays the reference on full
        tensors. For explicit collectives (funcol all-gather, reduce-scatter, all-to-all) and
        ``to_local``/``from_local`` round trips, so that no ``fn`` branches on the tensor type.
    :param local_output_placements: with ``local_fn`` (and only with it): one entry per output,
        each one placement per mesh dimension.
    :param module: a module under test: ``module(api) -> module`` builds it (after seeding the
        platform's RNG with :meth:`module_seed`, so both calls get the same weights), and ``fn``
        is called as ``fn(module, *inputs)``: with the plain module on the full tensors
        (reference), with the module parallelized by ``plan`` on the distributed inputs (step
        ``parallelize``, then ``run``). For a TP style or plan whose subject is the module's
        forward on distributed inputs, with no branch on the path.
    :param plan: with ``module`` (and only with it): ``{fqn: style}`` handed to the platform's
        ``parallelize_module`` (torch: ``torch.distributed.tensor.parallel.parallelize_module(
        module, mesh, plan)``), or ``plan(module, mesh, api) -> module``.
    :param redistribute_outputs: the step after the op (step ``redistribute-output``): one
        entry per output of the distributed call, ``None`` or the placements to redistribute it
        to before the placement check and the gather (e.g. a ``Partial`` matmul output
        reduce-scattered to ``Shard``).
    :param checkpoint_inputs: a save and load between placement and op (step ``checkpoint``,
        after ``redistribute_inputs``): one entry per input, ``None`` (not checkpointed) or the
        placements it is loaded into; every checkpointed input is saved as placed in one
        checkpoint (torch: ``torch.distributed.checkpoint.save`` of a ``{"input<i>": DTensor}``
        state dict, each rank writing its shards with their global offsets) and loaded into a
        fresh distributed tensor of the same global shape with the entry's placements (``load``:
        a reshard when they differ). The op then runs on the loaded tensors; the reference is
        unchanged, so wrong saved offsets show as wrong values. The checkpoint lives in the
        case's directory of the run's artifacts, under ``checkpoint/``.
    """

    name: str
    fn: Callable[..., Any]
    inputs: Sequence[Any]
    placements: Sequence[tuple]
    mesh_shape: Tuple[int, ...]
    mesh_dim_names: Optional[Tuple[str, ...]] = None
    compare: CompareSpec = field(default_factory=CompareSpec.allclose)
    tags: Tuple[str, ...] = ()
    derived_inputs: Sequence[DerivedSpec] = ()
    compare_outputs: Optional[Tuple[int, ...]] = None
    needs_mesh: bool = False
    solo_launcher: bool = False
    known_failure: Optional[KnownFailure] = None
    grad_compare: Optional[CompareSpec] = None
    timeout_s: Optional[float] = None
    output_placements: Optional[Tuple[Optional[tuple], ...]] = None
    grad_placements: Optional[Tuple[Optional[tuple], ...]] = None
    expect_raises: Optional[Any] = None
    simulation_limit: Optional[str] = None
    redistribute_inputs: Optional[Tuple[Optional[tuple], ...]] = None
    local_fn: Optional[Callable[..., Any]] = None
    local_output_placements: Optional[Tuple[tuple, ...]] = None
    redistribute_outputs: Optional[Tuple[Optional[tuple], ...]] = None
    checkpoint_inputs: Optional[Tuple[Optional[tuple], ...]] = None
    module: Optional[Callable[..., Any]] = None
    plan: Optional[Any] = None

    #: op cases declare no platform features, test-plan ID or training capability (the schema's
    #: fixed values)
    requires = ()
    spec_id = None
    capabilities = ()
    layer = None

    def module_seed(self) -> int:
        """Seed of building ``module``: ``crc32(f"{name}:module")``, the same for both calls."""
        return zlib.crc32(f"{self.name}:module".encode())

    @property
    def takes_local(self) -> bool:
        """Whether ``fn`` is ``fn(..., *, local)`` (:func:`takes_local`)."""
        return takes_local(self.fn)

    @property
    def needs_grad(self) -> bool:
        """Whether the backward step runs (some input has ``requires_grad``)."""
        return any(s.requires_grad for s in self.inputs)

    def grad_seed(self, output_index: int) -> int:
        """Seed of ``G_i``, the upstream gradient of output ``i``: ``crc32(f"{name}:grad:{i}")``."""
        return zlib.crc32(f"{self.name}:grad:{output_index}".encode())

    def validated(self, file: str) -> "OpShardCase":
        """Check every declaration rule; return a normalised copy.

        :raises CaseDeclarationError: naming ``file``, this case and the broken rule.
        """
        name = rules.check_name(file, self.name)
        if not callable(self.fn):
            raise CaseDeclarationError(file, name, "fn", f"fn must be callable; got {self.fn!r}")
        try:
            takes_local(self.fn)
        except ValueError as e:
            raise CaseDeclarationError(file, name, "local", str(e)) from None
        mesh_shape = rules.check_mesh_shape(file, name, self.mesh_shape)
        names = rules.check_mesh_dim_names(file, name, mesh_shape, self.mesh_dim_names)
        tags = rules.check_tags(file, name, self.tags)
        needs_mesh = rules.check_flag(file, name, "needs_mesh", self.needs_mesh)
        solo = rules.check_flag(file, name, "solo_launcher", self.solo_launcher)
        inputs = check_inputs(file, name, self.inputs)
        placements = rules.check_placements(file, name, mesh_shape, [s.shape for s in inputs], self.placements)
        check_partial_split(file, name, mesh_shape, inputs, placements, self.compare)
        derived = check_derived(file, name, mesh_shape, self.derived_inputs)
        for field_name in ("compare", "grad_compare"):
            value = getattr(self, field_name)
            if not isinstance(value, CompareSpec) and not (field_name == "grad_compare" and value is None):
                raise CaseDeclarationError(
                    file, name, "compare",
                    f"{field_name} must be CompareSpec.allclose(...), .equal(), .shape() or .check(fn)"
                )
        outs = self.compare_outputs
        if outs is not None:
            if not isinstance(outs, (tuple, list)) or not outs or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in outs
            ):
                raise CaseDeclarationError(
                    file, name, "compare-outputs",
                    f"compare_outputs must be a non-empty tuple of indices >= 0; got {outs!r}"
                )
            outs = tuple(outs)
        out_pl = rules.check_expected_placements(file, name, mesh_shape, self.output_placements, "output_placements")
        grad_pl = rules.check_expected_placements(file, name, mesh_shape, self.grad_placements, "grad_placements")
        if grad_pl is not None and len(grad_pl) != len(inputs):
            raise CaseDeclarationError(file, name, "expected-placements",
                                       f"grad_placements has {len(grad_pl)} entries for {len(inputs)} input(s)")
        check_timeout(file, name, self.timeout_s)
        steps = check_declared_steps(file, name, mesh_shape, inputs, self)
        return dataclasses.replace(
            self,
            **steps,
            mesh_shape=mesh_shape,
            mesh_dim_names=names,
            tags=tags,
            inputs=inputs,
            placements=placements,
            derived_inputs=derived,
            compare_outputs=outs,
            needs_mesh=needs_mesh,
            solo_launcher=solo,
            output_placements=out_pl,
            grad_placements=grad_pl,
            expect_raises=check_expect_raises(file, name, self.expect_raises),
            known_failure=rules.check_known_failure(file, name, self.known_failure, self.expect_raises),
            simulation_limit=rules.check_reason(file, name, "simulation_limit", self.simulation_limit),
        )

    def input_seed(self, index: int) -> int:
        """Default seed of input ``index``: ``crc32(f"{name}:{index}")`` (stable across runs and ranks)."""
        return zlib.crc32(f"{self.name}:{index}".encode())


@schema.declares(schema.SCENARIO)
@dataclass(frozen=True)
class ScenarioCase(_Case):
    """A scenario case: a function run on every rank of a named mesh, asserting inside.

    For tests that are not "one op, full inputs, compare": build a module, apply a
    parallelisation plan, inspect parameters, check the errors raised, count collectives, run
    forward and backward. Registered, scanned, tagged, planned into launches and reported per
    rank exactly like :class:`OpShardCase`.

    :param name: unique across all case files.
    :param fn: ``fn(ctx)`` with ``ctx`` a :class:`meshtest.rank.scenario.ScenarioContext` (the mesh,
        the backend, this rank, the platform's API namespace, ``step``/``note``/``assert_close``).
        Returning normally is a pass; ``AssertionError`` (including a failed
        ``ctx.assert_close``) is ``fail``; any other exception is ``error`` at the current step.
    :param mesh_shape: mesh shape; the launch has ``prod(mesh_shape)`` ranks.
    :param mesh_dim_names: real axis names (default ``d0, d1, ...``); kept, since a scenario
        reads them (``mesh["tp"]``), so only scenarios and ``needs_mesh`` cases with the same
        names share a launch.
    :param tags: gate tags from :data:`meshtest.model.rules.GATE_TAGS`.
    :param requires: platform features the scenario needs (names in
        :data:`meshtest.model.rules.FEATURES`). On a platform that lacks one, the case is reported
        ``unsupported`` naming the missing features: counted and listed separately, never a pass.
    :param spec_id: ID of the test-plan item the case implements (e.g. ``"A6"`` of the TP test
        plan); reports print a table by ID.
    :param divergence: set when the platform's behaviour differs from the spec's expectation
        and the case asserts the platform's actual, documented behaviour instead. Text states
        both behaviours; a passing case is reported ``pass`` and listed as a divergence.
    :param known_failure: as :class:`OpShardCase` (xfail / xpass).
    :param solo_launcher: run in a launch of its own.
    :param timeout_s: the case deadline in seconds, as :class:`OpShardCase`.
    :param expect_raises: as :class:`OpShardCase`; without a step, at any ``ctx.step``.
    :param capabilities: training capability domains the scenario guards
        (:data:`meshtest.model.rules.CAPABILITIES`); targets get ``cap:<domain>`` tags.
    :param layer: its layer of the training quality net (e.g. ``1`` for a PyTorch mechanism guard).
    """

    name: str
    fn: Callable[..., Any]
    mesh_shape: Tuple[int, ...]
    mesh_dim_names: Optional[Tuple[str, ...]] = None
    tags: Tuple[str, ...] = ()
    requires: Tuple[str, ...] = ()
    spec_id: Optional[str] = None
    divergence: Optional[str] = None
    known_failure: Optional[KnownFailure] = None
    solo_launcher: bool = False
    timeout_s: Optional[float] = None
    expect_raises: Optional[Any] = None
    capabilities: Tuple[str, ...] = ()
    layer: Optional[int] = None

    #: scenarios always get the real mesh (and keep their axis names when planned)
    needs_mesh = True
    #: a scenario runs in the one-process lane only at layer 0 (:func:`meshtest.model.rules.runs_locally`)
    simulation_limit = None

    def validated(self, file: str) -> "ScenarioCase":
        """Check every declaration rule; return a normalised copy.

        :raises CaseDeclarationError: naming ``file``, this case and the broken rule.
        """
        name = rules.check_name(file, self.name)
        if not callable(self.fn):
            raise CaseDeclarationError(file, name, "fn", f"fn must be callable as fn(ctx); got {self.fn!r}")
        mesh_shape = rules.check_mesh_shape(file, name, self.mesh_shape)
        check_timeout(file, name, self.timeout_s)
        return dataclasses.replace(
            self,
            mesh_shape=mesh_shape,
            mesh_dim_names=rules.check_mesh_dim_names(file, name, mesh_shape, self.mesh_dim_names),
            tags=rules.check_tags(file, name, self.tags),
            requires=rules.check_requires(file, name, self.requires),
            spec_id=rules.check_spec_id(file, name, self.spec_id),
            divergence=rules.check_reason(file, name, "divergence", self.divergence),
            known_failure=rules.check_known_failure(file, name, self.known_failure, self.expect_raises),
            solo_launcher=rules.check_flag(file, name, "solo_launcher", self.solo_launcher),
            expect_raises=check_expect_raises(file, name, self.expect_raises),
            capabilities=rules.check_capabilities(file, name, self.capabilities),
            layer=rules.check_layer(file, name, self.layer),
        )
