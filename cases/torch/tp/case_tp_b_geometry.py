"""The TP test plan, class B (B1–B9): parameter geometry after parallelize_module.

Per the shard-dim table / the plan's geometry check, every case reads each parameter after parallelize_module and
checks that it
is an ``nn.Parameter`` wrapping a DTensor, its ``placements`` and its ``to_local().shape``, and
that the local shard holds exactly the slice of the full (pre-parallelize) weight that the
placement names: for ``Shard(d)`` on a tp mesh of size ``n`` rank ``k`` holds
``full.chunk(n, d)[k]`` (every sharded dim here divides evenly, the shard-dim table), for ``Replicate()``
the whole tensor. The full weights are built identically on every rank (``torch.manual_seed``)
and cloned BEFORE parallelize_module.

B7/B8 check the two ``src_data_rank`` modes (the base-class contract): ``0`` scatters/broadcasts rank 0's
weights (non-source ranks hold zeros, yet end with rank 0's slices), ``None`` slices locally with
no communication (counted with CommDebugMode; a positive control with ``src_data_rank=0`` shows
the counter does see the scatter/broadcast). B9 builds the module under ``torch.device("meta")``:
parallelize_module must not communicate and must not hang (case timeout 30 s) and the meta
DTensors must carry the table's placements and local shapes.

Comparisons are bitwise (``ctx.assert_equal``): sharding only copies values, so any difference
is a wrong shard, not rounding; no tolerances and no gradients are involved.
"""
from meshtest import ScenarioCase, register

L0 = ("cpu_level0", "cpu_level1", "npu_level1")
MESH2 = (2,)
TP = ("tp",)


# ---------------------------------------------------------------- helpers

def _expected_local(ctx, full, placement):
    """The local shard rank ``ctx.rank`` must hold for ``full`` under ``placement``."""
    api = ctx.api
    if isinstance(placement, api.Shard):
        size = full.shape[placement.dim]
        assert size % ctx.world_size == 0, f"test bug: dim {placement.dim} of size {size} not divisible"
        return full.chunk(ctx.world_size, placement.dim)[ctx.rank]
    assert isinstance(placement, api.Replicate), f"test bug: placement {placement}"
    return full


def _check_param(ctx, module, name, full, placement, local_shape, *, check_values=True, what=""):
    """``module.<name>`` is an nn.Parameter DTensor with ``(placement,)``, global shape of ``full``,
    local shape ``local_shape`` and (unless meta) the local values ``full`` sliced by ``placement``."""
    api = ctx.api
    label = f"{what}{name}"
    p = getattr(module, name)
    assert isinstance(p, api.nn.Parameter), f"{label} is {type(p).__name__}, not an nn.Parameter"
    assert isinstance(p, api.DTensor), f"{label} is not a DTensor ({type(p).__name__})"
    assert tuple(p.placements) == (placement,), f"{label} placements {p.placements}, expected ({placement},)"
    assert tuple(p.shape) == tuple(full.shape), f"{label} global shape {tuple(p.shape)}, expected {tuple(full.shape)}"
    local = p.to_local()
    assert tuple(local.shape) == tuple(local_shape), \
        f"{label} local shape {tuple(local.shape)} on rank {ctx.rank}, expected {tuple(local_shape)}"
    if check_values:
        ctx.assert_equal(local.detach(), _expected_local(ctx, full, placement), label=f"{label} local shard")
    ctx.note(f"{label}: {p.placements} local {tuple(local.shape)}")


def _fulls(module):
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def _comm_total(comm):
    return sum(comm.get_comm_counts().values())


# ---------------------------------------------------------------- B1 – B4 (the shard-dim table, the 2-card Colwise
# example)

def _b1_colwise_linear(ctx):
    api = ctx.api
    n = ctx.world_size
    api.torch.manual_seed(1)
    model = api.nn.Sequential()
    model.add_module("proj", api.nn.Linear(32, 64, bias=True))  # the 2-card Colwise example: in=32, out=64
    full = _fulls(model.proj)
    ctx.step("parallelize")
    api.parallelize_module(model, ctx.mesh, {"proj": api.ColwiseParallel()})
    ctx.step("check parameters")
    _check_param(ctx, model.proj, "weight", full["weight"], api.Shard(0), (64 // n, 32))
    _check_param(ctx, model.proj, "bias", full["bias"], api.Shard(0), (64 // n,))


def _b2_rowwise_linear(ctx):
    api = ctx.api
    n = ctx.world_size
    api.torch.manual_seed(2)
    model = api.nn.Sequential()
    model.add_module("proj", api.nn.Linear(32, 24, bias=True))  # the 2-card Colwise example: in=32, out=24
    full = _fulls(model.proj)
    ctx.step("parallelize")
    api.parallelize_module(model, ctx.mesh, {"proj": api.RowwiseParallel()})
    ctx.step("check parameters")
    _check_param(ctx, model.proj, "weight", full["weight"], api.Shard(1), (24, 32 // n))
    _check_param(ctx, model.proj, "bias", full["bias"], api.Replicate(), (24,))


def _b3_colwise_embedding(ctx):
    api = ctx.api
    n = ctx.world_size
    api.torch.manual_seed(3)
    emb = api.nn.Embedding(16, 8)  # vocab 16, embedding_dim 8
    full = _fulls(emb)
    ctx.step("parallelize")
    api.parallelize_module(emb, ctx.mesh, api.ColwiseParallel())
    ctx.step("check parameters")
    assert [n_ for n_, _ in emb.named_parameters()] == ["weight"]
    _check_param(ctx, emb, "weight", full["weight"], api.Shard(1), (16, 8 // n))


def _b4_rowwise_embedding(ctx):
    api = ctx.api
    n = ctx.world_size
    api.torch.manual_seed(4)
    emb = api.nn.Embedding(16, 8)
    full = _fulls(emb)
    ctx.step("parallelize")
    api.parallelize_module(emb, ctx.mesh, api.RowwiseParallel())
    ctx.step("check parameters")
    assert [n_ for n_, _ in emb.named_parameters()] == ["weight"]
    _check_param(ctx, emb, "weight", full["weight"], api.Shard(0), (16 // n, 8))


register(ScenarioCase(
    name="tp_B1_colwise_linear_placements", fn=_b1_colwise_linear,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="B1",
))
register(ScenarioCase(
    name="tp_B2_rowwise_linear_placements", fn=_b2_rowwise_linear,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="B2",
))
register(ScenarioCase(
    name="tp_B3_colwise_embedding_placements", fn=_b3_colwise_embedding,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="B3",
))
register(ScenarioCase(
    name="tp_B4_rowwise_embedding_placements", fn=_b4_rowwise_embedding,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="B4",
))


# ---------------------------------------------------------------- B5, B6

def _b5_sequence_parallel_layernorm(ctx):
    api = ctx.api
    torch = api.torch
    torch.manual_seed(5)
    norm = api.nn.LayerNorm(16)
    with torch.no_grad():  # non-default affine values, identical on every rank
        norm.weight.copy_(torch.randn(16))
        norm.bias.copy_(torch.randn(16))
    full = _fulls(norm)
    ctx.step("parallelize")
    api.parallelize_module(norm, ctx.mesh, api.SequenceParallel())
    ctx.step("check parameters")
    _check_param(ctx, norm, "weight", full["weight"], api.Replicate(), (16,))
    _check_param(ctx, norm, "bias", full["bias"], api.Replicate(), (16,))


def _b6_no_parallel_linear(ctx):
    api = ctx.api
    api.torch.manual_seed(6)
    lin = api.nn.Linear(16, 8)
    full = _fulls(lin)
    ctx.step("parallelize")
    # the styles' constructor parameters: NoParallel(input_layout=Replicate(), desired_input_layout=Replicate(),
    # output_layout=Replicate(), use_local_output=True); defaults used here.
    api.parallelize_module(lin, ctx.mesh, api.NoParallel())
    ctx.step("check parameters")
    _check_param(ctx, lin, "weight", full["weight"], api.Replicate(), (8, 16))
    _check_param(ctx, lin, "bias", full["bias"], api.Replicate(), (8,))


register(ScenarioCase(
    name="tp_B5_sequence_parallel_layernorm_replicate", fn=_b5_sequence_parallel_layernorm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="B5",
))
register(ScenarioCase(
    name="tp_B6_no_parallel_linear_replicate", fn=_b6_no_parallel_linear,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles", "tp.no_parallel"), spec_id="B6",
))


# ---------------------------------------------------------------- B7 – B9 (src_data_rank, meta)

def _mixed_model(ctx, seed):
    """up: Linear(16, 32) Colwise, down: Linear(32, 16) Rowwise, emb: Embedding(16, 8) Rowwise:
    covers a scatter along dim 0, one along dim 1, a broadcast (Rowwise bias)."""
    api = ctx.api
    nn = api.nn
    api.torch.manual_seed(seed)
    model = nn.Module()
    model.up = nn.Linear(16, 32)
    model.down = nn.Linear(32, 16)
    model.emb = nn.Embedding(16, 8)
    return model


def _mixed_plan(api):
    return {"up": api.ColwiseParallel(), "down": api.RowwiseParallel(), "emb": api.RowwiseParallel()}


def _mixed_expectations(api, n):
    """(module, param, placement, local shape) per the shard-dim table for :func:`_mixed_model`."""
    return [
        ("up", "weight", api.Shard(0), (32 // n, 16)),
        ("up", "bias", api.Shard(0), (32 // n,)),
        ("down", "weight", api.Shard(1), (16, 32 // n)),
        ("down", "bias", api.Replicate(), (16,)),
        ("emb", "weight", api.Shard(0), (16 // n, 8)),
    ]


def _check_mixed(ctx, model, fulls, *, check_values=True, what=""):
    for mod, pname, placement, shape in _mixed_expectations(ctx.api, ctx.world_size):
        _check_param(ctx, getattr(model, mod), pname, fulls[f"{mod}.{pname}"], placement, shape,
                     check_values=check_values, what=f"{what}{mod}.")


def _b7_src_rank0_scatters(ctx):
    api = ctx.api
    torch = api.torch
    model = _mixed_model(ctx, seed=7)
    fulls = _fulls(model)  # rank 0's (= every rank's, same seed) true weights
    if ctx.rank != 0:
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
    ctx.step("parallelize src_data_rank=0")
    api.parallelize_module(model, ctx.mesh, _mixed_plan(api), src_data_rank=0)
    ctx.step("local shards are rank 0's slices")
    _check_mixed(ctx, model, fulls)
    if ctx.rank != 0:
        nonzero = all(bool(getattr(getattr(model, m), p).to_local().abs().sum() > 0)
                      for m, p, _, _ in _mixed_expectations(api, ctx.world_size))
        assert nonzero, "a shard on a non-source rank is still all zeros"


register(ScenarioCase(
    name="tp_B7_src_data_rank0_rank0_weights_scattered", fn=_b7_src_rank0_scatters,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="B7",
))


def _b8_src_none_local_slices(ctx):
    api = ctx.api
    ctx.step("control: src_data_rank=0 communicates")
    control = _mixed_model(ctx, seed=8)
    with api.CommDebugMode() as comm:
        api.parallelize_module(control, ctx.mesh, _mixed_plan(api), src_data_rank=0)
    control_count = _comm_total(comm)
    ctx.note(f"src_data_rank=0 collectives: {dict((str(k), v) for k, v in comm.get_comm_counts().items())}")
    # 4 scatters (up.weight, up.bias, down.weight, emb.weight) and 1 broadcast (down.bias)
    assert control_count >= 5, f"CommDebugMode saw only {control_count} collectives for src_data_rank=0"

    ctx.step("parallelize src_data_rank=None, identical weights")
    model = _mixed_model(ctx, seed=8)
    fulls = _fulls(model)
    with api.CommDebugMode() as comm:
        api.parallelize_module(model, ctx.mesh, _mixed_plan(api), src_data_rank=None)
    counts = {str(k): v for k, v in comm.get_comm_counts().items() if v}
    assert not counts, f"src_data_rank=None communicated during parallelize: {counts}"
    ctx.step("same local shards as src_data_rank=0")
    _check_mixed(ctx, model, fulls)
    for mod, pname, _, _ in _mixed_expectations(api, ctx.world_size):
        ctx.assert_equal(getattr(getattr(model, mod), pname).to_local().detach(),
                         getattr(getattr(control, mod), pname).to_local().detach(),
                         label=f"{mod}.{pname} None vs 0")

    ctx.step("src_data_rank=None slices each rank's OWN weights")
    own = _mixed_model(ctx, seed=800 + ctx.rank)  # deliberately different per rank
    own_fulls = _fulls(own)
    with api.CommDebugMode() as comm:
        api.parallelize_module(own, ctx.mesh, _mixed_plan(api), src_data_rank=None)
    assert _comm_total(comm) == 0, "src_data_rank=None communicated with rank-specific weights"
    _check_mixed(ctx, own, own_fulls, what="rank-local ")


register(ScenarioCase(
    name="tp_B8_src_data_rank_none_local_no_comm", fn=_b8_src_none_local_slices,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles", "comm_debug_mode"), spec_id="B8",
))


def _b9_meta_no_comm(ctx):
    api = ctx.api
    torch = api.torch
    for src in (0, None):
        ctx.step(f"build on meta (src_data_rank={src})")
        with torch.device("meta"):
            model = _mixed_model(ctx, seed=9)
        assert all(p.is_meta for p in model.parameters()), "module was not built on meta"
        fulls = _fulls(model)  # meta clones: shapes only
        ctx.step(f"parallelize meta module src_data_rank={src}")
        with api.CommDebugMode() as comm:
            api.parallelize_module(model, ctx.mesh, _mixed_plan(api), src_data_rank=src)
        counts = {str(k): v for k, v in comm.get_comm_counts().items() if v}
        assert not counts, f"meta parameters communicated (src_data_rank={src}): {counts}"
        ctx.step(f"meta placements and local shapes (src_data_rank={src})")
        _check_mixed(ctx, model, fulls, check_values=False, what=f"meta src={src} ")
        for mod, pname, _, _ in _mixed_expectations(api, ctx.world_size):
            local = getattr(getattr(model, mod), pname).to_local()
            assert local.is_meta, f"{mod}.{pname} local shard left the meta device ({local.device})"


register(ScenarioCase(
    name="tp_B9_meta_params_no_comm_no_hang", fn=_b9_meta_no_comm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles", "comm_debug_mode"), spec_id="B9",
    timeout_s=30,
))
