"""The training runtime: a training case's loop on torch — parameter placement, pipeline stages
and schedules, gradient accumulation and sync, clipping, the optimizer and scheduler steps, and
each step's snapshot (:class:`meshtest.platforms.ports.TrainSnapshot`).

The loop (:func:`train`, :func:`train_step`) is the one the baseline and the parallel run share;
``parallel`` turns on what only the parallel run does (the case's ``parallelize``, its
``param_placements``, ``pipeline``, ``batch_split`` and ``grad_sync``).
"""
from __future__ import annotations

import resource
import time
from typing import Any, Callable, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor import Replicate as TReplicate

from ..ports import TrainContext, TrainSnapshot
from . import checkpoint
from .placement import full_numpy, full_of, local_of, to_torch_placement

#: Wrapper segments capabilities insert into parameter names (AC's checkpoint_wrapper,
#: torch.compile, FSDP1): removed so that FQNs match the baseline's.
_WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def fqn(name: str) -> str:
    """A parameter name without the wrapper segments of :data:`_WRAPPER_SEGMENTS`."""
    for seg in _WRAPPER_SEGMENTS:
        name = name.replace(seg, "")
    return name


def peak_rss_kb() -> int:
    """This process's peak resident set so far, KiB (Linux ``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


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

    from ...model.train import placements_for

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


def train(backend: Any, case: Any, mesh: Any, parallel: bool, notes: Optional[list] = None, *, start: int = 0,
          steps: Optional[int] = None, load: Optional[str] = None, save: Optional[str] = None,
          light: bool = False) -> list:
    """The platform side of a training case: the loop of zero_grad, (micro-batch forward,
    scaled loss, backward) x grad_accum, snapshot of grads, optimizer step, scheduler step,
    snapshot of params and optimizer state; DCP checkpoints for phases. See
    :meth:`ShardBackend.train`."""
    api = backend.scenario_api()

    def build():
        backend.seed(case.seed())
        return case.model(api, ctx) if case.model_takes_context else case.model(api)

    ctx = TrainContext(mesh=mesh, api=api, rank=backend.rank(), world_size=backend.world_size(), build=build,
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
    first = (checkpoint.load(backend, load, model, opt, sched, ctx, case.restore, case.checkpoint) if load is not None
             else start)
    snaps = [train_step(backend, case, model, opt, sched, named, step, ctx, custom, parallel, light)
             for step in range(first, first + count)]
    if save is not None:
        checkpoint.save(backend, save, first + count, model, opt, sched, mesh, case.checkpoint)
    return snaps


def train_step(backend: Any, case: Any, model: Any, opt: Any, sched: Any, named: list, step: int, ctx: TrainContext,
               custom: Any, parallel: bool, light: bool = False) -> TrainSnapshot:
    """One optimizer step of :func:`train`: ``grad_accum`` micro-batches (forward, loss scaled by
    ``1 / grad_accum``, backward; ``custom`` — a pipeline schedule or the case's ``train_step`` —
    instead of forward and backward), the loss averaged over the ``batch_split`` axis, gradients
    redistributed to their parameters' placements, clipping, the optimizer and scheduler steps.

    :returns: the step's snapshot: loss, gradient norm, and (unless ``light``: only whether every
        gradient and parameter is finite) every gradient, parameter and optimizer state tensor
        as full float arrays by FQN; ``rss_kb`` in KiB, ``wall_s`` in seconds."""
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
            inputs, target = split_batch((*inputs, target), ctx.mesh, case.batch_split)
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
            value = full_of(loss).detach().float()
            total = value if total is None else total + value
    if total is not None and parallel and case.batch_split is not None:
        group = ctx.mesh.get_group(case.batch_split)
        dist.all_reduce(total, group=group)
        total = total / dist.get_world_size(group)
    if parallel and case.param_placements is not None:
        _grads_to_param_placements(named, ctx)
    norm = None
    if case.clip_grad_norm is not None:
        norm = full_numpy(clip(backend, case.clip_grad_norm, [p for _, p in named], ctx))
    if light:
        finite = all(bool(torch.isfinite(local_of(p.grad)).all()) for _, p in named if p.grad is not None)
        opt.step()
        if sched is not None:
            sched.step()
        finite = finite and all(bool(torch.isfinite(local_of(p)).all()) for _, p in named)
        loss = None if total is None else total.cpu().numpy()
        return TrainSnapshot(loss, norm, {}, {}, {}, partial=ctx.partial, finite=finite, rss_kb=peak_rss_kb(),
                             wall_s=time.perf_counter() - t0)
    grads = {n: full_numpy(p.grad) for n, p in named if p.grad is not None}
    opt.step()
    if sched is not None:
        sched.step()
    params = {n: full_numpy(p) for n, p in named}
    by_param = {id(p): n for n, p in named}
    optim = {f"{by_param[id(p)]}.{k}": full_numpy(v) for p, state in opt.state.items() if id(p) in by_param
             for k, v in state.items() if isinstance(v, torch.Tensor)}
    return TrainSnapshot(None if total is None else total.cpu().numpy(), norm, grads, params, optim,
                         partial=ctx.partial, rss_kb=peak_rss_kb(), wall_s=time.perf_counter() - t0)


def clip(backend: Any, max_norm: float, params: list, ctx: TrainContext) -> Any:
    """``clip_grad_norm_`` over the whole model: a rank holding part of it (a pipeline stage)
    adds the squared norms of every rank's part (all-reduce over the mesh) before clipping,
    as the model's global norm requires."""
    if not ctx.partial:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    squared = (torch.nn.utils.get_total_norm(grads).pow(2) if grads
               else torch.zeros((), device=backend.collective_device()))
    dist.all_reduce(squared)
    total = squared.sqrt()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def split_batch(tensors: tuple, mesh: Any, axis: str) -> tuple:
    """This rank's row-chunk of each tensor along dim 0, over mesh axis ``axis``."""
    k, n = mesh.get_local_rank(axis), mesh.size(mesh.mesh_dim_names.index(axis))
    parts = tuple(t.chunk(n, dim=0)[k] for t in tensors)
    return parts[:-1], parts[-1]
