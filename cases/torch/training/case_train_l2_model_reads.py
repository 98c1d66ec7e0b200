"""Training cases whose loss or forward reads more than the batch: the forms
``loss(output, target, model)`` and ``model(api, ctx)`` of :class:`meshtest.TrainCase`.

- ``fsdp2_aux_loss_on_a_submodule``: a mixture-of-experts-style auxiliary loss. The forward keeps
  a penalty on its hidden activations on the submodule that made them (``w1.aux``); the loss reads
  it from the model after the forward, ``mse + 0.1 * model.w1.aux``, and its gradient flows back
  through FSDP2's all-gathered ``w1``.
- ``fsdp2_parameter_used_on_the_last_micro_batch``: with two micro-batches per step, a ``late``
  layer adds to the output on the last micro-batch only (``ctx.micro == ctx.grad_accum - 1``); its
  gradient is that micro-batch's alone. Both runs' models read the same ``ctx.micro``: the
  baseline's builder gets the baseline's context.
"""
from cases.torch.training.models import mse, regression
from meshtest import TrainCase, register

L1 = ("cpu_level1",)
DP = ("dp",)


def mlp_keeping_aux(api, dim=16, hidden=32):
    """``w1`` (dim → hidden) keeps ``w1.aux``, the mean square of its output, after each forward;
    GELU; ``w2`` (hidden → dim)."""
    nn = api.nn

    class KeepsAux(nn.Linear):
        def forward(self, x):
            h = super().forward(x)
            self.aux = (h ** 2).mean()
            return h

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = KeepsAux(dim, hidden)
            self.w2 = nn.Linear(hidden, dim)

        def forward(self, x):
            return self.w2(api.F.gelu(self.w1(x)))

    return MLP()


def mse_plus_aux(out, target, model):
    return mse(out, target) + 0.1 * model.w1.aux


def mlp_with_late_layer(api, ctx, dim=16, hidden=32):
    """An MLP, plus ``late`` (dim → dim) added to the output on the step's last micro-batch only."""
    nn = api.nn

    class LateMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(dim, hidden)
            self.w2 = nn.Linear(hidden, dim)
            self.late = nn.Linear(dim, dim)

        def forward(self, x):
            y = self.w2(api.F.gelu(self.w1(x)))
            return y + self.late(x) if ctx.micro == ctx.grad_accum - 1 else y

    return LateMLP()


def fsdp_root(model, ctx):
    return ctx.api.fully_shard(model, mesh=ctx.mesh)


register(TrainCase(name="fsdp2_aux_loss_on_a_submodule", model=mlp_keeping_aux, data=regression, loss=mse_plus_aux,
                   parallelize=fsdp_root, steps=2, batch_split="dp", mesh_shape=(2,), mesh_dim_names=DP, tags=L1,
                   capabilities=("fsdp",), layer=2, requires=("fsdp2",)))
register(TrainCase(name="fsdp2_parameter_used_on_the_last_micro_batch", model=mlp_with_late_layer, data=regression,
                   loss=mse, parallelize=fsdp_root, steps=2, grad_accum=2, batch_split="dp", mesh_shape=(2,),
                   mesh_dim_names=DP, tags=L1, capabilities=("fsdp",), layer=2, requires=("fsdp2",)))
