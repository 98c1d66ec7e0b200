"""Layer 2 of the training quality net: communication, DTensor, declarative layouts, expert parallel,
context parallel, symmetric memory, distributed checkpoint and resume — each as one capability
trained (or saved and restored) against its single-device baseline.

- comms: data parallel by hand — the batch split over ``dp``, every gradient all-reduced (summed
  then divided by the group size) from ``register_post_accumulate_grad_hook``;
- dtensor: ``distribute_module`` with replicated parameters and the batch distributed
  ``Shard(0)`` (DTensor data parallel: the gradients come back ``Partial`` and gather to the
  baseline's);
- shard: a ``PrepareModuleInputOutput`` plan at the root injecting the input and output layouts
  around a Colwise/Rowwise pair;
- moe: expert parallel on 2 ranks, one expert each: rows dispatched to their expert's rank and
  back with an autograd ``all_to_all_single``; the gate and head gradients all-reduced, each
  rank's loss scaled by 1/2 so that expert gradients (summed over every rank's rows) match;
- cp: attention trained under ``context_parallel`` (sequence sharded over ``cp``, ring
  attention, gradients summed over ``cp``): causal, non-causal, and K/V rotated by all-to-all
  instead of all-gather; symm_mem: ``w1`` through symmetric memory's fused
  all-gather + matmul. Both need device kernels (CUDA): on CPU/gloo they report unsupported with
  the reason, and are not run — so not verified on this platform;
- dcp: model, optimizer and a scalar through ``torch.distributed.checkpoint`` save/load with
  FSDP2 — every tensor and the scalar come back exactly;
- resume: the same checkpoint loaded into a fresh FSDP2 model and optimizer trains on exactly
  like the run that never stopped.
"""
from cases.torch.training.models import (
    adam,
    attention,
    mlp,
    moe,
    mse,
    noncausal_attention,
    regression,
    sequences,
    stack,
)
from cases.torch.training.plans import (
    context_parallel_step,
    ddp_by_hand,
    dtensor_data_parallel,
    expert_parallel,
    layouts_at_the_root,
    scaled_loss_step,
    sharded_target_step,
    symmetric_memory_all_gather_matmul,
)
from meshtest import ScenarioCase, TrainCase, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
TWO = (2,)


def _fsdp_model_and_optimizer(api, mesh, seed):
    api.torch.manual_seed(seed)
    model = stack(api, layers=2)
    for block in model.blocks.values():
        api.fully_shard(block, mesh=mesh)
    api.fully_shard(model, mesh=mesh)
    return model, api.torch.optim.Adam(model.parameters(), lr=1e-2)


def _train(api, model, opt, step):
    api.torch.manual_seed(500 + step)
    mse(model(api.torch.randn(8, 16)), api.torch.zeros(8, 16)).backward()
    opt.step()
    opt.zero_grad()


class _CheckpointDir:
    """A directory every rank agrees on: rank 0 makes it and broadcasts its path, and removes it
    once every rank is done with it."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self) -> str:
        import tempfile

        box = [tempfile.mkdtemp(prefix="meshtest-dcp-") if self.ctx.rank == 0 else None]
        self.ctx.api.dist.broadcast_object_list(box, src=0)
        self.path = box[0]
        return self.path

    def __exit__(self, *exc):
        import shutil

        self.ctx.api.dist.barrier()
        if self.ctx.rank == 0:
            shutil.rmtree(self.path, ignore_errors=True)


def _full_state(api, model, opt):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    full = lambda t: t.full_tensor() if isinstance(t, api.DTensor) else t  # noqa: E731
    flat = {f"model.{k}": full(v) for k, v in msd.items()}
    for fqn, state in osd["state"].items():
        flat.update({f"optim.{fqn}.{k}": full(v) for k, v in state.items() if isinstance(v, api.torch.Tensor)})
    return flat


def dcp_round_trip(ctx):
    api = ctx.api
    dcp = api.dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, opt = _fsdp_model_and_optimizer(api, ctx.mesh, 11)
    _train(api, model, opt, 0)
    with _CheckpointDir(ctx) as path:
        msd, osd = get_state_dict(model, opt)
        ctx.step("save")
        dcp.save({"model": msd, "optim": osd, "extra": {"step": api.torch.tensor(1)}}, checkpoint_id=path)
        ctx.step("load")
        fresh, fresh_opt = _fsdp_model_and_optimizer(api, ctx.mesh, 99)
        _train(api, fresh, fresh_opt, 7)  # a different history, so the load must overwrite everything
        fmsd, fosd = get_state_dict(fresh, fresh_opt)
        state = {"model": fmsd, "optim": fosd, "extra": {"step": api.torch.tensor(0)}}
        dcp.load(state, checkpoint_id=path)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    assert int(state["extra"]["step"]) == 1, state["extra"]
    want, got = _full_state(api, model, opt), _full_state(api, fresh, fresh_opt)
    assert sorted(want) == sorted(got), (sorted(want), sorted(got))
    for key in sorted(want):
        ctx.assert_equal(got[key], want[key], label=key)


def resume_equals_continuous(ctx):
    api = ctx.api
    dcp = api.dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, opt = _fsdp_model_and_optimizer(api, ctx.mesh, 12)
    for step in range(2):
        _train(api, model, opt, step)
    with _CheckpointDir(ctx) as path:
        msd, osd = get_state_dict(model, opt)
        ctx.step("save")
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
        ctx.step("continuous")
        for step in range(2, 4):
            _train(api, model, opt, step)
        ctx.step("resume")
        again, again_opt = _fsdp_model_and_optimizer(api, ctx.mesh, 12)
        amsd, aosd = get_state_dict(again, again_opt)
        state = {"model": amsd, "optim": aosd}
        dcp.load(state, checkpoint_id=path)
    set_state_dict(again, again_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for step in range(2, 4):
        _train(api, again, again_opt, step)
    want, got = _full_state(api, model, opt), _full_state(api, again, again_opt)
    for key in sorted(want):
        ctx.assert_equal(got[key], want[key], label=f"after resume, {key}")


def context_parallel_alltoall_step(model, inputs, target, loss_fn, ctx):
    """:func:`context_parallel_step` with the K/V shards rotated by all-to-all instead of the
    default all-gather (the other ring layout of ``set_rotate_method``)."""
    from torch.distributed.tensor.experimental import _attention

    before = _attention._cp_options.rotate_method
    _attention.set_rotate_method("alltoall")
    try:
        return context_parallel_step(model, inputs, target, loss_fn, ctx)
    finally:
        _attention._cp_options.rotate_method = before


register(TrainCase(name="train_comms_ddp_by_hand", model=mlp, data=regression, loss=mse, parallelize=ddp_by_hand,
                   optimizer=adam, steps=2, batch_split="dp", mesh_shape=TWO, mesh_dim_names=("dp",), tags=L0,
                   capabilities=("comms",), layer=2))
register(TrainCase(name="train_dtensor_data_parallel", model=mlp, data=regression, loss=mse,
                   parallelize=dtensor_data_parallel, train_step=sharded_target_step, optimizer=adam, steps=2,
                   mesh_shape=TWO, mesh_dim_names=("dp",), tags=L0, capabilities=("dtensor",), layer=2))
register(TrainCase(name="train_shard_layouts_at_the_root", model=mlp, data=regression, loss=mse,
                   parallelize=layouts_at_the_root, optimizer=adam, steps=2, mesh_shape=TWO, mesh_dim_names=("tp",),
                   tags=L1, capabilities=("shard", "tp"), layer=2, requires=("tp.styles",)))
register(TrainCase(name="train_moe_expert_parallel", model=moe, data=regression, loss=mse, parallelize=expert_parallel,
                   train_step=scaled_loss_step, optimizer=adam, steps=2, batch_split="ep", mesh_shape=TWO,
                   mesh_dim_names=("ep",), tags=L0, capabilities=("moe",), layer=2))
register(TrainCase(name="train_cp_context_parallel_attention", model=attention, data=sequences, loss=mse,
                   train_step=context_parallel_step, steps=2, mesh_shape=TWO, mesh_dim_names=("cp",), tags=L1,
                   capabilities=("cp",), layer=2, requires=("context_parallel",)))
register(TrainCase(name="train_cp_noncausal_attention", model=noncausal_attention, data=sequences, loss=mse,
                   train_step=context_parallel_step, steps=2, mesh_shape=TWO, mesh_dim_names=("cp",), tags=L1,
                   capabilities=("cp",), layer=2, requires=("context_parallel",)))
register(TrainCase(name="train_cp_alltoall_rotation", model=attention, data=sequences, loss=mse,
                   train_step=context_parallel_alltoall_step, steps=2, mesh_shape=TWO, mesh_dim_names=("cp",),
                   tags=L1, capabilities=("cp",), layer=2, requires=("context_parallel",)))
register(TrainCase(name="train_symm_mem_fused_all_gather_matmul", model=mlp, data=regression, loss=mse,
                   parallelize=symmetric_memory_all_gather_matmul, steps=2, mesh_shape=TWO, tags=L1,
                   capabilities=("symm_mem",), layer=2, requires=("symmetric_memory",)))
register(ScenarioCase(name="l2_dcp_save_load_round_trip", fn=dcp_round_trip, mesh_shape=TWO, mesh_dim_names=("dp",),
                      tags=L0, capabilities=("dcp", "fsdp"), layer=2, requires=("dcp", "fsdp2")))
register(ScenarioCase(name="l2_resume_equals_continuous", fn=resume_equals_continuous, mesh_shape=TWO,
                      mesh_dim_names=("dp",), tags=L0, capabilities=("resume", "dcp"), layer=2,
                      requires=("dcp", "fsdp2")))
