"""Layer 4 of the training quality net, long runs: each capability (and TP+FSDP) trains a small model for 300
steps — plain, TP, FSDP2 (also with bfloat16 mixed precision, with clip-grad, and materialized
from meta), PP, AC, swap, hand-written DDP, DTensor data parallel, a layout plan at the root,
expert parallel; context parallel and symmetric memory, which report unsupported on CPU/gloo like
their layer-2 cases (DTensor random ops have no long run: no CPU RNG tracker, and nothing else in
the net draws from it) — with no NaN/Inf in any loss, gradient or parameter, a peak resident set that stops growing
after warm-up (at most 8 MiB more over the last 280 steps, per rank process: a tensor kept per step
by a leaking hook or a growing autograd graph shows), and no hang (the case deadline). Each
rank's curve — loss, peak RSS and seconds per step — is drawn in the HTML report and read by
``tools/perf_guard.py`` (throughput and peak RSS per capability against a stored baseline).

Gate ``cpu_nightly``: no level0/level1 selection runs them (``./pants --tag=cpu_nightly test
cases::``).
"""
from cases.torch.training.models import (
    adam,
    attention,
    init_stack,
    mlp,
    moe,
    mse,
    regression,
    sequences,
    sgd_momentum,
    stack,
    stack_stage,
)
from cases.torch.training.plans import (
    ac_full,
    context_parallel_step,
    ddp_by_hand,
    dtensor_data_parallel,
    expert_parallel,
    fsdp_bf16,
    fsdp_per_block,
    layouts_at_the_root,
    meta_init_fsdp,
    scaled_loss_step,
    sharded_target_step,
    swap_to_cpu,
    symmetric_memory_all_gather_matmul,
    tp_blocks,
    tp_fsdp_2d,
)
from meshtest import Pipeline, Stability, TrainCase, register

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
register(TrainCase(name="long_run_pp_gpipe", model=stack, data=regression, loss=mse,
                   pipeline=Pipeline(stack_stage, "GPipe"), optimizer=sgd_momentum, steps=STEPS, stability=LONG,
                   mesh_shape=(2,), mesh_dim_names=("pp",), tags=NIGHTLY, capabilities=("pp",), layer=4,
                   requires=("pipelining",)))
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
register(TrainCase(name="long_run_fsdp2_bf16", model=stack, data=regression, loss=mse, parallelize=fsdp_bf16,
                   optimizer=sgd_momentum, steps=STEPS, batch_split="dp", stability=LONG, mesh_shape=(2,),
                   mesh_dim_names=("dp",), tags=NIGHTLY, capabilities=("fsdp", "mixed_precision"), layer=4,
                   requires=("fsdp2.mixed_precision",)))
register(TrainCase(name="long_run_fsdp2_clip_grad", model=stack, data=regression, loss=mse, parallelize=fsdp_per_block,
                   optimizer=adam, clip_grad_norm=0.5, steps=STEPS, batch_split="dp", stability=LONG, mesh_shape=(2,),
                   mesh_dim_names=("dp",), tags=NIGHTLY, capabilities=("fsdp", "clip_grad"), layer=4,
                   requires=("fsdp2",)))
register(TrainCase(name="long_run_fsdp2_meta_init", model=init_stack, data=regression, loss=mse,
                   parallelize=meta_init_fsdp, optimizer=adam, steps=STEPS, batch_split="dp", stability=LONG,
                   mesh_shape=(2,), mesh_dim_names=("dp",), tags=NIGHTLY, capabilities=("fsdp", "init"), layer=4,
                   requires=("fsdp2", "meta_init")))
register(TrainCase(name="long_run_ddp_by_hand", model=mlp, data=regression, loss=mse, parallelize=ddp_by_hand,
                   optimizer=adam, steps=STEPS, batch_split="dp", stability=LONG, mesh_shape=(2,),
                   mesh_dim_names=("dp",), tags=NIGHTLY, capabilities=("comms",), layer=4))
register(TrainCase(name="long_run_dtensor_data_parallel", model=mlp, data=regression, loss=mse,
                   parallelize=dtensor_data_parallel, train_step=sharded_target_step, optimizer=adam, steps=STEPS,
                   stability=LONG, mesh_shape=(2,), mesh_dim_names=("dp",), tags=NIGHTLY, capabilities=("dtensor",),
                   layer=4))
register(TrainCase(name="long_run_layouts_at_the_root", model=mlp, data=regression, loss=mse,
                   parallelize=layouts_at_the_root, optimizer=adam, steps=STEPS, stability=LONG, mesh_shape=(2,),
                   mesh_dim_names=("tp",), tags=NIGHTLY, capabilities=("shard",), layer=4, requires=("tp.styles",)))
register(TrainCase(name="long_run_moe_expert_parallel", model=moe, data=regression, loss=mse,
                   parallelize=expert_parallel, train_step=scaled_loss_step, optimizer=adam, steps=STEPS,
                   batch_split="ep", stability=LONG, mesh_shape=(2,), mesh_dim_names=("ep",), tags=NIGHTLY,
                   capabilities=("moe",), layer=4))
register(TrainCase(name="long_run_cp_attention", model=attention, data=sequences, loss=mse,
                   train_step=context_parallel_step, optimizer=adam, steps=STEPS, stability=LONG, mesh_shape=(2,),
                   mesh_dim_names=("cp",), tags=NIGHTLY, capabilities=("cp",), layer=4,
                   requires=("context_parallel",)))
register(TrainCase(name="long_run_symm_mem_all_gather_matmul", model=mlp, data=regression, loss=mse,
                   parallelize=symmetric_memory_all_gather_matmul, optimizer=adam, steps=STEPS, stability=LONG,
                   mesh_shape=(2,), tags=NIGHTLY, capabilities=("symm_mem",), layer=4,
                   requires=("symmetric_memory",)))
