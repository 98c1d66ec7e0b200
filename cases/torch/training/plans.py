"""Parallelize steps several training case files share (imported as ``cases.torch.training.plans``).

Each is a ``parallelize(model, ctx)`` or ``train_step(...)`` of :class:`meshtest.TrainCase` for
the :func:`~cases.torch.training.models.stack` model: blocks ``blocks.<i>`` (an MLP ``mlp.w1``,
``mlp.w2`` each) and a ``head``.
"""
from cases.torch.training.models import deterministic_init


def fsdp_per_block(model, ctx, mesh=None):
    """``fully_shard`` on each block, then on the root (FSDP2's usual wrapping), over ``mesh``
    (default: the case's mesh)."""
    mesh = ctx.mesh if mesh is None else mesh
    for block in model.blocks.values():
        ctx.api.fully_shard(block, mesh=mesh)
    return ctx.api.fully_shard(model, mesh=mesh)


def tp_blocks(model, ctx, mesh=None):
    """Each block's ``mlp.w1`` ColwiseParallel and ``mlp.w2`` RowwiseParallel over ``mesh``
    (default: the case's); the head stays a plain replicated ``Linear``."""
    api = ctx.api
    plan = {}
    for name in model.blocks:
        plan[f"blocks.{name}.mlp.w1"] = api.ColwiseParallel()
        plan[f"blocks.{name}.mlp.w2"] = api.RowwiseParallel()
    return api.parallelize_module(model, ctx.mesh if mesh is None else mesh, plan)


def tp_fsdp_2d(model, ctx):
    """2-D: TP inside ``tp``, then FSDP2 over ``dp`` (torchtitan's order: TP first, then
    ``fully_shard`` on the ``dp`` sub-mesh)."""
    return fsdp_per_block(tp_blocks(model, ctx, ctx.mesh["tp"]), ctx, ctx.mesh["dp"])


def meta_init_fsdp(model, ctx):
    api = ctx.api
    with api.torch.device("meta"):
        meta = ctx.build()
    for block in meta.blocks.values():
        api.fully_shard(block, mesh=ctx.mesh)
    api.fully_shard(meta, mesh=ctx.mesh)
    meta.to_empty(device="cpu")
    ctx.note(f"materialized {sum(1 for _ in meta.parameters())} sharded parameters from meta")
    return deterministic_init(meta, api)


def context_parallel_step(model, inputs, target, loss_fn, ctx):
    """Forward and backward under ``context_parallel``: the sequence dim of the input and the
    target sharded over ``cp`` (the case's mesh, or its ``cp`` axis), the attention run as ring
    attention; each rank's loss over its sequence chunk, scaled by 1/cp, and the gradients (the
    local shard of a DTensor gradient) summed over ``cp``."""
    from torch.distributed.tensor.experimental import context_parallel

    mesh = ctx.mesh["cp"] if ctx.mesh.ndim > 1 else ctx.mesh
    x = inputs[0].clone()
    target = target.clone()
    with context_parallel(mesh, buffers=[x, target], buffer_seq_dims=[1, 1]):
        loss = loss_fn(model(x), target)
        (loss / mesh.size()).backward()
    for p in model.parameters():  # a DTensor gradient (FSDP, TP on the other axis): its local shard
        grad = p.grad.to_local() if isinstance(p.grad, ctx.api.DTensor) else p.grad
        ctx.api.dist.all_reduce(grad, group=mesh.get_group())
    return loss


def ac_full(model, ctx):
    """Every block wrapped in ``checkpoint_wrapper`` (non-reentrant ``torch.utils.checkpoint``):
    its activations are recomputed in backward."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for name, block in list(model.blocks.items()):
        model.blocks[name] = checkpoint_wrapper(block)
    return model


def swap_to_cpu(model, inputs, target, loss_fn, ctx):
    """Forward and backward under ``save_on_cpu``: every saved activation packed to CPU memory."""
    with ctx.api.torch.autograd.graph.save_on_cpu(pin_memory=False):
        loss = loss_fn(model(*inputs), target)
    loss.backward()
    return loss


def fsdp_bf16(model, ctx):
    api = ctx.api
    policy = api.MixedPrecisionPolicy(param_dtype=api.torch.bfloat16, reduce_dtype=api.torch.float32)
    for block in model.blocks.values():
        api.fully_shard(block, mesh=ctx.mesh, mp_policy=policy)
    return api.fully_shard(model, mesh=ctx.mesh, mp_policy=policy)


def ddp_by_hand(model, ctx):
    dist = ctx.api.dist
    group = ctx.mesh.get_group("dp")
    n = dist.get_world_size(group)

    def average(p):
        dist.all_reduce(p.grad, group=group)
        p.grad.div_(n)

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(average)
    return model


def dtensor_data_parallel(model, ctx):
    api = ctx.api
    return api.distribute_module(
        model, ctx.mesh, input_fn=lambda mod, inputs, mesh: tuple(
            api.distribute_tensor(x, mesh, [api.Shard(0)]) for x in inputs))


def sharded_target_step(model, inputs, target, loss_fn, ctx):
    api = ctx.api
    loss = loss_fn(model(*inputs), api.distribute_tensor(target, ctx.mesh, [api.Shard(0)]))
    loss.backward()
    return loss


def layouts_at_the_root(model, ctx):
    api = ctx.api
    R = api.Replicate()
    plan = {"": api.PrepareModuleInputOutput(input_layouts=(R,), desired_input_layouts=(R,), output_layouts=(R,),
                                             desired_output_layouts=(R,), use_local_output=True),
            "w1": api.ColwiseParallel(), "w2": api.RowwiseParallel(use_local_output=False)}
    return api.parallelize_module(model, ctx.mesh, plan)


def expert_parallel(model, ctx):
    """Keep this rank's expert, exchange rows with all-to-all, all-reduce the shared gradients."""
    api = ctx.api
    torch, dist = api.torch, api.dist
    funcol = api.funcol
    group, rank, n = ctx.mesh.get_group("ep"), ctx.rank, ctx.world_size
    mine = model.experts[str(rank)]
    model.experts = api.nn.ModuleDict({str(rank): mine})
    shared = [p for name, p in model.named_parameters() if not name.startswith("experts.")]
    for p in shared:
        p.register_post_accumulate_grad_hook(lambda p: dist.all_reduce(p.grad, group=group))

    def forward(x):
        choice, weight = model.route(x)
        order = torch.argsort(choice, stable=True)
        send = [int((choice == e).sum()) for e in range(n)]
        counts = torch.tensor(send)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=group)
        recv = recv_counts.tolist()
        rows = funcol.all_to_all_single_autograd(x[order], recv, send, group)
        done = funcol.all_to_all_single_autograd(mine(rows), send, recv, group)
        out = torch.zeros_like(x).index_put((order,), done)
        return model.head(out * weight)

    model.forward = forward
    ctx.partial = True  # each rank holds one expert
    return model


def scaled_loss_step(model, inputs, target, loss_fn, ctx):
    """The local loss divided by the ranks: the summed gradients are the full batch's."""
    loss = loss_fn(model(*inputs), target)
    (loss / ctx.world_size).backward()
    return loss


def symmetric_memory_all_gather_matmul(model, ctx):
    """``w1`` computed by symmetric memory's fused all-gather + matmul over row-sharded inputs."""
    from torch.distributed import _symmetric_memory as symm

    group = ctx.mesh.get_group()
    symm.enable_symm_mem_for_group(group.group_name)
    w1, rank, n = model.w1, ctx.rank, ctx.world_size

    def fused(x):
        local = x.chunk(n, dim=0)[rank].contiguous()
        gathered, (out,) = ctx.api.torch.ops.symm_mem.fused_all_gather_matmul(local, [w1.weight.t()], 0,
                                                                              group.group_name)
        return out + w1.bias

    w1.forward = fused
    return model


def tp_transformer(model, ctx, gather_logits=True):
    """Megatron-style TP of :func:`~cases.torch.training.models.tiny_lm`: vocab-sharded embedding,
    heads sharded in attention, Colwise/Rowwise MLP, and the vocab-sharded logits gathered for the
    loss (``gather_logits``) or left a ``Shard(-1)`` DTensor (for ``loss_parallel``)."""
    api = ctx.api
    R = api.Replicate()
    logits = api.ColwiseParallel(output_layouts=R) if gather_logits else api.ColwiseParallel(use_local_output=False)
    plan = {"embed": api.RowwiseParallel(input_layouts=R), "attn.wq": api.ColwiseParallel(),
            "attn.wk": api.ColwiseParallel(), "attn.wv": api.ColwiseParallel(), "attn.wo": api.RowwiseParallel(),
            "mlp.w1": api.ColwiseParallel(), "mlp.w2": api.RowwiseParallel(), "logits": logits}
    return api.parallelize_module(model, ctx.mesh, plan)

