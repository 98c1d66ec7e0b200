"""The TP plan's verification question 3: does the expected collective happen? Collective counts of TP styles.

Each case counts the collectives one forward (and, where the TP plan's semantics force one, one
backward) issues, with ``CommDebugMode``, on a 1-D ``("tp",)`` mesh of 2 ranks. These are hooks
that do not depend on HCCL, so they gate at level 0. The seed names no test ID for counting, so
each case carries the spec_id of the closest the TP test plan C item:

- ``tp_comm_colwise_forward_none`` (C1): ColwiseParallel with a Replicate input needs no collective
  in forward (every rank multiplies the full input by its own weight rows; the output stays
  Shard(-1), use_local_output=True). Its backward needs exactly one all-reduce: the input gradient
  is a partial sum over the output-feature shards and must become the Replicate input's gradient.
- ``tp_comm_rowwise_allreduce`` (C2): RowwiseParallel's default Replicate output turns the Partial
  local matmul into a full output with exactly one all-reduce (the activation-communication table) and nothing else.
  Backward
  needs none: the Replicate output gradient multiplies each rank's local in-feature slice.
- ``tp_comm_rowwise_sp_reduce_scatter`` (C11: "Rowwise then change the output layout" is the
  closest item; the reduce-scatter is Rowwise's own output relayout, not a LayerNorm's as in C6):
  RowwiseParallel(output_layouts=Shard(1)) — the sequence-parallel output of the activation-communication table —
  reduce-scatters
  the Partial output to Shard(1): exactly one reduce_scatter_tensor, no all-reduce.
- ``tp_comm_mlp_one_allreduce`` (C3): a Colwise + relu + Rowwise MLP forward issues exactly one
  all-reduce (the Colwise output is already Shard(-1), the Rowwise input layout) and nothing else.

Counts are read from ``get_comm_counts()``, whose keys are the ``torch.ops.c10d_functional``
op packets (``api.funcol.all_reduce`` is the Python wrapper, not a key). Every case also checks the
numbers against the single-device reference with the same full weights (fp32, the plan's tolerance rule:
rtol=1.5e-4, atol=1e-5) so that a count cannot pass on a forward that computes the wrong thing;
local outputs are gathered by their known layout with ``DTensor.from_local(...).full_tensor()``.
"""
import copy

from meshtest import ScenarioCase, register

L0 = ("cpu_level0", "cpu_level1", "npu_level1")
MESH2 = (2,)
TP = ("tp",)
RTOL = 1.5e-4
ATOL = 1e-5


def _ops(api):
    c10d = api.torch.ops.c10d_functional
    return {"all_reduce": c10d.all_reduce, "reduce_scatter": c10d.reduce_scatter_tensor,
            "all_gather": c10d.all_gather_into_tensor, "all_to_all": c10d.all_to_all_single}


def _counts(api, comm):
    """{short name: count} of every collective kind CommDebugMode saw (zero kinds left out)."""
    raw = comm.get_comm_counts()
    named = {short: raw.get(op, 0) for short, op in _ops(api).items()}
    total = comm.get_total_counts()
    other = total - sum(named.values())
    if other:
        named["other"] = other
    return {k: v for k, v in named.items() if v}


def _gather(api, mesh, local, placement):
    return api.DTensor.from_local(local, mesh, [placement]).full_tensor()


def _colwise_forward_none(ctx):
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(11)
    lin = nn.Linear(8, 16)
    ref = copy.deepcopy(lin)
    x = torch.randn(4, 8)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.ColwiseParallel())
    ctx.step("forward")
    xd = x.clone().requires_grad_(True)
    with api.CommDebugMode() as comm:
        y = lin(xd)
    fwd = _counts(api, comm)
    ctx.note(f"forward collectives: {fwd}")
    assert fwd == {}, f"ColwiseParallel forward with a Replicate input issued collectives {fwd}; expected none"
    assert not isinstance(y, api.DTensor), f"default use_local_output=True must return a local tensor, got {type(y)}"
    assert tuple(y.shape) == (4, 16 // ctx.world_size), f"local output shape {tuple(y.shape)}"
    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(1)), yr.detach(), rtol=RTOL, atol=ATOL, label="output")
    ctx.step("backward")
    # loss L = sum(Y * G) on the full output; this rank owns the columns of its shard, so its
    # local term is sum(y * G_shard): autograd then gives every rank dL/dx after the all-reduce.
    g = torch.randn(4, 16)
    with api.CommDebugMode() as comm:
        (y * g.chunk(ctx.world_size, dim=1)[ctx.rank]).sum().backward()
    bwd = _counts(api, comm)
    ctx.note(f"backward collectives: {bwd}")
    assert bwd == {"all_reduce": 1}, (f"ColwiseParallel backward collectives {bwd}; expected exactly one all_reduce "
                                      "of the input gradient")
    (yr * g).sum().backward()
    ctx.assert_close(xd.grad, xr.grad, rtol=RTOL, atol=ATOL, label="input gradient")


def _rowwise_allreduce(ctx):
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(12)
    lin = nn.Linear(8, 6)
    ref = copy.deepcopy(lin)
    x = torch.randn(4, 8)
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.RowwiseParallel())
    ctx.step("forward")
    x_local = x.chunk(ctx.world_size, dim=1)[ctx.rank].clone().requires_grad_(True)  # input layout Shard(-1)
    with api.CommDebugMode() as comm:
        y = lin(x_local)
        y = y + 0  # consume the (async) collective result inside the counted block
    fwd = _counts(api, comm)
    ctx.note(f"forward collectives: {fwd}")
    assert fwd == {"all_reduce": 1}, (f"RowwiseParallel default (Replicate) output collectives {fwd}; expected "
                                      "exactly one all_reduce")
    yr = ref(x)
    ctx.assert_close(y.detach(), yr.detach(), rtol=RTOL, atol=ATOL, label="output (Replicate, every rank)")
    ctx.step("backward")
    g = torch.randn(4, 6)
    with api.CommDebugMode() as comm:
        (y * g).sum().backward()
    bwd = _counts(api, comm)
    ctx.note(f"backward collectives: {bwd}")
    assert bwd == {}, f"RowwiseParallel backward collectives {bwd}; expected none"
    xr = x.clone().requires_grad_(True)
    (ref(xr) * g).sum().backward()
    ctx.assert_close(x_local.grad, xr.grad.chunk(ctx.world_size, dim=1)[ctx.rank], rtol=RTOL, atol=ATOL,
                     label="input gradient (this rank's in-feature slice)")


def _rowwise_sp_reduce_scatter(ctx):
    api = ctx.api
    torch, nn = api.torch, api.nn
    torch.manual_seed(13)
    lin = nn.Linear(8, 6)
    ref = copy.deepcopy(lin)
    x = torch.randn(2, 4, 8)  # (B, S, H); S divisible by tp
    ctx.step("apply")
    api.parallelize_module(lin, ctx.mesh, api.RowwiseParallel(output_layouts=api.Shard(1)))
    ctx.step("forward")
    x_local = x.chunk(ctx.world_size, dim=-1)[ctx.rank]
    with api.CommDebugMode() as comm:
        y = lin(x_local)
        y = y + 0
    fwd = _counts(api, comm)
    ctx.note(f"forward collectives: {fwd}")
    assert fwd == {"reduce_scatter": 1}, (
        f"RowwiseParallel(output_layouts=Shard(1)) collectives {fwd}; expected exactly one reduce_scatter_tensor")
    assert tuple(y.shape) == (2, 4 // ctx.world_size, 6), (
        f"local output shape {tuple(y.shape)}; expected the sequence shard")
    ctx.assert_close(_gather(api, ctx.mesh, y, api.Shard(1)), ref(x).detach(), rtol=RTOL, atol=ATOL,
                     label="output gathered along the sequence")


def _mlp_one_allreduce(ctx):
    api = ctx.api
    torch, nn = api.torch, api.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))

    torch.manual_seed(14)
    mlp = MLP()
    ref = copy.deepcopy(mlp)
    x = torch.randn(4, 8)
    ctx.step("apply")
    api.parallelize_module(mlp, ctx.mesh, {"up": api.ColwiseParallel(), "down": api.RowwiseParallel()})
    ctx.step("forward")
    with api.CommDebugMode() as comm:
        y = mlp(x)
        y = y + 0
    fwd = _counts(api, comm)
    ctx.note(f"forward collectives: {fwd}")
    assert fwd == {"all_reduce": 1}, f"Colwise+Rowwise MLP forward collectives {fwd}; expected exactly one all_reduce"
    ctx.assert_close(y, ref(x).detach(), rtol=RTOL, atol=ATOL, label="MLP output (Replicate, every rank)")


register(ScenarioCase(
    name="tp_comm_colwise_forward_none",
    fn=_colwise_forward_none,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0,
    requires=("tp.styles", "comm_debug_mode"),
    spec_id="C1",
))

register(ScenarioCase(
    name="tp_comm_rowwise_allreduce",
    fn=_rowwise_allreduce,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0,
    requires=("tp.styles", "comm_debug_mode"),
    spec_id="C2",
))

register(ScenarioCase(
    name="tp_comm_rowwise_sp_reduce_scatter",
    fn=_rowwise_sp_reduce_scatter,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0,
    requires=("tp.styles", "comm_debug_mode"),
    spec_id="C11",
))

register(ScenarioCase(
    name="tp_comm_mlp_one_allreduce",
    fn=_mlp_one_allreduce,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0,
    requires=("tp.styles", "comm_debug_mode"),
    spec_id="C3",
))
