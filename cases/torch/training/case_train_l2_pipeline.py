"""Layer 2 of the training quality net, pipeline parallel: each schedule torch 2.13 ships trains a 4-block
:func:`~cases.torch.training.models.stack` cut into stages over 2 ranks, against the whole model
trained on one device: the last stage's loss, and every stage's gradients and parameters by
fully-qualified name (each rank compares the blocks it holds), step by step.

Micro-batches: 4 per step, equal in size, so the schedule's mean of micro-batch losses is the
full batch's mean loss, and its gradients (summed over micro-batches and scaled by 1/4, torch's
``scale_grads`` default) are the baseline's.

- single-stage schedules: ``ScheduleGPipe``, ``Schedule1F1B`` (stage r = blocks 2r, 2r+1; the
  head on stage 1);
- multi-stage (virtual) schedules: ``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``
  (stages 0-3 = block 0-3, rank r runs stages r and r+2), ``ScheduleZBVZeroBubble`` (the V
  placement: rank 0 runs stages 0 and 3, rank 1 stages 1 and 2).
"""
from cases.torch.training.models import mse, regression, stack, stage_of
from meshtest import TrainCase, register

PP = ("pp",)
L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
MICRO = 4


def _stages(model, ctx, placement):
    """PipelineStage objects of this rank: ``placement`` maps rank → stage indices (0-3)."""
    pipe = ctx.api.pipelining
    mine = placement[ctx.rank]
    stages = [pipe.PipelineStage(stage_of(model, [str(i)], head=i == 3), stage_index=i, num_stages=4,
                                 device=ctx.api.torch.device("cpu")) for i in mine]
    return stages, stage_of(model, [str(i) for i in mine], head=3 in mine)


def single(schedule_name):
    def parallelize(model, ctx):
        pipe = ctx.api.pipelining
        blocks = [str(2 * ctx.rank), str(2 * ctx.rank + 1)]
        part = stage_of(model, blocks, head=ctx.rank == 1)
        stage = pipe.PipelineStage(part, stage_index=ctx.rank, num_stages=2, device=ctx.api.torch.device("cpu"))
        ctx.state["schedule"] = getattr(pipe, schedule_name)(stage, n_microbatches=MICRO, loss_fn=mse)
        ctx.partial = True
        return part
    return parallelize


def virtual(schedule_name, placement):
    def parallelize(model, ctx):
        stages, part = _stages(model, ctx, placement)
        ctx.state["schedule"] = getattr(ctx.api.pipelining, schedule_name)(stages, n_microbatches=MICRO, loss_fn=mse)
        ctx.state["last"] = 3 in placement[ctx.rank]
        ctx.state["first"] = 0 in placement[ctx.rank]
        ctx.partial = True
        return part
    return parallelize


def pipeline_step(model, inputs, target, loss_fn, ctx):
    """One schedule step: the first stage feeds ``inputs``, the last computes the loss."""
    schedule = ctx.state["schedule"]
    first = ctx.state.get("first", ctx.rank == 0)
    last = ctx.state.get("last", ctx.rank == ctx.world_size - 1)
    losses = []
    schedule.step(*(inputs if first else ()), target=target if last else None, losses=losses if last else None)
    return sum(losses) / len(losses) if last else None


INTERLEAVED = {0: (0, 2), 1: (1, 3)}
V_SHAPE = {0: (0, 3), 1: (1, 2)}
#: What every case here trains (the static fields — mesh, tags, capabilities, layer — are written
#: out in each call: the scan reads them from the syntax tree).
TRAIN = dict(model=stack, data=regression, loss=mse, train_step=pipeline_step, steps=2)

register(TrainCase(name="train_pp_gpipe", parallelize=single("ScheduleGPipe"), mesh_shape=(2,), mesh_dim_names=PP,
                   tags=L0, capabilities=("pp",), layer=2, requires=("pipelining",), **TRAIN))
register(TrainCase(name="train_pp_1f1b", parallelize=single("Schedule1F1B"), mesh_shape=(2,), mesh_dim_names=PP,
                   tags=L0, capabilities=("pp",), layer=2, requires=("pipelining",), **TRAIN))
register(TrainCase(name="train_pp_interleaved_1f1b", parallelize=virtual("ScheduleInterleaved1F1B", INTERLEAVED),
                   mesh_shape=(2,), mesh_dim_names=PP, tags=L1, capabilities=("pp",), layer=2,
                   requires=("pipelining",), **TRAIN))
register(TrainCase(name="train_pp_interleaved_zero_bubble",
                   parallelize=virtual("ScheduleInterleavedZeroBubble", INTERLEAVED), mesh_shape=(2,),
                   mesh_dim_names=PP, tags=L1, capabilities=("pp",), layer=2, requires=("pipelining.zero_bubble",),
                   **TRAIN))
register(TrainCase(name="train_pp_zbv_zero_bubble", parallelize=virtual("ScheduleZBVZeroBubble", V_SHAPE),
                   mesh_shape=(2,), mesh_dim_names=PP, tags=L1, capabilities=("pp",), layer=2,
                   requires=("pipelining.zero_bubble",), **TRAIN))
