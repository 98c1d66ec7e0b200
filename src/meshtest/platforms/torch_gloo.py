"""``TorchGlooBackend``: torch.distributed.tensor on CPU with the gloo process group.

Uses torch's public DTensor API as the system under test: ``init_device_mesh``,
``distribute_tensor`` (default ``src_data_rank=0``) and ``DTensor.full_tensor``.
"""
from __future__ import annotations

import datetime
import inspect
import os
import re
import resource
import time
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor import Partial as TPartial
from torch.distributed.tensor import Replicate as TReplicate
from torch.distributed.tensor import Shard as TShard
from torch.distributed.tensor.placement_types import _StridedShard as TStridedShard

from ..model.layout import Layout, TensorMeta, local_layout
from ..model.placement import Partial, Placement, Replicate, Shard, StridedShard
from ..model.rules import REPLICA_DIM
from .backend import ShardBackend, TrainContext, TrainSnapshot

_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _local(t: Any) -> Any:
    """A DTensor's local shard (every rank checks its own), or the tensor."""
    return t.to_local() if isinstance(t, DTensor) else t


def _peak_rss_kb() -> int:
    """This process's peak resident set so far, KiB (Linux ``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _flat_optim():
    """``StateDictOptions(flatten_optimizer_state_dict=True)``: optimizer state and param groups
    keyed by parameter FQN. Without it the param groups are a list saved under the same keys on
    every rank, and DCP keeps one rank's: pipeline stages (each with its own parameters) load
    the last stage's groups (measured on torch 2.13: stage 0's SGD lost ``momentum``;
    torchtitan sets the option for the same reason)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


class TorchLayoutError(RuntimeError):
    """torch's local layout (``compute_local_shape_and_global_offset``) disagrees with the one
    the placements define (:mod:`meshtest.model.layout`): torch is wrong, not the case."""


def placement_layout(global_shape: Sequence[int], mesh_shape: Sequence[int], coordinate: Sequence[int],
                     placements: Sequence[Any], torch_shape: Sequence[int], torch_offset: Sequence[int]) -> Layout:
    """The layout the placements define for the rank at ``coordinate`` (:func:`meshtest.model.layout.local_layout`),
    checked against torch's answer for it (``torch_shape``, ``torch_offset``; an empty offset:
    torch skipped it). ``placements`` are torch's or meshtest's.

    :raises TorchLayoutError: torch's local shape or global offset differs from the placements';
        the message names the placements, the mesh coordinate and both answers."""
    ours_p = [p if isinstance(p, Placement) else from_torch_placement(p) for p in placements]
    ours = local_layout(tuple(global_shape), tuple(mesh_shape), tuple(coordinate), ours_p)
    shape, offset = tuple(int(s) for s in torch_shape), tuple(int(o) for o in torch_offset)
    if shape != ours.shape or (offset and offset != ours.offset):
        raise TorchLayoutError(
            f"torch's local layout is wrong: global shape {tuple(global_shape)} placed {list(ours_p)} on mesh "
            f"{tuple(mesh_shape)}, mesh coordinate {tuple(coordinate)}: the placements give local shape "
            f"{ours.shape} at global offset {ours.offset} (meshtest.model.layout: torch.chunk per mesh dim, left "
            f"to right); torch's compute_local_shape_and_global_offset gives {shape} at {offset}")
    return ours


def _metadata(tensor: Any, value: Callable[[Any], Any] = int) -> Tuple[Any, ...]:
    """A DTensor's global metadata as plain values: ``(shape, stride, placements, layout)``
    (``value`` reads one size: a simulated rank's entry of a per-rank size); ``layout`` is
    ``(local shape, the local shape the placements lay out for the global shape)``
    (:func:`placement_layout`, which also holds torch's own answer to it).

    :raises TorchLayoutError: see :func:`placement_layout`."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    mesh = tensor.device_mesh
    expected, offset = compute_local_shape_and_global_offset(tensor.shape, mesh, tensor.placements)
    global_shape = tuple(value(d) for d in tensor.shape)
    local = tuple(value(d) for d in tensor.to_local().shape)
    try:
        laid = placement_layout(global_shape, tuple(mesh.shape), tuple(value(c) for c in mesh.get_coordinate()),
                                tensor.placements, [value(d) for d in expected], [value(o) for o in offset]).shape
    except TypeError:  # a placement meshtest has no counterpart for: torch's answer is the only one
        laid = tuple(value(d) for d in expected)
    return (global_shape, tuple(value(d) for d in tensor.stride()),
            tuple(str(p) for p in tensor.placements), (local, laid))


def tensor_meta(tensor: Any, dtype: str, value: Callable[[Any], Any] = int) -> TensorMeta:
    """``tensor``'s global metadata (:class:`meshtest.model.layout.TensorMeta`); ``value`` reads
    one size or stride (a simulated rank's entry of a per-rank size)."""
    return TensorMeta(tuple(value(d) for d in tensor.shape), tuple(value(d) for d in tensor.stride()),
                      bool(tensor.is_contiguous()), dtype, bool(tensor.requires_grad))


def to_torch_placement(p: Placement):
    """meshtest placement → ``torch.distributed.tensor`` placement."""
    if isinstance(p, StridedShard):
        return TStridedShard(p.dim, split_factor=p.split_factor)
    if isinstance(p, Shard):
        return TShard(p.dim)
    if isinstance(p, Replicate):
        return TReplicate()
    if isinstance(p, Partial):
        return TPartial(p.reduce_op)
    raise TypeError(f"unknown placement {p!r}")


def from_torch_placement(p: Any) -> Placement:
    """``torch.distributed.tensor`` placement → meshtest placement (for placement checks)."""
    if isinstance(p, TStridedShard):
        return StridedShard(p.dim, p.split_factor)
    if isinstance(p, TShard):
        return Shard(p.dim)
    if isinstance(p, TReplicate):
        return Replicate()
    if isinstance(p, TPartial):
        return Partial(str(p.reduce_op))
    raise TypeError(f"torch placement {p!r} has no meshtest counterpart")


def check_local_shape(rank: int, got: Sequence[int], expected: Sequence[int], global_shape: Sequence[int],
                      placements: Sequence[Placement]) -> None:
    """:raises ValueError: ``rank``'s local shape is not the one its placements lay out for it
    (:func:`placement_layout`; ``DTensor.from_local`` would build an invalid DTensor); the
    message says both."""
    if tuple(int(s) for s in expected) != tuple(got):
        raise ValueError(f"rank {rank}: local shape {tuple(got)}, but the placements lay out global shape "
                         f"{tuple(global_shape)} placed {list(placements)} as local shape "
                         f"{tuple(int(s) for s in expected)} here (DTensor.from_local would build an invalid DTensor)")


def dtensor_from_local(local: Any, mesh: Any, tp: Sequence[Any], global_shape: Sequence[int],
                       requires_grad: bool) -> Any:
    """``DTensor.from_local`` of ``global_shape`` (its contiguous stride), a leaf when ``requires_grad``."""
    d = DTensor.from_local(local, mesh, list(tp), run_check=False, shape=torch.Size(global_shape),
                           stride=torch.empty(global_shape, device="meta").stride())
    return d.detach().requires_grad_(True) if requires_grad else d


def dtensor_as_given(local: Any, mesh: Any, tp: Sequence[Any], global_shape: Sequence[int],
                     requires_grad: bool) -> Any:
    """``DTensor.from_local(local, mesh, tp, run_check=True, shape=..., stride=...)``: the
    declared global shape and torch's own check of the locals against it
    (``LocalInput(checked=False)``), a leaf when ``requires_grad``."""
    d = DTensor.from_local(local, mesh, list(tp), run_check=True, shape=torch.Size(global_shape),
                           stride=torch.empty(global_shape, device="meta").stride())
    return d.detach().requires_grad_(True) if requires_grad else d


#: The file of a full-state-dict checkpoint (``TrainCase(checkpoint="full"|"full_broadcast")``).
FULL_STATE_FILE = "full.pt"


def _full_options(broadcast: bool) -> Any:
    """``StateDictOptions`` of a full state dict (gathered to rank 0, on CPU; the optimizer's
    nested ``{"state", "param_groups"}`` keyed by FQN: torch 2.13's flattened form does not load
    into a fresh optimizer with ``set_optimizer_state_dict``); ``broadcast``: rank 0's is sent to
    the others on load (``broadcast_from_rank0``)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, broadcast_from_rank0=broadcast)


def _set_gradient_sync(model: Any, sync: bool) -> None:
    """``set_requires_gradient_sync(sync)`` on every module that has it (FSDP2's modules), for
    ``TrainCase(grad_sync="last")``.

    :raises ValueError: no module of the model can skip its gradient sync."""
    found = [m for m in model.modules() if callable(getattr(m, "set_requires_gradient_sync", None))]
    if not found:
        raise ValueError("grad_sync='last': no module of the parallelized model has set_requires_gradient_sync "
                         "(FSDP2's fully_shard gives it one)")
    for m in found:
        m.set_requires_gradient_sync(sync, recurse=False)


def _place_parameters(model: Any, pairs: Any, mesh: Any) -> Any:
    """``TrainCase(param_placements=...)``: every parameter a DTensor placed as the first matching
    pattern says (else replicated), inputs replicated, the output gathered
    (``distribute_module``)."""
    from torch.distributed.tensor import distribute_module

    from ..model.train import placements_for

    replicate = [TReplicate()] * mesh.ndim

    def partition(name: str, module: Any, device_mesh: Any) -> None:
        for pname, param in list(module.named_parameters(recurse=False)):
            want = placements_for(pairs, fqn(f"{name}.{pname}" if name else pname))
            tp = replicate if want is None else [to_torch_placement(p) for p in want]
            module.register_parameter(pname, torch.nn.Parameter(distribute_tensor(param.data, device_mesh, tp)))

    def inputs(module: Any, args: Any, device_mesh: Any) -> Any:
        return tuple(distribute_tensor(a, device_mesh, replicate) if isinstance(a, torch.Tensor)
                     and not isinstance(a, DTensor) else a for a in args)

    def outputs(module: Any, out: Any, device_mesh: Any) -> Any:
        return out.full_tensor() if isinstance(out, DTensor) else out

    return distribute_module(model, mesh, partition, input_fn=inputs, output_fn=outputs)


def _grads_to_param_placements(named: list, ctx: TrainContext) -> None:
    """Each DTensor gradient redistributed to its parameter's placements (noted once per
    parameter), so that the optimizer's in-place update meets equal placements."""
    told = ctx.state.setdefault("grads redistributed", set())
    for name, p in named:
        g = p.grad
        if isinstance(p, DTensor) and isinstance(g, DTensor) and tuple(g.placements) != tuple(p.placements):
            if name not in told:
                told.add(name)
                ctx.note(f"grad of {name} came back {tuple(g.placements)}; redistributed to its parameter's "
                         f"{tuple(p.placements)}")
            p.grad = g.redistribute(p.device_mesh, p.placements)


def _pipeline(case: Any, model: Any, ctx: TrainContext) -> Tuple[Any, list, Callable[..., Any]]:
    """The stages this rank runs and their schedule (``TrainCase(pipeline=Pipeline(...))``).

    :returns: the module holding this rank's stages (its one stage's module, which phases save
        and load by FQN; several stages in a ``ModuleList``), their parameters by FQN, and the
        step that runs the schedule (the loss on the rank holding the last stage, ``None``
        elsewhere)."""
    from torch.distributed.pipelining import PipelineStage, schedules

    plan = case.pipeline
    pp_mesh = ctx.mesh if plan.axis is None else ctx.mesh[plan.axis]
    pp, pp_rank = pp_mesh.size(), pp_mesh.get_local_rank()
    num = pp * plan.stages_per_rank
    mine = plan.stages_of(pp_rank, pp)
    parts = []
    for index in mine:
        part = plan.split(model, index, num)
        parts.append(case.parallelize(part, ctx) if case.parallelize is not None else part)
    stages = [PipelineStage(part, index, num, device=torch.device("cpu"), group=pp_mesh.get_group())
              for index, part in zip(mine, parts)]
    divide = case.grad_accum * (1 if plan.scale_grads else plan.microbatches)

    def loss_fn(out: Any, target: Any) -> Any:
        return case.loss(out, target) / divide

    if plan.actions is not None:
        schedule = schedules._PipelineScheduleRuntime(stages, n_microbatches=plan.microbatches, loss_fn=loss_fn,
                                                      scale_grads=plan.scale_grads)
        table = {rank: [schedules._Action.from_str(a) for a in row.split()] for rank, row in plan.actions}
        if plan.with_comms:  # run as written; torch's REDUCE_GRAD after each stage's last backward (grad scaling)
            schedule._prepare_schedule_with_comms({rank: schedules._add_reduce_grad(row, plan.microbatches)
                                                   for rank, row in table.items()}, format="compute_comms")
        else:
            schedule._prepare_schedule_with_comms(table)
    else:
        cls = schedules.get_schedule_class(plan.schedule)
        multi = issubclass(cls, schedules.PipelineScheduleMulti)
        schedule = cls(stages if multi else stages[0], n_microbatches=plan.microbatches, loss_fn=loss_fn,
                       scale_grads=plan.scale_grads)
    first, last = 0 in mine, num - 1 in mine
    ctx.partial = pp > 1
    ctx.state["schedule"] = schedule

    def step(model: Any, inputs: tuple, target: Any, scaled: Any, ctx: TrainContext) -> Any:
        losses: list = []
        schedule.step(*(inputs if first else ()), target=target if last else None, losses=losses if last else None)
        if not last:
            return None
        return sum(losses) / (len(losses) if plan.scale_grads else 1)

    named, seen = [], set()
    for part in parts:
        for n, p in part.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                named.append((fqn(n), p))
    return (parts[0] if len(parts) == 1 else torch.nn.ModuleList(parts)), named, step


#: One rank's collective in torch's collective-check message.
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=\d+, "
                          r"OpType=(\w+)(?:, TensorShape=(\[[^\]]*\]))?(?:, TensorDtypes=(\w+))?")


#: Wrapper segments capabilities insert into parameter names (AC's checkpoint_wrapper,
#: torch.compile, FSDP1): removed so that FQNs match the baseline's.
_WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def fqn(name: str) -> str:
    """A parameter name without the wrapper segments of :data:`_WRAPPER_SEGMENTS`."""
    for seg in _WRAPPER_SEGMENTS:
        name = name.replace(seg, "")
    return name


def _full(t: Any) -> Any:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _np(t: Any) -> np.ndarray:
    t = _full(t).detach()
    return (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).cpu().numpy().copy()


def _optional_module(name: str) -> Any:
    """The module ``name``, or ``None`` when it does not import (the features say so)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _probe_modules(wanted: dict) -> set:
    """The features whose modules all import."""
    import importlib

    found = set()
    for feature, modules in wanted.items():
        try:
            for m in modules:
                importlib.import_module(m)
            found.add(feature)
        except ImportError:
            pass
    return found


def _dispatcher():
    return DTensor._op_dispatcher


def _pop_modes(length, pop, target: int) -> None:
    while length() > target:
        pop()


def _set_handlers(handlers: dict) -> None:
    _dispatcher()._custom_op_handlers.clear()
    _dispatcher()._custom_op_handlers.update(handlers)


#: The process-wide torch settings a case could leave changed: name → (read, restore). Read
#: values compare with ``==``; ``restore(value)`` puts one back.
_STATE = {
    "default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
    "inference mode": (torch.is_inference_mode_enabled, lambda on: torch.inference_mode(on).__enter__()),
    "deterministic algorithms": (
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
    "anomaly mode": (lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                     lambda v: torch.autograd.set_detect_anomaly(v[0], check_nan=v[1])),
    "default device": (lambda: str(torch.get_default_device()), torch.set_default_device),
    "threads": (torch.get_num_threads, torch.set_num_threads),
    "torch function modes": (torch._C._len_torch_function_stack,
                             lambda n: _pop_modes(torch._C._len_torch_function_stack,
                                                  torch._C._pop_torch_function_stack, n)),
    "torch dispatch modes": (torch._C._len_torch_dispatch_stack,
                             lambda n: _pop_modes(torch._C._len_torch_dispatch_stack,
                                                  torch._C._pop_torch_dispatch_stack, n)),
    # loss_parallel() installs DTensor op handlers for the length of its `with` block
    "DTensor op handlers": (lambda: dict(_dispatcher()._custom_op_handlers), _set_handlers),
    "DTensor implicit replication": (lambda: _dispatcher()._allow_implicit_replication,
                                     lambda v: setattr(_dispatcher(), "_allow_implicit_replication", v)),
}


def _tp_styles(device: str) -> bool:
    import torch.distributed.tensor.parallel as tp

    return all(hasattr(tp, n) for n in ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                                         "PrepareModuleOutput", "PrepareModuleInputOutput", "parallelize_module"))


def _tp_reduce_dtype(device: str) -> bool:
    import torch.distributed.tensor.parallel as tp

    return all(hasattr(tp, n) and "reduce_dtype" in inspect.signature(getattr(tp, n)).parameters
               for n in ("RowwiseParallel", "PrepareModuleOutput"))


def _has_attr(module: str, *names: str) -> Callable[[str], bool]:
    def probe(device: str) -> bool:
        found = _optional_module(module)
        return found is not None and all(hasattr(found, n) for n in names)
    return probe


def _has_dtensor_strategy(op: Any) -> bool:
    """Whether DTensor's sharding propagator has a rule or strategy for ``op`` (an OpOverload)."""
    prop = DTensor._op_dispatcher.sharding_propagator
    tables = (prop.op_strategy_funcs, prop.op_to_rules, getattr(prop, "op_single_dim_strategy_funcs", {}))
    return any(op in table for table in tables)


#: The attention kernel ``scaled_dot_product_attention`` dispatches to, by device type: what context
#: parallel's ring attention needs DTensor to shard (CUDA's flash kernel; the CPU build's own one).
#: An NPU's kernel is assumed to be CUDA's (unverified without Ascend hardware).
SDPA_KERNEL = {"cpu": "_scaled_dot_product_flash_attention_for_cpu", "cuda": "_scaled_dot_product_flash_attention",
               "npu": "_scaled_dot_product_flash_attention"}


def _context_parallel(device: str) -> bool:
    """``context_parallel`` exists and DTensor can shard the device's attention kernel (torch 2.13 on
    CPU: no strategy for ``_scaled_dot_product_flash_attention_for_cpu``, docs/torch-bugs.md)."""
    experimental = _optional_module("torch.distributed.tensor.experimental")
    kernel = getattr(torch.ops.aten, SDPA_KERNEL.get(device, SDPA_KERNEL["cuda"]), None)
    return (experimental is not None and hasattr(experimental, "context_parallel") and kernel is not None
            and _has_dtensor_strategy(kernel.default))


def _dtensor_rng(device: str) -> bool:
    """torch's own test (``torch.distributed.tensor._random.is_rng_supported_mesh``): the device's
    module can set an RNG state (CUDA-like devices; ``torch.cpu`` cannot in 2.13)."""
    from torch.distributed.device_mesh import _get_device_handle

    handle = _get_device_handle(device)
    return handle is not None and hasattr(handle, "set_rng_state")


def _symmetric_memory(device: str) -> bool:
    """A symmetric-memory backend is registered for the device (``_symmetric_memory.get_backend``:
    CUDA's; none for CPU in 2.13)."""
    symm = _optional_module("torch.distributed._symmetric_memory")
    return symm is not None and symm.get_backend(device) is not None


def _modules(*names: str) -> Callable[[str], bool]:
    return lambda device: len(_probe_modules({"_": names})) == 1


#: One probe per platform feature (:data:`meshtest.model.rules.FEATURES`, but ``collectives``:
#: MindSpore's ``ctx.api.comm``), each asked with the backend's device type; a case that requires
#: a feature whose probe says no is ``unsupported``, naming it.
FEATURE_PROBES: Dict[str, Callable[[str], bool]] = {
    "dtensor": _modules("torch.distributed.tensor"),
    "tp.styles": _tp_styles,
    "tp.no_parallel": _has_attr("torch.distributed.tensor.parallel", "NoParallel"),
    "tp.reduce_dtype": _tp_reduce_dtype,
    "loss_parallel": _has_attr("torch.distributed.tensor.parallel", "loss_parallel"),
    "comm_debug_mode": _has_attr("torch.distributed.tensor.debug", "CommDebugMode"),
    "fsdp2": _has_attr("torch.distributed.fsdp", "fully_shard"),
    "fsdp2.mixed_precision": _has_attr("torch.distributed.fsdp", "fully_shard", "MixedPrecisionPolicy"),
    "training": lambda device: True,  # the backend's own train(): always here
    "pipelining": _modules("torch.distributed.pipelining"),
    "pipelining.zero_bubble": _has_attr("torch.distributed.pipelining", "ScheduleInterleavedZeroBubble",
                                        "ScheduleZBVZeroBubble"),
    "checkpoint": _modules("torch.utils.checkpoint"),
    "dcp": _modules("torch.distributed.checkpoint"),
    "meta_init": lambda device: hasattr(torch.nn.Module, "to_empty"),
    "context_parallel": _context_parallel,
    "dtensor_rng": _dtensor_rng,
    "symmetric_memory": _symmetric_memory,
}


class TorchGlooBackend(ShardBackend):
    """Torch on CPU over gloo; the launch is torchrun (RANK/WORLD_SIZE/MASTER_* from its env)."""

    platform = "torch"

    def init(self, device_kind: str, timeout_s: float) -> None:
        if device_kind != "cpu":
            raise RuntimeError(f"TorchGlooBackend runs on device kind 'cpu', not {device_kind!r}")
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))

    def rank(self) -> int:
        return dist.get_rank()

    def coordinate(self, mesh: Any, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        return tuple(mesh.get_coordinate())

    def from_local(self, array: np.ndarray, dtype: str, mesh: Any, placements: Sequence[Placement],
                   global_shape: Tuple[int, ...], requires_grad: bool = False, *, checked: bool = True) -> Any:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        tp = [to_torch_placement(p) for p in placements]
        if not checked:
            return dtensor_as_given(self.make_tensor(array, dtype), mesh, tp, global_shape, requires_grad)
        expected, offset = compute_local_shape_and_global_offset(torch.Size(global_shape), mesh, tp)
        laid = placement_layout(global_shape, tuple(mesh.shape), tuple(mesh.get_coordinate()), placements,
                                expected, offset)
        check_local_shape(self.rank(), array.shape, laid.shape, global_shape, placements)
        return dtensor_from_local(self.make_tensor(array, dtype), mesh, tp, global_shape, requires_grad)

    def redistribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        if not isinstance(tensor, DTensor):
            raise TypeError(f"redistribute needs a DTensor; got {type(tensor).__name__}")
        return tensor.redistribute(mesh, [to_torch_placement(p) for p in placements])

    def checkpoint_roundtrip(self, tensors: Dict[str, Any], mesh: Any, placements: Dict[str, Sequence[Placement]],
                             directory: str) -> Dict[str, Any]:
        """``torch.distributed.checkpoint.save`` of ``tensors`` (each rank its shards and their
        global offsets), then ``load`` into ``torch.distributed.tensor.zeros`` of each key's
        placements."""
        import shutil

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        if directory is None:
            raise ValueError("checkpoint_inputs needs a directory shared by the ranks; this run gives the case none")
        if self.rank() == 0:
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(directory)
        dist.barrier()
        bad = [k for k, t in tensors.items() if not isinstance(t, DTensor)]
        if bad:
            raise TypeError(f"checkpoint_inputs: {', '.join(bad)} is not a DTensor")
        target = {k: torch.distributed.tensor.zeros(t.shape, dtype=t.dtype, device_mesh=mesh,
                                                    placements=[to_torch_placement(p) for p in placements[k]])
                  for k, t in tensors.items()}
        try:
            dcp.save({k: t.detach() for k, t in tensors.items()}, checkpoint_id=directory)
            dist.barrier()
            dcp.load(target, checkpoint_id=directory)
        except CheckpointException as e:  # a BaseException: the rank would die instead of reporting
            raise RuntimeError(f"checkpoint {directory}: {e}") from None
        return {k: v.requires_grad_(True) if tensors[k].requires_grad else v for k, v in target.items()}

    def build_module(self, builder: Callable[..., Any], seed: int) -> Any:
        self.seed(seed)
        return builder(self.scenario_api())

    def parallelize_module(self, module: Any, mesh: Any, plan: Any) -> Any:
        """A dict: ``torch.distributed.tensor.parallel.parallelize_module(module, mesh, plan)``."""
        if isinstance(plan, dict):
            from torch.distributed.tensor.parallel import parallelize_module

            return parallelize_module(module, mesh, plan)
        return plan(module, mesh, self.scenario_api())

    def local_map(self, fn: Callable[..., Any], mesh: Any, args: Sequence[Any],
                  out_placements: Sequence[Sequence[Placement]]) -> Tuple[Any, ...]:
        """torch's ``local_map`` (``torch.distributed.tensor.experimental``), no input placements
        given (each DTensor argument is taken as it is placed)."""
        from torch.distributed.tensor.experimental import local_map

        tp = [[to_torch_placement(p) for p in per] for per in out_placements]
        n = len(tp)

        def counted(*local_args: Any) -> Any:
            out = fn(*local_args, mesh=mesh)
            outs = (out,) if isinstance(out, torch.Tensor) else tuple(out) if isinstance(out, (tuple, list)) else None
            if outs is None or len(outs) != n:
                got = type(out).__name__ if outs is None else f"{len(outs)} output(s)"
                raise ValueError(f"local_fn returned {got}; local_output_placements declares {n}")
            return outs[0] if n == 1 else outs

        out = local_map(counted, out_placements=tp[0] if n == 1 else tuple(tp),
                        device_mesh=mesh)(*args)
        return (out,) if n == 1 else tuple(out)

    def placements_of(self, tensor: Any) -> Optional[Tuple[Placement, ...]]:
        return tuple(from_torch_placement(p) for p in tensor.placements) if isinstance(tensor, DTensor) else None

    def metadata_by_rank(self, tensor: Any) -> Optional[Dict[int, Tuple[Any, ...]]]:
        """``dist.all_gather_object`` of this rank's ``(shape, stride, placements)`` over the launch
        (every rank of a launch runs every case)."""
        if not isinstance(tensor, DTensor):
            return None
        mine = _metadata(tensor)
        every: List[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        return dict(enumerate(every))

    def tensor_meta(self, tensor: Any) -> Optional[TensorMeta]:
        """A DTensor's global metadata (its spec's shape and stride, ``is_contiguous()`` of the
        wrapper), a plain tensor's own; ``None`` for anything else."""
        return tensor_meta(tensor, self.dtype_name(tensor)) if isinstance(tensor, torch.Tensor) else None

    def library_paths(self) -> Tuple[str, ...]:
        return (os.path.dirname(torch.__file__),)

    def global_state(self) -> Dict[str, Any]:
        return {name: read() for name, (read, _) in _STATE.items()}

    def restore_global_state(self, state: Dict[str, Any]) -> None:
        for name, value in state.items():
            read, restore = _STATE[name]
            if read() != value:
                restore(value)

    def seed(self, seed: int) -> None:
        """``torch.manual_seed(seed)``, and DTensor's RNG tracker dropped so that the next random
        DTensor op builds a fresh one from that seed (torch syncs it from rank 0)."""
        import torch.distributed.tensor._random as dtensor_random

        torch.manual_seed(seed)
        dtensor_random._rng_tracker = None

    def forget_cached_decisions(self) -> None:
        """Clears DTensor's sharding-propagation caches (the sharding decisions, in Python and in
        the C++ dispatch fast path, and the output tensor metadata, all keyed on the op's
        schema): their key leaves out ``memory_format`` for ``_to_copy`` and the ``*_like``
        factories in torch 2.13, so a case would see the strides of whatever cast an earlier
        case made (docs/torch-bugs.md#memory-format-cache-key)."""
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()  # torch's "recommended way": the Python cache and the C++ fast path's
        DTensor._op_dispatcher.sharding_propagator._propagate_tensor_meta_cached.cache_clear()

    def explain(self, error: BaseException) -> Optional[str]:
        """Reads torch's "Detected mismatch between collectives on ranks" (collective checks on):
        ``collective mismatch: rank 0 entered ALLREDUCE [4] Float, rank 1 entered ALLGATHER [8]
        Float``."""
        text = str(error)
        if "Detected mismatch between collectives" not in text:
            return None
        entered = _FINGERPRINT.findall(text)
        if not entered:
            return None
        parts = dict.fromkeys(f"rank {r} entered {op} {shape} {dtypes}" for r, op, shape, dtypes in entered)
        return "collective mismatch: " + ", ".join(sorted(parts))

    def train(self, case: Any, mesh: Any, parallel: bool, notes: Optional[list] = None, *, start: int = 0,
              steps: Optional[int] = None, load: Optional[str] = None, save: Optional[str] = None,
              light: bool = False) -> list:
        """The platform side of a training case: the loop of zero_grad, (micro-batch forward,
        scaled loss, backward) x grad_accum, snapshot of grads, optimizer step, scheduler step,
        snapshot of params and optimizer state; DCP checkpoints for phases. See
        :meth:`ShardBackend.train`."""
        api = self.scenario_api()

        def build():
            self.seed(case.seed())
            return case.model(api, ctx) if case.model_takes_context else case.model(api)

        ctx = TrainContext(mesh=mesh, api=api, rank=self.rank(), world_size=self.world_size(), build=build,
                           notes=notes if notes is not None else [], grad_accum=case.grad_accum)
        model = build()
        custom = case.train_step if parallel else None
        if parallel and case.param_placements is not None:
            model = _place_parameters(model, case.param_placements, mesh)
        if parallel and case.pipeline is not None:
            model, named, custom = _pipeline(case, model, ctx)
        else:
            if parallel and case.parallelize is not None:
                model = case.parallelize(model, ctx)
            named = [(fqn(n), p) for n, p in model.named_parameters()]
        params = [p for _, p in named]
        opt = (case.optimizer(params, api) if case.optimizer is not None else torch.optim.SGD(params, lr=0.1))
        sched = case.scheduler(opt, api) if case.scheduler is not None else None
        count = (case.steps if steps is None else steps) - start
        first = (self._load(load, model, opt, sched, ctx, case.restore, case.checkpoint) if load is not None
                 else start)
        snaps = [self._train_step(case, model, opt, sched, named, step, ctx, custom, parallel, light)
                 for step in range(first, first + count)]
        if save is not None:
            self._save(save, first + count, model, opt, sched, mesh, case.checkpoint)
        return snaps

    def _save(self, root: str, step: int, model: Any, opt: Any, sched: Any, mesh: Any, fmt: str = "dcp") -> None:
        """Save ``{"model", "optim"}`` — ``fmt`` ``"dcp"``: DCP (``get_state_dict``: DTensor shards
        by FQN, each rank writing its own); ``"full"``/``"full_broadcast"``: the full state dict
        (``full_state_dict=True``, gathered to CPU) written by rank 0 as ``full.pt`` —, then
        ``extra_rank<r>.pt`` (step, RNG state, scheduler) beside it, then the commit
        (:mod:`meshtest.checkpoints`) once every rank has written."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict import get_state_dict

        from .. import checkpoints

        rank = self.rank()
        if rank == 0:
            checkpoints.prepare(root, step)
        dist.barrier()
        path = checkpoints.partial_dir(root, step)
        if fmt == "dcp":
            model_sd, optim_sd = get_state_dict(model, opt, options=_flat_optim())
            try:
                dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
            except CheckpointException as e:  # a BaseException: the rank would die instead of reporting
                raise RuntimeError(f"saving checkpoint {path} failed: {e}") from None
        else:
            model_sd, optim_sd = get_state_dict(model, opt, options=_full_options(broadcast=False))
            if rank == 0:
                torch.save({"model": model_sd, "optim": optim_sd}, os.path.join(path, FULL_STATE_FILE))
        extra = {"step": step, "rng": torch.get_rng_state(), "scheduler": None if sched is None else sched.state_dict()}
        torch.save(extra, os.path.join(path, f"extra_rank{rank}.pt"))
        dist.barrier()
        if rank == 0:
            checkpoints.commit(root, step, {"world_size": self.world_size(), "mesh_shape": list(mesh.shape),
                                            "mesh_dim_names": list(mesh.mesh_dim_names or ()), "format": fmt,
                                            "saved": ["model", "optim", "scheduler", "rng", "data"]})
        dist.barrier()

    def _load(self, root: str, model: Any, opt: Any, sched: Any, ctx: TrainContext, restore: Sequence[str],
              fmt: str = "dcp") -> int:
        """Restore ``restore`` from the newest committed checkpoint under ``root``; returns the
        first step to train (the saved step, or 0 when the data position is not restored). A
        rank with no ``extra_rank<r>.pt`` of its own (a restore on more ranks than saved) takes
        rank 0's: the RNG state every rank draws from is seeded alike. ``fmt`` as :meth:`_save`:
        ``"full"``: every rank reads ``full.pt``; ``"full_broadcast"``: rank 0 reads it and
        ``set_state_dict(broadcast_from_rank0=True)`` sends each tensor to the others."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict import (
            get_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
            set_state_dict,
        )

        from .. import checkpoints

        found = checkpoints.latest(root)
        ctx.note(checkpoints.describe(found))
        try:
            if fmt == "dcp":
                options = _flat_optim()
                model_sd, optim_sd = get_state_dict(model, opt, options=options)
                wanted = {k: v for k, v in (("model", model_sd), ("optim", optim_sd)) if k in restore}
                if wanted:
                    dcp.load(wanted, checkpoint_id=found.path)
            else:
                options = _full_options(broadcast=fmt == "full_broadcast")
                reads = fmt == "full" or ctx.rank == 0
                full = (torch.load(os.path.join(found.path, FULL_STATE_FILE), weights_only=False) if reads
                        else {"model": {}, "optim": {}})
            own = os.path.join(found.path, f"extra_rank{ctx.rank}.pt")
            extra = torch.load(own if os.path.exists(own) else os.path.join(found.path, "extra_rank0.pt"),
                               weights_only=False)
        except (Exception, CheckpointException) as e:  # DCP's CheckpointException is a BaseException
            raise checkpoints.CheckpointError(f"checkpoint {found.path} could not be loaded: "
                                              f"{type(e).__name__}: {e}") from e
        if fmt == "dcp":
            set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
        else:
            if "model" in restore:
                set_model_state_dict(model, full["model"], options=options)
            if "optim" in restore:
                set_optimizer_state_dict(model, opt, full["optim"], options=options)
        if sched is not None and "scheduler" in restore:
            sched.load_state_dict(extra["scheduler"])
        if "rng" in restore:
            torch.set_rng_state(extra["rng"])
        return int(extra["step"]) if "data" in restore else 0

    def _train_step(self, case: Any, model: Any, opt: Any, sched: Any, named: list, step: int, ctx: TrainContext,
                    custom: Any, parallel: bool, light: bool = False) -> TrainSnapshot:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = None
        for micro in range(case.grad_accum):
            ctx.step, ctx.micro = step, micro
            if parallel and case.grad_sync == "last":
                _set_gradient_sync(model, micro == case.grad_accum - 1)
            inputs, target = case.data(step * case.grad_accum + micro, ctx.api)
            inputs = inputs if isinstance(inputs, tuple) else (inputs,)
            if parallel and case.batch_split is not None:
                inputs, target = self._split_batch((*inputs, target), ctx.mesh, case.batch_split)
            if case.loss_takes_model:
                scaled = lambda out, tgt: case.loss(out, tgt, model) / case.grad_accum  # noqa: E731
            else:
                scaled = lambda out, tgt: case.loss(out, tgt) / case.grad_accum  # noqa: E731
            if custom is not None:
                loss = custom(model, inputs, target, scaled, ctx)
            else:
                loss = scaled(model(*inputs), target)
                loss.backward()
            if loss is not None:
                value = _full(loss).detach().float()
                total = value if total is None else total + value
        if total is not None and parallel and case.batch_split is not None:
            group = ctx.mesh.get_group(case.batch_split)
            dist.all_reduce(total, group=group)
            total = total / dist.get_world_size(group)
        if parallel and case.param_placements is not None:
            _grads_to_param_placements(named, ctx)
        norm = None
        if case.clip_grad_norm is not None:
            norm = _np(self._clip(case.clip_grad_norm, [p for _, p in named], ctx))
        if light:
            finite = all(bool(torch.isfinite(_local(p.grad)).all()) for _, p in named if p.grad is not None)
            opt.step()
            if sched is not None:
                sched.step()
            finite = finite and all(bool(torch.isfinite(_local(p)).all()) for _, p in named)
            loss = None if total is None else total.cpu().numpy()
            return TrainSnapshot(loss, norm, {}, {}, {}, partial=ctx.partial, finite=finite, rss_kb=_peak_rss_kb(),
                                 wall_s=time.perf_counter() - t0)
        grads = {n: _np(p.grad) for n, p in named if p.grad is not None}
        opt.step()
        if sched is not None:
            sched.step()
        params = {n: _np(p) for n, p in named}
        by_param = {id(p): n for n, p in named}
        optim = {f"{by_param[id(p)]}.{k}": _np(v) for p, state in opt.state.items() if id(p) in by_param
                 for k, v in state.items() if isinstance(v, torch.Tensor)}
        return TrainSnapshot(None if total is None else total.cpu().numpy(), norm, grads, params, optim,
                             partial=ctx.partial, rss_kb=_peak_rss_kb(), wall_s=time.perf_counter() - t0)

    def _clip(self, max_norm: float, params: list, ctx: TrainContext) -> Any:
        """``clip_grad_norm_`` over the whole model: a rank holding part of it (a pipeline stage)
        adds the squared norms of every rank's part (all-reduce over the mesh) before clipping,
        as the model's global norm requires."""
        if not ctx.partial:
            return torch.nn.utils.clip_grad_norm_(params, max_norm)
        grads = [p.grad for p in params if p.grad is not None]
        squared = (torch.nn.utils.get_total_norm(grads).pow(2) if grads
                   else torch.zeros((), device=self.collective_device()))
        dist.all_reduce(squared)
        total = squared.sqrt()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total

    @staticmethod
    def _split_batch(tensors: tuple, mesh: Any, axis: str) -> tuple:
        """This rank's row-chunk of each tensor along dim 0, over mesh axis ``axis``."""
        k, n = mesh.get_local_rank(axis), mesh.size(mesh.mesh_dim_names.index(axis))
        parts = tuple(t.chunk(n, dim=0)[k] for t in tensors)
        return parts[:-1], parts[-1]

    def enable_collective_checks(self) -> bool:
        """``TORCH_DISTRIBUTED_DEBUG=DETAIL``: gloo process groups are wrapped so that each
        collective first compares every rank's fingerprint (op, shapes, dtypes) and raises
        "Detected mismatch between collectives on ranks" naming them."""
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level_from_env()
        return True

    def world_size(self) -> int:
        return dist.get_world_size()

    def make_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...]) -> Any:
        return init_device_mesh("cpu", tuple(shape), mesh_dim_names=tuple(names))

    def make_replicated_mesh(self, shape: Tuple[int, ...], names: Tuple[str, ...], replicas: int) -> Any:
        """``make_mesh((replicas, *shape), (REPLICA_DIM, *names))`` sliced to ``names``: torch's
        own sub-mesh of this rank (``DeviceMesh.__getitem__``)."""
        full = self.make_mesh((replicas, *shape), (REPLICA_DIM, *names))
        return full[tuple(names)] if len(names) > 1 else full[names[0]]

    def make_tensor(self, array: np.ndarray, dtype: str, requires_grad: bool = False) -> Any:
        # np.array (not np.ascontiguousarray, which promotes 0-d to 1-d) keeps InputSpec(()) 0-d.
        t = torch.from_numpy(np.array(array, order="C")).to(_DTYPES[dtype])
        return t.requires_grad_(True) if requires_grad else t

    def clone(self, tensor: Any) -> Any:
        c = tensor.detach().clone()
        return c.requires_grad_(tensor.requires_grad)

    def distribute(self, tensor: Any, mesh: Any, placements: Sequence[Placement]) -> Any:
        d = distribute_tensor(tensor.detach(), mesh, [to_torch_placement(p) for p in placements])
        return d.requires_grad_(tensor.requires_grad)

    def local_to_global(self, tensor: Any) -> Any:
        return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        t = tensor.detach()
        if t._is_zerotensor():  # autograd's all-zero gradient (of sgn, ...) holds no data to read
            t = torch.zeros(t.shape, dtype=t.dtype)
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        return t.contiguous().numpy()

    def dtype_name(self, tensor: Any) -> str:
        return _NAMES.get(tensor.dtype, str(tensor.dtype).replace("torch.", ""))

    def backward(self, outputs: Sequence[Any], grad_outputs: Sequence[Any]) -> None:
        torch.autograd.backward(list(outputs), grad_tensors=list(grad_outputs))

    def differentiable(self, tensor: Any) -> bool:
        return bool(getattr(tensor, "requires_grad", False))

    def grad_of(self, tensor: Any) -> Any:
        return tensor.grad

    def collective_device(self) -> Any:
        """Where the tensors of meshtest's own collectives live: the process group's device (gloo:
        the CPU; hccl / nccl: the rank's device)."""
        return torch.device("cpu")

    def any_rank(self, flag: bool) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def recover_after_failure(self, timeout_s: float) -> bool:
        try:
            work = dist.barrier(async_op=True)
            return bool(work.wait(timeout=datetime.timedelta(seconds=timeout_s)))
        except RuntimeError:
            return False

    def case_fence(self, timeout_s: float) -> bool:
        """``dist.monitored_barrier`` (gloo): point-to-point with rank 0 on its own tag, so it
        never pairs with a collective a peer is still inside; rank 0's error names the ranks
        that did not arrive (logged). Only rank 0 applies ``timeout_s``; the other ranks wait at
        most the process group's timeout."""
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
            return True
        except Exception as e:  # RuntimeError (timeout, peer gone), ValueError (group destroyed), ...
            print(f"meshtest: case fence failed: {type(e).__name__}: {e}", flush=True)
            return False

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def build_info(self) -> Dict[str, str]:
        """torch's version and the CPU kernel path it dispatches to (``AVX2``, ``AVX512``, ...):
        float results of the same program may differ between code paths."""
        return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}

    def sharding_rules(self) -> Dict[str, str]:
        """DTensor's registered rules (:func:`meshtest.platforms.torch_rules.registered_rules`)."""
        from . import torch_rules

        return torch_rules.registered_rules()

    def record_calls(self) -> Any:
        """:class:`meshtest.platforms.torch_rules.CallRecorder` (wraps DTensor's sharding propagator)."""
        from . import torch_rules

        return torch_rules.CallRecorder()

    def faults(self) -> Dict[str, str]:
        from . import torch_rules

        return dict(torch_rules.ALL_FAULTS)

    def fault_sites(self, call: Dict[str, Any]) -> List[str]:
        from . import torch_rules

        return torch_rules.fault_sites(call)

    def activate_mutant(self, mutant: str) -> None:
        from . import torch_rules

        torch_rules.activate(mutant)

    def features(self) -> frozenset:
        """Probed from the installed torch, each by its own probe (:data:`FEATURE_PROBES`), on this
        backend's device type: none is assumed present or absent, so a torch that gains a
        feature (a CPU strategy for flash attention, a CPU RNG tracker) runs its cases."""
        device = self.probe_device()
        return frozenset(name for name, probe in FEATURE_PROBES.items() if probe(device))

    def probe_device(self) -> str:
        """The device type the feature probes ask about (``cpu`` here)."""
        return "cpu"

    def repro_api_source(self) -> str:
        """Each entry of :meth:`scenario_api` imported by the path torch keeps it under (checked:
        the import gives the same object), as ``api = types.SimpleNamespace(...)``.

        :raises ValueError: an entry that no import path gives back."""
        import importlib

        lines, fields = {"import types", "import torch"}, []
        for name, value in sorted(vars(self.scenario_api()).items()):
            if value is None:
                expr = "None"
            elif value is torch.ops.c10d_functional:  # an op namespace (a module type), not an importable module
                expr = "torch.ops.c10d_functional"
            elif isinstance(value, types.ModuleType):
                lines.add(f"import {value.__name__}")
                expr = value.__name__
            else:
                module, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
                head = qual.split(".")[0]
                try:
                    found = importlib.import_module(module)
                    for part in qual.split("."):
                        found = getattr(found, part)
                except (ImportError, AttributeError, TypeError, ValueError):
                    found = None
                if found is not value:
                    raise ValueError(f"api.{name} ({value!r}) cannot be imported by its path {module}.{qual}")
                lines.add(f"from {module} import {head} as _api_{name}")
                expr = f"_api_{name}" + qual[len(head):]
            fields.append(f"    {name}={expr},")
        return "\n".join(sorted(lines) + ["", "api = types.SimpleNamespace(", *fields, ")"])

    def scenario_api(self) -> Any:
        """torch's names for the spec's concepts; a missing one (e.g. ``NoParallel`` in torch
        2.13) is ``None`` and the features say so."""
        import torch.distributed.tensor as dt
        import torch.distributed.tensor.parallel as tp
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.debug import CommDebugMode

        names = ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                 "PrepareModuleOutput", "PrepareModuleInputOutput", "NoParallel", "ParallelStyle",
                 "parallelize_module", "loss_parallel")
        api = {n: getattr(tp, n, None) for n in names}
        from torch.distributed.fsdp import MixedPrecisionPolicy

        api.update(MixedPrecisionPolicy=MixedPrecisionPolicy, checkpoint=torch.utils.checkpoint,
                   pipelining=_optional_module("torch.distributed.pipelining"),
                   dcp=_optional_module("torch.distributed.checkpoint"))
        api.update(torch=torch, nn=torch.nn, F=torch.nn.functional, dist=dist, DTensor=dt.DTensor,
                   Shard=dt.Shard, Replicate=dt.Replicate, Partial=dt.Partial,
                   distribute_tensor=dt.distribute_tensor, distribute_module=dt.distribute_module,
                   init_device_mesh=init_device_mesh,
                   CommDebugMode=CommDebugMode, fully_shard=fully_shard,
                   funcol=torch.distributed._functional_collectives,
                   # the keys of CommDebugMode.get_comm_counts(): comm_ops.all_reduce, .reduce_scatter_tensor, ...
                   comm_ops=torch.ops.c10d_functional)
        return types.SimpleNamespace(**api)
