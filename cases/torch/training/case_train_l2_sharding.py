"""Layer 2 of the training quality net, the sharding capabilities, each against its single-device baseline:
loss, every parameter's gathered gradient, every parameter after the step and the optimizer
state agree, step by step.

- TP: ``w1`` ColwiseParallel, ``w2`` RowwiseParallel on a 2-rank ``tp`` mesh, Adam.
- FSDP2: ``fully_shard`` per block and at the root on a 2-rank ``dp`` mesh; the batch is split over
  ``dp`` (each rank trains on its half), so the gradients FSDP2 reduce-scatters (averaged over
  ``dp``) equal the baseline's gradients of the full batch's mean loss. Also with gradient
  accumulation (2 micro-batches per step) and with momentum SGD.
- FSDP2 + ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``: compute in
  bfloat16 against a float32 baseline, so values differ by bfloat16 rounding (8 mantissa bits,
  relative 2^-8 ≈ 0.4 % per op): compared at rtol 5e-2 / atol 5e-3, the master weights stay
  float32. Momentum SGD, whose update is proportional to the gradient (Adam's normalised
  update turns a bfloat16-sized gradient difference into a full ``lr`` step).
- Clip grad under each parallelism: FSDP2, TP and PP (a stage holds part of the model, so the
  global norm adds every stage's part) — the total norm and the clipped gradients match.
- TP through a transformer's paths: vocab-sharded embedding, heads sharded in attention,
  Colwise/Rowwise MLP, vocab-sharded logits gathered for the cross-entropy.
"""
from cases.torch.training.models import (
    adam,
    cross_entropy,
    mlp,
    mse,
    regression,
    sgd_momentum,
    stack,
    stack_stage,
    tiny_lm,
    tokens,
)
from cases.torch.training.plans import fsdp_bf16, fsdp_per_block, tp_transformer
from meshtest import CompareSpec, Pipeline, Shard, TrainCase, TrainCompare, register

TP = ("tp",)
DP = ("dp",)
L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
BF16 = CompareSpec.allclose(rtol=5e-2, atol=5e-3)


def tp_colwise_rowwise(model, ctx):
    api = ctx.api
    return api.parallelize_module(model, ctx.mesh, {"w1": api.ColwiseParallel(), "w2": api.RowwiseParallel()})


register(TrainCase(name="train_tp_mlp_colwise_rowwise_adam", model=mlp, data=regression, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=adam, steps=3, mesh_shape=(2,), mesh_dim_names=TP,
                   tags=L0, capabilities=("tp",), layer=2, requires=("tp.styles",)))
register(TrainCase(name="train_fsdp2_per_block_adam", model=stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=adam, steps=3, batch_split="dp", mesh_shape=(2,),
                   mesh_dim_names=DP, tags=L0, capabilities=("fsdp",), layer=2, requires=("fsdp2",)))
register(TrainCase(name="train_fsdp2_grad_accum_momentum", model=stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=sgd_momentum, steps=2, grad_accum=2, batch_split="dp",
                   mesh_shape=(2,), mesh_dim_names=DP, tags=L1, capabilities=("fsdp",), layer=2, requires=("fsdp2",)))
register(TrainCase(name="train_fsdp2_mixed_precision_bf16", model=stack, data=regression, loss=mse,
                   parallelize=fsdp_bf16, optimizer=sgd_momentum, steps=2, batch_split="dp", mesh_shape=(2,),
                   mesh_dim_names=DP, compare=TrainCompare(loss=BF16, grad_norm=BF16, grads=BF16, params=BF16,
                                                           optim=BF16),
                   tags=L1, capabilities=("fsdp", "mixed_precision"), layer=2, requires=("fsdp2.mixed_precision",)))
register(TrainCase(name="train_fsdp2_clip_grad_norm", model=stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=adam, steps=2, batch_split="dp", clip_grad_norm=0.5,
                   mesh_shape=(2,), mesh_dim_names=DP, tags=L0, capabilities=("fsdp", "clip_grad"), layer=2,
                   requires=("fsdp2",)))


# Momentum SGD here: the key bias has a zero gradient in exact arithmetic (softmax ignores a shift
# shared by every key), and Adam's normalised step turns its rounding noise into +-lr updates.
register(TrainCase(name="train_tp_transformer_embedding_attention", model=tiny_lm, data=tokens, loss=cross_entropy,
                   parallelize=tp_transformer, optimizer=sgd_momentum, steps=2, mesh_shape=(2,), mesh_dim_names=TP,
                   tags=L0, capabilities=("tp",), layer=2, requires=("tp.styles",)))
register(TrainCase(name="train_tp_clip_grad_norm", model=mlp, data=regression, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=adam, steps=2, clip_grad_norm=0.2, mesh_shape=(2,),
                   mesh_dim_names=TP, tags=L1, capabilities=("tp", "clip_grad"), layer=2, requires=("tp.styles",)))
register(TrainCase(name="train_pp_clip_grad_norm_across_stages", model=stack, data=regression, loss=mse,
                   pipeline=Pipeline(stack_stage, "GPipe"), optimizer=sgd_momentum, steps=2,
                   clip_grad_norm=0.2, mesh_shape=(2,), mesh_dim_names=("pp",), tags=L1,
                   capabilities=("pp", "clip_grad"), layer=2, requires=("pipelining",)))


def tied_lm(api, vocab=8, dim=4):
    """An embedding and an output head that share one weight (``head.weight is emb.weight``)."""
    nn = api.nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.head = nn.Linear(dim, vocab, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, x):
            return self.head(self.emb(x))

    return Tied()


def tied_tokens(i, api):
    g = api.torch.Generator().manual_seed(2000 + i)
    x = api.torch.randint(0, 8, (4, 3), generator=g)
    return x, api.torch.randn(4, 3, 8, generator=g)


def fsdp_tied_apart(model, ctx):
    """The two modules that share the weight in FSDP2 units of their own (a mistake FSDP2 once
    trained through silently, each unit sharding and updating its own view of the weight)."""
    ctx.api.fully_shard(model.emb, mesh=ctx.mesh)
    ctx.api.fully_shard(model.head, mesh=ctx.mesh)
    return ctx.api.fully_shard(model, mesh=ctx.mesh)


# A fix pinned by its error: FSDP2 refuses a parameter shared across two of its units, naming the
# parameter and the way out (fully_shard([module_a, module_b])); torch 2.13 raises it.
register(TrainCase(name="train_fsdp2_tied_weights_in_separate_units_raise", model=tied_lm, data=tied_tokens, loss=mse,
                   parallelize=fsdp_tied_apart, steps=1, mesh_shape=(2,), mesh_dim_names=DP, tags=L1,
                   capabilities=("fsdp",), layer=1, requires=("fsdp2",),
                   expect_raises=(ValueError, r"Parameter 'head\.weight' is shared with a parameter already managed "
                                              r"by another FSDP group.*fully_shard\(\[module_a, module_b\]\)")))

# Gradient accumulation without a sync per micro-batch (FSDP2's set_requires_gradient_sync(False)
# until the last micro-batch): one reduce-scatter per step, the same gradients.
register(TrainCase(name="train_fsdp2_no_sync_grad_accum", model=stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=sgd_momentum, steps=2, grad_accum=2, grad_sync="last",
                   batch_split="dp", mesh_shape=(2,), mesh_dim_names=DP, tags=L0, capabilities=("fsdp",), layer=2,
                   requires=("fsdp2",)))
# "Place every parameter as P": each weight (Shard(0), Shard(0)) on a 2 x 2 mesh, each bias
# replicated; the gradients are redistributed to their weights' placements before SGD's update.
register(TrainCase(name="train_params_shard0_shard0_sgd", model=mlp, data=regression, loss=mse,
                   param_placements={"*.weight": (Shard(0), Shard(0))}, steps=2, mesh_shape=(2, 2),
                   mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",), layer=2))
