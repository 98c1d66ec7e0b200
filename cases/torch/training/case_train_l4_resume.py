"""Layer 4 of the training quality net, resume across processes: each case trains in phases, each later phase
a launch of its own (new processes: nothing in memory survives from the phase before; phase 1
may be the first case of another launch), and a later phase loads the
checkpoint the one before saved (DCP: model and optimizer; the LR scheduler, each rank's RNG
state and the data position beside it).

The check is the training net's: resume is judged by the continuity of the trajectory. From phase 2
on, each rank also trains the same parallel configuration without a stop, from step 0, and the
resumed steps must equal it — exactly on CPU (loss, gradients, parameters, optimizer state),
as Megatron compares the second half of a resumed run with a continuous one; and every phase
matches the single-device baseline within the usual tolerance. The models draw from the global
RNG in each forward (:func:`~cases.torch.training.models.noisy_stack`) and the learning rate
changes every step, so a resume that drops the RNG, the scheduler, the optimizer state or the
data position leaves the continuous run at its first step.

- TP, FSDP2, PP (GPipe) and TP+FSDP (2-D): save after 2 steps, resume for 2 on the same mesh.
- The full state dict instead of DCP (``checkpoint="full"``: gathered, written by rank 0, read by
  every rank; ``"full_broadcast"``: read by rank 0 only and sent to the others with
  ``broadcast_from_rank0``), for FSDP2 and TP.
- FSDP2 + meta-device init (layer 3's "resume + FSDP + meta init"): phase 2 materializes the
  model from meta, then loads over it.
- Cross-mesh restore: FSDP2 saved on ``(4,)``, loaded on ``(2, 2)`` (TP+FSDP) and on ``(2,)``;
  the continuous run on the new mesh re-associates the sums of the steps before the stop
  differently, so continuity is within the float32 tolerance there, not exact.
"""
from cases.torch.training.models import (
    adam,
    decaying_lr,
    init_stack,
    mse,
    noisy_stack,
    regression,
    sgd_momentum,
    stack,
    stack_stage,
)
from cases.torch.training.plans import fsdp_per_block, meta_init_fsdp, tp_blocks, tp_fsdp_2d
from meshtest import CompareSpec, KnownFailure, Phase, Pipeline, TrainCase, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
CLOSE = CompareSpec.allclose(rtol=1e-5, atol=1e-6)

register(TrainCase(name="resume_fsdp2_adam_lambda_lr", model=noisy_stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=adam, scheduler=decaying_lr, steps=2, batch_split="dp",
                   phases=(Phase(steps=2),), mesh_shape=(2,), mesh_dim_names=("dp",), tags=L0,
                   capabilities=("fsdp", "resume", "dcp"), layer=4, requires=("fsdp2",)))
register(TrainCase(name="resume_tp_adam_lambda_lr", model=noisy_stack, data=regression, loss=mse,
                   parallelize=tp_blocks, optimizer=adam, scheduler=decaying_lr, steps=2, phases=(Phase(steps=2),),
                   mesh_shape=(2,), mesh_dim_names=("tp",), tags=L1, capabilities=("tp", "resume", "dcp"), layer=4,
                   requires=("tp.styles",)))
register(TrainCase(name="resume_pp_gpipe_momentum", model=stack, data=regression, loss=mse,
                   pipeline=Pipeline(stack_stage, "GPipe"), optimizer=sgd_momentum, scheduler=decaying_lr,
                   steps=2, phases=(Phase(steps=2),), mesh_shape=(2,), mesh_dim_names=("pp",), tags=L1,
                   capabilities=("pp", "resume", "dcp"), layer=4, requires=("pipelining",)))
register(TrainCase(name="resume_tp_fsdp_2d_adam", model=noisy_stack, data=regression, loss=mse,
                   parallelize=tp_fsdp_2d, optimizer=adam, scheduler=decaying_lr, steps=2, batch_split="dp",
                   phases=(Phase(steps=2),), mesh_shape=(2, 2), mesh_dim_names=("dp", "tp"), tags=L1,
                   capabilities=("tp", "fsdp", "resume", "dcp"), layer=3, requires=("fsdp2", "tp.styles")))
register(TrainCase(name="restore_fsdp2_4_ranks_on_2x2_tp_fsdp", model=noisy_stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=adam, scheduler=decaying_lr, steps=2, batch_split="dp",
                   phases=(Phase(steps=2, mesh_shape=(2, 2), mesh_dim_names=("dp", "tp"), parallelize=tp_fsdp_2d,
                                 continuity=CLOSE),),
                   mesh_shape=(4,), mesh_dim_names=("dp",), tags=L1, capabilities=("fsdp", "tp", "resume", "dcp"),
                   layer=4, requires=("fsdp2", "tp.styles")))
register(TrainCase(name="restore_fsdp2_4_ranks_on_2", model=noisy_stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=adam, scheduler=decaying_lr, steps=2, batch_split="dp",
                   phases=(Phase(steps=2, mesh_shape=(2,), continuity=CLOSE),), mesh_shape=(4,),
                   mesh_dim_names=("dp",), tags=L1, capabilities=("fsdp", "resume", "dcp"), layer=4,
                   requires=("fsdp2",)))
register(TrainCase(name="resume_fsdp2_meta_init", model=init_stack, data=regression, loss=mse,
                   parallelize=meta_init_fsdp, optimizer=adam, scheduler=decaying_lr, steps=2, batch_split="dp",
                   phases=(Phase(steps=2),), mesh_shape=(2,), mesh_dim_names=("dp",), tags=L1,
                   capabilities=("fsdp", "init", "resume", "dcp"), layer=3, requires=("fsdp2", "meta_init")))
register(TrainCase(name="resume_fsdp2_full_state_broadcast", model=noisy_stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, optimizer=adam, scheduler=decaying_lr, steps=2, batch_split="dp",
                   phases=(Phase(steps=2),), checkpoint="full_broadcast", mesh_shape=(2,), mesh_dim_names=("dp",),
                   tags=L1, capabilities=("fsdp", "resume", "dcp"), layer=4, requires=("fsdp2",)))
register(TrainCase(name="resume_tp_full_state", model=noisy_stack, data=regression, loss=mse, parallelize=tp_blocks,
                   optimizer=adam, scheduler=decaying_lr, steps=2, phases=(Phase(steps=2),), checkpoint="full",
                   mesh_shape=(2,), mesh_dim_names=("tp",), tags=L1, capabilities=("tp", "resume", "dcp"), layer=4,
                   requires=("tp.styles",)))
# The default optimizer (SGD without momentum) keeps no state: torch's full optimizer state dict
# of it cannot be loaded back (the Adam and momentum cases above never meet this).
register(TrainCase(name="resume_fsdp2_full_state_stateless_sgd", model=noisy_stack, data=regression, loss=mse,
                   parallelize=fsdp_per_block, steps=2, batch_split="dp", phases=(Phase(steps=2),),
                   checkpoint="full", mesh_shape=(2,), mesh_dim_names=("dp",), tags=L0,
                   capabilities=("fsdp", "resume", "dcp"), layer=4, requires=("fsdp2",),
                   known_failure=KnownFailure(
                       kind="raises", step="phase2 resume", match=r"AssertionError: Expected device to be set",
                       reason="set_optimizer_state_dict of a full optimizer state dict whose state is empty (a "
                              "stateless optimizer: plain SGD) asserts instead of loading the param groups",
                       upstream="docs/torch-bugs.md#full-osd-stateless-optimizer")))
