"""Reductions on DTensor: sum and mean, over the sharded dim and over an unsharded dim.

Reducing over a sharded dim makes DTensor return a ``Partial`` output (sum, or avg for mean)
that ``full_tensor()`` all-reduces; reducing over an unsharded dim stays local. Both keepdim
settings are covered.

Tolerance: the distributed sum adds per-rank partial sums, a different association than the
single-device reduction, so float32 results differ by a few ulps of the sum; rtol=1e-5,
atol=1e-5 covers that for these sizes (≤ 64 standard-normal terms). Reductions over an
unsharded dim run the same per-row kernel as the reference and keep the default tolerances.
"""
import torch

from meshtest import CompareSpec, InputSpec, OpShardCase, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
REORDERED_SUM = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def sum_dim0(x):
    return torch.sum(x, dim=0)


def sum_dim0_keepdim(x):
    return torch.sum(x, dim=0, keepdim=True)


def sum_dim1(x):
    return torch.sum(x, dim=1)


def sum_dim1_keepdim(x):
    return x.sum(dim=1, keepdim=True)


def sum_all(x):
    return x.sum()


def mean_dim0(x):
    return torch.mean(x, dim=0)


def mean_dim0_keepdim(x):
    return torch.mean(x, dim=0, keepdim=True)


def mean_dim1_keepdim(x):
    return x.mean(dim=1, keepdim=True)


def mean_dims_01(x):
    return x.mean(dim=(0, 1))


register(OpShardCase(
    name="sum_sharded_dim0_mesh2",
    fn=sum_dim0,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="sum_sharded_dim0_keepdim_mesh4",
    fn=sum_dim0_keepdim,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="sum_unsharded_dim1_s0_mesh2",
    fn=sum_dim1,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    tags=L0,
))

register(OpShardCase(
    name="sum_unsharded_dim1_keepdim_s0_mesh4",
    fn=sum_dim1_keepdim,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    tags=L0,
))

register(OpShardCase(
    name="mean_sharded_dim0_mesh4",
    fn=mean_dim0,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="mean_sharded_dim0_keepdim_mesh2",
    fn=mean_dim0_keepdim,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0,
))

register(OpShardCase(
    name="mean_unsharded_dim1_keepdim_s0_mesh2",
    fn=mean_dim1_keepdim,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    tags=L0,
))

register(OpShardCase(
    name="sum_all_s0s1_dp_tp",
    fn=sum_all,
    inputs=[InputSpec((8, 8))],
    placements=[(Shard(0), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

# Sharded on tp along dim 1 and reduced over it: Partial on tp, Shard(0) kept on dp.
register(OpShardCase(
    name="sum_sharded_dim1_s0s1_dp_tp",
    fn=sum_dim1,
    inputs=[InputSpec((8, 8))],
    placements=[(Shard(0), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L0,
))

register(OpShardCase(
    name="mean_dims01_3d_s0s1_dp_tp",
    fn=mean_dims_01,
    inputs=[InputSpec((4, 6, 5))],
    placements=[(Shard(0), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))
