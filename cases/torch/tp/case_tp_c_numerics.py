"""The TP test plan, class C (C1–C14; C15 lives in case_tp_c15_fsdp.py): TP numerics on 2 ranks, and
C6, C10, C12 on 4 ranks as well (the 4-card items of the plan's 4-card priority, at the end of the file), against a
single-device reference.

Every case builds the full module once (``torch.manual_seed`` so every rank builds identical full
weights and inputs), deep-copies it as the single-device reference BEFORE ``parallelize_module``,
runs the parallel module on a 1-D ``("tp",)`` mesh of 2 ranks and compares forward output and
(for every module with parameters, and for inputs that require grad) backward gradients with the
reference. Local results are gathered by their layout: a DTensor with ``.full_tensor()`` (which
for a ``Partial`` gradient is the all-reduce), a local tensor of known layout ``L`` with
``DTensor.from_local(t, mesh, [L]).full_tensor()``.

Tolerances (the plan's tolerance rule): fp32 ``rtol=1.5e-4, atol=1e-5``; the C13 fp16/bf16 cases use the TP plan's
low-precision row ``rtol=1e-3, atol=1e-3`` against the fp32 reference AND require the fp32-reduce
error to be strictly below the plain low-precision reduce error. No tolerance is widened anywhere.

How expected gradients are derived (the loss each rank actually back-propagates)
-------------------------------------------------------------------------------
Notation: ``y`` the logical (global) output, ``G`` a fixed random cotangent built identically on
every rank, ``L_ref = sum(y_ref * G)`` the single-device loss; ``tp`` the mesh size.

* Replicated output (Rowwise default, NoParallel, MLP): every rank holds the whole ``y`` and
  back-propagates its own copy ``L_r = sum(y_local * G)``. All copies are the SAME logical loss
  ``L = L_ref`` (not a sum of tp losses): a Replicate DTensor's gradient is the gradient of the one
  logical tensor, and DTensor encodes exactly that — ``to_local()`` of a Replicate DTensor hands
  back a Replicate gradient, and the backward of the Partial->Replicate all-reduce is the identity
  (torch/distributed/tensor/_redistribute.py ``_redistribute_backward``: Replicate grad vs Partial
  source is normalised to Replicate, no collective). Each rank's weight shard ``W[:, blk_r]`` of a
  Rowwise Linear therefore gets ``G^T x[:, blk_r]`` = the matching block of ``dL_ref/dW``, so the
  gathered gradient equals the reference gradient with factor 1, for weight, bias and input.
* Sharded output (Colwise Shard(-1), SequenceParallel Shard(seq), PrepareModuleOutput Shard(d)):
  rank r back-propagates ``L_r = sum(y_r * G_r)`` over its own slice ``G_r`` of ``G``. The slices
  are disjoint, so the optimised logical loss is ``L = sum_r L_r = sum(y * G) = L_ref`` exactly.
  Each sharded parameter block only influences its own rank's ``y_r`` -> gathered grad = reference
  grad (factor 1). A replicated parameter used on sequence shards (LayerNorm/RMSNorm weight under
  SequenceParallel) gets ``dL_r/dw`` on rank r, a partial sum: the logical gradient is the sum over
  ranks (torch returns it as a ``Partial`` DTensor grad; ``full_tensor()`` all-reduces it). A
  Replicate input used by a Colwise layer gets partial contributions ``G_r W_r`` that torch
  all-reduces in ``from_local``'s backward, so every rank's input grad is the full ``dL_ref/dx``.
* the plan's gradient-scale claim ("Rowwise weight grad gathered along dim 1 must be divided by tp_size"): checked in
  ``tp_C2_rowwise_grad_scale_claim``. With the per-rank loss above (each rank calls backward on its
  own ``out.sum()``-style loss, as an ST does) the factor is 1, so the claim does not hold on torch.
  It holds only when the optimised objective is the SUM over ranks of per-rank losses,
  ``L_sum = sum_r L_r``: for a replicated output every ``L_r`` equals ``L_ref`` as a function of
  the weights, so ``L_sum = tp * L_ref`` and every gradient (weight, bias AND input) is ``tp``
  times the reference, while for Colwise shards ``L_sum = L_ref`` (factor 1). That case asserts
  both, with the factors derived here.
* C13 backward: ``reduce_dtype`` only changes the forward reduction (the I/O hooks' contract: cast the Partial local
  tensor, then redistribute); the gradient reaching each rank's local matmul is the output
  gradient cast to the module dtype either way, so the grads of the reduce_dtype module must equal
  those of the plain module (checked at the TP plan's low-precision tolerance, which leaves room for a
  backward collective run in fp32). They are not compared with the fp32 reference: a bf16 weight
  gradient alone carries relative rounding 2^-9 ~ 2e-3 > rtol 1e-3, and the TP plan gives no
  low-precision gradient tolerance.
"""
import copy

from meshtest import ScenarioCase, register

L1_NPU0 = ("cpu_level1", "npu_level0", "npu_level1")
# The TP plan's 4-card priority: on CPU/gloo level0 runs the hooks that do not depend on HCCL — the
# PrepareModule* layout conversions (C10, C11, C12 on 2 ranks); the 4-card items (C6 backward,
# C10, C12) are must-run on NPU, hence npu_level0.
HOOKS_L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1")
L1 = ("cpu_level1", "npu_level0", "npu_level1")
MESH2 = (2,)
MESH4 = (4,)
TP = ("tp",)
RTOL = 1.5e-4
ATOL = 1e-5
LP_RTOL = 1e-3
LP_ATOL = 1e-3


# ---------------------------------------------------------------- helpers (self-contained file)

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


def _full_grad(api, p):
    """A parameter's gradient gathered by the gradient's own placement."""
    assert p.grad is not None, "parameter has no gradient after backward"
    g = p.grad
    return g.full_tensor() if isinstance(g, api.DTensor) else g


def _check_param_grads(ctx, tp_mod, ref_mod, factor=1.0, label=""):
    """Every parameter of ``ref_mod`` has a gathered TP gradient equal to ``factor`` x the reference."""
    api = ctx.api
    tp_params = dict(tp_mod.named_parameters())
    ref_params = dict(ref_mod.named_parameters())
    assert set(tp_params) == set(ref_params), f"parameter names differ: {sorted(tp_params)} vs {sorted(ref_params)}"
    placements = {}
    for name, rp in ref_params.items():
        tpp = tp_params[name]
        placements[name] = (tuple(tpp.placements) if isinstance(tpp, api.DTensor) else None,
                            tuple(tpp.grad.placements) if isinstance(tpp.grad, api.DTensor) else None)
        ctx.assert_close(_full_grad(api, tpp), factor * rp.grad, rtol=RTOL, atol=ATOL, label=f"{label}grad {name}")
    ctx.note(f"{label}(param placement, grad placement): {placements}")


# ---------------------------------------------------------------- C1

def _c1_colwise_linear(ctx):
    """ColwiseParallel Linear(16->32): output Shard(-1) local; rank r back-propagates
    L_r = sum(y_r * G_r) on its output columns (sum_r L_r = L_ref). Weight/bias Shard(0) grads
    gathered along dim 0 = reference (factor 1). Replicate input x: torch all-reduces the partial
    input grads in from_local's backward, so x.grad on every rank = full reference x grad."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(101)
    lin = nn.Linear(16, 32)
    ref = copy.deepcopy(lin)
    x = torch.randn(4, 16)
    G = torch.randn(4, 32)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.ColwiseParallel())
    ctx.step("forward")
    xt = x.clone().requires_grad_(True)
    y = lin(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    blk = _blk(32, ctx)
    assert not isinstance(y, api.DTensor), f"use_local_output=True must give a local tensor, got {type(y)}"
    ctx.assert_close(_plain(y), yr.detach()[:, blk], rtol=RTOL, atol=ATOL, label="local output vs reference columns")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(1)), yr.detach(), rtol=RTOL, atol=ATOL,
                     label="gathered output")
    ctx.step("backward")
    (y * G[:, blk]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, lin, ref)
    ctx.assert_close(xt.grad, xr.grad, rtol=RTOL, atol=ATOL, label="input grad (Replicate input, every rank)")


register(ScenarioCase(
    name="tp_C1_colwise_linear_fwd_bwd",
    fn=_c1_colwise_linear,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C1",
))


# ---------------------------------------------------------------- C2

def _c2_rowwise_linear(ctx):
    """RowwiseParallel Linear(16->8) with the default Shard(-1) input: rank r feeds x[:, blk_r].
    Output Replicate (all-reduce), local. Every rank back-propagates its own copy of the one
    logical loss L = sum(y * G) (same G everywhere): the all-reduce's backward is the identity, so
    rank r's W[:, blk_r] grad = G^T x[:, blk_r] -> gathered along dim 1 = reference, factor 1;
    the Replicate bias grad = sum_b G = reference; x[:, blk_r] grad = G W[:, blk_r] = reference
    input-grad columns."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(102)
    lin = nn.Linear(16, 8)
    ref = copy.deepcopy(lin)
    x = torch.randn(4, 16)
    G = torch.randn(4, 8)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.RowwiseParallel())
    ctx.step("forward")
    blk = _blk(16, ctx)
    xt = x[:, blk].clone().requires_grad_(True)
    y = lin(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    ctx.assert_close(_plain(y), yr.detach(), rtol=RTOL, atol=ATOL, label="output (Replicate, every rank)")
    ctx.step("backward")
    (y * G).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, lin, ref)
    ctx.assert_close(_gather(api, ctx.mesh, xt.grad, api.Shard(1)), xr.grad, rtol=RTOL, atol=ATOL,
                     label="input grad gathered along dim 1")


register(ScenarioCase(
    name="tp_C2_rowwise_linear_fwd_bwd",
    fn=_c2_rowwise_linear,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C2",
))


def _allclose(torch, a, b):
    return bool(torch.all((a - b).abs() <= ATOL + RTOL * b.abs()))


def _c2_grad_scale_claim(ctx):
    """the plan's gradient-scale claim / the plan's tolerance rule claim: 'Rowwise weight grad, gathered along dim 1,
    divided by tp_size,
    equals the single-device grad'. Checked under two loss formations (derivations in the module
    docstring):

    A. per-rank loss, as an ST writes it: every rank calls backward on its own
       L_r = sum(y_local * G) of the replicated output. Optimised loss = L_ref -> factor 1 for
       weight, bias and input grad. The claim's comparison (gathered / tp vs reference) must FAIL.
    B. loss summed over ranks: L_sum = sum_r L_r, formed with DTensor so autograd sees it
       (each rank's use of the replicated output declares a Partial gradient,
       ``to_local(grad_placements=[Partial()])``; the per-rank scalars are a Partial DTensor
       reduced by ``full_tensor()``). L_sum = tp * L_ref as a function of (W, b, x) -> every
       gradient is tp x reference: the claim holds for the weight, but equally for bias and input.
       Contrast: a Colwise Linear under the same summed formation (disjoint output shards,
       L_sum = L_ref) -> factor 1, which is where the TP plan's 'Colwise direct, Rowwise / tp_size'
       asymmetry comes from.
    """
    api = ctx.api
    torch, nn = api.torch, api.nn
    tp = ctx.world_size
    torch.manual_seed(112)
    base = nn.Linear(16, 8)
    x = torch.randn(4, 16)
    G = torch.randn(4, 8)
    blk = _blk(16, ctx)

    ctx.step("A: per-rank loss")
    lin_a = copy.deepcopy(base)
    ref = copy.deepcopy(base)
    api.parallelize_module(lin_a, ctx.mesh, api.RowwiseParallel())
    xa = x[:, blk].clone().requires_grad_(True)
    (lin_a(xa) * G).sum().backward()
    xr = x.clone().requires_grad_(True)
    (ref(xr) * G).sum().backward()
    wa = _full_grad(api, lin_a.weight)
    ctx.assert_close(wa, ref.weight.grad, rtol=RTOL, atol=ATOL, label="A: gathered weight grad (factor 1)")
    _check_param_grads(ctx, lin_a, ref, factor=1.0, label="A: ")
    ctx.assert_close(_gather(api, ctx.mesh, xa.grad, api.Shard(1)), xr.grad, rtol=RTOL, atol=ATOL,
                     label="A: input grad (factor 1)")
    claim_err_a = (wa / tp - ref.weight.grad).abs().max().item()
    claim_holds_a = _allclose(torch, wa / tp, ref.weight.grad)
    ctx.note(f"A (per-rank loss): gathered/ref weight-grad ratio = factor 1; the plan's gradient-scale claim "
             f"(gathered / {tp}) "
             f"leaves max abs error {claim_err_a:.3g} -> claim holds: {claim_holds_a}")
    assert not claim_holds_a, ("A: gathered Rowwise weight grad / tp_size matched the reference although it already "
                               "equals it")

    ctx.step("B: loss summed over ranks")
    lin_b = copy.deepcopy(base)
    api.parallelize_module(lin_b, ctx.mesh, api.RowwiseParallel(use_local_output=False))
    xb = x[:, blk].clone().requires_grad_(True)
    yb = lin_b(xb)
    assert tuple(yb.placements) == (api.Replicate(),), f"B: Rowwise output placements {yb.placements}"
    l_r = (yb.to_local(grad_placements=[api.Partial()]) * G).sum()
    l_sum = api.DTensor.from_local(l_r, ctx.mesh, [api.Partial()]).full_tensor()
    l_ref = (ref(x) * G).sum().detach()
    ctx.assert_close(l_sum.detach(), tp * l_ref, rtol=RTOL, atol=ATOL, label="B: L_sum = tp * L_ref")
    l_sum.backward()
    wb = _full_grad(api, lin_b.weight)
    _check_param_grads(ctx, lin_b, ref, factor=float(tp), label="B: ")
    ctx.assert_close(_gather(api, ctx.mesh, xb.grad, api.Shard(1)), tp * xr.grad, rtol=RTOL, atol=ATOL,
                     label="B: input grad (factor tp)")
    claim_holds_b = _allclose(torch, wb / tp, ref.weight.grad)
    assert claim_holds_b, "B: gathered Rowwise weight grad / tp_size does not match the reference"

    ctx.step("B: Colwise contrast")
    col = nn.Linear(16, 8)
    col_ref = copy.deepcopy(col)
    api.parallelize_module(col, ctx.mesh, api.ColwiseParallel(use_local_output=False))
    oblk = _blk(8, ctx)
    yc = col(x)
    lc = (yc.to_local() * G[:, oblk]).sum()
    api.DTensor.from_local(lc, ctx.mesh, [api.Partial()]).full_tensor().backward()
    (col_ref(x) * G).sum().backward()
    _check_param_grads(ctx, col, col_ref, factor=1.0, label="B colwise: ")
    ctx.note(f"B (summed loss): Rowwise weight/bias/input grads = {tp} x reference (the plan's gradient-scale "
             "claim's division holds, "
             f"and applies to bias and input grads too); Colwise grads = 1 x reference")


register(ScenarioCase(
    name="tp_C2_rowwise_grad_scale_claim",
    fn=_c2_grad_scale_claim,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C2",
    divergence="the plan's gradient-scale claim/the plan's tolerance rule: the Rowwise weight grad gathered along "
               "dim 1 must be divided by tp_size "
               "before it equals the single-device grad; torch 2.13: when every rank back-propagates its own "
               "copy of the replicated loss (the ST's per-rank loss.backward()), the gathered grad already equals "
               "the single-device grad (the all-reduce's backward is the identity), so /tp_size is off by "
               "tp_size; the division is right only for a loss summed over ranks, where it applies to bias and "
               "input grads as well and Colwise keeps factor 1",
))


# ---------------------------------------------------------------- C3

def _c3_mlp(ctx):
    """Colwise fc1(16->32) + relu + Rowwise fc2(32->16); Replicate input x. Output Replicate:
    every rank back-propagates its own copy of L = sum(y * G) -> all gathered param grads =
    reference (factor 1); x.grad (all-reduced partial contributions of fc1's shards) = reference."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(103)
    mlp = nn.Sequential()
    mlp.add_module("fc1", nn.Linear(16, 32))
    mlp.add_module("act", nn.ReLU())
    mlp.add_module("fc2", nn.Linear(32, 16))
    ref = copy.deepcopy(mlp)
    x = torch.randn(4, 16)
    G = torch.randn(4, 16)
    ctx.step("apply")
    api.parallelize_module(mlp, ctx.mesh, {"fc1": api.ColwiseParallel(), "fc2": api.RowwiseParallel()})
    ctx.step("forward")
    xt = x.clone().requires_grad_(True)
    y = mlp(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    ctx.assert_close(_plain(y), yr.detach(), rtol=RTOL, atol=ATOL, label="output (Replicate, every rank)")
    ctx.step("backward")
    (y * G).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, mlp, ref)
    ctx.assert_close(xt.grad, xr.grad, rtol=RTOL, atol=ATOL, label="input grad")


register(ScenarioCase(
    name="tp_C3_colwise_rowwise_mlp_fwd_bwd",
    fn=_c3_mlp,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C3",
))


# ---------------------------------------------------------------- C4

def _c4_colwise_embedding(ctx):
    """ColwiseParallel Embedding(16, 8): weight Shard(1), output Shard(-1) local. Forward gathered
    along the last dim = full embedding. Backward: L_r = sum(y_r * G_r) on the rank's embedding
    columns (sum_r L_r = L_ref) -> weight grad gathered along dim 1 = reference, factor 1."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(104)
    emb = nn.Embedding(16, 8)
    ref = copy.deepcopy(emb)
    ids = torch.randint(0, 16, (3, 5))
    G = torch.randn(3, 5, 8)
    ctx.step("apply")
    api.parallelize_module(emb, ctx.mesh, api.ColwiseParallel())
    ctx.step("forward")
    y = emb(ids)
    yr = ref(ids)
    blk = _blk(8, ctx)
    ctx.assert_close(_plain(y), yr.detach()[..., blk], rtol=RTOL, atol=ATOL, label="local output vs reference columns")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(2)), yr.detach(), rtol=RTOL, atol=ATOL,
                     label="gathered output")
    ctx.step("backward")
    (y * G[..., blk]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, emb, ref)


register(ScenarioCase(
    name="tp_C4_colwise_embedding_fwd_bwd",
    fn=_c4_colwise_embedding,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C4",
))


# ---------------------------------------------------------------- C5

def _c5_rowwise_embedding(ctx):
    """RowwiseParallel(input_layouts=Replicate()) Embedding(16, 8) — the embed_tokens plan of the plan's model examples:
    weight Shard(0) (vocab rows), ids replicated; each rank looks up its vocab rows (others masked),
    the Partial result is all-reduced -> every rank's output = the full embedding. Backward:
    replicated output, every rank back-propagates its own copy of L = sum(y * G) -> weight grad
    gathered (by the grad's own placement) = reference, factor 1."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(105)
    emb = nn.Embedding(16, 8)
    ref = copy.deepcopy(emb)
    ids = torch.randint(0, 16, (3, 5))
    G = torch.randn(3, 5, 8)
    rows = 16 // ctx.world_size
    assert all(bool(((ids >= k * rows) & (ids < (k + 1) * rows)).any()) for k in range(ctx.world_size)), \
        "test data must look up rows of every vocab shard"
    ctx.step("apply")
    api.parallelize_module(emb, ctx.mesh, api.RowwiseParallel(input_layouts=api.Replicate()))
    ctx.step("forward")
    y = emb(ids)
    yr = ref(ids)
    assert not isinstance(y, api.DTensor), f"use_local_output=True must give a local tensor, got {type(y)}"
    ctx.assert_close(_plain(y), yr.detach(), rtol=RTOL, atol=ATOL, label="output = full embedding (every rank)")
    ctx.step("backward")
    (y * G).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, emb, ref)


register(ScenarioCase(
    name="tp_C5_rowwise_embedding_fwd_bwd",
    fn=_c5_rowwise_embedding,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C5",
))


def _c5_rowwise_embedding_default_input(ctx):
    """RowwiseParallel() with DEFAULT layouts on an Embedding. the styles' constructor parameters/the I/O hooks'
    contract: input_layouts
    defaults to Shard(-1) and apply only changes desired_input_layouts to Replicate() for an
    Embedding, so a plain ids tensor is annotated Shard(-1) and all-gathered along its last dim
    (the shard-dim table's 'default input Replicate()' is that desired layout). With the same (B, S)
    ids on every rank, the module therefore embeds cat([ids] * tp, -1): output (B, tp*S, E).
    torch/distributed/tensor/parallel/style.py RowwiseParallel.__init__/_apply behave exactly so."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(115)
    emb = nn.Embedding(16, 8)
    ref = copy.deepcopy(emb)
    ids = torch.randint(0, 16, (3, 5))
    ctx.step("apply")
    api.parallelize_module(emb, ctx.mesh, api.RowwiseParallel())
    ctx.step("forward")
    y = _plain(emb(ids))
    tp = ctx.world_size
    assert tuple(y.shape) == (3, 5 * tp, 8), f"output shape {tuple(y.shape)}; expected (3, {5 * tp}, 8)"
    ctx.assert_close(y, ref(torch.cat([ids] * tp, dim=-1)).detach(), rtol=RTOL, atol=ATOL,
                     label="output = embedding of the all-gathered ids")
    ctx.note(f"default input_layouts Shard(-1): ids {tuple(ids.shape)} -> output {tuple(y.shape)}; "
             "pass input_layouts=Replicate() for replicated ids")


register(ScenarioCase(
    name="tp_C5_rowwise_embedding_default_input_is_shard",
    fn=_c5_rowwise_embedding_default_input,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C5",
))


# ---------------------------------------------------------------- C6

def _c6_sp_layernorm(ctx):
    """SequenceParallel LayerNorm(8) (random affine params) on (B=2, S=8, H=8), rank r feeding
    x[:, blk_r]. Forward: local chunk = reference slice, full_tensor = reference. Backward: rank r
    back-propagates L_r = sum(y_r * G[:, blk_r]) (sum_r L_r = L_ref); the replicated weight/bias get
    the partial dL_r/dw per rank -> gathered (sum over ranks) = reference; x chunk grad =
    reference slice."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(106)
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
        f"output must stay a Shard(1) DTensor (use_local_output=False), got {type(y)} {getattr(y, 'placements', None)}"
    ctx.assert_close(y.to_local().detach(), yr.detach()[:, blk], rtol=RTOL, atol=ATOL,
                     label="local chunk vs reference slice")
    ctx.assert_close(y.full_tensor().detach(), yr.detach(), rtol=RTOL, atol=ATOL, label="gathered output")
    ctx.step("backward")
    (y.to_local() * G[:, blk]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, ln, ref)
    ctx.assert_close(xt.grad, xr.grad[:, blk], rtol=RTOL, atol=ATOL, label="input chunk grad")


register(ScenarioCase(
    name="tp_C6_sequence_parallel_layernorm_fwd_bwd",
    fn=_c6_sp_layernorm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C6",
))


# ---------------------------------------------------------------- C7

def _c7_sp_dropout(ctx):
    """SequenceParallel Dropout(p=0), train mode: identity. Output is a Shard(1) DTensor whose local
    chunk is bitwise the input chunk and whose full_tensor is bitwise x; the input grad of
    L_r = sum(y_r * G_r) is bitwise G_r."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(107)
    drop = nn.Dropout(p=0.0)
    drop.train()
    x = torch.randn(2, 8, 8)
    G = torch.randn(2, 8, 8)
    ctx.step("apply")
    api.parallelize_module(drop, ctx.mesh, api.SequenceParallel())
    ctx.step("forward")
    blk = _blk(8, ctx)
    xt = x[:, blk].clone().requires_grad_(True)
    y = drop(xt)
    assert isinstance(y, api.DTensor) and tuple(y.placements) == (api.Shard(1),), \
        f"output must be a Shard(1) DTensor, got {type(y)} {getattr(y, 'placements', None)}"
    ctx.assert_equal(y.to_local().detach(), x[:, blk], label="local chunk = input chunk")
    ctx.assert_equal(y.full_tensor().detach(), x, label="gathered output = x")
    ctx.step("backward")
    (y.to_local() * G[:, blk]).sum().backward()
    ctx.assert_equal(xt.grad, G[:, blk], label="input grad = G chunk")


register(ScenarioCase(
    name="tp_C7_sequence_parallel_dropout_p0",
    fn=_c7_sp_dropout,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C7",
))


# ---------------------------------------------------------------- C8 (NoParallel: the styles' constructor parameters)

def _c8_no_parallel_linear(ctx):
    """NoParallel() Linear(16->8): parameters Replicate(), input Replicate, output Replicate local
    (use_local_output=True) -> every rank's output = reference. Backward: every rank back-propagates
    its own copy of L = sum(y * G) -> every gradient (Replicate) = reference, factor 1."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(108)
    lin = nn.Linear(16, 8)
    ref = copy.deepcopy(lin)
    x = torch.randn(4, 16)
    G = torch.randn(4, 8)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.NoParallel())
    for name, p in lin.named_parameters():
        assert isinstance(p, api.DTensor) and tuple(p.placements) == (api.Replicate(),), \
            f"{name} must be a Replicate() DTensor, got {type(p)} {getattr(p, 'placements', None)}"
    ctx.step("forward")
    xt = x.clone().requires_grad_(True)
    y = lin(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    assert not isinstance(y, api.DTensor), f"use_local_output=True must give a local tensor, got {type(y)}"
    ctx.assert_close(_plain(y), yr.detach(), rtol=RTOL, atol=ATOL, label="output (every rank)")
    ctx.step("backward")
    (y * G).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, lin, ref)
    ctx.assert_close(xt.grad, xr.grad, rtol=RTOL, atol=ATOL, label="input grad")


register(ScenarioCase(
    name="tp_C8_no_parallel_linear_fwd_bwd",
    fn=_c8_no_parallel_linear,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles", "tp.no_parallel"),
    spec_id="C8",
))


# ---------------------------------------------------------------- C9

def _c9_sp_then_no_parallel(ctx):
    """norm: SequenceParallel LayerNorm(8) -> proj: NoParallel(input_layout=Shard(1),
    desired_input_layout=Replicate()) Linear(8->8). The norm's Shard(1) DTensor output is
    all-gathered into the replicated Linear; output Replicate local = reference on every rank.
    Backward: every rank back-propagates its own copy of L = sum(y * G): Linear grads (Replicate,
    full on each rank) = reference; the all-gather's backward slices the replicated grad, so the
    norm's per-rank weight/bias grads are partial sums -> gathered = reference; input chunk grad =
    reference slice."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(109)
    model = nn.Sequential()
    model.add_module("norm", nn.LayerNorm(8))
    model.add_module("proj", nn.Linear(8, 8))
    with torch.no_grad():
        model.norm.weight.copy_(torch.randn(8))
        model.norm.bias.copy_(torch.randn(8))
    ref = copy.deepcopy(model)
    x = torch.randn(2, 8, 8)
    G = torch.randn(2, 8, 8)
    ctx.step("apply")
    api.parallelize_module(model, ctx.mesh, {
        "norm": api.SequenceParallel(),
        "proj": api.NoParallel(input_layout=api.Shard(1), desired_input_layout=api.Replicate()),
    })
    ctx.step("forward")
    blk = _blk(8, ctx)
    xt = x[:, blk].clone().requires_grad_(True)
    y = model(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    assert not isinstance(y, api.DTensor), f"NoParallel use_local_output=True must give a local tensor, got {type(y)}"
    ctx.assert_close(_plain(y), yr.detach(), rtol=RTOL, atol=ATOL, label="output (Replicate, every rank)")
    ctx.step("backward")
    (y * G).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, model, ref)
    ctx.assert_close(xt.grad, xr.grad[:, blk], rtol=RTOL, atol=ATOL, label="input chunk grad")


register(ScenarioCase(
    name="tp_C9_sequence_parallel_then_no_parallel",
    fn=_c9_sp_then_no_parallel,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles", "tp.no_parallel"),
    spec_id="C9",
))


# ---------------------------------------------------------------- C10

def _c10_prepare_input_colwise(ctx):
    """Block(proj=Linear(16->32)): PrepareModuleInput(Shard(0) -> Replicate) on the block, Colwise
    on proj. Rank r feeds its batch rows x[blk_r]; they are all-gathered, proj outputs its column
    shard of the full batch. Backward: L_r = sum(y_r * G[:, cols_r]) (sum_r = L_ref) -> param grads
    gathered along dim 0 = reference; the input grad is a partial sum over column shards that the
    all-gather's backward reduce-scatters -> x[blk_r] grad = reference rows."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(110)
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
    ctx.assert_close(_plain(y), yr.detach()[:, cols], rtol=RTOL, atol=ATOL,
                     label="local output = reference columns, all rows")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(1)), yr.detach(), rtol=RTOL, atol=ATOL,
                     label="gathered output")
    ctx.step("backward")
    (y * G[:, cols]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, block, ref)
    ctx.assert_close(xt.grad, xr.grad[rows], rtol=RTOL, atol=ATOL, label="input rows grad")


register(ScenarioCase(
    name="tp_C10_prepare_input_then_colwise_fwd_bwd",
    fn=_c10_prepare_input_colwise,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=HOOKS_L0,
    requires=("dtensor", "tp.styles"),
    spec_id="C10",
))


# ---------------------------------------------------------------- C11

def _c11_common(ctx, seed, rowwise_kwargs, out_layout):
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(seed)
    lin = nn.Linear(16, 8)
    ref = copy.deepcopy(lin)
    x = torch.randn(4, 16)
    G = torch.randn(4, 8)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.RowwiseParallel(**rowwise_kwargs))
    api.parallelize_module(lin, ctx.mesh, api.PrepareModuleOutput(output_layouts=out_layout,
                                                                   desired_output_layouts=api.Shard(0)))
    ctx.step("forward")
    cols, rows = _blk(16, ctx), _blk(4, ctx)
    xt = x[:, cols].clone().requires_grad_(True)
    y = lin(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    assert not isinstance(y, api.DTensor), (
        f"PrepareModuleOutput use_local_output=True must give a local tensor, got {type(y)}")
    ctx.assert_close(_plain(y), yr.detach()[rows], rtol=RTOL, atol=ATOL, label="local output = reference rows")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(0)), yr.detach(), rtol=RTOL, atol=ATOL,
                     label="gathered output")
    ctx.step("backward")
    (y * G[rows]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, lin, ref)
    ctx.assert_close(_gather(api, ctx.mesh, xt.grad, api.Shard(1)), xr.grad, rtol=RTOL, atol=ATOL,
                     label="input grad gathered along dim 1")


def _c11_rowwise_then_prepare_output(ctx):
    """RowwiseParallel() Linear(16->8) (Replicate local output) followed, on the same module, by
    PrepareModuleOutput(Replicate -> Shard(0)): rank r gets output rows blk_r. Backward:
    L_r = sum(y_r * G[rows_r]) (disjoint rows, sum_r = L_ref); the Replicate->Shard(0) backward
    all-gathers G, the all-reduce backward is the identity -> W[:, blk_r] grad = G^T x[:, blk_r]:
    gathered grads = reference (factor 1); input grad gathered along dim 1 = reference."""
    _c11_common(ctx, 111, {}, ctx.api.Replicate())


register(ScenarioCase(
    name="tp_C11_rowwise_then_prepare_output_fwd_bwd",
    fn=_c11_rowwise_then_prepare_output,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=HOOKS_L0,
    requires=("dtensor", "tp.styles"),
    spec_id="C11",
))


def _c11_rowwise_partial_then_prepare_output(ctx):
    """RowwiseParallel(output_layouts=Partial(), use_local_output=False) keeps the Partial matmul
    result; PrepareModuleOutput(Partial -> Shard(0)) on the same module reduce-scatters it (the path
    the I/O hooks' contract's reduce_dtype acts on). Same loss and derivation as the Replicate variant: factor 1."""
    _c11_common(ctx, 121, {"output_layouts": ctx.api.Partial(), "use_local_output": False}, ctx.api.Partial())


register(ScenarioCase(
    name="tp_C11_rowwise_partial_then_prepare_output_fwd_bwd",
    fn=_c11_rowwise_partial_then_prepare_output,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=HOOKS_L0,
    requires=("dtensor", "tp.styles"),
    spec_id="C11",
))


# ---------------------------------------------------------------- C13

C13_IN = 32
C13_OUT = 16
C13_BATCH = 16


def _c13_data(ctx, dtype_name):
    """Low-precision Linear(32->16, no bias), input and cotangent (identical on every rank) and the
    fp32 reference built from the very same (low-precision-representable) values. The input scale
    makes the plain low-precision reduce visibly worse: fp16 at scale 1 (outputs ~2), bf16 at 0.25
    (so the fp32-reduce result can meet rtol=atol=1e-3 while bf16 partials are still rounded)."""
    torch, nn = ctx.api.torch, ctx.api.nn
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    scale = {"fp16": 1.0, "bf16": 0.25}[dtype_name]
    torch.manual_seed(13)
    lin = nn.Linear(C13_IN, C13_OUT, bias=False).to(dtype)
    x = (torch.randn(C13_BATCH, C13_IN) * scale).to(dtype)
    G = (torch.randn(C13_BATCH, C13_OUT) * scale).to(dtype).float()
    ref_out = torch.nn.functional.linear(x.float(), lin.weight.detach().float())
    return dtype, lin, x, G, ref_out


def _errors(torch, out, ref):
    e = (out.detach().float() - ref).abs()
    return e.max().item(), e.mean().item()


def _c13_check_errors(ctx, hi, lo, ref_out, dtype_name):
    torch = ctx.api.torch
    hi_max, hi_mean = _errors(torch, hi, ref_out)
    lo_max, lo_mean = _errors(torch, lo, ref_out)
    ctx.note(f"{dtype_name}: error vs fp32 reference — fp32 reduce: max {hi_max:.3g} mean {hi_mean:.3g}; "
             f"plain {dtype_name} reduce: max {lo_max:.3g} mean {lo_mean:.3g}")
    ctx.assert_close(hi.detach().float(), ref_out, rtol=LP_RTOL, atol=LP_ATOL,
                     label="fp32-reduce output vs fp32 reference")
    assert lo_max > 0 and lo_mean > 0, (f"plain {dtype_name} reduce shows no error; the data cannot tell the reduces "
                                        "apart")
    assert hi_max < lo_max and hi_mean < lo_mean, (
        f"fp32-reduce error (max {hi_max:.3g}, mean {hi_mean:.3g}) is not below the plain {dtype_name} reduce error "
        f"(max {lo_max:.3g}, mean {lo_mean:.3g})")


def _c13_reduce_dtype(ctx, dtype_name):
    """RowwiseParallel(reduce_dtype=torch.float32) on a fp16/bf16 Linear vs the same module with a
    plain RowwiseParallel(). Forward: the fp32-reduce output (compared as float32, whatever dtype
    it comes back in) is within rtol=atol=1e-3 of the fp32 reference and its max and mean error are
    strictly below the plain reduce's. On 2 ranks a plain reduce is round(p0 + p1) in the low dtype:
    the fp32 reduce only wins if its result is not rounded back to the low dtype. Backward (see the
    module docstring): every rank back-propagates its own copy of L = sum(y * G); the grads of
    both modules (weight gathered along dim 1, input gathered along dim 1) must agree."""
    api = ctx.api
    torch = api.torch
    dtype, lin, x, G, ref_out = _c13_data(ctx, dtype_name)
    lin_lo = copy.deepcopy(lin)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.RowwiseParallel(reduce_dtype=torch.float32))
    api.parallelize_module(lin_lo, ctx.mesh, api.RowwiseParallel())
    ctx.step("forward")
    blk = _blk(C13_IN, ctx)
    x_hi = x[:, blk].clone().requires_grad_(True)
    x_lo = x[:, blk].clone().requires_grad_(True)
    hi = lin(x_hi)
    lo = lin_lo(x_lo)
    assert lo.dtype == dtype, f"plain reduce output dtype {lo.dtype}"
    ctx.note(f"reduce_dtype=float32 output dtype: {hi.dtype}")
    _c13_check_errors(ctx, _plain(hi), _plain(lo), ref_out, dtype_name)
    ctx.step("backward")
    (hi.float() * G).sum().backward()
    (lo.float() * G).sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == dtype, "weight grad must exist in the module dtype"
    ctx.assert_close(_full_grad(api, lin.weight).float(), _full_grad(api, lin_lo.weight).float(),
                     rtol=LP_RTOL, atol=LP_ATOL, label="weight grad: reduce_dtype vs plain")
    ctx.assert_close(_gather(api, ctx.mesh, x_hi.grad, api.Shard(1)).float(),
                     _gather(api, ctx.mesh, x_lo.grad, api.Shard(1)).float(),
                     rtol=LP_RTOL, atol=LP_ATOL, label="input grad: reduce_dtype vs plain")


def _c13_reduce_dtype_fp16(ctx):
    _c13_reduce_dtype(ctx, "fp16")


def _c13_reduce_dtype_bf16(ctx):
    _c13_reduce_dtype(ctx, "bf16")


register(ScenarioCase(
    name="tp_C13_rowwise_reduce_dtype_fp32_fp16",
    fn=_c13_reduce_dtype_fp16,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles", "tp.reduce_dtype"),
    spec_id="C13",
))

register(ScenarioCase(
    name="tp_C13_rowwise_reduce_dtype_fp32_bf16",
    fn=_c13_reduce_dtype_bf16,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles", "tp.reduce_dtype"),
    spec_id="C13",
))


def _c13_premise(ctx, dtype_name):
    """The premise of C13 with DTensor primitives only (runs on torch 2.13, which lacks
    reduce_dtype): RowwiseParallel(output_layouts=Partial(), use_local_output=False) leaves the
    low-precision Partial matmul result; reduce it once in the low dtype
    (redistribute(Replicate())) and once after casting the Partial local tensor to float32
    (from_local(local.float(), Partial()).redistribute(Replicate()) — cross-checked bitwise against
    redistribute(..., forward_dtype=float32)). Same data as the C13 cases. Asserts the fp32-reduce
    output within rtol=atol=1e-3 of the fp32 reference and its max and mean error strictly below the
    plain reduce's; backward through both paths (per-rank copy of L = sum(y * G)) gives agreeing
    grads, the check C13 makes."""
    api = ctx.api
    torch = api.torch
    dtype, lin, x, G, ref_out = _c13_data(ctx, dtype_name)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.RowwiseParallel(output_layouts=api.Partial(), use_local_output=False))
    ctx.step("forward")
    blk = _blk(C13_IN, ctx)
    xt = x[:, blk].clone().requires_grad_(True)
    out = lin(xt)
    assert isinstance(out, api.DTensor) and tuple(out.placements) == (api.Partial(),) and out.dtype == dtype, \
        f"expected a {dtype} Partial DTensor, got {type(out)} {getattr(out, 'placements', None)} {out.dtype}"
    lo = out.redistribute(placements=[api.Replicate()]).to_local()
    hi = api.DTensor.from_local(out.to_local().float(), ctx.mesh, [api.Partial()]).redistribute(
        placements=[api.Replicate()]).to_local()
    hi2 = out.redistribute(placements=[api.Replicate()], forward_dtype=torch.float32).to_local()
    assert lo.dtype == dtype and hi.dtype == torch.float32, f"reduce dtypes {lo.dtype}, {hi.dtype}"
    ctx.assert_equal(_plain(hi2), _plain(hi), label="forward_dtype=float32 reduce = cast-then-reduce")
    _c13_check_errors(ctx, _plain(hi), _plain(lo), ref_out, dtype_name)
    ctx.step("backward")
    g_hi = torch.autograd.grad((hi * G).sum(), [lin.weight, xt], retain_graph=True)
    g_lo = torch.autograd.grad((lo.float() * G).sum(), [lin.weight, xt])
    assert g_hi[0].dtype == dtype, f"weight grad dtype {g_hi[0].dtype}"
    ctx.assert_close(g_hi[0].full_tensor().float(), g_lo[0].full_tensor().float(), rtol=LP_RTOL, atol=LP_ATOL,
                     label="weight grad: fp32-reduce path vs plain path")
    ctx.assert_close(_gather(api, ctx.mesh, g_hi[1], api.Shard(1)).float(),
                     _gather(api, ctx.mesh, g_lo[1], api.Shard(1)).float(),
                     rtol=LP_RTOL, atol=LP_ATOL, label="input grad: fp32-reduce path vs plain path")


def _c13_premise_fp16(ctx):
    _c13_premise(ctx, "fp16")


def _c13_premise_bf16(ctx):
    _c13_premise(ctx, "bf16")


register(ScenarioCase(
    name="tp_C13_premise_fp32_reduce_fp16",
    fn=_c13_premise_fp16,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C13",
))

register(ScenarioCase(
    name="tp_C13_premise_fp32_reduce_bf16",
    fn=_c13_premise_bf16,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C13",
))


# ---------------------------------------------------------------- C14

def _c14_check_norm(ctx, norm, ref, x, G, dim, use_local_output):
    """Shared body: norm already parallelised with SequenceParallel(sequence_dim=dim); rank r feeds
    the chunk of x along ``dim``. Loss L_r = sum(y_r * G_r) (sum_r = L_ref): replicated norm
    weight(s) get partial grads -> gathered = reference; input chunk grad = reference chunk."""
    api = ctx.api
    n = x.shape[dim]
    idx = [slice(None)] * x.dim()
    idx[dim] = _blk(n, ctx)
    idx = tuple(idx)
    ctx.step("forward")
    xt = x[idx].clone().requires_grad_(True)
    y = norm(xt)
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    if use_local_output:
        assert not isinstance(y, api.DTensor), f"use_local_output=True must give a local tensor, got {type(y)}"
        y_local = y
        y_full = _gather(api, ctx.mesh, y, api.Shard(dim))
    else:
        assert isinstance(y, api.DTensor) and tuple(y.placements) == (api.Shard(dim),), \
            f"output must be a Shard({dim}) DTensor, got {type(y)} {getattr(y, 'placements', None)}"
        y_local = y.to_local()
        y_full = y.full_tensor().detach()
    ctx.assert_close(y_local.detach(), yr.detach()[idx], rtol=RTOL, atol=ATOL, label="local chunk vs reference chunk")
    ctx.assert_close(y_full, yr.detach(), rtol=RTOL, atol=ATOL, label="gathered output")
    ctx.step("backward")
    (y_local * G[idx]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, norm, ref)
    ctx.assert_close(xt.grad, xr.grad[idx], rtol=RTOL, atol=ATOL, label="input chunk grad")


def _c14_qwen_qnorm(ctx):
    """Qwen q_norm: RMSNorm(head_dim=8) on q of shape (B=2, S=3, n_heads=4, head_dim=8) whose head
    dim 2 is sharded by the Colwise q_proj; SequenceParallel(sequence_dim=2, use_local_output=True)
    as in the Qwen3.5 plan (the plan's model examples)."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(114)
    norm = nn.RMSNorm(8)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(8))
    ref = copy.deepcopy(norm)
    x = torch.randn(2, 3, 4, 8)
    G = torch.randn(2, 3, 4, 8)
    ctx.step("apply")
    api.parallelize_module(norm, ctx.mesh, api.SequenceParallel(sequence_dim=2, use_local_output=True))
    _c14_check_norm(ctx, norm, ref, x, G, 2, True)


register(ScenarioCase(
    name="tp_C14_sequence_dim2_qwen_qnorm_rmsnorm",
    fn=_c14_qwen_qnorm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C14",
))


def _c14_bhsd_layernorm(ctx):
    """LayerNorm(8) over the last dim of a (B=2, H=2, S=8, D=8) attention-layout activation,
    SequenceParallel(sequence_dim=2) with the default use_local_output=False (Shard(2) DTensor out)."""
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(124)
    norm = nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(8))
        norm.bias.copy_(torch.randn(8))
    ref = copy.deepcopy(norm)
    x = torch.randn(2, 2, 8, 8)
    G = torch.randn(2, 2, 8, 8)
    ctx.step("apply")
    api.parallelize_module(norm, ctx.mesh, api.SequenceParallel(sequence_dim=2))
    _c14_check_norm(ctx, norm, ref, x, G, 2, False)


register(ScenarioCase(
    name="tp_C14_sequence_dim2_bhsd_layernorm",
    fn=_c14_bhsd_layernorm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("dtensor", "tp.styles"),
    spec_id="C14",
))


# ================================================================ 4 ranks
# The TP test plan, class C numerics on 4 ranks (mesh (4,) ("tp",)): C6 SequenceParallel LayerNorm
# forward+backward, C10 PrepareModuleInput -> Colwise Linear, C12 PrepareModuleInputOutput MLP block
# (the 4-card items of the plan's 4-card priority). The 2-rank C cases are above.
#
# Every case builds the full module with ``torch.manual_seed`` (identical full weights and inputs on
# every rank), deep-copies it as the single-device reference BEFORE ``parallelize_module``, and
# compares the forward output and every parameter gradient and input gradient, gathered by layout
# (a DTensor gradient with ``.full_tensor()``, which all-reduces a ``Partial`` gradient; a local
# tensor of known layout ``L`` with ``DTensor.from_local(t, mesh, [L]).full_tensor()``).
#
# Tolerance: fp32 ``rtol=1.5e-4, atol=1e-5`` (the plan's tolerance rule), never widened.
#
# Expected gradients: in all three cases the module output is sharded (Shard(1) sequence chunks or
# Shard(-1) feature columns), and rank r back-propagates ``L_r = sum(y_r * G_r)`` over its own slice
# ``G_r`` of a cotangent ``G`` built identically on every rank. The slices are disjoint, so the
# logical loss the ranks optimise together is ``L = sum_r L_r = sum(y * G) = L_ref``, the
# single-device loss: every gathered gradient must equal the reference gradient with factor 1.
# * A sharded parameter block influences only its own rank's output slice -> its local grad is the
#   matching block of the reference grad.
# * A replicated parameter applied to sequence chunks (LayerNorm weight/bias under SequenceParallel)
#   gets ``dL_r/dw`` on rank r: a partial sum whose total over ranks is the reference grad (torch
#   hands it back as a ``Partial`` DTensor gradient, gathered by the all-reduce of ``full_tensor``).
# * An input chunk that was all-gathered (Shard -> Replicate) receives, in backward, the
#   reduce-scatter of the per-rank partial input grads -> its grad is the reference grad's chunk.
# (The Replicate-output case and the plan's gradient-scale claim 'divide Rowwise grads by tp_size' claim are derived
# and checked above.)


# ---------------------------------------------------------------- C6

register(ScenarioCase(
    name="tp_C6_sequence_parallel_layernorm_fwd_bwd_4",
    fn=_c6_sp_layernorm,  # the 2-rank function: written for any tp size dividing its dims
    mesh_shape=MESH4, mesh_dim_names=TP, tags=L1,
    requires=("dtensor", "tp.styles"),
    spec_id="C6",
))


# ---------------------------------------------------------------- C10

register(ScenarioCase(
    name="tp_C10_prepare_input_then_colwise_fwd_bwd_4",
    fn=_c10_prepare_input_colwise,  # the 2-rank function: written for any tp size dividing its dims
    mesh_shape=MESH4, mesh_dim_names=TP, tags=L1,
    requires=("dtensor", "tp.styles"),
    spec_id="C10",
))


# ---------------------------------------------------------------- C12

def _c12_prepare_io_mlp_block(ctx):
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
    ctx.assert_close(_plain(y), yr.detach()[:, blk], rtol=RTOL, atol=ATOL,
                     label="local output = reference sequence chunk")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(1)), yr.detach(), rtol=RTOL, atol=ATOL,
                     label="gathered output")
    ctx.step("backward")
    (y * G[:, blk]).sum().backward()
    (yr * G).sum().backward()
    _check_param_grads(ctx, block, ref)
    ctx.assert_close(xt.grad, xr.grad[:, blk], rtol=RTOL, atol=ATOL, label="input chunk grad")


register(ScenarioCase(
    name="tp_C12_prepare_input_output_mlp_block_fwd_bwd_4",
    fn=_c12_prepare_io_mlp_block,
    mesh_shape=MESH4, mesh_dim_names=TP, tags=L1,
    requires=("dtensor", "tp.styles"),
    spec_id="C12",
))


register(ScenarioCase(
    name="tp_C12_prepare_input_output_mlp_block_fwd_bwd",
    fn=_c12_prepare_io_mlp_block,  # written for any tp size dividing 8 (sequence) and 32 (fc1 out)
    mesh_shape=MESH2, mesh_dim_names=TP, tags=HOOKS_L0,
    requires=("dtensor", "tp.styles"),
    spec_id="C12",
))
