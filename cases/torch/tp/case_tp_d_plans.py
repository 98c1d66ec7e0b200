"""The TP test plan, class D: composed styles and business plans (D1–D5), 2 ranks on a ("tp",) mesh.

- D1 ``tp_D1_glob_every_layer``: a 3-layer model planned with the glob keys
  ``layers.*.mlp.gate_proj`` / ``up_proj`` (ColwiseParallel) and ``layers.*.mlp.down_proj``
  (RowwiseParallel). Every layer's projections get the shard-dim table placements; a decoy
  ``layers.<i>.gate_proj`` (same leaf name, not under ``mlp``) and a root ``head`` stay plain
  parameters; forward and backward match the reference.
- D2 ``tp_D2_root_colwise``: ``parallelize_module(linear, mesh, ColwiseParallel())`` — a single
  style on the root module: Shard(0) weight and bias, forward/backward as C1; the style object gets
  the call's ``src_data_rank`` written into it (parallelize_module's contract), checked with ``src_data_rank=None``
  as well.
- D3 ``tp_D3_qwen_block`` (the TP plan's common acceptance unit): a tiny Qwen-like decoder block,
  RMSNorm (the Python implementation SequenceParallel supports) → attention → residual →
  RMSNorm → SwiGLU MLP → residual, with the Qwen3.5 plan of the plan's model examples: SequenceParallel norms,
  PrepareModuleInput(Shard(1) → Replicate) on ``self_attn`` and ``mlp``, Colwise q/k/v and
  gate/up, Rowwise o_proj/down_proj(output_layouts=Shard(1), use_local_output=False). The block
  input is a Shard(1) DTensor (what Qwen's Rowwise embed_tokens hands it). Plain softmax attention
  written with torch ops, 4 heads of 4 (2 local heads per rank). Checks what the attention module
  receives (a Replicate DTensor of the full sequence), that o_proj returns a Shard(1) DTensor, the
  block output layout, the output and every gradient.
- D4 ``tp_D4_lm_head_loss_parallel``: lm_head ColwiseParallel(input_layouts=Shard(1),
  output_layouts=Shard(-1), use_local_output=False) fed the local sequence shard of the hidden
  states: the logits stay a DTensor sharded on the vocabulary (Shard(2) == Shard(-1) of a 3-D
  tensor); under ``loss_parallel()`` cross-entropy (mean) and its backward match the reference.
- D5 ``tp_D5_noparallel_norm``: the block of D3 with sequence parallelism switched off — NoParallel
  norms (replicated parameters, Replicate input and output), attention/MLP with default
  Colwise/Rowwise (Replicate in and out), a replicated plain input. torch 2.13 has no NoParallel
  (feature "tp.no_parallel"), so this case is reported unsupported there; it is written against
  the styles' constructor parameters (``input_layout``/``desired_input_layout``/``output_layout``, singular;
  ``use_local_output``
  default True).

Gradients. Every rank evaluates the same scalar loss L: ``L = sum(Y * G)`` with ``G`` a fixed
random tensor (seeded identically on every rank) and ``Y`` the full output (gathered by layout
where the output is sharded; D4's L is the cross-entropy). The reference computes the same L on one
device with the same full weights (deepcopy before parallelize_module). Nothing sums L over the
tp ranks: a Replicate output's gradient is used as is (torch's Rowwise backward issues no
collective, see tp_comm_rowwise_allreduce), a sharded one flows back to each rank's own slice, and
partial sums (the input gradient of a Colwise layer, a replicated norm weight seen by a sequence
shard) are reduced when the gradient is gathered. So every gathered gradient — Colwise Shard(0),
Rowwise Shard(1), replicated biases and norm weights (``full_tensor()`` reduces a Partial grad) —
must equal the reference ∇L itself, with no division by tp_size. The plan's gradient-scale claim/the plan's tolerance
rule "Rowwise
gradient divided by tp_size" is its NPU ST's convention and does not hold for this loss; a
gradient tp_size times too large would fail here.

Tolerances: fp32 throughout, the plan's tolerance rule rtol=1.5e-4, atol=1e-5 (measured errors are ~1e-6 or less:
the sharded path only reorders sums).
"""
import copy
import math

from meshtest import ScenarioCase, register

L1_NPU0 = ("cpu_level1", "npu_level0", "npu_level1")
MESH2 = (2,)
TP = ("tp",)
RTOL = 1.5e-4
ATOL = 1e-5
H = 16          # hidden size
NH = 4          # attention heads (divisible by tp)
HD = 4          # head dim
INTER = 32      # MLP intermediate size


def _grads_match(ctx, model, ref, names=None):
    """Every parameter's gathered gradient equals the reference's (see the module docstring)."""
    ref_params = dict(ref.named_parameters())
    checked = 0
    for name, p in model.named_parameters():
        if names is not None and name not in names:
            continue
        assert p.grad is not None, f"{name}: no gradient"
        g = p.grad.full_tensor() if isinstance(p.grad, ctx.api.DTensor) else p.grad
        ctx.assert_close(g, ref_params[name].grad, rtol=RTOL, atol=ATOL, label=f"{name}.grad")
        checked += 1
    assert checked == len(ref_params if names is None else names), f"checked {checked} gradients"


def _placements(api, p):
    assert isinstance(p, api.DTensor), f"expected a DTensor parameter, got {type(p).__name__}"
    return tuple(p.placements)


def _build_block_classes(api):
    torch, nn = api.torch, api.nn

    class RMSNorm(nn.Module):
        """Qwen/llama RMSNorm, the Python implementation SequenceParallel supports."""

        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, NH * HD)
            self.k_proj = nn.Linear(H, NH * HD)
            self.v_proj = nn.Linear(H, NH * HD)
            self.o_proj = nn.Linear(NH * HD, H)
            self.seen_input = None

        def forward(self, x):
            self.seen_input = (type(x), tuple(getattr(x, "placements", ())), tuple(x.shape))
            b, s = x.shape[0], x.shape[1]
            # -1: the local head count (NH / tp after Colwise q/k/v, NH on one device)
            q = self.q_proj(x).view(b, s, -1, HD).transpose(1, 2)
            k = self.k_proj(x).view(b, s, -1, HD).transpose(1, 2)
            v = self.v_proj(x).view(b, s, -1, HD).transpose(1, 2)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HD), dim=-1)
            o = (att @ v).transpose(1, 2).reshape(b, s, -1)
            return self.o_proj(o)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(H, INTER)
            self.up_proj = nn.Linear(H, INTER)
            self.down_proj = nn.Linear(INTER, H)

        def forward(self, x):
            return self.down_proj(api.F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(H)
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm(H)
            self.mlp = MLP()
            self.seen_attn_out = None

        def forward(self, x):
            a = self.self_attn(self.input_layernorm(x))
            self.seen_attn_out = (type(a), tuple(getattr(a, "placements", ())))
            h = x + a
            return h + self.mlp(self.post_attention_layernorm(h))

    return Block, MLP


def _randomize_norms(api, block):
    """Non-trivial norm weights, so that a wrong norm-weight gradient or layout shows."""
    with api.torch.no_grad():
        for norm in (block.input_layernorm, block.post_attention_layernorm):
            norm.weight.copy_(1.0 + 0.2 * api.torch.randn_like(norm.weight))


# ---------------------------------------------------------------- D1

def _d1_glob_every_layer(ctx):
    api = ctx.api
    torch, nn = api.torch, api.nn
    _, MLP = _build_block_classes(api)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = MLP()
            self.gate_proj = nn.Linear(H, H)  # decoy: same leaf name, not under "mlp"

        def forward(self, x):
            return x + self.mlp(x) + self.gate_proj(x)

    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(n))
            self.head = nn.Linear(H, H)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    n_layers = 3
    torch.manual_seed(31)
    model = Model(n_layers)
    ref = copy.deepcopy(model)
    x = torch.randn(2, 4, H)
    g = torch.randn(2, 4, H)
    tp = ctx.world_size
    ctx.step("apply")
    api.parallelize_module(model, ctx.mesh, {
        "layers.*.mlp.gate_proj": api.ColwiseParallel(),
        "layers.*.mlp.up_proj": api.ColwiseParallel(),
        "layers.*.mlp.down_proj": api.RowwiseParallel(),
    })
    ctx.step("placements")
    S0, S1, R = api.Shard(0), api.Shard(1), api.Replicate()
    for i, layer in enumerate(model.layers):
        mlp = layer.mlp
        for proj in ("gate_proj", "up_proj"):
            m = getattr(mlp, proj)
            assert _placements(api, m.weight) == (S0,), f"layers.{i}.mlp.{proj}.weight {m.weight.placements}"
            assert _placements(api, m.bias) == (S0,), f"layers.{i}.mlp.{proj}.bias {m.bias.placements}"
            assert tuple(m.weight.to_local().shape) == (INTER // tp, H), (
                f"layers.{i}.mlp.{proj} local {m.weight.to_local().shape}")
        assert _placements(api, mlp.down_proj.weight) == (S1,), (
            f"layers.{i}.mlp.down_proj.weight {mlp.down_proj.weight.placements}")
        assert _placements(api, mlp.down_proj.bias) == (R,), (
            f"layers.{i}.mlp.down_proj.bias {mlp.down_proj.bias.placements}")
        assert tuple(mlp.down_proj.weight.to_local().shape) == (H, INTER // tp)
        for name, p in layer.gate_proj.named_parameters():
            assert not isinstance(p, api.DTensor), f"decoy layers.{i}.gate_proj.{name} was parallelized by the glob"
    for name, p in model.head.named_parameters():
        assert not isinstance(p, api.DTensor), f"head.{name} was parallelized"
    ctx.note(f"glob hit all {n_layers} layers; decoys untouched")
    ctx.step("forward")
    xd = x.clone().requires_grad_(True)
    y = model(xd)
    assert not isinstance(y, api.DTensor), f"model output is {type(y).__name__}; Rowwise default returns a local tensor"
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    ctx.assert_close(y.detach(), yr.detach(), rtol=RTOL, atol=ATOL, label="model output (Replicate)")
    ctx.step("backward")
    (y * g).sum().backward()
    (yr * g).sum().backward()
    ctx.assert_close(xd.grad, xr.grad, rtol=RTOL, atol=ATOL, label="input gradient")
    _grads_match(ctx, model, ref)


# ---------------------------------------------------------------- D2

def _d2_root_colwise(ctx):
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(32)
    lin = nn.Linear(H, 24)
    ref = copy.deepcopy(lin)
    lin_none = copy.deepcopy(lin)
    x = torch.randn(4, H)
    g = torch.randn(4, 24)
    tp, r = ctx.world_size, ctx.rank
    ctx.step("apply")
    style = api.ColwiseParallel()
    model = api.parallelize_module(lin, ctx.mesh, style)
    assert style.src_data_rank == 0, f"style.src_data_rank {style.src_data_rank!r} after the default call; expected 0"
    style_none = api.ColwiseParallel()
    model_none = api.parallelize_module(lin_none, ctx.mesh, style_none, src_data_rank=None)
    assert style_none.src_data_rank is None, (
        f"style.src_data_rank {style_none.src_data_rank!r} after src_data_rank=None; parallelize_module must write it")
    ctx.step("placements")
    for m, label in ((model, "src_data_rank=0"), (model_none, "src_data_rank=None")):
        assert _placements(api, m.weight) == (api.Shard(0),), f"{label}: weight {m.weight.placements}"
        assert _placements(api, m.bias) == (api.Shard(0),), f"{label}: bias {m.bias.placements}"
        ctx.assert_equal(m.weight.to_local(), ref.weight.detach().chunk(tp, 0)[r], label=f"{label}: local weight")
        ctx.assert_equal(m.bias.to_local(), ref.bias.detach().chunk(tp, 0)[r], label=f"{label}: local bias")
    ctx.step("forward")
    xd = x.clone().requires_grad_(True)
    y = model(xd)
    assert not isinstance(y, api.DTensor), f"default use_local_output=True must return a local tensor, got {type(y)}"
    assert tuple(y.shape) == (4, 24 // tp), f"local output shape {tuple(y.shape)}"
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    full = api.DTensor.from_local(y, ctx.mesh, [api.Shard(1)]).full_tensor()
    ctx.assert_close(full, yr.detach(), rtol=RTOL, atol=ATOL, label="output gathered on the last dim")
    ctx.assert_close(model_none(x), yr.detach().chunk(tp, -1)[r], rtol=RTOL, atol=ATOL,
                     label="src_data_rank=None local output")
    ctx.step("backward")
    # L = sum(Y * G); this rank's local output is the column block r of Y
    (y * g.chunk(tp, -1)[r]).sum().backward()
    (yr * g).sum().backward()
    ctx.assert_close(xd.grad, xr.grad, rtol=RTOL, atol=ATOL, label="input gradient")
    _grads_match(ctx, model, ref)


# ---------------------------------------------------------------- D3

def _d3_qwen_block(ctx):
    api = ctx.api
    torch = api.torch
    Block, _ = _build_block_classes(api)
    torch.manual_seed(33)
    block = Block()
    _randomize_norms(api, block)
    ref = copy.deepcopy(block)
    B, S = 2, 4
    x = torch.randn(B, S, H)
    g = torch.randn(B, S, H)
    S1, R = api.Shard(1), api.Replicate()
    ctx.step("apply")
    api.parallelize_module(block, ctx.mesh, {
        "input_layernorm": api.SequenceParallel(),
        "self_attn": api.PrepareModuleInput(input_layouts=(S1,), desired_input_layouts=(R,)),
        "self_attn.q_proj": api.ColwiseParallel(),
        "self_attn.k_proj": api.ColwiseParallel(),
        "self_attn.v_proj": api.ColwiseParallel(),
        "self_attn.o_proj": api.RowwiseParallel(output_layouts=S1, use_local_output=False),
        "post_attention_layernorm": api.SequenceParallel(),
        "mlp": api.PrepareModuleInput(input_layouts=(S1,), desired_input_layouts=(R,)),
        "mlp.gate_proj": api.ColwiseParallel(),
        "mlp.up_proj": api.ColwiseParallel(),
        "mlp.down_proj": api.RowwiseParallel(output_layouts=S1, use_local_output=False),
    })
    ctx.step("placements")
    expect = {"input_layernorm.weight": (R,), "post_attention_layernorm.weight": (R,),
              "self_attn.o_proj.weight": (api.Shard(1),), "self_attn.o_proj.bias": (R,),
              "mlp.down_proj.weight": (api.Shard(1),), "mlp.down_proj.bias": (R,)}
    for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
        expect[f"{proj}.weight"] = expect[f"{proj}.bias"] = (api.Shard(0),)
    params = dict(block.named_parameters())
    assert sorted(params) == sorted(expect), f"parameters {sorted(params)}"
    for name, want in expect.items():
        assert _placements(api, params[name]) == want, f"{name}: placements {params[name].placements}, expected {want}"
    ctx.step("forward")
    # the block's input: a sequence-sharded DTensor, as Qwen's Rowwise embed_tokens(output Shard(1),
    # use_local_output=False) hands it over
    xd = api.distribute_tensor(x, ctx.mesh, [S1]).requires_grad_(True)
    y = block(xd)
    typ, pl, shape = block.self_attn.seen_input
    assert typ is api.DTensor and pl == (R,) and shape == (B, S, H), (
        f"self_attn received {typ.__name__} {pl} {shape}; PrepareModuleInput must hand it a Replicate DTensor of the "
        "full sequence")
    typ, pl = block.seen_attn_out
    assert typ is api.DTensor and pl == (S1,), f"o_proj returned {typ.__name__} {pl}; expected a Shard(1) DTensor"
    assert isinstance(y, api.DTensor) and tuple(y.placements) == (S1,), (
        f"block output {type(y).__name__} {getattr(y, 'placements', None)}; expected a Shard(1) DTensor")
    assert tuple(y.to_local().shape) == (B, S // ctx.world_size, H), f"local output shape {tuple(y.to_local().shape)}"
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    yfull = y.full_tensor()
    ctx.assert_close(yfull.detach(), yr.detach(), rtol=RTOL, atol=ATOL, label="block output gathered")
    ctx.step("backward")
    (yfull * g).sum().backward()
    (yr * g).sum().backward()
    assert isinstance(xd.grad, api.DTensor), f"input gradient {type(xd.grad).__name__}"
    ctx.assert_close(xd.grad.full_tensor(), xr.grad, rtol=RTOL, atol=ATOL, label="input gradient")
    norm_grad = block.input_layernorm.weight.grad
    ctx.note(f"SequenceParallel norm weight grad placements: {tuple(norm_grad.placements)}")
    _grads_match(ctx, block, ref)


# ---------------------------------------------------------------- D4

def _d4_lm_head_loss_parallel(ctx):
    api = ctx.api
    torch, nn, F = api.torch, api.nn, api.F
    V = 32
    torch.manual_seed(34)
    lm_head = nn.Linear(H, V, bias=False)
    ref = copy.deepcopy(lm_head)
    B, S = 2, 4
    h = torch.randn(B, S, H)
    labels = torch.randint(0, V, (B, S))
    tp, r = ctx.world_size, ctx.rank
    ctx.step("apply")
    api.parallelize_module(lm_head, ctx.mesh, api.ColwiseParallel(
        input_layouts=api.Shard(1), output_layouts=api.Shard(-1), use_local_output=False))
    assert _placements(api, lm_head.weight) == (api.Shard(0),), f"lm_head.weight {lm_head.weight.placements}"
    ctx.step("forward")
    h_local = h.chunk(tp, dim=1)[r].clone().requires_grad_(True)  # annotated Shard(1) by input_layouts
    logits = lm_head(h_local)
    assert isinstance(logits, api.DTensor), (
        f"logits are {type(logits).__name__}; use_local_output=False keeps a DTensor")
    assert len(logits.placements) == 1 and isinstance(logits.placements[0], api.Shard) \
        and logits.placements[0].dim % logits.ndim == logits.ndim - 1, (
            f"logits placements {logits.placements}; expected Shard(-1) (the vocabulary dim)")
    assert tuple(logits.shape) == (B, S, V) and tuple(logits.to_local().shape) == (B, S, V // tp), (
        f"logits global {tuple(logits.shape)} local {tuple(logits.to_local().shape)}")
    hr = h.clone().requires_grad_(True)
    ref_logits = ref(hr)
    ctx.assert_close(logits.full_tensor().detach(), ref_logits.detach(), rtol=RTOL, atol=ATOL, label="logits gathered")
    ctx.step("loss_parallel forward+backward")
    with api.loss_parallel():  # backward must run inside the context as well
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1))
        loss.backward()
    ref_loss = F.cross_entropy(ref_logits.flatten(0, 1), labels.flatten(0, 1))
    ref_loss.backward()
    assert isinstance(loss, api.DTensor), f"loss_parallel cross-entropy returned {type(loss).__name__}"
    ctx.assert_close(loss.full_tensor().detach(), ref_loss.detach(), rtol=RTOL, atol=ATOL, label="cross-entropy loss")
    ctx.step("gradients")
    ctx.assert_close(lm_head.weight.grad.full_tensor(), ref.weight.grad, rtol=RTOL, atol=ATOL,
                     label="lm_head.weight.grad")
    ctx.assert_close(h_local.grad, hr.grad.chunk(tp, dim=1)[r], rtol=RTOL, atol=ATOL,
                     label="hidden-state gradient (this rank's sequence shard)")


# ---------------------------------------------------------------- D5

def _d5_noparallel_norm(ctx):
    api = ctx.api
    torch = api.torch
    Block, _ = _build_block_classes(api)
    torch.manual_seed(35)
    block = Block()
    _randomize_norms(api, block)
    ref = copy.deepcopy(block)
    B, S = 2, 4
    x = torch.randn(B, S, H)
    g = torch.randn(B, S, H)
    R = api.Replicate()
    ctx.step("apply")
    api.parallelize_module(block, ctx.mesh, {
        "input_layernorm": api.NoParallel(),
        "self_attn.q_proj": api.ColwiseParallel(),
        "self_attn.k_proj": api.ColwiseParallel(),
        "self_attn.v_proj": api.ColwiseParallel(),
        "self_attn.o_proj": api.RowwiseParallel(),
        "post_attention_layernorm": api.NoParallel(input_layout=R, desired_input_layout=R, output_layout=R,
                                                   use_local_output=True),  # the constructor's defaults, spelled out
        "mlp.gate_proj": api.ColwiseParallel(),
        "mlp.up_proj": api.ColwiseParallel(),
        "mlp.down_proj": api.RowwiseParallel(),
    })
    ctx.step("placements")
    for norm in ("input_layernorm", "post_attention_layernorm"):
        w = getattr(block, norm).weight
        assert _placements(api, w) == (R,), f"{norm}.weight {w.placements}; NoParallel replicates"
        ctx.assert_equal(w.to_local(), getattr(ref, norm).weight.detach(), label=f"{norm}.weight local (full)")
    ctx.step("forward")
    xd = x.clone().requires_grad_(True)  # replicated plain input: every rank holds all of it
    y = block(xd)
    typ, pl, shape = block.self_attn.seen_input
    assert typ is not api.DTensor and shape == (B, S, H), (
        f"self_attn received {typ.__name__} {pl} {shape}; NoParallel use_local_output=True hands on the full local "
        "tensor")
    assert not isinstance(y, api.DTensor), f"block output {type(y).__name__}; expected a local (replicated) tensor"
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    ctx.assert_close(y.detach(), yr.detach(), rtol=RTOL, atol=ATOL, label="block output (every rank)")
    ctx.step("backward")
    (y * g).sum().backward()
    (yr * g).sum().backward()
    ctx.assert_close(xd.grad, xr.grad, rtol=RTOL, atol=ATOL, label="input gradient")
    _grads_match(ctx, block, ref)


register(ScenarioCase(
    name="tp_D1_glob_every_layer",
    fn=_d1_glob_every_layer,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("tp.styles",),
    spec_id="D1",
))

register(ScenarioCase(
    name="tp_D2_root_colwise",
    fn=_d2_root_colwise,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("tp.styles",),
    spec_id="D2",
))

register(ScenarioCase(
    name="tp_D3_qwen_block",
    fn=_d3_qwen_block,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("tp.styles",),
    spec_id="D3",
))

register(ScenarioCase(
    name="tp_D4_lm_head_loss_parallel",
    fn=_d4_lm_head_loss_parallel,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("tp.styles", "loss_parallel"),
    spec_id="D4",
))

register(ScenarioCase(
    name="tp_D5_noparallel_norm",
    fn=_d5_noparallel_norm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L1_NPU0,
    requires=("tp.styles", "tp.no_parallel"),
    spec_id="D5",
))
