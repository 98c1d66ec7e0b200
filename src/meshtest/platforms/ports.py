"""The parts of the ``ShardBackend`` port (:mod:`meshtest.platforms.backend`), one class each:
the rank process (:class:`ProcessPort`), tensors (:class:`TensorPort`), meshes and placements
(:class:`PlacementPort`), modules, checkpoints and training (:class:`ModelPort`), and suite
strength (:class:`StrengthPort`); and what a training case's callbacks see
(:class:`TrainContext`, :class:`TrainSnapshot`).

A method with a body is optional: its default suits a platform that lacks the capability
(it returns nothing, or raises ``Unsupported`` / ``NotImplementedError`` naming the platform).
Platform-free: NumPy and meshtest's model only.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..model.layout import TensorMeta
from ..model.placement import Placement


@dataclass
class TrainContext:
    """What a training case's ``parallelize`` and ``train_step`` get on each rank.

    :ivar mesh: the DeviceMesh (the case's axis names); ``api``: the platform namespace.
    :ivar build: builds a fresh model from the case's seed (e.g. on the meta device, under a
        ``with api.torch.device("meta"):``), for capabilities that construct the model themselves.
    """

    mesh: Any
    api: Any
    rank: int
    world_size: int
    build: Callable[[], Any]
    notes: List[str] = field(default_factory=list)
    #: the case's own objects between ``parallelize`` and ``train_step`` (a pipeline schedule)
    state: Dict[str, Any] = field(default_factory=dict)
    #: set by ``parallelize`` when this rank holds part of the model (a pipeline stage): only the
    #: parameters it holds are compared, and the loss where it is computed
    partial: bool = False
    #: the optimizer step being trained (0-based, global across phases) and the micro-batch of
    #: it (``0 .. grad_accum - 1``), set before each micro-batch's forward: a hook or a
    #: ``train_step`` reads them (global micro-batch ``step * grad_accum + micro``)
    step: int = 0
    micro: int = 0
    grad_accum: int = 1

    def note(self, text: str) -> None:
        """Attach a line to this rank's result."""
        self.notes.append(str(text))


@dataclass
class TrainSnapshot:
    """One training step as NumPy, by fully-qualified parameter name (DTensors gathered).

    :ivar loss: the step's loss (the mean over a ``batch_split`` axis), or ``None`` on a rank
        that does not compute it (a pipeline stage before the last).
    :ivar grad_norm: the total gradient norm ``clip_grad_norm`` returned, or ``None``.
    :ivar grads: gradient per parameter after the step's backward(s), before the optimizer step.
    :ivar params: each parameter after the optimizer step.
    :ivar optim: each optimizer state tensor, as ``"<param fqn>.<state key>"``.
    :ivar finite: every gradient and parameter of this rank finite after the step (``None``: not
        checked). :ivar rss_kb: the process's peak resident set after the step, KiB
        (``ru_maxrss``). :ivar wall_s: the step's wall-clock seconds.
    """

    loss: Optional[np.ndarray]
    grad_norm: Optional[np.ndarray]
    grads: Dict[str, np.ndarray]
    params: Dict[str, np.ndarray]
    optim: Dict[str, np.ndarray]
    #: the rank held part of the model (:attr:`TrainContext.partial`)
    partial: bool = False
    finite: Optional[bool] = None
    rss_kb: int = 0
    wall_s: float = 0.0


class ProcessPort(ABC):
    """The rank process and its runtime: start and end, the collectives the runner relies on, the
    process-wide state a case could leave behind, and what the platform is (version, features)."""

    platform: str = ""

    @abstractmethod
    def init(self, device_kind: str, timeout_s: float) -> None:
        """Initialise the distributed runtime for this rank (``maybe_init_dist``).

        :param device_kind: ``"cpu"`` or ``"npu"``.
        :param timeout_s: collective timeout in seconds; must be shorter than a case deadline.
        """

    def device_problem(self, device_kind: str, need: int) -> Optional[str]:
        """Why this machine cannot run ranks on ``need`` devices of ``device_kind`` (ids
        ``0..need-1``: the runner asks for the slot pool's size, since slot ids are device ids, or
        the largest launch's if more) with this backend, in one
        line naming what is missing, or ``None`` when it can. The runner asks before any launch
        of a non-CPU device kind (:mod:`meshtest.platforms.probe`, in a process of its own), so a
        gate run on the wrong machine fails at once instead of hanging or passing.
        Default: ``None`` for ``cpu``, otherwise the platform has no such device."""
        if device_kind == "cpu":
            return None
        return f"platform {self.platform!r} has no backend for device kind {device_kind!r}"

    @abstractmethod
    def rank(self) -> int:
        """This process's global rank, ``0 <= rank < world_size``."""

    @abstractmethod
    def world_size(self) -> int:
        """Number of rank processes in the launch."""

    @abstractmethod
    def any_rank(self, flag: bool) -> bool:
        """Collective: whether ``flag`` is true on any rank (every rank gets the same answer)."""

    @abstractmethod
    def recover_after_failure(self, timeout_s: float) -> bool:
        """Health probe after a non-assertion error: a collective bounded by ``timeout_s``.

        :returns: ``True`` when the process group still works, ``False`` when the launch must end.
        """

    @abstractmethod
    def shutdown(self) -> None:
        """Close the distributed runtime."""

    def case_fence(self, timeout_s: float) -> bool:
        """Collective run by every rank after every case: returns once all ranks finished it.

        Keeps one rank's skipped or extra collective inside the case that caused it (instead
        of pairing with a peer's next case) and, after an error, is the health probe.
        Default: :meth:`recover_after_failure`. Prefer a barrier that names absent ranks.

        :returns: ``False`` when some rank did not arrive within ``timeout_s`` seconds or the
            process group is broken (the launch then ends and the rest is relaunched).
        """
        return self.recover_after_failure(timeout_s)

    def library_paths(self) -> Tuple[str, ...]:
        """Directories of the platform library: an ``AssertionError`` raised from a file under
        one of them is the library's internal check failing (``error``), not the case's own
        assertion (``fail``). Default: none."""
        return ()

    def global_state(self) -> Dict[str, Any]:
        """The platform's process-wide settings a case could change and leave behind (default
        dtype, grad mode, ...), by a human-readable name; values compare with ``==`` and print
        with ``str``. Taken before and after every case; a case that changed one is reported
        (step ``isolation``) and :meth:`restore_global_state` puts it back. Default: none."""
        return {}

    def restore_global_state(self, state: Dict[str, Any]) -> None:
        """Put back every entry of ``state`` (a :meth:`global_state` snapshot) that differs now."""
        return None

    def seed(self, seed: int) -> None:
        """Reset the platform's random number generators to ``seed`` before a case (every rank
        gets the same seed), so a case's random ops do not depend on the cases before it.
        Default: nothing."""
        return None

    def forget_cached_decisions(self) -> None:
        """Drop what the platform cached from the ops of the cases before (sharding decisions,
        output metadata), before a case, so a case's verdict depends on its own calls only: a
        cache keyed on too little answers a later case with an earlier one's result, and which
        case meets it would depend on the order the planner chose. A case that calls an op twice
        still meets such a bug within itself. Default: nothing."""
        return None

    def explain(self, error: BaseException) -> Optional[str]:
        """A one-line reading of a platform error the report should lead with (e.g. which
        collective each rank entered, from a collective-check failure), or ``None``."""
        return None

    def enable_collective_checks(self) -> bool:
        """Called before :meth:`init` when the launch asks for collective fingerprint checks: every
        collective first checks that all ranks entered the same one, with the same shapes and
        dtypes, and raises naming each rank's collective otherwise. Returns whether the platform
        did enable them (default: ``False``, not supported)."""
        return False

    def build_info(self) -> Dict[str, str]:
        """What a golden training curve depends on besides the case: the platform library's
        version and the CPU code path it takes (e.g. ``{"torch": "2.13.0+cpu",
        "cpu_capability": "AVX2"}``). Default: ``{}`` (no golden curves compared exactly)."""
        return {}

    def features(self) -> frozenset:
        """Platform features this backend provides, from :data:`meshtest.model.rules.FEATURES`.

        Probe the installed library rather than hard-coding a list, so a newer release that
        gains a feature runs the cases that need it. A :class:`meshtest.model.spec.ScenarioCase`
        requiring a feature missing here is reported ``unsupported`` (default: none).
        """
        return frozenset()


class TensorPort(ABC):
    """The platform's tensors as meshtest sees them: made from NumPy, read back, differentiated."""

    platform: str = ""

    @abstractmethod
    def make_tensor(self, array: np.ndarray, dtype: str, requires_grad: bool = False) -> Any:
        """Platform tensor with ``array``'s values, cast to the platform-agnostic ``dtype``."""

    @abstractmethod
    def clone(self, tensor: Any) -> Any:
        """An independent copy (the reference may modify its inputs in place)."""

    @abstractmethod
    def is_tensor(self, obj: Any) -> bool:
        """Whether ``obj`` is a tensor of this platform (plain or distributed)."""

    @abstractmethod
    def to_numpy(self, tensor: Any) -> np.ndarray:
        """Values of a full tensor as NumPy (low-precision floats widened to float32)."""

    @abstractmethod
    def dtype_name(self, tensor: Any) -> str:
        """Platform-agnostic dtype name of ``tensor`` (see :data:`meshtest.model.dtypes.DTYPES`)."""

    @abstractmethod
    def backward(self, outputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
        """Back-propagate ``sum_i <outputs[i], grad_outputs[i]>`` into the leaves' gradients."""

    @abstractmethod
    def grad_of(self, tensor: Any) -> Any:
        """The accumulated gradient of a leaf tensor (distributed if the leaf is), or ``None``."""

    def differentiable(self, tensor: Any) -> bool:
        """Whether a gradient can flow back through ``tensor`` (torch: ``requires_grad``). An op's
        non-differentiable output (batch norm's saved mean, an LU factorisation's pivots) is left
        out of an op case's backward loss. Default: ``True``."""
        return True


class PlacementPort(ABC):
    """Meshes and placements: distribute, build from local parts, redistribute, gather, and the
    metadata of a distributed tensor."""

    platform: str = ""

    @abstractmethod
    def make_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...]) -> Any:
        """Create the DeviceMesh of ``shape`` with axis ``names`` over all ranks."""

    def make_replicated_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...], replicas: int) -> Any:
        """This rank's DeviceMesh of ``shape`` with axis ``names`` when the launch has ``replicas``
        times as many ranks: the ranks split into ``replicas`` disjoint meshes of ``shape`` (in
        rank order, as the mesh ``(replicas, *shape)`` slices them), each running the case on its
        own. Backends whose :class:`BackendInfo` sets ``submeshes`` implement it.

        :raises NotImplementedError: the platform has no sub-meshes.
        """
        raise NotImplementedError(f"platform {self.platform!r} makes no sub-meshes")

    @abstractmethod
    def distribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        """Distribute a full tensor by ``placements`` (one per mesh dimension)."""

    @abstractmethod
    def local_to_global(self, tensor: Any) -> Any:
        """Gather a distributed output into a full tensor on every rank.

        A plain (non-distributed) tensor is returned unchanged: it is taken to be the full value.
        """

    def coordinate(self, mesh: Any, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        """This rank's coordinate in ``mesh`` (of ``shape``), one index per mesh dimension.

        Default: ``np.unravel_index(rank, shape)`` — the row-major layout of ``init_device_mesh``.
        """
        return tuple(int(i) for i in np.unravel_index(self.rank(), shape))

    def from_local(self, array: np.ndarray, dtype: str, mesh: Any, placements: Sequence[Placement],
                   global_shape: Tuple[int, ...], requires_grad: bool = False, *, checked: bool = True) -> Any:
        """A distributed tensor of ``global_shape`` whose local part on this rank is ``array``
        (``DTensor.from_local`` semantics; used for :class:`meshtest.model.local_input.LocalInput`).

        :param checked: ``True``: the local was checked by meshtest; build with ``global_shape``
            and without the platform's own check. ``False``
            (``LocalInput(checked=False)``): build from the local as given, with ``global_shape``
            and the platform's own check on: the platform's check is under test.
        :raises ValueError: (``checked``) the local's shape is not what the platform's layout of
            ``global_shape`` by ``placements`` gives this rank (the message says both).
        :raises NotImplementedError: the platform cannot build an input from locals (default).
        """
        raise NotImplementedError(f"platform {self.platform!r} cannot build a distributed input from local tensors")

    def from_locals(self, locals_: Dict[Tuple[int, ...], np.ndarray], dtype: str, mesh: Any,
                    mesh_shape: Tuple[int, ...], placements: Sequence[Placement], global_shape: Tuple[int, ...],
                    requires_grad: bool = False, *, checked: bool = True) -> Any:
        """A distributed tensor of ``global_shape`` from every rank's local part (``locals_``: mesh
        coordinate → array). Default: :meth:`from_local` of this rank's entry
        (:meth:`coordinate`); a backend that simulates several ranks in one process builds them all.

        :raises ValueError, NotImplementedError: as :meth:`from_local` (``checked`` likewise).
        """
        return self.from_local(locals_[self.coordinate(mesh, mesh_shape)], dtype, mesh, placements, global_shape,
                               requires_grad, checked=checked)

    def to_numpy_by_rank(self, tensor: Any) -> Dict[int, np.ndarray]:
        """The values of a full tensor as each rank this process answers for holds them:
        ``{rank(): to_numpy(tensor)}`` (default). A backend that simulates several ranks in one
        process returns one entry per simulated rank, so each rank's result is compared."""
        return {self.rank(): self.to_numpy(tensor)}

    def metadata_by_rank(self, tensor: Any) -> Optional[Dict[int, Tuple[Any, ...]]]:
        """Collective over the launch: the global metadata of a distributed output — ``(global
        shape, stride, placements as text)`` and optionally a fourth entry, ``(local shape, the
        local shape the platform's layout gives this rank)`` — as every rank holds it,
        ``{rank: metadata}``;
        ``None`` for a plain tensor, or when the platform cannot tell (default). Compared before
        the gather (step ``output-metadata``): ranks whose DTensors disagree on the global shape
        would otherwise meet in a gather whose sizes differ, which aborts a rank inside the
        collective library (gloo's size check) instead of failing the case."""
        return None

    def tensor_meta(self, tensor: Any) -> Optional[TensorMeta]:
        """The global metadata of ``tensor`` (plain or distributed) as plain values
        (:class:`meshtest.model.layout.TensorMeta`: shape, stride, contiguity, dtype name,
        requires_grad), compared between a distributed output and its reference at step
        ``output-metadata``; ``None`` when the platform cannot tell (default: not compared)."""
        return None

    def redistribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        """``tensor`` (distributed) redistributed to ``placements``, one per mesh dimension (an
        op case's declared step ``redistribute_inputs`` / ``redistribute_outputs``; differentiable
        where the platform's redistribute is).

        :raises Unsupported: the platform has no redistribute (default).
        """
        from ..errors import Unsupported

        raise Unsupported(f"platform {self.platform!r} has no redistribute of a distributed tensor")

    def placements_of(self, tensor: Any) -> Optional[Tuple[Placement, ...]]:
        """The placements of a distributed tensor as meshtest placements, or ``None`` for a
        plain tensor (checked against a case's ``output_placements`` / ``grad_placements``).

        :raises NotImplementedError: the platform cannot report placements (default).
        """
        raise NotImplementedError(f"platform {self.platform!r} cannot report a tensor's placements")

    def local_map(self, fn: Callable[..., Any], mesh: Any, args: Sequence[Any],
                  out_placements: Sequence[Sequence[Placement]]) -> Tuple[Any, ...]:
        """Run ``fn(*local_args, mesh=mesh)`` on this rank's local shards of the distributed
        ``args`` and wrap each local output it returns as a distributed tensor with its entry of
        ``out_placements`` (an op case's ``local_fn``); the global shape of an output is what the
        platform infers from the local one (torch: even sharding).

        :returns: the distributed outputs, one per entry of ``out_placements``.
        :raises ValueError: ``fn`` returned another number of outputs.
        :raises Unsupported: the platform cannot (default).
        """
        from ..errors import Unsupported

        raise Unsupported(f"platform {self.platform!r} cannot run a function on local shards (local_map)")


class ModelPort:
    """Beyond one op: modules, parallel plans, sharded checkpoints, training, and the scenario
    namespace. Optional: every method has a default that says the platform lacks it."""

    platform: str = ""

    def build_module(self, builder: Callable[..., Any], seed: int) -> Any:
        """``builder(api)`` (:meth:`scenario_api`) after seeding the platform's RNGs with
        ``seed``: an op case's ``module``, built the same for the reference and the distributed
        call.

        :raises Unsupported: the platform has no module API (default)."""
        from ..errors import Unsupported

        raise Unsupported(f"platform {self.platform!r} builds no module for an op case")

    def parallelize_module(self, module: Any, mesh: Any, plan: Any) -> Any:
        """``module`` parallelized by an op case's ``plan``: a ``{fqn: style}`` dict (the
        platform's own plan API) or ``plan(module, mesh, api) -> module``.

        :raises Unsupported: the platform has no parallel plan (default)."""
        from ..errors import Unsupported

        raise Unsupported(f"platform {self.platform!r} has no parallel plan for a module")

    def checkpoint_roundtrip(self, tensors: Dict[str, Any], mesh: Any, placements: Dict[str, Sequence[Placement]],
                             directory: str) -> Dict[str, Any]:
        """Collective over the launch: save the distributed ``tensors`` (by key) as one sharded
        checkpoint in ``directory`` (emptied first; the same path on every rank), then load each
        into a fresh distributed tensor of its global shape and dtype placed by ``placements[key]``
        (an op case's declared step ``checkpoint_inputs``). A loaded tensor is a leaf that
        requires grad when its source did.

        :returns: the loaded tensors, by key.
        :raises Unsupported: the platform has no sharded checkpoint (default).
        """
        from ..errors import Unsupported

        raise Unsupported(f"platform {self.platform!r} has no sharded checkpoint of distributed tensors")

    def train(self, case: Any, mesh: Any, parallel: bool, notes: Optional[List[str]] = None, *, start: int = 0,
              steps: Optional[int] = None, load: Optional[str] = None, save: Optional[str] = None,
              light: bool = False) -> List[TrainSnapshot]:
        """Train a :class:`meshtest.model.train.TrainCase` on this rank: build the model from
        the case's seed, apply ``case.parallelize`` when ``parallel``, train
        ``steps - start`` steps (``steps`` default ``case.steps``) of ``case.grad_accum``
        micro-batches from global step ``start``, and snapshot each step. The baseline run
        (``parallel=False``) must run no collective.

        Phases (collective; every rank of the launch): with ``load``, first restore what
        ``case.restore`` names from the newest committed checkpoint under that directory
        (:func:`meshtest.checkpoints.latest`; the data position it restores decides the first
        step); with ``save``, after the last step write a checkpoint of the model and optimizer
        (the platform's distributed checkpoint), the scheduler, this rank's RNG state and the
        step, committed with :func:`meshtest.checkpoints.commit`.

        :param notes: collects the lines ``ctx.note`` adds (and which checkpoint loaded).
        :param light: a long run: snapshots carry the loss, ``finite``, ``rss_kb`` and ``wall_s``
            only (no per-parameter arrays, which would grow the process by themselves).
        :raises NotImplementedError: the platform runs no training cases (default).
        :raises meshtest.checkpoints.CheckpointError: ``load`` has no loadable checkpoint.
        """
        raise NotImplementedError(f"platform {self.platform!r} runs no training cases")

    def scenario_api(self) -> Any:
        """The namespace scenario cases use as ``ctx.api``.

        It carries the spec's names for the features this backend provides — for tensor
        parallelism ``ColwiseParallel``, ``RowwiseParallel``, ``SequenceParallel``,
        ``PrepareModuleInput``, ``PrepareModuleOutput``, ``PrepareModuleInputOutput``,
        ``NoParallel``, ``parallelize_module``; ``Shard``/``Replicate``/``Partial``, ``DTensor``,
        ``distribute_tensor``; ``CommDebugMode``; ``fully_shard`` — and, as ``torch``, ``nn`` and
        ``F``, a tensor library with torch's API (what scenarios build modules and inputs
        with). See :mod:`meshtest.platforms.torch.api` for the torch platform's namespace.

        :raises NotImplementedError: the platform runs op cases only.
        """
        raise NotImplementedError(f"platform {self.platform!r} provides no scenario API; it runs op cases only")

    def repro_api_source(self) -> str:
        """Python source that binds ``api`` — :meth:`scenario_api`'s namespace — in a standalone
        script (``python -m meshtest repro`` of a training case), each entry imported from where
        the platform's library keeps it.

        :raises NotImplementedError: the platform has no standalone form (default).
        """
        raise NotImplementedError(f"platform {self.platform!r} cannot write a standalone script")


class StrengthPort:
    """Suite strength (:mod:`meshtest.strength`): sharding-rule coverage and mutation mode.
    Optional: every method has a default that says the platform lacks it."""

    platform: str = ""

    def sharding_rules(self) -> Dict[str, str]:
        """Every operator the platform registers a sharding rule for → its family (e.g.
        ``{"aten.mm.default": "matrix"}``); what coverage is measured against.

        :raises NotImplementedError: the platform cannot list its rules (default).
        """
        raise NotImplementedError(f"platform {self.platform!r} cannot list its sharding rules")

    def record_calls(self) -> Any:
        """A context manager recording each distinct operator call the sharding rules see while
        it is entered; entering returns an object whose ``calls`` is the list of JSON records
        (``op``, ``mesh``, ``args``, ``kwargs``, ``out``, ``to``; ``docs/strength.md``).

        :raises NotImplementedError: the platform cannot record (default).
        """
        raise NotImplementedError(f"platform {self.platform!r} cannot record sharding-rule calls")

    def record_dispatch(self) -> Any:
        """A context manager recording, while it is entered, each operator the sharding rules see
        and the module that served it; entering returns an object whose ``served`` is
        ``{operator: module}`` (``"torch"`` for the platform's own rules, ``"none"`` where no rule
        served it): the dispatch map (:mod:`meshtest.model.dispatch_map`).

        :raises NotImplementedError: the platform cannot tell (default).
        """
        raise NotImplementedError(f"platform {self.platform!r} cannot record which module served an operator")

    def faults(self) -> Dict[str, str]:
        """The fault operators of mutation mode, name → what the fault does (default: none)."""
        return {}

    def fault_sites(self, call: Dict[str, Any]) -> List[str]:
        """The faults that can change one recorded call (:meth:`record_calls`). Default: none."""
        return []

    def activate_mutant(self, mutant: str) -> None:
        """From now on in this process, the sharding rule of one operator carries one fault
        (``mutant`` = ``"operator:fault"``; ``""`` deactivates).

        :raises NotImplementedError: the platform has no mutation mode (default).
        :raises ValueError: a malformed mutant or an unknown fault.
        """
        raise NotImplementedError(f"platform {self.platform!r} has no mutation mode")

    def prove_mutant(self, mutant: str, calls: Sequence[Dict[str, Any]]) -> Tuple[bool, str]:
        """Look for a witness of ``mutant`` among recorded ``calls``: an input on which the
        operator matches its single-device reference with the mutant off and differs (or
        raises) with it on. Returns (proven, the witness or why there is none).

        :raises NotImplementedError: the platform cannot replay calls (default; the torch
            platform does in its local lane).
        """
        raise NotImplementedError(f"platform {self.platform!r} cannot replay recorded calls")
