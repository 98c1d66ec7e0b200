"""Layer 2 of the training quality net, the capabilities that change memory and lifecycles, not layouts:
each trains against the plain model and must change nothing in loss, gradients, parameters or
optimizer state.

- AC full: every block wrapped in ``checkpoint_wrapper`` (non-reentrant ``torch.utils.checkpoint``);
  its FQN segment ``_checkpoint_wrapped_module`` is removed before comparing.
- AC selective: the same with a ``create_selective_checkpoint_contexts`` policy that saves matmul
  outputs and recomputes the rest.
- Swap: forward and backward under ``torch.autograd.graph.save_on_cpu`` (every saved activation
  packed to CPU memory and unpacked in backward; on a CPU device the copies are real copies).
- Meta init: the model built on the meta device, ``fully_shard``-ed there (2 ranks, batch split
  over ``dp``), materialized with ``to_empty`` and initialized by a deterministic rule applied to
  the sharded parameters — against the baseline initialized by the same rule on full tensors.
"""
import functools

from cases.torch.training.models import adam, init_stack, mse, regression, stack
from cases.torch.training.plans import ac_full, meta_init_fsdp, swap_to_cpu
from meshtest import TrainCase, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
ONE = (1,)


def _save_matmuls(api, ctx, op, *args, **kwargs):
    policy = api.checkpoint.CheckpointPolicy
    return policy.MUST_SAVE if op in (api.torch.ops.aten.mm.default, api.torch.ops.aten.addmm.default) \
        else policy.PREFER_RECOMPUTE


def ac_selective(model, ctx):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    api = ctx.api
    contexts = functools.partial(api.checkpoint.create_selective_checkpoint_contexts,
                                 functools.partial(_save_matmuls, api))
    for name, block in list(model.blocks.items()):
        model.blocks[name] = checkpoint_wrapper(block, context_fn=contexts)
    return model


register(TrainCase(name="train_ac_full_checkpoint_wrapper", model=stack, data=regression, loss=mse,
                   parallelize=ac_full, optimizer=adam, steps=2, mesh_shape=ONE, tags=L0, capabilities=("ac",),
                   layer=2, requires=("checkpoint",)))
register(TrainCase(name="train_ac_selective_save_matmuls", model=stack, data=regression, loss=mse,
                   parallelize=ac_selective, optimizer=adam, steps=2, mesh_shape=ONE, tags=L1, capabilities=("ac",),
                   layer=2, requires=("checkpoint",)))
register(TrainCase(name="train_swap_save_on_cpu", model=stack, data=regression, loss=mse, train_step=swap_to_cpu,
                   optimizer=adam, steps=2, mesh_shape=ONE, tags=L0, capabilities=("swap",), layer=2,
                   requires=("checkpoint",)))
register(TrainCase(name="train_meta_init_fsdp2", model=init_stack, data=regression, loss=mse,
                   parallelize=meta_init_fsdp, optimizer=adam, steps=2, batch_split="dp", mesh_shape=(2,),
                   mesh_dim_names=("dp",), tags=L0, capabilities=("init", "fsdp"), layer=2,
                   requires=("fsdp2", "meta_init")))
