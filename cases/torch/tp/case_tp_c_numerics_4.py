"""Seed 003 §8.2 class C numerics on 4 ranks (mesh (4,) ("tp",)): C6 SequenceParallel LayerNorm
forward+backward, C10 PrepareModuleInput -> Colwise Linear, C12 PrepareModuleInputOutput MLP block
(the 4-card items of §8.2 E). The 2-rank C cases are in case_tp_c_numerics.py.

Every case builds the full module with ``torch.manual_seed`` (identical full weights and inputs on
every rank), deep-copies it as the single-device reference BEFORE ``parallelize_module``, and
compares the forward output and every parameter gradient and input gradient, gathered by layout
(a DTensor gradient with ``.full_tensor()``, which all-reduces a ``Partial`` gradient; a local
tensor of known layout ``L`` with ``DTensor.from_local(t, mesh, [L]).full_tensor()``).

Tolerance: fp32 ``rtol=1.5e-4, atol=1e-5`` (seed §9.4), never widened.

Expected gradients: in all three cases the module output is sharded (Shard(1) sequence chunks or
Shard(-1) feature columns), and rank r back-propagates ``L_r = sum(y_r * G_r)`` over its own slice
``G_r`` of a cotangent ``G`` built identically on every rank. The slices are disjoint, so the
logical loss the ranks optimise together is ``L = sum_r L_r = sum(y * G) = L_ref``, the
single-device loss: every gathered gradient must equal the reference gradient with factor 1.
* A sharded parameter block influences only its own rank's output slice -> its local grad is the
  matching block of the reference grad.
* A replicated parameter applied to sequence chunks (LayerNorm weight/bias under SequenceParallel)
  gets ``dL_r/dw`` on rank r: a partial sum whose total over ranks is the reference grad (torch
  hands it back as a ``Partial`` DTensor gradient, gathered by the all-reduce of ``full_tensor``).
* An input chunk that was all-gathered (Shard -> Replicate) receives, in backward, the
  reduce-scatter of the per-rank partial input grads -> its grad is the reference grad's chunk.
(The Replicate-output case and the seed §7.6 'divide Rowwise grads by tp_size' claim are derived
and checked in case_tp_c_numerics.py.)
"""
import copy

from meshtest import ScenarioCase, register

L1 = ("cpu_level1", "npu_level1")
MESH4 = (4,)
TP = ("tp",)
RTOL = 1.5e-4
ATOL = 1e-5


def _plain(t):
    """A module output as a plain detached tensor (waits on an AsyncCollectiveTensor)."""
    if hasattr(t, "wait") and not hasattr(t, "full_tensor"):
        t = t.wait()
    return t.detach()


def _gather(api, mesh, local, placement):
    """Full tensor from a local tensor whose layout on the 1-D mesh is ``placement``."""
    return api.DTensor.from_local(_plain(local), mesh, [placement]).full_tensor()


def _blk(n, ctx):
    """Slice of a dim of size ``n`` this rank holds under an even Shard."""
    k = n // ctx.world_size
    return slice(ctx.rank * k, (ctx.rank + 1) * k)


def _check_param_grads(ctx, tp_mod, ref_mod):
    """Every parameter's TP gradient, gathered by the gradient's own placement, = reference grad."""
    api = ctx.api
    tp_params = dict(tp_mod.named_parameters())
    ref_params = dict(ref_mod.named_parameters())
    assert set(tp_params) == set(ref_params), f"parameter names differ: {sorted(tp_params)} vs {sorted(ref_params)}"
    placements = {}
    for name, rp in ref_params.items():
        p = tp_params[name]
        assert p.grad is not None, f"{name} has no gradient after backward"
        g = p.grad.full_tensor() if isinstance(p.grad, api.DTensor) else p.grad
        placements[name] = (tuple(p.placements) if isinstance(p, api.DTensor) else None,
                            tuple(p.grad.placements) if isinstance(p.grad, api.DTensor) else None)
        ctx.assert_close(g, rp.grad, rtol=RTOL, atol=ATOL, label=f"grad {name}")
    ctx.note(f"(param placement, grad placement): {placements}")


# ---------------------------------------------------------------- C6

def _c6_sp_layernorm_4(ctx):
    """SequenceParallel LayerNorm(8) (random affine params) on (B=2, S=8, H=8), 2 positions per rank.
    Local chunk = reference slice; full_tensor = reference; weight/bias grads (Partial per rank)
    gathered = reference; input chunk grad = reference slice."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(406)
    ln = nn.LayerNorm(8)
    with torch.no_grad():
        ln.weight.copy_(torch.randn(8))
        ln.bias.copy_(torch.randn(8))
    ref = copy.deepcopy(ln)
    x = torch.randn(2, 8, 8)
    G = torch.randn(2, 8, 8)
    ctx.step("apply")
    api.parallelize_module(ln, ctx.mesh, api.SequenceParallel())
    ctx.step("forward")
    blk = _blk(8, ctx)
    xt = x[:, blk].clone().requires_grad_(True)
    y = ln(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    assert isinstance(y, api.DTensor) and tuple(y.placements) == (api.Shard(1),), \
        f"output must stay a Shard(1) DTensor, got {type(y)} {getattr(y, 'placements', None)}"
    ctx.assert_close(y.to_local().detach(), yr.detach()[:, blk], rtol=RTOL, atol=ATOL, label="local chunk vs reference slice")
    ctx.assert_close(y.full_tensor().detach(), yr.detach(), rtol=RTOL, atol=ATOL, label="gathered output")
    ctx.step("backward")
    (y.to_local() * G[:, blk]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, ln, ref)
    ctx.assert_close(xt.grad, xr.grad[:, blk], rtol=RTOL, atol=ATOL, label="input chunk grad")


register(ScenarioCase(
    name="tp_C6_sequence_parallel_layernorm_fwd_bwd_4",
    fn=_c6_sp_layernorm_4,
    mesh_shape=MESH4, mesh_dim_names=TP, tags=L1,
    requires=("dtensor", "tp.styles"),
    spec_id="C6",
))


# ---------------------------------------------------------------- C10

def _c10_prepare_input_colwise_4(ctx):
    """Block(proj=Linear(16->32)): PrepareModuleInput(Shard(0) -> Replicate) on the block, Colwise
    on proj; rank r feeds batch rows x[blk_r] (2 of 8), gets output columns cols_r (8 of 32) for the
    whole batch. L_r = sum(y_r * G[:, cols_r]); param grads gathered along dim 0 = reference; the
    all-gather's backward reduce-scatters the partial input grads -> x[blk_r] grad = reference rows."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(410)
    block = nn.Sequential()
    block.add_module("proj", nn.Linear(16, 32))
    ref = copy.deepcopy(block)
    x = torch.randn(8, 16)
    G = torch.randn(8, 32)
    ctx.step("apply")
    api.parallelize_module(block, ctx.mesh, {"proj": api.ColwiseParallel()})
    api.parallelize_module(block, ctx.mesh, api.PrepareModuleInput(input_layouts=api.Shard(0),
                                                                   desired_input_layouts=api.Replicate()))
    ctx.step("forward")
    rows, cols = _blk(8, ctx), _blk(32, ctx)
    xt = x[rows].clone().requires_grad_(True)
    y = block(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    ctx.assert_close(_plain(y), yr.detach()[:, cols], rtol=RTOL, atol=ATOL, label="local output = reference columns, all rows")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(1)), yr.detach(), rtol=RTOL, atol=ATOL, label="gathered output")
    ctx.step("backward")
    (y * G[:, cols]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, block, ref)
    ctx.assert_close(xt.grad, xr.grad[rows], rtol=RTOL, atol=ATOL, label="input rows grad")


register(ScenarioCase(
    name="tp_C10_prepare_input_then_colwise_fwd_bwd_4",
    fn=_c10_prepare_input_colwise_4,
    mesh_shape=MESH4, mesh_dim_names=TP, tags=L1,
    requires=("dtensor", "tp.styles"),
    spec_id="C10",
))


# ---------------------------------------------------------------- C12

def _c12_prepare_io_mlp_block_4(ctx):
    """MLP block (fc1 Linear(16->32) Colwise, relu, fc2 Linear(32->16) Rowwise) wrapped with
    PrepareModuleInputOutput(input Shard(1) -> Replicate, output Replicate -> Shard(1)): rank r
    feeds sequence positions blk_r of x (B=2, S=8, H=16), the block all-gathers them, runs the TP
    MLP on the full sequence (fc2's Replicate local output) and hands back positions blk_r.
    Backward: L_r = sum(y_r * G[:, blk_r]) (sum_r = L_ref). Output Shard(1) <- Replicate backward
    all-gathers G; fc2's all-reduce backward is the identity -> fc2 W[:, blk] grad = reference
    block, fc1's Shard(0) blocks likewise; the input all-gather's backward reduce-scatters the
    partial input grads of fc1's shards -> input chunk grad = reference slice. All factor 1."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(412)
    block = nn.Sequential()
    block.add_module("fc1", nn.Linear(16, 32))
    block.add_module("act", nn.ReLU())
    block.add_module("fc2", nn.Linear(32, 16))
    ref = copy.deepcopy(block)
    x = torch.randn(2, 8, 16)
    G = torch.randn(2, 8, 16)
    ctx.step("apply")
    api.parallelize_module(block, ctx.mesh, {"fc1": api.ColwiseParallel(), "fc2": api.RowwiseParallel()})
    api.parallelize_module(block, ctx.mesh, api.PrepareModuleInputOutput(
        input_layouts=api.Shard(1), desired_input_layouts=api.Replicate(),
        output_layouts=api.Replicate(), desired_output_layouts=api.Shard(1)))
    ctx.step("forward")
    blk = _blk(8, ctx)
    xt = x[:, blk].clone().requires_grad_(True)
    y = block(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    assert not isinstance(y, api.DTensor), f"use_local_output=True must give a local tensor, got {type(y)}"
    ctx.assert_close(_plain(y), yr.detach()[:, blk], rtol=RTOL, atol=ATOL, label="local output = reference sequence chunk")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(1)), yr.detach(), rtol=RTOL, atol=ATOL, label="gathered output")
    ctx.step("backward")
    (y * G[:, blk]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, block, ref)
    ctx.assert_close(xt.grad, xr.grad[:, blk], rtol=RTOL, atol=ATOL, label="input chunk grad")


register(ScenarioCase(
    name="tp_C12_prepare_input_output_mlp_block_fwd_bwd_4",
    fn=_c12_prepare_io_mlp_block_4,
    mesh_shape=MESH4, mesh_dim_names=TP, tags=L1,
    requires=("dtensor", "tp.styles"),
    spec_id="C12",
))
