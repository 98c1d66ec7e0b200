"""Layer 1 of the training quality net, the runtime mechanisms under communication, pipelines, resume, RNG,
mixed precision, context parallel, MoE dispatch and symmetric memory.

Where torch 2.13 on CPU/gloo cannot run a mechanism (context parallel's attention kernel,
DTensor's RNG tracker, symmetric memory) the case still exists and requires the platform
feature, so it reports ``unsupported on platform torch`` with the reason, counted and listed.
"""
import copy

from cases.torch.training.models import mlp, mse, stack, stage_of
from meshtest import ScenarioCase, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
ONE = (1,)
TWO = (2,)


def subgroup_collectives_and_p2p_order(ctx):
    """Comms: a ``new_group`` over every rank all-reduces like the world; point-to-point messages
    between two ranks arrive in the order they were sent."""
    api = ctx.api
    dist, torch = api.dist, api.torch
    ctx.step("new_group")
    group = dist.new_group(list(range(ctx.world_size)))
    t = torch.full((3,), float(ctx.rank + 1))
    dist.all_reduce(t, group=group)
    assert t.tolist() == [3.0] * 3, t.tolist()
    ctx.step("send/recv")
    if ctx.rank == 0:
        for i in range(3):
            dist.send(torch.full((2,), float(i)), dst=1)
    else:
        got = []
        for _ in range(3):
            buf = torch.empty(2)
            dist.recv(buf, src=0)
            got.append(buf[0].item())
        assert got == [0.0, 1.0, 2.0], f"messages arrived as {got}"


def gpipe_p2p_order(ctx):
    """PP: under ScheduleGPipe with 2 micro-batches, stage 0 sends both forward activations
    before it receives any gradient, and stage 1 mirrors it — the schedule's plan, seen in the
    point-to-point operations the stages actually issue."""
    api = ctx.api
    pipe, dist = api.pipelining, api.dist
    model = stack(api, layers=2)
    part = stage_of(model, [str(ctx.rank)], head=ctx.rank == 1)
    stage = pipe.PipelineStage(part, stage_index=ctx.rank, num_stages=2, device=api.torch.device("cpu"))
    schedule = pipe.ScheduleGPipe(stage, n_microbatches=2, loss_fn=mse)
    schedules = pipe.schedules  # the schedules hand every batch of P2P ops to _batch_p2p
    issued, original = [], schedules._batch_p2p

    def recording(ops, *args, **kwargs):
        issued.extend(("send" if op.op is dist.isend else "recv", op.peer) for op in ops)
        return original(ops, *args, **kwargs)

    x, y = api.torch.randn(4, 16), api.torch.randn(4, 16)
    ctx.step("schedule step")
    schedules._batch_p2p = recording
    try:
        if ctx.rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])
    finally:
        schedules._batch_p2p = original
    expected = ([("send", 1)] * 2 + [("recv", 1)] * 2) if ctx.rank == 0 else ([("recv", 0)] * 2 + [("send", 0)] * 2)
    assert issued == expected, f"stage {ctx.rank} issued {issued}; GPipe plans {expected}"


def optimizer_and_scheduler_state_round_trip(ctx):
    """Resume: ``Optimizer`` and ``LRScheduler`` ``state_dict`` / ``load_state_dict`` into fresh
    objects, then the next step is exactly the continuous run's next step."""
    api = ctx.api
    torch = api.torch

    def setup():
        torch.manual_seed(3)
        m = mlp(api)
        o = torch.optim.Adam(m.parameters(), lr=1e-2)
        return m, o, torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)

    def step(m, o, s, i):
        torch.manual_seed(100 + i)
        mse(m(torch.randn(4, 16)), torch.zeros(4, 16)).backward()
        o.step()
        o.zero_grad()
        s.step()

    model, opt, sched = setup()
    for i in range(2):
        step(model, opt, sched, i)
    ctx.step("save")
    # state_dict() returns the live state tensors: a checkpoint must copy them before training on
    saved = copy.deepcopy((model.state_dict(), opt.state_dict(), sched.state_dict()))
    step(model, opt, sched, 2)
    ctx.step("load")
    again, opt2, sched2 = setup()
    again.load_state_dict(saved[0])
    opt2.load_state_dict(saved[1])
    sched2.load_state_dict(saved[2])
    assert sched2.get_last_lr() == [1e-2 * 0.25], sched2.get_last_lr()
    step(again, opt2, sched2, 2)
    for name, p in model.named_parameters():
        ctx.assert_equal(dict(again.named_parameters())[name].detach(), p.detach(), label=name)


def seeds_shared_along_tp_distinct_along_dp(ctx):
    """RNG: ranks seeded alike draw alike (what TP relies on for replicated dropout); a seed offset
    by the dp rank (torchtitan's determinism rule for DP/PP) draws differently."""
    api = ctx.api
    torch, dist = api.torch, api.dist
    ctx.step("shared seed")
    torch.manual_seed(1234)
    mine = torch.rand(8)
    peers = [torch.empty(8) for _ in range(ctx.world_size)]
    dist.all_gather(peers, mine)
    assert all(torch.equal(peers[0], p) for p in peers), "the same seed drew different numbers"
    ctx.step("seed + dp rank")
    torch.manual_seed(1234 + ctx.rank)
    mine = torch.rand(8)
    dist.all_gather(peers, mine)
    assert not torch.equal(peers[0], peers[1]), "offset seeds drew the same numbers"


def dtensor_rng_consistent_across_layouts(ctx):
    """RNG (DTensor): a DTensor ``randn`` with one seed gives the same global tensor whether it is
    Replicate or Shard(0); each shard is its slice of it."""
    api = ctx.api
    torch = api.torch
    import torch.distributed.tensor as dt

    torch.manual_seed(7)
    rep = dt.randn(4, 4, device_mesh=ctx.mesh, placements=[api.Replicate()]).full_tensor()
    torch.manual_seed(7)
    shard = dt.randn(4, 4, device_mesh=ctx.mesh, placements=[api.Shard(0)]).full_tensor()
    ctx.assert_equal(shard, rep, label="Shard(0) vs Replicate draw")


def mixed_precision_casts_in_forward(ctx):
    """Mixed precision: ``MixedPrecisionPolicy(param_dtype=bfloat16)`` hands the forward bfloat16
    parameters, while the sharded parameters the optimizer steps stay float32, and gradients land
    in float32 (``reduce_dtype``)."""
    api = ctx.api
    torch = api.torch
    model = mlp(api)
    policy = api.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    api.fully_shard(model, mesh=ctx.mesh, mp_policy=policy)
    inside = []
    model.w1.register_forward_pre_hook(lambda m, args: inside.append(m.weight.dtype))
    ctx.step("forward")
    out = model(torch.randn(4, 16))
    assert inside == [torch.bfloat16] and out.dtype == torch.bfloat16, (inside, out.dtype)
    ctx.step("backward")
    out.float().sum().backward()
    assert model.w1.weight.dtype == torch.float32 and model.w1.weight.grad.dtype == torch.float32, \
        (model.w1.weight.dtype, model.w1.weight.grad.dtype)


def context_parallel_buffers_sharded_on_sequence(ctx):
    """CP: inside ``context_parallel`` the attention buffers are sharded on the sequence dim and
    SDPA runs as ring attention; the output equals full attention."""
    api = ctx.api
    torch = api.torch
    from torch.distributed.tensor.experimental import context_parallel

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    cq, ck, cv = q.clone(), k.clone(), v.clone()
    with context_parallel(ctx.mesh, buffers=[cq, ck, cv], buffer_seq_dims=[2, 2, 2]):
        assert cq.shape[2] == 8 // ctx.world_size, cq.shape
        out = torch.nn.functional.scaled_dot_product_attention(cq, ck, cv, is_causal=True)
    ctx.assert_close(out, ref.chunk(ctx.world_size, dim=2)[ctx.rank], label="ring attention chunk")


def all_to_all_uneven_splits(ctx):
    """MoE: ``all_to_all_single`` with uneven split sizes delivers each rank exactly the rows the
    others addressed to it, in rank order (the dispatch/combine primitive)."""
    api = ctx.api
    torch, dist = api.torch, api.dist
    # rank r sends (r + 1) rows to rank 0 and (2 - r) rows to rank 1; each row holds 10 * r + dst
    send_sizes = [ctx.rank + 1, 2 - ctx.rank]
    rows = torch.cat([torch.full((n, 3), 10.0 * ctx.rank + dst) for dst, n in enumerate(send_sizes)])
    recv_sizes = [r + 1 if ctx.rank == 0 else 2 - r for r in range(ctx.world_size)]
    out = torch.empty(sum(recv_sizes), 3)
    ctx.step("all_to_all")
    dist.all_to_all_single(out, rows, output_split_sizes=recv_sizes, input_split_sizes=send_sizes)
    expected = torch.cat([torch.full((n, 3), 10.0 * r + ctx.rank) for r, n in enumerate(recv_sizes)])
    ctx.assert_equal(out, expected, label="received rows")


def symmetric_memory_put_get(ctx):
    """Symmetric memory: a buffer allocated in symmetric memory is readable by the peer after a
    barrier (one-sided put)."""
    from torch.distributed import _symmetric_memory as symm

    api = ctx.api
    buf = symm.empty(4, device="cuda")
    handle = symm.rendezvous(buf, api.dist.group.WORLD.group_name)
    buf.fill_(float(ctx.rank))
    handle.barrier()
    peer = handle.get_buffer((ctx.rank + 1) % ctx.world_size, (4,), buf.dtype)
    assert peer[0].item() == float((ctx.rank + 1) % ctx.world_size)


def pp_shared_parameter_grads_synced_after_the_schedule(ctx):
    """PP: a parameter shared by two stages (a tied input projection and output head) gets its
    gradient in two pieces. Within ``schedule.step`` the stage's gradient is written once per
    micro-batch (its post-accumulate-grad hook fires ``n_microbatches`` times), so the tied-weight
    sync belongs after ``step`` returns: then the sum of both stages' gradients equals the
    single-device gradient of the tied weight, and neither stage's piece alone does."""
    api = ctx.api
    torch, nn, pipe, dist = api.torch, api.nn, api.pipelining, api.dist
    torch.manual_seed(11)
    tied = torch.randn(16, 16) * 0.2
    x, y = torch.randn(4, 16), torch.randn(4, 16)

    class Stage(nn.Module):
        def __init__(self, head):
            super().__init__()
            self.proj = nn.Linear(16, 16, bias=False)
            self.head = head
            with torch.no_grad():
                self.proj.weight.copy_(tied)

        def forward(self, h):
            return self.proj(api.F.gelu(h) if self.head else h)

    ctx.step("baseline")
    whole = nn.Linear(16, 16, bias=False)
    with torch.no_grad():
        whole.weight.copy_(tied)
    mse(whole(api.F.gelu(whole(x))), y).backward()
    expected = whole.weight.grad
    ctx.step("schedule step")
    part = Stage(head=ctx.rank == 1)
    fired = []
    part.proj.weight.register_post_accumulate_grad_hook(lambda p: fired.append(p.grad.clone()))
    stage = pipe.PipelineStage(part, stage_index=ctx.rank, num_stages=2, device=torch.device("cpu"))
    schedule = pipe.ScheduleGPipe(stage, n_microbatches=2, loss_fn=mse)
    if ctx.rank == 0:
        schedule.step(x)
    else:
        schedule.step(target=y, losses=[])
    assert len(fired) == 2, f"stage {ctx.rank}: the tied weight's grad was written {len(fired)} times, not once " \
                            f"per micro-batch (2)"
    ctx.step("tied-weight sync")
    piece = part.proj.weight.grad.clone()
    synced = piece.clone()
    dist.all_reduce(synced)
    ctx.assert_close(synced, expected, label="tied weight grad summed over stages")
    assert not torch.allclose(piece, expected, rtol=1e-3, atol=1e-5), \
        f"stage {ctx.rank}'s own piece already equals the whole gradient: the case would not see a missing sync"


def cp_full_backward_pre_hook_precedes_async_backward(ctx):
    """CP: attention under context parallelism gathers K/V along the sequence in forward and
    reduces their gradients with an *asynchronous* collective in backward (the ring / all-gather
    paths). ``register_full_backward_pre_hook`` on the attention module must fire before that
    module's backward issues the collective, and ``register_full_backward_hook`` only after the
    collective's gradient is waited on and complete — in that order on every iteration."""
    api = ctx.api
    torch, nn, dist = api.torch, api.nn, api.dist
    world, rank = ctx.world_size, ctx.rank
    order = []

    class GatherSeq(torch.autograd.Function):
        """All-gather the local sequence chunk (dim 1); backward all-reduces asynchronously and
        keeps this rank's chunk (what CP's all-gather K/V variant does)."""

        @staticmethod
        def forward(fctx, t):
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t.contiguous())
            return torch.cat(parts, dim=1)

        @staticmethod
        def backward(fctx, g):
            g = g.contiguous()
            order.append("collective issued")
            work = dist.all_reduce(g, async_op=True)
            work.wait()
            order.append("collective waited")
            return g.chunk(world, dim=1)[rank]

    class Attention(nn.Module):
        def forward(self, q, k, v):
            k, v = GatherSeq.apply(k), GatherSeq.apply(v)
            return api.F.scaled_dot_product_attention(q, k, v)

    attn = Attention()
    attn.register_full_backward_pre_hook(lambda m, g: order.append("pre-hook") and None)
    attn.register_full_backward_hook(lambda m, gi, go: order.append("hook") and None)
    torch.manual_seed(5)
    full = [torch.randn(1, 8, 4) for _ in range(3)]
    for it in range(3):
        order.clear()
        q, k, v = (t.chunk(world, dim=1)[rank].clone().requires_grad_() for t in full)
        ctx.step(f"iteration {it} backward")
        attn(q, k, v).sum().backward()
        expected = ["pre-hook"] + ["collective issued", "collective waited"] * 2 + ["hook"]
        assert order == expected, f"iteration {it}: {order}; expected {expected}"
        assert k.grad is not None and k.grad.shape == k.shape, f"iteration {it}: k.grad {k.grad}"


def mesh_slicing(ctx):
    """Comms: slicing a ``(dp, tp)`` mesh by name gives 1-D sub-meshes whose process groups hold
    exactly the ranks along that axis: an all-reduce over ``mesh["tp"]`` sums across tp, one over
    ``mesh["dp"]`` (size 1 here) leaves the value alone, and each rank's coordinate on a slice
    is its coordinate on the parent mesh."""
    api = ctx.api
    torch, dist = api.torch, api.dist
    mesh = ctx.mesh
    ctx.step("slice")
    tp, dp = mesh["tp"], mesh["dp"]
    assert (tp.size(), dp.size()) == (2, 1), (tp.size(), dp.size())
    assert tp.get_local_rank() == mesh.get_coordinate()[1], (tp.get_local_rank(), mesh.get_coordinate())
    ctx.step("all_reduce over tp")
    t = torch.full((2,), float(ctx.rank + 1))
    dist.all_reduce(t, group=tp.get_group())
    assert t.tolist() == [3.0, 3.0], t.tolist()
    ctx.step("all_reduce over dp")
    t = torch.full((2,), float(ctx.rank + 1))
    dist.all_reduce(t, group=dp.get_group())
    assert t.tolist() == [float(ctx.rank + 1)] * 2, t.tolist()


register(ScenarioCase(name="l1_comms_subgroup_and_p2p_order", fn=subgroup_collectives_and_p2p_order, mesh_shape=TWO,
                      tags=L0, capabilities=("comms",), layer=1))
register(ScenarioCase(name="l1_pp_gpipe_p2p_order", fn=gpipe_p2p_order, mesh_shape=TWO, mesh_dim_names=("pp",),
                      tags=L0, capabilities=("pp",), layer=1, requires=("pipelining",)))
register(ScenarioCase(name="l1_resume_optimizer_scheduler_round_trip", fn=optimizer_and_scheduler_state_round_trip,
                      mesh_shape=ONE, tags=L0, capabilities=("resume",), layer=1))
register(ScenarioCase(name="l1_rng_seeds_shared_along_tp_distinct_along_dp",
                      fn=seeds_shared_along_tp_distinct_along_dp, mesh_shape=TWO, tags=L0, capabilities=("rng",),
                      layer=1))
register(ScenarioCase(name="l1_mixed_precision_casts_in_forward", fn=mixed_precision_casts_in_forward,
                      mesh_shape=TWO, mesh_dim_names=("dp",), tags=L0, capabilities=("mixed_precision", "fsdp"),
                      layer=1, requires=("fsdp2.mixed_precision",)))
register(ScenarioCase(name="l1_cp_buffers_sharded_on_sequence", fn=context_parallel_buffers_sharded_on_sequence,
                      mesh_shape=TWO, mesh_dim_names=("cp",), tags=L1, capabilities=("cp",), layer=1,
                      requires=("context_parallel",)))
register(ScenarioCase(name="l1_moe_all_to_all_uneven_splits", fn=all_to_all_uneven_splits, mesh_shape=TWO,
                      tags=L0, capabilities=("moe",), layer=1))
register(ScenarioCase(name="l1_symm_mem_put_get", fn=symmetric_memory_put_get, mesh_shape=TWO, tags=L1,
                      capabilities=("symm_mem",), layer=1, requires=("symmetric_memory",)))
register(ScenarioCase(name="l2_rng_dtensor_consistent_across_layouts", fn=dtensor_rng_consistent_across_layouts,
                      mesh_shape=TWO, tags=L1, capabilities=("rng",), layer=2, requires=("dtensor_rng",)))
register(ScenarioCase(name="l1_pp_shared_param_grads_synced_after_schedule",
                      fn=pp_shared_parameter_grads_synced_after_the_schedule, mesh_shape=TWO, mesh_dim_names=("pp",),
                      tags=L0, capabilities=("pp",), layer=1, requires=("pipelining",)))
register(ScenarioCase(name="l1_cp_full_backward_pre_hook_precedes_async_backward",
                      fn=cp_full_backward_pre_hook_precedes_async_backward, mesh_shape=TWO, mesh_dim_names=("cp",),
                      tags=L0, capabilities=("cp",), layer=1))
register(ScenarioCase(name="l1_comms_mesh_slicing", fn=mesh_slicing, mesh_shape=(1, 2), mesh_dim_names=("dp", "tp"),
                      tags=L0, capabilities=("comms",), layer=1))
