"""The declarative model: what to test, not how to launch it (the declaration rules).

A case file registers :class:`OpShardCase` objects; the runner plans them into launches and
each rank runs the pipeline ``build → (derive) → reference → distribute → run → gather →
compare`` (see :mod:`meshtest.rank.pipeline`). Everything here is platform-agnostic: tensors are
described by :class:`InputSpec` and built as NumPy arrays, which the platform's
:class:`meshtest.platforms.backend.ShardBackend` turns into its own tensors.
"""
from __future__ import annotations

import dataclasses
import inspect
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from ..errors import CaseDeclarationError, CheckFailed
from . import rules, schema
from .dtypes import DTYPES, FLOAT_DTYPES
from .known import KnownFailure
from .layout import METADATA_FIELDS
from .local_input import LocalInput
from .placement import Partial
from .scan import ScannedCase

#: Input initialisers (the InputSpec fields).
INITS = ("randn", "uniform", "ones", "zeros", "arange")



def numpy_dtype(dtype: str) -> np.dtype:
    """NumPy dtype used to carry values of the platform-agnostic ``dtype`` (bfloat16 → float32)."""
    return np.dtype("float32" if dtype == "bfloat16" else dtype)


@dataclass(frozen=True)
class InputSpec:
    """One full (global) input tensor of a case.

    :param shape: full tensor shape; ``()`` is a 0-d tensor; a dim may be 0 (an empty tensor).
    :param init: ``randn`` (standard normal), ``uniform`` (``[low, high)``; integers for
        integer dtypes, fair coin for ``bool``), ``ones``, ``zeros`` or ``arange``
        (``0 .. numel-1`` in row-major order).
    :param seed: seed of NumPy's ``default_rng``. ``None`` derives a stable seed from the case
        name and input index (CRC-32), so every rank and every run builds the same values.
    :param dtype: one of :data:`DTYPES`.
    :param data: exact values (array-like of ``shape``); overrides ``init``.
    :param low: lower bound for ``uniform``.
    :param high: upper bound (exclusive) for ``uniform``.
    :param requires_grad: build the tensor as a leaf that requires grad (float dtypes only).
    """

    shape: Tuple[int, ...]
    init: str = "randn"
    seed: Optional[int] = None
    dtype: str = "float32"
    data: Any = None
    low: float = 0.0
    high: float = 1.0
    requires_grad: bool = False

    def validate(self, file: str, case: str, index: int) -> "InputSpec":
        """Rules ``input-shape``, ``input-init``, ``input-dtype``, ``input-data``; returns a normalised copy."""
        where = f"inputs[{index}]"
        shape = self.shape
        if not isinstance(shape, (tuple, list)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise CaseDeclarationError(
                file, case, "input-shape", f"{where}.shape must be a tuple of integers >= 0; got {shape!r}"
            )
        if self.init not in INITS:
            raise CaseDeclarationError(
                file, case, "input-init", f"{where}.init {self.init!r} unknown; use one of {', '.join(INITS)}"
            )
        if self.dtype not in DTYPES:
            raise CaseDeclarationError(
                file, case, "input-dtype", f"{where}.dtype {self.dtype!r} unknown; use one of {', '.join(DTYPES)}"
            )
        if self.init == "randn" and self.dtype not in FLOAT_DTYPES and self.data is None:
            raise CaseDeclarationError(
                file, case, "input-init",
                f"{where}: init 'randn' needs a float dtype, not {self.dtype!r}; use 'uniform' or 'arange'",
            )
        if self.requires_grad and self.dtype not in FLOAT_DTYPES:
            raise CaseDeclarationError(
                file, case, "input-dtype", f"{where}: requires_grad needs a float dtype, not {self.dtype!r}"
            )
        if self.data is not None:
            data_shape = np.shape(self.data)
            if tuple(data_shape) != tuple(shape):
                raise CaseDeclarationError(
                    file, case, "input-data",
                    f"{where}.data has shape {tuple(data_shape)!r} but shape is {tuple(shape)!r}",
                )
        return dataclasses.replace(self, shape=tuple(shape))

    def build_numpy(self, default_seed: int) -> np.ndarray:
        """Build the full input as a NumPy array of :func:`numpy_dtype` (``self.dtype``).

        :param default_seed: seed used when ``self.seed`` is ``None``.
        """
        dt = numpy_dtype(self.dtype)
        if self.data is not None:
            return np.array(self.data, dtype=dt).reshape(self.shape)
        rng = np.random.default_rng(default_seed if self.seed is None else self.seed)
        if self.init == "randn":
            arr = rng.standard_normal(self.shape)
        elif self.init == "uniform":
            if self.dtype == "bool":
                arr = rng.random(self.shape) < 0.5
            elif dt.kind in "iu":
                arr = rng.integers(int(self.low), int(self.high), size=self.shape)
            else:
                arr = rng.uniform(self.low, self.high, size=self.shape)
        elif self.init == "ones":
            arr = np.ones(self.shape)
        elif self.init == "zeros":
            arr = np.zeros(self.shape)
        else:  # arange
            arr = np.arange(int(np.prod(self.shape, dtype=np.int64))).reshape(self.shape)
        return np.asarray(arr).astype(dt)


@dataclass(frozen=True)
class DerivedSpec:
    """An extra input computed once from the *full* primary inputs, then distributed.

    Use it for values that depend on global information (e.g. an attention statistic over
    the full Q/K): computing them on each rank's shard would change their meaning
    (the process model). The case's ``fn`` receives primary inputs then derived inputs, in order.

    :param fn: ``fn(*full_primary_inputs) -> tensor``, run on every rank with identical inputs.
    :param placements: one placement per mesh dimension for the derived tensor.
    :param ndim: rank of the derived tensor (needed to check ``Shard(d)`` at registration).
    :param name: label used in error messages.
    """

    fn: Callable[..., Any]
    placements: tuple
    ndim: int
    name: str = "derived"


#: ``torch.testing.assert_close``'s float32 tolerances: the defaults of :meth:`CompareSpec.allclose`
#: and of a scenario's ``ctx.assert_close``.
DEFAULT_RTOL = 1.3e-6
DEFAULT_ATOL = 1e-5


@dataclass(frozen=True)
class CompareSpec:
    """How the gathered distributed output is compared with the single-device reference.

    Build with :meth:`allclose`, :meth:`equal`, :meth:`shape` or :meth:`check`; every kind also
    checks shape and dtype. ``allclose`` and ``equal`` first check that the reference is finite:
    a reference with NaN or Inf makes the case fail ("reference has NaN/Inf"), since NaN equals
    NaN and a broken case would look green; ``allow_nonfinite=True`` opts in (an op whose
    reference is meant to hold NaN/Inf).
    """

    kind: str
    rtol: float = 0.0
    atol: float = 0.0
    reason: str = ""
    allow_nonfinite: bool = False
    #: ``check``: the property, ``fn(expected, actual)`` on NumPy arrays
    fn: Optional[Callable[[np.ndarray, np.ndarray], Any]] = None
    #: output metadata fields not compared with the reference (:meth:`exempt_metadata`)
    metadata_exempt: Tuple[str, ...] = ()
    #: why they are not (:meth:`exempt_metadata`)
    metadata_reason: str = ""

    @staticmethod
    def allclose(rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                 allow_nonfinite: bool = False) -> "CompareSpec":
        """Elementwise ``|actual - expected| <= atol + rtol * |expected|`` (NumPy's ``isclose``;
        NaNs at the same places are equal when ``allow_nonfinite``).

        Defaults are ``torch.testing.assert_close``'s float32 tolerances.
        """
        return CompareSpec("allclose", rtol=float(rtol), atol=float(atol), allow_nonfinite=bool(allow_nonfinite))

    @staticmethod
    def equal(allow_nonfinite: bool = False) -> "CompareSpec":
        """Bitwise-equal values (integer, bool and data-movement ops)."""
        return CompareSpec("equal", allow_nonfinite=bool(allow_nonfinite))

    @staticmethod
    def check(fn: Callable[[np.ndarray, np.ndarray], Any], reason: str = "") -> "CompareSpec":
        """A property instead of closeness, for values that differ by design (random ops).

        :param fn: ``fn(expected, actual)`` with the reference and the gathered output as NumPy
            arrays (shape and dtype already equal). It passes by returning ``None`` or ``True``;
            ``False``, a string (the failure's text) or an ``AssertionError`` fail the case.
            Ready-made properties: :mod:`meshtest.properties`.
        :param reason: why closeness does not apply; shown in reports.
        """
        return CompareSpec("check", reason=reason, fn=fn)

    def exempt_metadata(self, *fields: str, reason: str) -> "CompareSpec":
        """This spec, with the output metadata ``fields`` (of ``"stride"``, ``"contiguous"``,
        ``"requires_grad"``) left out of the check against the reference at step
        ``output-metadata`` (:mod:`meshtest.rank.metadata`): for a difference the platform
        documents, e.g. ``CompareSpec.equal().exempt_metadata("stride", reason="...")``.

        :param reason: where the platform documents the difference; shown in reports.
        :raises ValueError: no field, a field not compared, or an empty ``reason``.
        """
        unknown = [f for f in fields if f not in METADATA_FIELDS]
        if not fields or unknown:
            raise ValueError(f"exempt_metadata({', '.join(map(repr, fields))}): the fields compared with the "
                             f"reference are {', '.join(METADATA_FIELDS)}")
        if not reason.strip():
            raise ValueError(f"exempt_metadata({', '.join(map(repr, fields))}) needs a reason: where the platform "
                             "documents the difference")
        return dataclasses.replace(self, metadata_exempt=tuple(dict.fromkeys(self.metadata_exempt + fields)),
                                   metadata_reason=reason)

    @staticmethod
    def shape(reason: str = "") -> "CompareSpec":
        """Only shape and dtype: for data-dependent values (e.g. dropout with p > 0).

        :param reason: why values cannot be compared; shown in reports.
        """
        return CompareSpec("shape", reason=reason)


@dataclass(frozen=True)
class ExpectRaises:
    """An exception the case must raise on every rank, as its passing outcome.

    Written in a case as ``expect_raises=(ValueError, "regex")`` or ``(ValueError, "regex",
    "step")``; for a bug whose fix may be either a raise or the right result,
    ``expect_raises=ExpectRaises(ValueError, "regex", or_pass=True)``; when the fix's exception
    type is not known yet (a maintainer promising "a more obvious error"), leave the class out:
    ``ExpectRaises(match="aten.foo", or_pass=True)`` takes any exception whose message
    matches, raised at the step, or a right result.

    :param exception: the exception class (a subclass matches); ``None``: any ``Exception``
        except meshtest's own verdict that a check failed (:class:`meshtest.errors.CheckFailed`:
        the values differ, which is not a raise of the platform); ``match`` must then be
        non-empty (rule ``expect-raises``), or a typo anywhere in the case would pass.
    :param match: a regular expression searched in ``str(exception)`` (``""``: any message).
    :param step: the step it must be raised in; ``None``: ``run`` for an op case, ``parallel``
        for a training case, any step for a scenario.
    :param or_pass: the case also passes when nothing is raised and every check holds (an op
        case's outputs equal the reference, a training case's runs agree): "raises this, or is
        right". Any other exception, or a completed run whose values differ, fails naming both
        outcomes.
    """

    exception: Optional[type] = None
    match: str = ""
    step: Optional[str] = None
    or_pass: bool = False

    def describe(self) -> str:
        text = "any exception" if self.exception is None else self.exception.__name__
        text += f" matching {self.match!r}" if self.match else ""
        text += f" at step {self.step}" if self.step else ""
        return text + (" (or a pass)" if self.or_pass else "")

    def matches(self, error: BaseException, step: str) -> bool:
        """Whether ``error``, raised at ``step``, is the expected exception."""
        import re

        if self.exception is None:
            kind_ok = isinstance(error, Exception) and not isinstance(error, CheckFailed)
        else:
            kind_ok = isinstance(error, self.exception)
        return (kind_ok and (self.step is None or self.step == step)
                and re.search(self.match, str(error)) is not None)


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
        inputs = _check_inputs(file, name, self.inputs)
        placements = rules.check_placements(file, name, mesh_shape, [s.shape for s in inputs], self.placements)
        _check_partial_split(file, name, mesh_shape, inputs, placements, self.compare)
        derived = _check_derived(file, name, mesh_shape, self.derived_inputs)
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
        _check_timeout(file, name, self.timeout_s)
        steps = _check_declared_steps(file, name, mesh_shape, inputs, self)
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
        _check_timeout(file, name, self.timeout_s)
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


def _check_declared_steps(file: str, name: str, mesh_shape: Tuple[int, ...], inputs: Sequence[Any],
                          case: OpShardCase) -> dict:
    """Rule ``declared-steps``: ``redistribute_inputs`` and ``checkpoint_inputs`` have one entry
    per input (``None`` or placements valid for that input's shape); ``local_fn`` is callable and comes with
    ``local_output_placements`` (one placement per mesh dimension for each output), which
    nothing else may carry; ``redistribute_outputs`` entries are ``None`` or placements. Rules
    ``module`` (``module`` and ``plan`` together, not with ``local_fn``) and ``local``.

    :returns: the normalised fields, by name.
    """
    out: dict = {}
    value = case.redistribute_inputs
    if value is not None:
        if not isinstance(value, (tuple, list)) or len(value) != len(inputs):
            raise CaseDeclarationError(
                file, name, "declared-steps",
                f"redistribute_inputs must have one entry (None or placements) per input, {len(inputs)}; got {value!r}")
        entries = []
        for i, entry in enumerate(value):
            if entry is None:
                entries.append(None)
                continue
            (p,) = rules.check_placements(file, name, mesh_shape, [inputs[i].shape], [entry],
                                          what=f"redistribute_inputs[{i}]")
            entries.append(p)
        if all(e is None for e in entries):
            raise CaseDeclarationError(file, name, "declared-steps",
                                       "redistribute_inputs redistributes no input (every entry is None); leave it out")
        out["redistribute_inputs"] = tuple(entries)
    if (case.module is None) != (case.plan is None):
        raise CaseDeclarationError(file, name, "module",
                                   "module and plan go together: the module is built for the reference and "
                                   "parallelized by the plan for the distributed call")
    if case.module is not None:
        if not callable(case.module):
            raise CaseDeclarationError(file, name, "module", f"module must be callable as module(api); got "
                                                             f"{case.module!r}")
        if not (callable(case.plan) or (isinstance(case.plan, dict) and case.plan)):
            raise CaseDeclarationError(file, name, "module", "plan must be a non-empty {fqn: style} dict or "
                                                             f"plan(module, mesh, api); got {case.plan!r}")
        if case.local_fn is not None:
            raise CaseDeclarationError(file, name, "module", "module and local_fn exclude each other: local_fn "
                                                             "replaces the call of fn(module, *inputs)")
    if takes_local(case.fn) and case.local_fn is not None:
        raise CaseDeclarationError(file, name, "local",
                                   "fn(..., *, local) and local_fn exclude each other: local_fn replaces the whole "
                                   "distributed call, local() runs a part of it")
    fn, placements = case.local_fn, case.local_output_placements
    if fn is not None and not callable(fn):
        raise CaseDeclarationError(file, name, "declared-steps",
                                   f"local_fn must be callable as local_fn(*local_inputs, mesh=mesh); got {fn!r}")
    if (fn is None) != (placements is None):
        raise CaseDeclarationError(
            file, name, "declared-steps",
            "local_fn and local_output_placements go together: the platform wraps each local output of local_fn "
            "with its placements" + ("" if fn is None else "; add local_output_placements=((Shard(0),),) or the like"))
    if placements is not None:
        checked = rules.check_expected_placements(file, name, mesh_shape, placements, "local_output_placements")
        if any(p is None for p in checked):
            raise CaseDeclarationError(file, name, "declared-steps",
                                       "local_output_placements needs placements for every output (no None)")
        out["local_output_placements"] = checked
    out["redistribute_outputs"] = rules.check_expected_placements(file, name, mesh_shape, case.redistribute_outputs,
                                                                  "redistribute_outputs")
    value = case.checkpoint_inputs
    if value is not None:
        if not isinstance(value, (tuple, list)) or len(value) != len(inputs):
            raise CaseDeclarationError(
                file, name, "declared-steps",
                f"checkpoint_inputs must have one entry (None or the placements to load into) per input, "
                f"{len(inputs)}; got {value!r}")
        entries = [None if e is None else rules.check_placements(file, name, mesh_shape, [inputs[i].shape], [e],
                                                                 what=f"checkpoint_inputs[{i}]")[0]
                   for i, e in enumerate(value)]
        if all(e is None for e in entries):
            raise CaseDeclarationError(file, name, "declared-steps",
                                       "checkpoint_inputs checkpoints no input (every entry is None); leave it out")
        out["checkpoint_inputs"] = tuple(entries)
    return out


def _check_timeout(file: str, name: str, timeout_s: Any) -> None:
    """Rule ``timeout``: ``None`` or a number of seconds > 0."""
    number = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
    if timeout_s is not None and (not number or timeout_s <= 0):
        raise CaseDeclarationError(file, name, "timeout",
                                   f"timeout_s must be a number of seconds > 0; got {timeout_s!r}")


def _check_inputs(file: str, name: str, inputs: Any) -> Tuple[Any, ...]:
    """Rule ``inputs``: a list of :class:`InputSpec` / ``LocalInput``, each valid."""
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(s, (InputSpec, LocalInput)) for s in inputs):
        raise CaseDeclarationError(file, name, "inputs", "inputs must be a list of InputSpec or LocalInput")
    return tuple(s.validate(file, name, i) for i, s in enumerate(inputs))


def _check_derived(file: str, name: str, mesh_shape: Tuple[int, ...], derived: Any) -> Tuple[DerivedSpec, ...]:
    out = []
    for i, d in enumerate(derived):
        if not isinstance(d, DerivedSpec) or not callable(d.fn):
            raise CaseDeclarationError(file, name, "derived",
                                       f"derived_inputs[{i}] must be a DerivedSpec with a callable fn")
        (p,) = rules.check_placements(file, name, mesh_shape, [(1,) * d.ndim], [d.placements],
                                      what=f"derived_inputs[{i}]")
        out.append(dataclasses.replace(d, placements=p))
    return tuple(out)


def _check_partial_split(file: str, name: str, mesh_shape: Tuple[int, ...], inputs: Sequence[Any],
                         placements: Sequence[tuple], compare: Any) -> None:
    """Rule ``partial-split``: an :class:`InputSpec` placed ``Partial`` is split by the platform's
    rule (torch: ``v / n`` on every rank for ``sum``; ``v`` for ``avg``/``max``/``min``). That turns
    an integer ``sum`` into floats, and on a mesh dimension whose size is not a power of two
    ``v / n`` summed ``n`` times (or ``n`` copies of ``v`` averaged) is not bit-equal to ``v``, so
    ``equal()`` would fail for meshtest's own reason. Either is an error here, naming
    ``LocalInput`` (distinct partials that reduce exactly) as the way to declare it.
    """
    for i, (spec, per_input) in enumerate(zip(inputs, placements)):
        if not isinstance(spec, InputSpec):
            continue
        for k, p in enumerate(per_input):
            if not isinstance(p, Partial):
                continue
            if p.reduce_op == "sum" and spec.dtype not in FLOAT_DTYPES:
                raise CaseDeclarationError(
                    file, name, "partial-split",
                    f"inputs[{i}] is {spec.dtype} placed {p!r} on mesh dim {k}: the platform splits a full tensor "
                    "into partial sums as v / n, which is not an integer; declare the per-rank values with "
                    "LocalInput(shape=..., local=lambda coord: ..., dtype=...)")
            size = mesh_shape[k]
            inexact = p.reduce_op in ("sum", "avg") and size & (size - 1) != 0
            if inexact and isinstance(compare, CompareSpec) and compare.kind == "equal":
                raise CaseDeclarationError(
                    file, name, "partial-split",
                    f"inputs[{i}] placed {p!r} on mesh dim {k} of size {size}: the split v / {size} does not "
                    f"reduce back to v bit for bit, so equal() would fail; compare with allclose(...) or declare "
                    "exact partials with LocalInput")


def takes_local(fn: Any) -> bool:
    """Whether an op case's ``fn`` declares the keyword-only parameter ``local``
    (``fn(x, *, local)``): it then gets :class:`meshtest.rank.pipeline.LocalRegion`'s
    ``local(g, *out_placements)`` on both calls. ``False`` when Python cannot read the signature.

    :raises ValueError: ``local`` is a parameter of ``fn`` but not keyword-only."""
    try:
        param = inspect.signature(fn).parameters.get("local")
    except (TypeError, ValueError):
        return False
    if param is None:
        return False
    if param.kind is not inspect.Parameter.KEYWORD_ONLY:
        raise ValueError("fn's parameter local must be keyword-only: def fn(x, *, local)")
    return True


def check_expect_raises(file: str, name: str, value: Any) -> Optional[ExpectRaises]:
    """Rule ``expect-raises``: ``None``, an :class:`ExpectRaises`, or ``(exc, "regex"[, "step"])``."""
    import re

    if value is None or isinstance(value, ExpectRaises):
        spec = value
    elif isinstance(value, tuple) and 1 <= len(value) <= 3:
        spec = ExpectRaises(*value)
    else:
        raise CaseDeclarationError(file, name, "expect-raises",
                                   f"expect_raises must be (ExceptionClass, 'regex'[, 'step']); got {value!r}")
    if spec is None:
        return None
    if spec.exception is None:
        if not (isinstance(spec.match, str) and spec.match):
            raise CaseDeclarationError(file, name, "expect-raises",
                                       "without an exception class, expect_raises needs the regex its message must "
                                       "match (any exception with any message would pass a typo in the case)")
    elif not (isinstance(spec.exception, type) and issubclass(spec.exception, BaseException)):
        raise CaseDeclarationError(file, name, "expect-raises", f"{spec.exception!r} is not an exception class")
    if not isinstance(spec.match, str) or not (spec.step is None or isinstance(spec.step, str)):
        raise CaseDeclarationError(file, name, "expect-raises", "the regex and the step must be strings")
    if not isinstance(spec.or_pass, bool):
        raise CaseDeclarationError(file, name, "expect-raises", f"or_pass must be True or False; got {spec.or_pass!r}")
    try:
        re.compile(spec.match)
    except re.error as e:
        raise CaseDeclarationError(file, name, "expect-raises", f"regex {spec.match!r} does not compile: {e}") from None
    return spec
