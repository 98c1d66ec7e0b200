"""Layer 2 of the training quality net, the optimizer step on distributed parameters: torch's
optimizers with their list implementations (``foreach=True``: the ``_foreach_*`` operators;
``fused=True``: one fused kernel per list, ``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``,
``_fused_adagrad_``) on parameter lists whose DTensors are placed differently, each against the
same optimizer and implementation stepping the single-device model (loss, gathered gradients,
parameters after every step, the optimizer state).

On CPU torch's optimizers default to the per-tensor loop (``_default_to_fused_or_foreach``
picks the list implementations for CUDA tensors only), so every other training case's
optimizer never reaches a list operator; these ask for them by name. The placements:

- TP (``w1`` ColwiseParallel, ``w2`` RowwiseParallel, 2 ranks): one list holds ``Shard(0)``
  weights and bias, a ``Shard(1)`` weight and a ``Replicate()`` bias.
- "Place every parameter as P" on a 2 x 2 mesh: ``(Shard(0), Replicate())``,
  ``(Replicate(), Shard(1))``, ``(Shard(0), Shard(0))`` and a replicated bias in one list.
- FSDP2 per block (2 ranks, the batch split over ``dp``): every parameter ``Shard(0)``.

The optimizers: Adam, AdamW (decoupled weight decay), SGD with Nesterov momentum (its momentum buffer
made on the first step), Adagrad, RMSprop (centered) and Adam with AMSGrad (``max_exp_avg_sq``).
torch documents ``foreach`` and ``fused`` as implementations of the same update
(https://pytorch.org/docs/stable/optim.html, "Algorithms"): each case's baseline uses the same
implementation on plain tensors, and the comparison's tolerance is the training cases' default.
The model and data are float64: the adaptive optimizers divide a gradient by its own running
magnitude, so a gradient that nearly cancels (2e-8 in float32 here) turns its rounding into an
O(1) difference of the update (RMSprop's momentum buffer differed at 3e-5 relative in float32);
in float64 that rounding stays below the tolerance.

torch 2.13 registers DTensor strategies for ``_fused_adam_`` and ``_fused_adamw_`` only: fused SGD
and Adagrad on DTensor parameters raise (docs/torch-bugs.md#fused-sgd-adagrad-strategy), known
failures pinned to that raise.
"""
from cases.torch.training.models import mlp, mse, regression, stack
from cases.torch.training.plans import fsdp_per_block
from meshtest import KnownFailure, Replicate, Shard, TrainCase, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
TP = ("tp",)


def mlp64(api):
    return mlp(api).double()


def stack64(api):
    return stack(api).double()


def regression64(i, api):
    return tuple(t.double() for t in regression(i, api))


#: Fused SGD and Adagrad on DTensor parameters: torch 2.13 registers DTensor strategies for
#: ``_fused_adam_`` and ``_fused_adamw_`` only.
NO_FUSED_SGD = KnownFailure(kind="raises", step="parallel",
                            match=r"Operator aten\._fused_sgd_\.default does not have a sharding strategy registered",
                            reason="torch.optim.SGD(fused=True) calls _fused_sgd_ on the DTensor parameters; torch "
                                   "2.13 registers DTensor strategies for _fused_adam_ and _fused_adamw_ only",
                            upstream="docs/torch-bugs.md#fused-sgd-adagrad-strategy")
NO_FUSED_ADAGRAD = KnownFailure(kind="raises", step="parallel",
                                match=r"Operator aten\._fused_adagrad_\.default does not have a sharding strategy "
                                      r"registered",
                                reason="torch.optim.Adagrad(fused=True) calls _fused_adagrad_ on the DTensor "
                                       "parameters; torch 2.13 registers DTensor strategies for _fused_adam_ and "
                                       "_fused_adamw_ only",
                                upstream="docs/torch-bugs.md#fused-sgd-adagrad-strategy")


def tp_colwise_rowwise(model, ctx):
    api = ctx.api
    return api.parallelize_module(model, ctx.mesh, {"w1": api.ColwiseParallel(), "w2": api.RowwiseParallel()})


#: (torch.optim class name, keyword arguments): the update a case steps with. torch 2.13 has a
#: fused CPU kernel (``fused=True``) for Adam, AdamW, SGD and Adagrad.
ADAM = ("Adam", dict(lr=1e-2))
ADAMW = ("AdamW", dict(lr=1e-2, weight_decay=0.1))
SGD = ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True))
ADAGRAD = ("Adagrad", dict(lr=0.05))
RMSPROP = ("RMSprop", dict(lr=1e-2, centered=True, momentum=0.5))
AMSGRAD = ("Adam", dict(lr=1e-2, amsgrad=True))

def optimizer(spec, impl):
    """``optimizer(params, api)`` for :class:`TrainCase`: ``torch.optim.<class>`` of ``spec``
    (``ADAM``, ...) with ``impl`` (``"foreach"`` or ``"fused"``) set to True."""
    cls, kw = spec

    def make(params, api):
        return getattr(api.torch.optim, cls)(params, **{impl: True}, **kw)
    return make


MIXED_2D = {"w1.weight": (Shard(0), Replicate()), "w2.weight": (Replicate(), Shard(1)),
            "w1.bias": (Shard(0), Shard(0))}


register(TrainCase(name="train_optim_adam_foreach_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(ADAM, "foreach"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L0, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_adam_foreach_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(ADAM, "foreach"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
register(TrainCase(name="train_optim_adam_foreach_fsdp2", model=stack64, data=regression64, loss=mse,
                   parallelize=fsdp_per_block, optimizer=optimizer(ADAM, "foreach"), steps=3,
                   batch_split="dp", mesh_shape=(2,), mesh_dim_names=("dp",), tags=L1,
                   capabilities=("fsdp",), layer=2, requires=("fsdp2",)))
register(TrainCase(name="train_optim_adam_fused_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(ADAM, "fused"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L0, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_adam_fused_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(ADAM, "fused"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
register(TrainCase(name="train_optim_adam_fused_fsdp2", model=stack64, data=regression64, loss=mse,
                   parallelize=fsdp_per_block, optimizer=optimizer(ADAM, "fused"), steps=3,
                   batch_split="dp", mesh_shape=(2,), mesh_dim_names=("dp",), tags=L1,
                   capabilities=("fsdp",), layer=2, requires=("fsdp2",)))
register(TrainCase(name="train_optim_adamw_foreach_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(ADAMW, "foreach"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L1, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_adamw_foreach_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(ADAMW, "foreach"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
register(TrainCase(name="train_optim_adamw_fused_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(ADAMW, "fused"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L1, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_adamw_fused_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(ADAMW, "fused"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
register(TrainCase(name="train_optim_sgd_momentum_foreach_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(SGD, "foreach"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L0, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_sgd_momentum_foreach_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(SGD, "foreach"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
register(TrainCase(name="train_optim_sgd_momentum_foreach_fsdp2", model=stack64, data=regression64, loss=mse,
                   parallelize=fsdp_per_block, optimizer=optimizer(SGD, "foreach"), steps=3,
                   batch_split="dp", mesh_shape=(2,), mesh_dim_names=("dp",), tags=L1,
                   capabilities=("fsdp",), layer=2, requires=("fsdp2",)))
register(TrainCase(name="train_optim_sgd_momentum_fused_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(SGD, "fused"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L0, capabilities=("tp",), layer=2,
                   requires=("tp.styles",),
                   known_failure=NO_FUSED_SGD))
register(TrainCase(name="train_optim_sgd_momentum_fused_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(SGD, "fused"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2,
                   known_failure=NO_FUSED_SGD))
register(TrainCase(name="train_optim_sgd_momentum_fused_fsdp2", model=stack64, data=regression64, loss=mse,
                   parallelize=fsdp_per_block, optimizer=optimizer(SGD, "fused"), steps=3,
                   batch_split="dp", mesh_shape=(2,), mesh_dim_names=("dp",), tags=L1,
                   capabilities=("fsdp",), layer=2, requires=("fsdp2",),
                   known_failure=NO_FUSED_SGD))
register(TrainCase(name="train_optim_adagrad_foreach_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(ADAGRAD, "foreach"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L1, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_adagrad_foreach_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(ADAGRAD, "foreach"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
register(TrainCase(name="train_optim_adagrad_fused_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(ADAGRAD, "fused"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L1, capabilities=("tp",), layer=2,
                   requires=("tp.styles",),
                   known_failure=NO_FUSED_ADAGRAD))
register(TrainCase(name="train_optim_adagrad_fused_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(ADAGRAD, "fused"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2,
                   known_failure=NO_FUSED_ADAGRAD))
register(TrainCase(name="train_optim_rmsprop_centered_foreach_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(RMSPROP, "foreach"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L1, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_rmsprop_centered_foreach_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(RMSPROP, "foreach"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
register(TrainCase(name="train_optim_adam_amsgrad_foreach_tp_mixed", model=mlp64, data=regression64, loss=mse,
                   parallelize=tp_colwise_rowwise, optimizer=optimizer(AMSGRAD, "foreach"), steps=3,
                   mesh_shape=(2,), mesh_dim_names=TP, tags=L1, capabilities=("tp",), layer=2,
                   requires=("tp.styles",)))
register(TrainCase(name="train_optim_adam_amsgrad_foreach_params_mixed_2d", model=mlp64, data=regression64,
                   loss=mse, param_placements=MIXED_2D, optimizer=optimizer(AMSGRAD, "foreach"), steps=3,
                   mesh_shape=(2, 2), mesh_dim_names=("a", "b"), tags=L1, capabilities=("shard",),
                   layer=2))
