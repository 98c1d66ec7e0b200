"""Long-run faults (tagged ``cpu_faults``; src/tests/test_long_run_torch.py runs them): each a
short long run (60 steps, warm-up 10) with a defect the stability checks must name.

- ``fault_long_run_leaks``: the train step keeps a 256 KiB tensor per step (a leaking hook or a
  loss history kept with its graph): 12.5 MiB over 50 steps, past the 8 MiB bound.
- ``fault_long_run_diverges``: SGD at ``lr=50``: the loss turns NaN within a few steps.
"""
from cases.torch.training.models import mse, regression, stack
from meshtest import Stability, TrainCase, register

FAULTS = ("cpu_faults",)
KEPT = []


def leaking_step(model, inputs, target, loss_fn, ctx):
    KEPT.append(ctx.api.torch.ones(65536))
    loss = loss_fn(model(*inputs), target)
    loss.backward()
    return loss


def huge_lr(params, api):
    return api.torch.optim.SGD(params, lr=50.0)


register(TrainCase(name="fault_long_run_leaks", model=stack, data=regression, loss=mse, train_step=leaking_step,
                   steps=60, stability=Stability(warmup=10, rss_growth_mb=8.0), mesh_shape=(1,), tags=FAULTS))
register(TrainCase(name="fault_long_run_diverges", model=stack, data=regression, loss=mse, optimizer=huge_lr,
                   steps=60, stability=Stability(warmup=10, rss_growth_mb=8.0), mesh_shape=(1,), tags=FAULTS))
