"""Layer 0 of the training quality net: the pure logic under the capabilities, checked in one process with no
collective — pipeline schedule plans, redistribute plans, the DCP save plan, the clip-grad
formula, the mixed-precision policy, meta-init rules and state_dict key rules. A 1-rank launch
runs without torchrun (the runner starts the rank itself).
"""
import types

from cases.torch.training.models import mlp, stack
from meshtest import ScenarioCase, register

L0 = ("cpu_level0", "cpu_level1")
ONE = (1,)


def _fake_stages(indices, ranks, stages, api):
    """Stand-ins for PipelineStage with what a schedule's planner reads (no process group)."""
    return [types.SimpleNamespace(num_stages=stages, group_size=ranks, group_rank=0, stage_index=i,
                                  is_first=i == 0, is_last=i == stages - 1, submod=api.nn.Linear(2, 2))
            for i in indices]


def pipeline_plans_keep_every_microbatch_in_order(ctx):
    """PP: for interleaved 1F1B and interleaved zero-bubble over 2 ranks x 2 stages each, 4
    micro-batches, every rank's plan runs each (stage, micro-batch) forward exactly once and its
    backward (or input-grad + weight-grad for zero bubble) exactly once, after the forward."""
    api = ctx.api
    pipe = api.pipelining
    for name in ("ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"):
        ctx.step(name)
        schedule = getattr(pipe, name)(_fake_stages([0, 2], 2, 4, api), n_microbatches=4)
        for rank, actions in schedule.pipeline_order.items():
            seen = [str(a) for a in actions if a is not None]
            owned = {0: (0, 2), 1: (1, 3)}[rank]
            for stage in owned:
                for mb in range(4):
                    f = seen.index(f"{stage}F{mb}")
                    backward = [f"{stage}B{mb}"] if f"{stage}B{mb}" in seen else [f"{stage}I{mb}", f"{stage}W{mb}"]
                    for b in backward:
                        assert seen.count(b) == 1 and seen.index(b) > f, f"{name} rank {rank}: {b} vs {stage}F{mb}"
            assert len(seen) == len(set(seen)), f"{name} rank {rank} repeats an action: {seen}"
            ctx.note(f"{name} rank {rank}: {' '.join(seen[:8])} ...")


def redistribute_plans(ctx):
    """DTensor: the redistribute planner turns Shard(0) → Replicate into one all-gather and
    Partial → Shard(0) into one reduce-scatter, on the mesh dim that changes (a 2 x 2 mesh built
    without a backend: planning needs none)."""
    api = ctx.api
    torch = api.torch
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.distributed.tensor._redistribute import _gen_transform_infos

    mesh = api.torch.distributed.device_mesh.DeviceMesh("cpu", torch.arange(4).reshape(2, 2), _init_backend=False)
    meta = TensorMeta(torch.Size([8, 8]), (8, 1), torch.float32)
    S, R, P = api.Shard, api.Replicate, api.Partial

    def plan(src, dst):
        infos = _gen_transform_infos(DTensorSpec(mesh, src, meta), DTensorSpec(mesh, dst, meta))
        return [(i.mesh_dim, type(i.src_dst_placements[0]).__name__, type(i.src_dst_placements[1]).__name__)
                for i in infos]

    ctx.step("Shard(0) -> Replicate on dim 1")
    assert plan((R(), S(0)), (R(), R())) == [(1, "Shard", "Replicate")], plan((R(), S(0)), (R(), R()))
    ctx.step("Partial -> Shard(0) on dim 0")
    assert plan((P(), R()), (S(0), R())) == [(0, "Partial", "Shard")], plan((P(), R()), (S(0), R()))


def dcp_save_plan_names_every_tensor(ctx):
    """DCP: the default planner's local save plan has one write item per state_dict tensor, under
    its fully-qualified name, with the tensor's size."""
    api = ctx.api
    from torch.distributed.checkpoint.default_planner import create_default_local_save_plan

    model = mlp(api)
    plan = create_default_local_save_plan(model.state_dict(), is_coordinator=True)
    items = {item.index.fqn: tuple(item.tensor_data.size) for item in plan.items}
    assert items == {k: tuple(v.shape) for k, v in model.state_dict().items()}, items


def clip_grad_formula(ctx):
    """Clip grad: the total norm is the 2-norm of the per-tensor 2-norms, and each gradient is
    scaled by ``max_norm / (total + 1e-6)`` when that is below 1 (torch's documented rule)."""
    torch = ctx.api.torch
    g = [torch.tensor([3.0, 4.0]), torch.tensor([12.0])]
    total = torch.nn.utils.get_total_norm(g)
    ctx.assert_close(total, torch.tensor(13.0), label="total norm")
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in g]
    for p, t in zip(params, g):
        p.grad = t.clone()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm=1.3, total_norm=total)
    for before, p in zip(g, params):
        ctx.assert_close(p.grad, before * (1.3 / (13.0 + 1e-6)), label="clipped")


def mixed_precision_policy_rules(ctx):
    """Mixed precision: the policy's defaults leave every dtype alone and cast forward inputs;
    it is an immutable value."""
    api = ctx.api
    import dataclasses

    policy = api.MixedPrecisionPolicy()
    assert (policy.param_dtype, policy.reduce_dtype, policy.output_dtype, policy.cast_forward_inputs) == \
        (None, None, None, True), policy
    try:
        policy.param_dtype = api.torch.bfloat16
    except dataclasses.FrozenInstanceError:
        return
    raise AssertionError("MixedPrecisionPolicy is mutable")


def meta_init_rules(ctx):
    """Meta init: a model built on the meta device has the eager model's names, shapes and dtypes;
    after ``to_empty`` and ``reset_parameters`` under the same seed it has the eager weights."""
    api = ctx.api
    torch = api.torch
    torch.manual_seed(21)
    eager = stack(api, layers=2)
    with torch.device("meta"):
        meta = stack(api, layers=2)
    shapes = lambda m: {n: (tuple(p.shape), p.dtype) for n, p in m.named_parameters()}  # noqa: E731
    assert shapes(meta) == shapes(eager)
    meta.to_empty(device="cpu")
    torch.manual_seed(21)
    for module in meta.modules():
        if isinstance(module, torch.nn.Linear):
            module.reset_parameters()
    for (name, a), (_, b) in zip(meta.named_parameters(), eager.named_parameters()):
        ctx.assert_equal(a.detach(), b.detach(), label=name)


def state_dict_keys_survive_sharding(ctx):
    """FSDP / TP: ``fully_shard`` keeps the plain model's state_dict keys (FQNs), so checkpoints
    and baselines match by name (a 1-rank mesh suffices for the rule)."""
    api = ctx.api
    plain = stack(api, layers=2)
    sharded = stack(api, layers=2)
    for block in sharded.blocks.values():
        api.fully_shard(block, mesh=ctx.mesh)
    api.fully_shard(sharded, mesh=ctx.mesh)
    assert list(sharded.state_dict()) == list(plain.state_dict()), (list(sharded.state_dict()),
                                                                     list(plain.state_dict()))


register(ScenarioCase(name="l0_pipeline_plans_keep_every_microbatch", fn=pipeline_plans_keep_every_microbatch_in_order,
                      mesh_shape=ONE, tags=L0, capabilities=("pp",), layer=0, requires=("pipelining.zero_bubble",)))
register(ScenarioCase(name="l0_redistribute_plans", fn=redistribute_plans, mesh_shape=ONE, tags=L0,
                      capabilities=("dtensor",), layer=0))
register(ScenarioCase(name="l0_dcp_save_plan_names_every_tensor", fn=dcp_save_plan_names_every_tensor, mesh_shape=ONE,
                      tags=L0, capabilities=("dcp",), layer=0, requires=("dcp",)))
register(ScenarioCase(name="l0_clip_grad_formula", fn=clip_grad_formula, mesh_shape=ONE, tags=L0,
                      capabilities=("clip_grad",), layer=0))
register(ScenarioCase(name="l0_mixed_precision_policy_rules", fn=mixed_precision_policy_rules, mesh_shape=ONE,
                      tags=L0, capabilities=("mixed_precision",), layer=0, requires=("fsdp2.mixed_precision",)))
register(ScenarioCase(name="l0_meta_init_rules", fn=meta_init_rules, mesh_shape=ONE, tags=L0, capabilities=("init",),
                      layer=0, requires=("meta_init",)))
register(ScenarioCase(name="l0_state_dict_keys_survive_sharding", fn=state_dict_keys_survive_sharding,
                      mesh_shape=ONE, tags=L0, capabilities=("fsdp", "tp"), layer=0, requires=("fsdp2",)))
