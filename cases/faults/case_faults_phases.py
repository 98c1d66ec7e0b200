"""Resume faults for the phase cases (tagged ``cpu_faults``; src/tests/test_phases_torch.py runs
them): each trains 2 steps under FSDP2, saves, and resumes in a second launch — but restores
less than everything, as a buggy resume would. The continuity check must name step 2, the first
resumed step, as the first divergence.

- ``fault_resume_drops_optimizer``: Adam's moments and step count not restored.
- ``fault_resume_drops_rng``: the RNG state not restored (the model draws from it every forward).
- ``fault_resume_drops_data_position``: the data restarts at micro-batch 0.
- ``fault_resume_drops_scheduler``: the learning rate restarts from its initial value.
- ``fault_phase_hangs``: with ``MESHTEST_FAULT_HANG=1`` in the environment, phase 2 sleeps in its
  parallelize step (the runner is killed there); without, it trains like the others.
"""
import os
import time

from cases.torch.training.models import adam, decaying_lr, mse, noisy_stack, regression
from cases.torch.training.plans import fsdp_per_block
from meshtest import Phase, TrainCase, register

FAULTS = ("cpu_faults",)
TRAIN = dict(model=noisy_stack, data=regression, loss=mse, parallelize=fsdp_per_block, optimizer=adam,
             scheduler=decaying_lr, steps=2)


def sleeps(model, ctx):
    if os.environ.get("MESHTEST_FAULT_HANG") == "1":
        time.sleep(600)
    return fsdp_per_block(model, ctx)


register(TrainCase(name="fault_resume_drops_optimizer", phases=(Phase(steps=2),),
                   restore=("model", "scheduler", "rng", "data"), mesh_shape=(1,), mesh_dim_names=("dp",),
                   tags=FAULTS, **TRAIN))
register(TrainCase(name="fault_resume_drops_rng", phases=(Phase(steps=2),),
                   restore=("model", "optim", "scheduler", "data"),
                   mesh_shape=(1,), mesh_dim_names=("dp",),
                   tags=FAULTS, **TRAIN))
register(TrainCase(name="fault_resume_drops_data_position", phases=(Phase(steps=2),),
                   restore=("model", "optim", "scheduler", "rng"), mesh_shape=(1,), mesh_dim_names=("dp",),
                   tags=FAULTS, **TRAIN))
register(TrainCase(name="fault_resume_drops_scheduler", phases=(Phase(steps=2),),
                   restore=("model", "optim", "rng", "data"), mesh_shape=(1,), mesh_dim_names=("dp",), tags=FAULTS,
                   **TRAIN))
register(TrainCase(name="fault_phase_hangs", phases=(Phase(steps=1, parallelize=sleeps),), mesh_shape=(2,),
                   mesh_dim_names=("dp",), batch_split="dp", tags=FAULTS, timeout_s=900, **TRAIN))
