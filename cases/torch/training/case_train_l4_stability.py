"""Layer 4 (seed 001 §4.5), long runs: each capability (and TP+FSDP) trains a small model for 300
steps with no NaN/Inf in any loss, gradient or parameter, a peak resident set that stops growing
after warm-up (at most 8 MiB more over the last 280 steps, per rank process: a tensor kept per step
by a leaking hook or a growing autograd graph shows), and no hang (the case deadline). Each
rank's curve — loss, peak RSS and seconds per step — is drawn in the HTML report and read by
``tools/perf_guard.py`` (throughput and peak RSS per capability against a stored baseline).

Gate ``cpu_nightly``: no level0/level1 selection runs them (``./pants --tag=cpu_nightly test
cases::``).
"""
from cases.torch.training.models import adam, mse, regression, sgd_momentum, stack
from cases.torch.training.plans import (
                   ac_full,
                   fsdp_per_block,
                   gpipe_step,
                   pp_two_stages,
                   swap_to_cpu,
                   tp_blocks,
                   tp_fsdp_2d,
)
from meshtest import Stability, TrainCase, register

NIGHTLY = ("cpu_nightly",)
STEPS = 300
LONG = Stability(warmup=20, rss_growth_mb=8.0)

register(TrainCase(name="long_run_plain", model=stack, data=regression, loss=mse, optimizer=adam, steps=STEPS,
                   stability=LONG, mesh_shape=(1,), tags=NIGHTLY, capabilities=("init",), layer=4))
register(TrainCase(name="long_run_tp", model=stack, data=regression, loss=mse, parallelize=tp_blocks, optimizer=adam,
                   steps=STEPS, stability=LONG, mesh_shape=(2,), mesh_dim_names=("tp",), tags=NIGHTLY,
                   capabilities=("tp",), layer=4, requires=("tp.styles",)))
register(TrainCase(name="long_run_fsdp2", model=stack, data=regression, loss=mse, parallelize=fsdp_per_block,
                   optimizer=adam, steps=STEPS, batch_split="dp", stability=LONG, mesh_shape=(2,),
                   mesh_dim_names=("dp",), tags=NIGHTLY, capabilities=("fsdp",), layer=4, requires=("fsdp2",)))
register(TrainCase(name="long_run_pp_gpipe", model=stack, data=regression, loss=mse, parallelize=pp_two_stages,
                   train_step=gpipe_step, optimizer=sgd_momentum, steps=STEPS, stability=LONG, mesh_shape=(2,),
                   mesh_dim_names=("pp",), tags=NIGHTLY, capabilities=("pp",), layer=4, requires=("pipelining",)))
register(TrainCase(name="long_run_ac", model=stack, data=regression, loss=mse, parallelize=ac_full, optimizer=adam,
                   steps=STEPS, stability=LONG, mesh_shape=(1,), tags=NIGHTLY, capabilities=("ac",), layer=4,
                   requires=("checkpoint",)))
register(TrainCase(name="long_run_swap", model=stack, data=regression, loss=mse, train_step=swap_to_cpu,
                   optimizer=adam, steps=STEPS, stability=LONG, mesh_shape=(1,), tags=NIGHTLY, capabilities=("swap",),
                   layer=4, requires=("checkpoint",)))
register(TrainCase(name="long_run_tp_fsdp_2d", model=stack, data=regression, loss=mse, parallelize=tp_fsdp_2d,
                   optimizer=adam, steps=STEPS, batch_split="dp", stability=LONG, mesh_shape=(2, 2),
                   mesh_dim_names=("dp", "tp"), tags=NIGHTLY, capabilities=("tp", "fsdp"), layer=4,
                   requires=("fsdp2", "tp.styles")))
