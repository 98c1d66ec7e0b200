"""The TP test plan's C15 (with parallelize_module's contract "mixed parallelism", the plan's mixed-parallel order,
the plan's verification question 5): TP then FSDP2 on a 2-D
("dp", "tp") mesh of 4 ranks, forward and backward against the single-device reference.

The model is the activation-communication table MLP ``down(relu(up(x)))`` (up: Linear(8, 16) ColwiseParallel, down:
Linear(16, 8) RowwiseParallel). ``parallelize_module(model, mesh["tp"], plan)`` runs first, then
``fully_shard(model, mesh=mesh["dp"])``, exactly the order parallelize_module's contract prescribes. The single-device
reference is a deepcopy taken before either step, so it holds the same full weights.

Parameters. After TP each parameter is a DTensor on the 1-D tp mesh with the shard-dim table placement;
after FSDP2 it must be a DTensor on the 2-D mesh whose tp entry is still that placement and whose
dp entry shards tensor dim 0 (FSDP2 shards dim 0 of each TP-local shard; torch spells that
``_StridedShard(dim=0, split_factor=tp)`` for the Colwise parameters whose dim 0 is already
tp-sharded, and ``Shard(0)`` for the Rowwise ones). The layout is checked by content, not only by
name: every rank's local block must be dp-chunk ``d`` (dim 0) of tp-shard ``t`` of the original full
weight, and ``full_tensor()`` must give back the full weight. The same holds after backward (FSDP2
reshards after backward), and each gradient is a DTensor with the parameter's placements.

Data. The global batch X (8 rows) is split on dim 0 over dp: rank (d, t) feeds rows
X_d = chunk(X, dp)[d]; the two tp ranks of one dp index feed the same rows (TP needs a Replicate
input). The output of the Rowwise layer is Replicate over tp, so every rank holds Y_d = f(X_d).

Loss and gradient derivation. Each rank minimises L_d = sum(Y_d * G_d), G a fixed random tensor
(seeded identically on every rank), G_d its dp slice; the two tp ranks of index d compute the same
scalar L_d. Within a dp group TP backward gives the gradient of L_d itself (a Replicate output's
gradient is not summed over tp: torch's Rowwise backward issues no collective), so before FSDP's
reduction rank (d, t) holds the tp-shard t of dL_d/dW. FSDP2 then reduce-scatters over the dp mesh
with the default ReduceOp.AVG (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
``_get_gradient_divide_factors``: data_parallel_size = dp group size, factor None, fp32 → AVG; the tp
dim is not part of that group). Hence the gathered gradient is
    grad W = (1/dp) * sum_d dL_d/dW = (1/dp) * dL_ref/dW,  L_ref = sum_d L_d = sum(f(X) * G),
i.e. the reference gradient of the full-batch loss divided by dp (= 2). A gradient that FSDP summed
instead of averaging, or that TP counted once per tp rank (the "gradient amplification" of the plan's verification
questions
item 5), would be 2x this and fails. Losses: every rank's L_d equals the reference's L_d, and the
sum of L_d over the dp mesh equals L_ref.

Tolerances: fp32, the plan's tolerance rule rtol=1.5e-4, atol=1e-5 (the sharded path only reorders sums; the
1/dp average is exact in binary).
"""
import copy

from meshtest import ScenarioCase, register

L1 = ("cpu_level1", "npu_level0", "npu_level1")  # the TP test plan's priority E: C15 is must-run on 4 NPU cards
MESH22 = (2, 2)
DP_TP = ("dp", "tp")
RTOL = 1.5e-4
ATOL = 1e-5


def _expected_local(full, tp_pl, t, tp, d, dp, api):
    """Rank (d, t)'s block: FSDP2's dim-0 chunk d of the TP-local shard t."""
    tp_local = full.chunk(tp, dim=tp_pl.dim)[t] if isinstance(tp_pl, api.Shard) else full
    return tp_local.chunk(dp, dim=0)[d]


def _check_2d_params(ctx, model, full_weights, tp_placements, dp, tp, when):
    api = ctx.api
    d, t = ctx.mesh.get_local_rank("dp"), ctx.mesh.get_local_rank("tp")
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(tp_placements), f"{when}: parameters {sorted(params)}"
    seen = {}
    for name, p in params.items():
        assert isinstance(p, api.DTensor), f"{when}: {name} is {type(p).__name__}, expected a DTensor"
        assert tuple(p.device_mesh.mesh_dim_names) == DP_TP and tuple(p.device_mesh.shape) == MESH22, (
            f"{when}: {name} lives on mesh {p.device_mesh}; expected the 2-D ('dp', 'tp') mesh")
        pl_dp, pl_tp = p.placements
        seen[name] = f"({pl_dp!r}, {pl_tp!r})"
        assert pl_tp == tp_placements[name], f"{when}: {name} tp placement {pl_tp}; expected {tp_placements[name]}"
        assert not isinstance(pl_dp, (api.Replicate, api.Partial)) and getattr(pl_dp, "dim", None) == 0, (
            f"{when}: {name} dp placement {pl_dp}; FSDP2 must shard tensor dim 0")
        ctx.assert_equal(p.to_local(), _expected_local(full_weights[name], pl_tp, t, tp, d, dp, api),
                         label=f"{when}: {name} local block (dp {d}, tp {t})")
        ctx.assert_equal(p.full_tensor(), full_weights[name], label=f"{when}: {name}.full_tensor()")
    return seen


def _c15_tp_then_fsdp(ctx):
    api = ctx.api
    torch, nn = api.torch, api.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))

    torch.manual_seed(15)
    model = MLP()
    ref = copy.deepcopy(model)
    full_weights = {n: p.detach().clone() for n, p in ref.named_parameters()}
    x = torch.randn(8, 8)       # global batch
    g = torch.randn(8, 8)       # loss weights, L = sum(Y * G)
    dp_mesh, tp_mesh = ctx.mesh["dp"], ctx.mesh["tp"]
    dp, tp = dp_mesh.size(), tp_mesh.size()
    d = ctx.mesh.get_local_rank("dp")
    S0, S1, R = api.Shard(0), api.Shard(1), api.Replicate()
    tp_placements = {"up.weight": S0, "up.bias": S0, "down.weight": S1, "down.bias": R}

    ctx.step("tensor parallel")
    api.parallelize_module(model, tp_mesh, {"up": api.ColwiseParallel(), "down": api.RowwiseParallel()})
    for name, p in model.named_parameters():
        assert isinstance(p, api.DTensor) and tuple(p.placements) == (tp_placements[name],) \
            and p.device_mesh.ndim == 1, f"after TP: {name} {type(p).__name__} {getattr(p, 'placements', None)}"

    ctx.step("fully_shard")
    api.fully_shard(model, mesh=dp_mesh)
    seen = _check_2d_params(ctx, model, full_weights, tp_placements, dp, tp, "after fully_shard")
    ctx.note(f"2-D placements (dp, tp): {seen}")

    ctx.step("forward")
    x_d, g_d = x.chunk(dp, dim=0)[d], g.chunk(dp, dim=0)[d]
    y_d = model(x_d)
    assert not isinstance(y_d, api.DTensor), f"output is {type(y_d).__name__}; Rowwise default returns a local tensor"
    y_ref = ref(x)
    ctx.assert_close(y_d.detach(), y_ref.detach().chunk(dp, dim=0)[d], rtol=RTOL, atol=ATOL,
                     label=f"output of dp slice {d}")

    ctx.step("backward")
    loss_d = (y_d * g_d).sum()
    loss_d.backward()
    loss_ref = (y_ref * g).sum()
    loss_ref.backward()
    ctx.assert_close(loss_d.detach(), (y_ref.detach().chunk(dp, dim=0)[d] * g_d).sum(), rtol=RTOL, atol=ATOL,
                     label=f"loss L_{d} of this rank")
    loss_sum = api.funcol.all_reduce(loss_d.detach(), "sum", dp_mesh)
    ctx.assert_close(loss_sum.wait() if hasattr(loss_sum, "wait") else loss_sum, loss_ref.detach(),
                     rtol=RTOL, atol=ATOL, label="sum over dp of L_d vs the full-batch reference loss")

    ctx.step("gradients")
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        assert isinstance(p.grad, api.DTensor), f"{name}.grad is {type(p.grad).__name__}"
        assert tuple(p.grad.placements) == tuple(p.placements), (
            f"{name}.grad placements {p.grad.placements} differ from the parameter's {p.placements}")
        ctx.assert_close(p.grad.full_tensor(), ref_params[name].grad / dp, rtol=RTOL, atol=ATOL,
                         label=f"{name}.grad (reference full-batch grad / dp)")
    _check_2d_params(ctx, model, full_weights, tp_placements, dp, tp, "after backward")


register(ScenarioCase(
    name="tp_C15_tp_then_fsdp2",
    fn=_c15_tp_then_fsdp,
    mesh_shape=MESH22, mesh_dim_names=DP_TP, tags=L1,
    requires=("tp.styles", "fsdp2"),
    spec_id="C15",
))
