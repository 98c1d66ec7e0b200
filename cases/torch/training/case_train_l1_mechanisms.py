"""Layer 1 of the training quality net: the PyTorch mechanisms the parallel capabilities rely on, guarded
one by one. Not "does training look right" but "do the hooks, callbacks and lifecycles happen
where the capabilities assume": a hook that stops firing, fires through ``forward()``, or fires
at another time is caught here, by name, before any numeric test could blame a capability.
"""
from cases.torch.training.models import mlp, mse, stack
from meshtest import ScenarioCase, register

L0 = ("cpu_level0", "cpu_level1")
ONE = (1,)
TWO = (2,)


def hooks_fire_through_call_only(ctx):
    """DTensor / Shard: layout injection hangs on forward (pre-)hooks, which run through
    ``Module.__call__`` and are bypassed by a direct ``forward()``."""
    api = ctx.api
    model, seen = mlp(api), []
    model.w1.register_forward_pre_hook(lambda m, args, kwargs: seen.append("pre"), with_kwargs=True)
    model.w1.register_forward_hook(lambda m, args, out: seen.append("post"))
    x = api.torch.randn(2, 16)
    ctx.step("__call__")
    model(x)
    assert seen == ["pre", "post"], f"hooks through __call__: {seen}"
    ctx.step("forward()")
    model.w1.forward(x)
    assert seen == ["pre", "post"], f"a direct forward() fired hooks: {seen}"


def tp_grads_accumulate_across_backwards(ctx):
    """TP: ``.grad`` of a ColwiseParallel weight accumulates across two backwards (the boundary
    gradient accumulation relies on), as a sharded DTensor."""
    api = ctx.api
    model = api.parallelize_module(mlp(api), ctx.mesh, {"w1": api.ColwiseParallel(), "w2": api.RowwiseParallel()})
    x = api.torch.randn(4, 16)
    ctx.step("first backward")
    model(x).sum().backward()
    once = model.w1.weight.grad.full_tensor().clone()
    assert model.w1.weight.grad.placements == (api.Shard(0),), model.w1.weight.grad.placements
    ctx.step("second backward")
    model(x).sum().backward()
    ctx.assert_close(model.w1.weight.grad.full_tensor(), 2 * once, label="grad after two backwards")


def _fsdp2_per_block(ctx):
    """A 2-block :func:`stack` with ``fully_shard`` on each block and on the root, over ``ctx.mesh``."""
    model = stack(ctx.api, layers=2)
    for block in model.blocks.values():
        ctx.api.fully_shard(block, mesh=ctx.mesh)
    return ctx.api.fully_shard(model, mesh=ctx.mesh)


def fsdp2_unshards_for_forward_and_reshards_after(ctx):
    """FSDP2: a forward pre-hook registered after ``fully_shard`` runs after FSDP2's own (which
    unshards): it sees the block's parameters as unsharded full tensors; after the forward they
    are sharded DTensors again (reshard after forward)."""
    api = ctx.api
    model = _fsdp2_per_block(ctx)
    inside = []
    model.blocks["0"].register_forward_pre_hook(
        lambda m, args: inside.append((type(m.mlp.w1.weight).__name__, tuple(m.mlp.w1.weight.shape))))
    ctx.step("forward")
    model(api.torch.randn(4, 16))
    assert inside == [("Parameter", (32, 16))] or inside == [("Tensor", (32, 16))], f"inside forward: {inside}"
    w = model.blocks["0"].mlp.w1.weight
    assert isinstance(w, api.DTensor) and tuple(w.to_local().shape) == (16, 16), (type(w), w.shape)


def fsdp2_grads_reduced_when_backward_returns(ctx):
    """FSDP2: its post-backward reduce-scatter runs from an autograd final callback; by the time
    ``backward()`` returns every gradient is a sharded DTensor, and a callback a user queues from
    an output-tensor hook runs after them (``queue_callback`` ordering)."""
    api = ctx.api
    model = _fsdp2_per_block(ctx)
    order = []
    out = model(api.torch.randn(4, 16))
    out.register_hook(lambda g: api.torch.autograd.Variable._execution_engine.queue_callback(
        lambda: order.append("user callback")) or g)
    ctx.step("backward")
    out.sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(isinstance(g, api.DTensor) and g.placements == (api.Shard(0),) for g in grads), \
        [(type(g).__name__, getattr(g, "placements", None)) for g in grads]
    assert order == ["user callback"], order


def load_state_dict_post_hook_leaves_a_trainable_model(ctx):
    """DCP / FSDP: ``register_load_state_dict_post_hook`` runs once per load, and the loaded
    model still trains (the optimizer moves its parameters)."""
    api = ctx.api
    model, calls = mlp(api), []
    model.register_load_state_dict_post_hook(lambda m, keys: calls.append(sorted(keys.missing_keys)))
    ctx.step("load")
    model.load_state_dict(mlp(api).state_dict())
    assert calls == [[]], calls
    opt = api.torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.w1.weight.detach().clone()
    ctx.step("train after load")
    mse(model(api.torch.randn(4, 16)), api.torch.zeros(4, 16)).backward()
    opt.step()
    assert not api.torch.equal(before, model.w1.weight.detach()), "the loaded model did not train"


def checkpoint_recomputes_in_backward(ctx):
    """AC: under ``torch.utils.checkpoint`` (non-reentrant) the wrapped forward runs again during
    backward (the recompute), and not otherwise."""
    api = ctx.api
    model, runs = mlp(api), []
    model.w1.register_forward_hook(lambda m, args, out: runs.append(api.torch.is_grad_enabled()))
    x = api.torch.randn(2, 16, requires_grad=True)
    ctx.step("checkpointed")
    api.checkpoint.checkpoint(model, x, use_reentrant=False).sum().backward()
    assert len(runs) == 2, f"forward ran {len(runs)} time(s) with checkpoint; expected forward + recompute"
    runs.clear()
    ctx.step("plain")
    model(x).sum().backward()
    assert len(runs) == 1, f"forward ran {len(runs)} time(s) without checkpoint"


def saved_tensor_hooks_pack_forward_unpack_backward(ctx):
    """Swap: ``saved_tensors_hooks`` packs every saved tensor during forward and unpacks each one
    during backward, only then (the window swap/offload moves tensors in)."""
    api = ctx.api
    model, events, phase = mlp(api), [], ["forward"]

    def pack(t):
        events.append(("pack", phase[0]))
        return t

    def unpack(t):
        events.append(("unpack", phase[0]))
        return t

    ctx.step("forward")
    with api.torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = model(api.torch.randn(2, 16)).sum()
    phase[0] = "backward"
    ctx.step("backward")
    loss.backward()
    packs = [p for kind, p in events if kind == "pack"]
    unpacks = [p for kind, p in events if kind == "unpack"]
    assert packs and set(packs) == {"forward"}, events
    assert set(unpacks) == {"backward"} and len(unpacks) == len(packs), events


def clip_skips_frozen_and_gradless_params(ctx):
    """Clip grad: ``clip_grad_norm_`` before ``optimizer.step`` takes the norm over the
    gradients that exist: a frozen parameter and an unused one (no ``.grad``) are skipped and
    left unchanged by the step."""
    api = ctx.api
    torch = api.torch
    model = mlp(api)
    model.w2.bias.requires_grad_(False)
    unused = torch.nn.Parameter(torch.ones(3))
    params = list(model.parameters()) + [unused]
    mse(model(torch.randn(4, 16)), torch.zeros(4, 16)).backward()
    grads = [p.grad for p in params if p.grad is not None]
    expected = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    frozen, idle = model.w2.bias.detach().clone(), unused.detach().clone()
    ctx.step("clip")
    total = torch.nn.utils.clip_grad_norm_(params, max_norm=0.1)
    ctx.assert_close(total, expected, label="total norm")
    ctx.step("step")
    torch.optim.SGD(params, lr=0.5).step()
    assert torch.equal(frozen, model.w2.bias) and torch.equal(idle, unused), "a skipped parameter moved"


def meta_params_materialize_on_to_empty(ctx):
    """Meta init: a model built under ``torch.device("meta")`` has meta parameters until
    ``to_empty``; hooks registered before materialization still fire after it."""
    api = ctx.api
    torch = api.torch
    with torch.device("meta"):
        model = mlp(api)
    fired = []
    model.w1.register_forward_hook(lambda m, args, out: fired.append(True))
    assert all(p.is_meta for p in model.parameters()), "built under meta but has real storage"
    ctx.step("materialize")
    model.to_empty(device="cpu")
    for m in (model.w1, model.w2):
        m.reset_parameters()
    assert not any(p.is_meta for p in model.parameters())
    model(torch.randn(2, 16))
    assert fired == [True], "a hook registered on the meta model did not fire after materialization"


register(ScenarioCase(name="l1_hooks_fire_through_call_only", fn=hooks_fire_through_call_only, mesh_shape=ONE,
                      tags=L0, capabilities=("dtensor", "shard"), layer=1))
register(ScenarioCase(name="l1_tp_grads_accumulate_across_backwards", fn=tp_grads_accumulate_across_backwards,
                      mesh_shape=TWO, mesh_dim_names=("tp",), tags=L0, capabilities=("tp",), layer=1,
                      requires=("tp.styles",)))
register(ScenarioCase(name="l1_fsdp2_unshards_for_forward", fn=fsdp2_unshards_for_forward_and_reshards_after,
                      mesh_shape=TWO, mesh_dim_names=("dp",), tags=L0, capabilities=("fsdp",), layer=1,
                      requires=("fsdp2",)))
register(ScenarioCase(name="l1_fsdp2_grads_reduced_when_backward_returns", fn=fsdp2_grads_reduced_when_backward_returns,
                      mesh_shape=TWO, mesh_dim_names=("dp",), tags=L0, capabilities=("fsdp",), layer=1,
                      requires=("fsdp2",)))
register(ScenarioCase(name="l1_load_state_dict_post_hook_trainable",
                      fn=load_state_dict_post_hook_leaves_a_trainable_model, mesh_shape=ONE, tags=L0,
                      capabilities=("dcp", "fsdp"), layer=1))
register(ScenarioCase(name="l1_checkpoint_recomputes_in_backward", fn=checkpoint_recomputes_in_backward,
                      mesh_shape=ONE, tags=L0, capabilities=("ac",), layer=1, requires=("checkpoint",)))
register(ScenarioCase(name="l1_saved_tensor_hooks_order", fn=saved_tensor_hooks_pack_forward_unpack_backward,
                      mesh_shape=ONE, tags=L0, capabilities=("swap",), layer=1, requires=("checkpoint",)))
register(ScenarioCase(name="l1_clip_skips_frozen_and_gradless", fn=clip_skips_frozen_and_gradless_params,
                      mesh_shape=ONE, tags=L0, capabilities=("clip_grad",), layer=1))
register(ScenarioCase(name="l1_meta_params_materialize_on_to_empty", fn=meta_params_materialize_on_to_empty,
                      mesh_shape=ONE, tags=L0, capabilities=("init",), layer=1, requires=("meta_init",)))


def tp_injected_layouts_are_stable(ctx):
    """TP: the input a ColwiseParallel linear receives (seen by a pre-hook registered after
    ``parallelize_module``) is a Replicate DTensor and its output a local shard of the last dim,
    identically on every call."""
    api = ctx.api
    model = api.parallelize_module(mlp(api), ctx.mesh, {"w1": api.ColwiseParallel(), "w2": api.RowwiseParallel()})
    seen = []
    model.w1.register_forward_pre_hook(lambda m, args: seen.append(("in", type(args[0]).__name__,
                                                                       getattr(args[0], "placements", None))))
    model.w1.register_forward_hook(lambda m, args, out: seen.append(("out", type(out).__name__, tuple(out.shape))))
    for call in range(2):
        ctx.step(f"call {call}")
        model(api.torch.randn(4, 16))
    first = [("in", "DTensor", (api.Replicate(),)), ("out", "Tensor", (4, 32 // ctx.world_size))]
    assert seen == first * 2, seen


def backward_hooks_run_in_reverse_module_order(ctx):
    """Swap / prefetch: full backward pre-hooks and hooks fire once per block in backward, the
    last block first, each block's pre-hook before its hook (the boundaries swap prefetches and
    frees at)."""
    api = ctx.api
    model, events = stack(api, layers=3), []
    for name, block in model.blocks.items():
        block.register_full_backward_pre_hook(lambda m, g, name=name: events.append(f"pre {name}"))
        block.register_full_backward_hook(lambda m, gi, go, name=name: events.append(f"post {name}"))
    x = api.torch.randn(2, 16, requires_grad=True)
    ctx.step("backward")
    model(x).sum().backward()
    assert events == ["pre 2", "post 2", "pre 1", "post 1", "pre 0", "post 0"], events


def loaded_state_stays_bound_to_the_optimizer(ctx):
    """DCP / FSDP: ``load_state_dict`` into an FSDP2 model copies into the parameters the
    optimizer holds (same objects, still sharded DTensors), so the next step trains them."""
    api = ctx.api
    model = mlp(api)
    api.fully_shard(model, mesh=ctx.mesh)
    opt = api.torch.optim.SGD(model.parameters(), lr=0.1)
    before = [id(p) for p in model.parameters()]
    donor = mlp(api)
    api.fully_shard(donor, mesh=ctx.mesh)
    ctx.step("load")
    model.load_state_dict(donor.state_dict())
    assert [id(p) for p in model.parameters()] == before, "load_state_dict replaced the parameter objects"
    assert [id(p) for p in opt.param_groups[0]["params"]] == before
    assert all(isinstance(p, api.DTensor) for p in model.parameters())
    ctx.step("step")
    mse(model(api.torch.randn(4, 16)), api.torch.zeros(4, 16)).backward()
    w = model.w1.weight.full_tensor().clone()
    opt.step()
    assert not api.torch.equal(w, model.w1.weight.full_tensor()), "the optimizer did not move the loaded weights"


def load_after_meta_materialization(ctx):
    """Meta init: ``load_state_dict`` into a model materialized from meta (``to_empty``) gives
    real, trainable parameters equal to the checkpoint's."""
    api = ctx.api
    torch = api.torch
    source = mlp(api)
    with torch.device("meta"):
        model = mlp(api)
    model.to_empty(device="cpu")
    ctx.step("load")
    model.load_state_dict(source.state_dict())
    for (name, a), (_, b) in zip(model.named_parameters(), source.named_parameters()):
        ctx.assert_equal(a.detach(), b.detach(), label=name)
        assert a.requires_grad and not a.is_meta, name


register(ScenarioCase(name="l1_tp_injected_layouts_are_stable", fn=tp_injected_layouts_are_stable, mesh_shape=TWO,
                      mesh_dim_names=("tp",), tags=L0, capabilities=("tp", "shard"), layer=1, requires=("tp.styles",)))
register(ScenarioCase(name="l1_backward_hooks_reverse_module_order", fn=backward_hooks_run_in_reverse_module_order,
                      mesh_shape=ONE, tags=L0, capabilities=("swap",), layer=1))
register(ScenarioCase(name="l1_loaded_state_stays_bound_to_the_optimizer", fn=loaded_state_stays_bound_to_the_optimizer,
                      mesh_shape=TWO, mesh_dim_names=("dp",), tags=L0, capabilities=("dcp", "fsdp"), layer=1,
                      requires=("fsdp2",)))
register(ScenarioCase(name="l1_load_after_meta_materialization", fn=load_after_meta_materialization, mesh_shape=ONE,
                      tags=L0, capabilities=("init",), layer=1, requires=("meta_init",)))
