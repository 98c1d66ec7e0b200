"""MindSpore communication guards (the training net's layer 1, "comms"; the MindSpore column of the platform port).

Each rank builds its own input from its rank (a seeded NumPy draw), runs one MindSpore collective
through ``ctx.api.comm`` and compares the result with the single-process reference: the same
reduction, concatenation or copy computed in NumPy from every rank's input, which each rank can
build itself. Float sums use the default ``allclose`` tolerances (the summation order of a
collective is not NumPy's); everything else must be bit-equal.

On CPU (msrun, ``mccl``) MindSpore 2.10 has kernels for AllReduce(sum), AllGather and Broadcast.
ReduceScatter, AllReduce with another reduce op and AllReduce on integers have none there: those cases stay, marked
``known_failure`` with MindSpore's own error, at the CPU gates; on Ascend (``npu_level0``) the
same functions are plain cases.
"""
import numpy as np

from meshtest import KnownFailure, ScenarioCase, register

L0 = ("cpu_ms_level0", "cpu_ms_level1", "npu_level0", "npu_level1")
CPU = ("cpu_ms_level0", "cpu_ms_level1")
NPU = ("npu_level0", "npu_level1")
NEEDS = ("collectives",)


def _inputs(world, shape=(4, 3), dtype=np.float32, seed=7):
    """Every rank's input, as each rank builds it: rank r draws from seed + r."""
    out = []
    for r in range(world):
        x = np.random.default_rng(seed + r).standard_normal(shape)
        out.append((x * 8).round().astype(dtype) if np.issubdtype(dtype, np.integer) else x.astype(dtype))
    return out


def all_reduce_sum_f32(ctx):
    x = _inputs(ctx.world_size)
    ctx.step("all_reduce")
    out = ctx.api.comm.all_reduce(ctx.api.Tensor(x[ctx.rank]))
    ctx.step("compare")
    ctx.assert_close(out, np.sum(x, axis=0), label="all_reduce(sum)")


def all_reduce_sum_f16(ctx):
    x = _inputs(ctx.world_size, dtype=np.float16)
    ctx.step("all_reduce")
    out = ctx.api.comm.all_reduce(ctx.api.Tensor(x[ctx.rank]))
    ctx.step("compare")
    # float16 tolerances (torch.testing's): the collective may add in another order
    ctx.assert_close(out, np.sum(x, axis=0, dtype=np.float16), rtol=1e-3, atol=1e-5, label="all_reduce(sum) float16")


def all_reduce_sum_int32(ctx):
    x = _inputs(ctx.world_size, dtype=np.int32)
    ctx.step("all_reduce")
    out = ctx.api.comm.all_reduce(ctx.api.Tensor(x[ctx.rank]))
    ctx.step("compare")
    ctx.assert_equal(out, np.sum(x, axis=0, dtype=np.int32), label="all_reduce(sum) int32")


def all_gather_f32(ctx):
    x = _inputs(ctx.world_size, shape=(2, 5))
    ctx.step("all_gather")
    out = ctx.api.comm.all_gather(ctx.api.Tensor(x[ctx.rank]))
    ctx.step("compare")
    ctx.assert_equal(out, np.concatenate(x, axis=0), label="all_gather (rank order, dim 0)")


def broadcast_from_last(ctx):
    src = ctx.world_size - 1
    x = _inputs(ctx.world_size, shape=(3, 3))
    ctx.step("broadcast")
    out = ctx.api.comm.broadcast(ctx.api.Tensor(x[ctx.rank]), src=src)
    ctx.step("compare")
    ctx.assert_equal(out, x[src], label=f"broadcast from rank {src}")


def collectives_in_sequence(ctx):
    """Three collectives of different shapes back to back: each pairs with its peers' same call
    (a skipped or reordered one would mix shapes or values)."""
    comm, T = ctx.api.comm, ctx.api.Tensor
    a, b, c = _inputs(ctx.world_size, (2, 2), seed=1), _inputs(ctx.world_size, (5,), seed=2), \
        _inputs(ctx.world_size, (1, 3), seed=3)
    ctx.step("all_reduce")
    ra = comm.all_reduce(T(a[ctx.rank]))
    ctx.step("all_gather")
    rb = comm.all_gather(T(b[ctx.rank]))
    ctx.step("broadcast")
    rc = comm.broadcast(T(c[ctx.rank]), src=0)
    ctx.step("compare")
    ctx.assert_close(ra, np.sum(a, axis=0), label="1st: all_reduce")
    ctx.assert_equal(rb, np.concatenate(b, axis=0), label="2nd: all_gather")
    ctx.assert_equal(rc, c[0], label="3rd: broadcast")


def reduce_scatter_sum(ctx):
    x = _inputs(ctx.world_size, shape=(2 * ctx.world_size, 3))
    ctx.step("reduce_scatter")
    out = ctx.api.comm.reduce_scatter(ctx.api.Tensor(x[ctx.rank]))
    ctx.step("compare")
    ctx.assert_close(out, np.split(np.sum(x, axis=0), ctx.world_size)[ctx.rank], label="reduce_scatter(sum)")


def all_reduce_max(ctx):
    x = _inputs(ctx.world_size)
    ctx.step("all_reduce")
    out = ctx.api.comm.all_reduce(ctx.api.Tensor(x[ctx.rank]), op="max")
    ctx.step("compare")
    ctx.assert_equal(out, np.max(x, axis=0), label="all_reduce(max)")


register(ScenarioCase(name="ms_all_reduce_sum_f32_w2", fn=all_reduce_sum_f32, mesh_shape=(2,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_all_reduce_sum_f32_w4", fn=all_reduce_sum_f32, mesh_shape=(4,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_all_reduce_sum_f16_w2", fn=all_reduce_sum_f16, mesh_shape=(2,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_all_gather_f32_w2", fn=all_gather_f32, mesh_shape=(2,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_all_gather_f32_w4", fn=all_gather_f32, mesh_shape=(4,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_broadcast_from_last_w2", fn=broadcast_from_last, mesh_shape=(2,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_broadcast_from_last_w4", fn=broadcast_from_last, mesh_shape=(4,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_collectives_in_sequence_w4", fn=collectives_in_sequence, mesh_shape=(4,), tags=L0,
                      requires=NEEDS, capabilities=("comms",), layer=1))

# The same functions where MindSpore's CPU build has no kernel: known failures at the CPU gates,
# plain cases on Ascend.
register(ScenarioCase(
    name="ms_reduce_scatter_sum_cpu_w2", fn=reduce_scatter_sum, mesh_shape=(2,), tags=CPU, requires=NEEDS,
    capabilities=("comms",), layer=1,
    known_failure=KnownFailure(
        kind="raises", step="reduce_scatter", match=r"not registered on CPU|ReduceScatter",
        reason="MindSpore 2.10 has no CPU (mccl) kernel for ReduceScatter; the same case passes where the kernel "
               "exists (Ascend, npu gates)",
        upstream="docs/mindspore-bugs.md#no-cpu-reduce-scatter")))
register(ScenarioCase(
    name="ms_all_reduce_max_cpu_w2", fn=all_reduce_max, mesh_shape=(2,), tags=CPU, requires=NEEDS,
    capabilities=("comms",), layer=1,
    known_failure=KnownFailure(
        kind="raises", step="all_reduce", match=r"only support reduce sum on CPU",
        reason="MindSpore 2.10's CPU AllReduce kernel (allreduce_cpu_kernel.cc) implements only sum",
        upstream="docs/mindspore-bugs.md#cpu-all-reduce-sum-only")))
register(ScenarioCase(
    name="ms_all_reduce_sum_int32_cpu_w2", fn=all_reduce_sum_int32, mesh_shape=(2,), tags=CPU, requires=NEEDS,
    capabilities=("comms",), layer=1,
    known_failure=KnownFailure(
        kind="raises", step="all_reduce", match=r"Select CPU operator\[AllReduce\] fail.*Unsupported data type",
        reason="MindSpore 2.10's CPU AllReduce kernel registers float32 and float16 only",
        upstream="docs/mindspore-bugs.md#cpu-all-reduce-float-only")))
register(ScenarioCase(name="ms_reduce_scatter_sum_w2", fn=reduce_scatter_sum, mesh_shape=(2,), tags=NPU,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_all_reduce_max_w2", fn=all_reduce_max, mesh_shape=(2,), tags=NPU,
                      requires=NEEDS, capabilities=("comms",), layer=1))
register(ScenarioCase(name="ms_all_reduce_sum_int32_w2", fn=all_reduce_sum_int32, mesh_shape=(2,), tags=NPU,
                      requires=NEEDS, capabilities=("comms",), layer=1))
