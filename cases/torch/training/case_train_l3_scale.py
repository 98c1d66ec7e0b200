"""Layer 3 of the training quality net at the size teams outgrow one node: DP x TP x PP on 8 ranks.

Each case trains the 4-block :func:`~cases.torch.training.models.stack` through a pipeline over
the ``pp`` axis (:func:`~cases.torch.training.models.stack_stage`: two blocks per stage, the head
on the last), each stage's MLPs Colwise/Rowwise over ``tp`` and, on the 2 x 2 x 2 mesh, each
stage ``fully_shard``-ed over ``dp`` with the batch split over ``dp``; the single-device baseline
is the same model trained whole. On one node of 8 slots they run as any 8-rank case; on a Ray
cluster of nodes of 4 slots (their targets are then tagged ``nodes:2``) the same launch is placed
4 + 4 across two nodes and must give the same verdicts and records (docs/scale.md).
"""
from cases.torch.training.models import mse, regression, sgd_momentum, stack, stack_stage
from cases.torch.training.plans import tp_blocks
from meshtest import Pipeline, TrainCase, register

L1 = ("cpu_level1",)


def tp_then_fsdp_per_stage(part, ctx):
    """A stage's MLPs Colwise/Rowwise over ``tp``, then ``fully_shard`` of the stage over ``dp``."""
    tp_blocks(part, ctx, ctx.mesh["tp"])
    return ctx.api.fully_shard(part, mesh=ctx.mesh["dp"])


def tp_per_stage(part, ctx):
    return tp_blocks(part, ctx, ctx.mesh["tp"])


register(TrainCase(name="dp_tp_pp_2x2x2_gpipe", model=stack, data=regression, loss=mse,
                   pipeline=Pipeline(stack_stage, "GPipe", axis="pp"), parallelize=tp_then_fsdp_per_stage,
                   optimizer=sgd_momentum, steps=2, batch_split="dp", mesh_shape=(2, 2, 2),
                   mesh_dim_names=("pp", "dp", "tp"), tags=L1, capabilities=("pp", "fsdp", "tp"), layer=3,
                   requires=("pipelining", "fsdp2", "tp.styles")))
register(TrainCase(name="tp_pp_2x4_1f1b", model=stack, data=regression, loss=mse,
                   pipeline=Pipeline(stack_stage, "1F1B", axis="pp"), parallelize=tp_per_stage,
                   optimizer=sgd_momentum, steps=2, mesh_shape=(2, 4), mesh_dim_names=("pp", "tp"), tags=L1,
                   capabilities=("pp", "tp"), layer=3, requires=("pipelining", "tp.styles")))
