"""Layer 3 of the training quality net: capabilities combined, each trained against its single-device
baseline step by step (loss, gathered gradients, parameters after the step, optimizer state),
plus the combination's own lifecycle assertion where the table has one.

The eleven combinations of the table, and where each lives:

1. Shard + TP I/O layout injection: ``shard_tp_layout_injection_args_kwargs`` — each rank feeds
   its row-chunk of the batch positionally and a per-row scale by keyword; a
   ``PrepareModuleInput`` declares both ``Shard(0)`` and gathers them to ``Replicate()`` for a
   Colwise/Rowwise pair.
2. TP + FSDP one-step training: ``tp_fsdp_2d_one_step`` on a ``(dp, tp)`` mesh.
3. TP + FSDP state_dict / resume: ``resume_tp_fsdp_2d_adam`` (case_train_l4_resume.py: save,
   stop, load, continue in another launch).
4. TP + PP micro-batch scheduling: ``tp_pp_gpipe_2d`` — two GPipe stages over ``pp``, each
   stage's MLPs tensor-parallel over ``tp``, 4 micro-batches.
5. CP + TP attention: ``cp_tp_attention`` and 6. FSDP + CP attention: ``fsdp_cp_attention`` —
   context parallel has no CPU kernel in torch 2.13 (see the layer-2 CP cases): reported
   unsupported with the reason.
7. FSDP + AC recompute: ``fsdp_ac_recompute`` — checkpointed blocks inside FSDP2 units; the
   blocks' forward runs twice per step (the recompute happened).
8. PP + AC micro-batch recompute: ``pp_ac_microbatch_recompute`` — each stage's blocks
   checkpointed; every micro-batch's forward recomputed in its backward.
9. swap + AC saved-tensor lifecycle: ``swap_ac_saved_tensor_lifecycle`` — ``save_on_cpu``
   around checkpointed blocks: every packed tensor unpacked once, all in backward.
10. resume + FSDP + meta init: ``resume_fsdp2_meta_init`` (case_train_l4_resume.py).
11. clip-grad + FSDP: ``clip_grad_fsdp_tp_2d`` — the global norm over gradients that are all
    2-D DTensors (the head tensor-parallel too; momentum SGD: Adam's first step is
    ``lr * sign(g)``, which turns a float32 rounding difference of a near-zero clipped gradient
    into a full ``lr`` step); ``clip_grad_fsdp_tp_mixed_meshes`` — the head
    on FSDP's 1-D ``dp`` mesh, the blocks on ``(dp, tp)``: ``clip_grad_norm_`` stacks norms of
    DTensors on different meshes and fails (known failure, pytorch/pytorch#180346).

Beyond the table, for the domains it does not combine: ``tp_loss_parallel`` (TP + DTensor: the
vocabulary-sharded logits stay a ``Shard(-1)`` DTensor into the cross-entropy under
``loss_parallel``, never gathered) and ``fsdp_bf16_clip_grad`` (FSDP2 + mixed precision +
clip-grad: the norm of bfloat16-computed, float32-reduced gradients; bfloat16 tolerance as in
layer 2).
"""
from cases.torch.training.models import (
    adam,
    attention,
    mlp,
    mse,
    regression,
    sequences,
    sgd_momentum,
    stack,
    stack_stage,
    stage_of,
    tiny_lm,
    tokens,
)
from cases.torch.training.plans import (
    ac_full,
    context_parallel_step,
    fsdp_bf16,
    fsdp_per_block,
    tp_blocks,
    tp_fsdp_2d,
    tp_transformer,
)
from meshtest import CompareSpec, KnownFailure, Pipeline, TrainCase, TrainCompare, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
DP_TP = ("dp", "tp")


def scaled_mlp(api):
    """An MLP whose first layer's output is scaled per row by a keyword input: ``forward(x, *,
    scale)``; :func:`feed_rows` calls it with the rows (and their scales) this rank feeds."""
    nn = api.nn

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = mlp(api)
            self.rows = None  # (index, count): this rank's row-chunk; None: every row

        def forward(self, x):
            if self.rows is not None:
                x = x.chunk(self.rows[1], dim=0)[self.rows[0]]
            return self.inner.w2(api.F.gelu(self.inner.w1(x)))

    class Fed(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = Scaled()

        def forward(self, x):
            return self.body(x)

    return Fed()


def layout_injection(model, ctx):
    """Each rank feeds its rows; ``PrepareModuleInput`` declares the positional input and the
    ``scale`` keyword ``Shard(0)`` and redistributes both to ``Replicate()`` before the TP pair."""
    api = ctx.api
    S, R = api.Shard(0), api.Replicate()
    body = model.body
    body.rows = (ctx.rank, ctx.world_size)

    class Inject(api.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, *, scale):
            return self.inner.w2(api.F.gelu(self.inner.w1(x)) * scale)

    inject = Inject(body.inner)
    api.parallelize_module(inject, ctx.mesh, api.PrepareModuleInput(
        input_layouts=(S,), desired_input_layouts=(R,), input_kwarg_layouts={"scale": S},
        desired_input_kwarg_layouts={"scale": R}, use_local_output=True))
    api.parallelize_module(body.inner, ctx.mesh, {"w1": api.ColwiseParallel(), "w2": api.RowwiseParallel()})
    ctx.state["inject"] = inject
    return model


def injected_step(model, inputs, target, loss_fn, ctx):
    (x,) = inputs
    mine = x.chunk(ctx.world_size, dim=0)[ctx.rank]
    loss = loss_fn(ctx.state["inject"](mine, scale=row_scale(mine)), target)
    loss.backward()
    return loss


def row_scale(x):
    return x.mean(dim=-1, keepdim=True).sigmoid() + 0.5


def scaled_baseline(api):
    """The baseline of :func:`layout_injection`: the same weights, every row, the same scale."""
    model = scaled_mlp(api)
    inner = model.body.inner
    model.body.forward = lambda x: inner.w2(api.F.gelu(inner.w1(x)) * row_scale(x))
    return model


def tp_of_stage(part, ctx):
    """A pipeline stage's MLPs Colwise/Rowwise over the ``tp`` sub-mesh."""
    return tp_blocks(part, ctx, ctx.mesh["tp"])


def gpipe_2d_step(model, inputs, target, loss_fn, ctx):
    losses = []
    if ctx.state["stage"] == 0:
        ctx.state["schedule"].step(*inputs)
        return None
    ctx.state["schedule"].step(target=target, losses=losses)
    return sum(losses) / len(losses)


def _count_block_forwards(model, ctx):
    """Count the starts of the first block's MLP forward (inside the checkpointed block): 1 per
    micro-batch without recompute, 2 with. A pre-hook: the recompute stops as soon as the last
    tensor backward needs is recomputed (``torch.utils.checkpoint``'s early stop), before the
    MLP returns, so a post-hook would not see it."""
    counter = ctx.state.setdefault("forwards", [0])
    module = model.blocks["0"] if "0" in model.blocks else next(iter(model.blocks.values()))
    inner = getattr(module, "_checkpoint_wrapped_module", module)
    inner.mlp.register_forward_pre_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))


def fsdp_ac(model, ctx):
    ac_full(model, ctx)
    _count_block_forwards(model, ctx)
    return fsdp_per_block(model, ctx)


def recompute_step(model, inputs, target, loss_fn, ctx):
    """One step asserting the recompute: the checkpointed block's MLP ran twice."""
    counter = ctx.state["forwards"]
    counter[0] = 0
    loss = loss_fn(model(*inputs), target)
    assert counter[0] == 1, f"forward ran the block {counter[0]} time(s)"
    loss.backward()
    assert counter[0] == 2, f"after backward the block ran {counter[0]} time(s): it was not recomputed"
    return loss


def pp_ac(model, ctx):
    part = _pp_stage(ac_full(model, ctx), ctx)
    _count_block_forwards(part, ctx)
    return part


def _pp_stage(model, ctx):
    pipe = ctx.api.pipelining
    part = stage_of(model, [str(2 * ctx.rank), str(2 * ctx.rank + 1)], head=ctx.rank == 1)
    stage = pipe.PipelineStage(part, stage_index=ctx.rank, num_stages=2, device=ctx.api.torch.device("cpu"))
    ctx.state["schedule"] = pipe.ScheduleGPipe(stage, n_microbatches=4, loss_fn=mse)
    ctx.state["stage"] = ctx.rank
    ctx.partial = True
    return part


def pp_recompute_step(model, inputs, target, loss_fn, ctx):
    """A GPipe step; each of the 4 micro-batches ran the stage's first checkpointed block twice
    (the first step also runs the stage's shape inference, so there it is at least 8)."""
    counter = ctx.state["forwards"]
    counter[0] = 0
    first = ctx.state.setdefault("steps", 0) == 0
    ctx.state["steps"] += 1
    loss = gpipe_2d_step(model, inputs, target, loss_fn, ctx)
    assert counter[0] >= 8 if first else counter[0] == 8, \
        f"4 micro-batches ran the block {counter[0]} time(s), not 4 forwards + 4 recomputes"
    return loss


def swap_ac_step(model, inputs, target, loss_fn, ctx):
    """``save_on_cpu``-style offload by ``saved_tensors_hooks`` around checkpointed blocks: what
    is packed (the checkpoints' inputs and the head's) is unpacked exactly once each, only in
    backward, and the recomputed activations are not offloaded again after the forward."""
    torch = ctx.api.torch
    log = []

    def pack(t):
        log.append(("pack", len(log)))
        return t.to("cpu", copy=True)

    def unpack(t):
        log.append(("unpack", len(log)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = loss_fn(model(*inputs), target)
    packed = sum(1 for kind, _ in log if kind == "pack")
    assert packed > 0 and all(kind == "pack" for kind, _ in log), log
    loss.backward()
    unpacked = sum(1 for kind, _ in log if kind == "unpack")
    assert unpacked == packed, f"{packed} tensor(s) packed but {unpacked} unpacked"
    return loss


def tp_cp_attention(model, ctx):
    """Attention heads' projections over ``tp`` (``qkv`` Colwise, ``out`` Rowwise) and the
    sequence over ``cp`` (:func:`~cases.torch.training.plans.context_parallel_step`)."""
    api = ctx.api
    return api.parallelize_module(model, ctx.mesh["tp"], {"qkv": api.ColwiseParallel(),
                                                         "out": api.RowwiseParallel()})


def fsdp_over_dp(model, ctx):
    return ctx.api.fully_shard(model, mesh=ctx.mesh["dp"])


register(TrainCase(name="shard_tp_layout_injection_args_kwargs", model=scaled_baseline, data=regression, loss=mse,
                   parallelize=layout_injection, train_step=injected_step, optimizer=adam, steps=2, mesh_shape=(2,),
                   mesh_dim_names=("tp",), tags=L0, capabilities=("shard", "tp"), layer=3, requires=("tp.styles",)))
register(TrainCase(name="tp_fsdp_2d_one_step", model=stack, data=regression, loss=mse, parallelize=tp_fsdp_2d,
                   optimizer=adam, steps=2, batch_split="dp", mesh_shape=(2, 2), mesh_dim_names=DP_TP, tags=L1,
                   capabilities=("tp", "fsdp"), layer=3, requires=("fsdp2", "tp.styles")))
register(TrainCase(name="tp_pp_gpipe_2d", model=stack, data=regression, loss=mse, parallelize=tp_of_stage,
                   pipeline=Pipeline(stack_stage, "GPipe", axis="pp"), optimizer=sgd_momentum, steps=2,
                   mesh_shape=(2, 2), mesh_dim_names=("pp", "tp"), tags=L1, capabilities=("tp", "pp"), layer=3,
                   requires=("pipelining", "tp.styles")))
register(TrainCase(name="cp_tp_attention", model=attention, data=sequences, loss=mse, parallelize=tp_cp_attention,
                   train_step=context_parallel_step, steps=2, mesh_shape=(2, 2), mesh_dim_names=("cp", "tp"),
                   tags=L1, capabilities=("cp", "tp"), layer=3, requires=("context_parallel", "tp.styles")))
register(TrainCase(name="fsdp_cp_attention", model=attention, data=sequences, loss=mse, parallelize=fsdp_over_dp,
                   train_step=context_parallel_step, steps=2, batch_split="dp", mesh_shape=(2, 2),
                   mesh_dim_names=("dp", "cp"), tags=L1, capabilities=("cp", "fsdp"), layer=3,
                   requires=("context_parallel", "fsdp2")))
register(TrainCase(name="fsdp_ac_recompute", model=stack, data=regression, loss=mse, parallelize=fsdp_ac,
                   train_step=recompute_step, optimizer=adam, steps=2, batch_split="dp", mesh_shape=(2,),
                   mesh_dim_names=("dp",), tags=L0, capabilities=("fsdp", "ac"), layer=3,
                   requires=("fsdp2", "checkpoint")))
register(TrainCase(name="pp_ac_microbatch_recompute", model=stack, data=regression, loss=mse, parallelize=pp_ac,
                   train_step=pp_recompute_step, optimizer=sgd_momentum, steps=2, mesh_shape=(2,),
                   mesh_dim_names=("pp",), tags=L1, capabilities=("pp", "ac"), layer=3,
                   requires=("pipelining", "checkpoint")))
register(TrainCase(name="swap_ac_saved_tensor_lifecycle", model=stack, data=regression, loss=mse, parallelize=ac_full,
                   train_step=swap_ac_step, optimizer=adam, steps=2, mesh_shape=(1,), tags=L0,
                   capabilities=("swap", "ac"), layer=3, requires=("checkpoint",)))
def tp_fsdp_2d_with_head(model, ctx):
    """:func:`~cases.torch.training.plans.tp_fsdp_2d` with the head ColwiseParallel (output
    gathered to ``Replicate``) too: every parameter a DTensor on the ``(dp, tp)`` mesh."""
    api = ctx.api
    api.parallelize_module(model, ctx.mesh["tp"], {"head": api.ColwiseParallel(output_layouts=api.Replicate())})
    return tp_fsdp_2d(model, ctx)


register(TrainCase(name="clip_grad_fsdp_tp_2d", model=stack, data=regression, loss=mse,
                   parallelize=tp_fsdp_2d_with_head, optimizer=sgd_momentum, steps=2, batch_split="dp",
                   clip_grad_norm=0.3, mesh_shape=(2, 2), mesh_dim_names=DP_TP, tags=L1,
                   capabilities=("clip_grad", "fsdp", "tp"), layer=3, requires=("fsdp2", "tp.styles")))
register(TrainCase(name="clip_grad_fsdp_tp_mixed_meshes", model=stack, data=regression, loss=mse,
                   parallelize=tp_fsdp_2d, optimizer=adam, steps=2, batch_split="dp", clip_grad_norm=0.3,
                   mesh_shape=(2, 2), mesh_dim_names=DP_TP, tags=L1, capabilities=("clip_grad", "fsdp", "tp"),
                   layer=3, requires=("fsdp2", "tp.styles"),
                   known_failure=KnownFailure(
                       kind="raises", step="parallel",
                       match=r"All operands in aten\.stack\.default must have the same mesh",
                       reason="torch.nn.utils.clip_grad_norm_ torch.stack-s the per-parameter norms, DTensors on the "
                              "(dp, tp) mesh and on FSDP's 1-D dp mesh (fixed upstream by pytorch/pytorch#180501)",
                       upstream="pytorch/pytorch#180346")))


def token_cross_entropy(logits, target):
    import torch.nn.functional as F

    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def tp_logits_sharded(model, ctx):
    """Megatron-style TP whose logits stay vocabulary-sharded (``Shard(-1)``, a DTensor)."""
    return tp_transformer(model, ctx, gather_logits=False)


def loss_parallel_step(model, inputs, target, loss_fn, ctx):
    """Forward and backward inside ``loss_parallel()``: the cross-entropy of sharded logits."""
    with ctx.api.loss_parallel():
        loss = loss_fn(model(*inputs), target)
        loss.backward()
    return loss


BF16 = CompareSpec.allclose(rtol=5e-2, atol=5e-3)

register(TrainCase(name="tp_loss_parallel", model=tiny_lm, data=tokens, loss=token_cross_entropy,
                   parallelize=tp_logits_sharded, train_step=loss_parallel_step, optimizer=sgd_momentum, steps=2,
                   mesh_shape=(2,), mesh_dim_names=("tp",), tags=L1, capabilities=("tp", "dtensor"), layer=3,
                   requires=("tp.styles", "loss_parallel")))
register(TrainCase(name="fsdp_bf16_clip_grad", model=stack, data=regression, loss=mse, parallelize=fsdp_bf16,
                   optimizer=sgd_momentum, steps=2, batch_split="dp", clip_grad_norm=0.5, mesh_shape=(2,),
                   mesh_dim_names=("dp",), compare=TrainCompare(loss=BF16, grad_norm=BF16, grads=BF16, params=BF16,
                                                                optim=BF16),
                   tags=L1, capabilities=("fsdp", "mixed_precision", "clip_grad"), layer=3,
                   requires=("fsdp2.mixed_precision",)))
