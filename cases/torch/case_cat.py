"""torch.cat on DTensor, along a non-sharded dim and along the sharded dim.

Concatenating along a dim no input is sharded on keeps the placement; along the sharded dim
DTensor must redistribute (the result's chunks would not line up with the inputs' chunks).
Data movement only, so outputs must be bit-equal.
"""
import torch

from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
EXACT = CompareSpec.equal()


def cat_dim0(*xs):
    return torch.cat(xs, dim=0)


def cat_dim1(*xs):
    return torch.cat(xs, dim=1)


register(OpShardCase(
    name="cat_unsharded_dim1_s0_s0_mesh2",
    fn=cat_dim1,
    inputs=[InputSpec((8, 4)), InputSpec((8, 6))],
    placements=[(Shard(0),), (Shard(0),)],
    mesh_shape=MESH2,
    compare=EXACT,
    tags=L0_NPU,
))

register(OpShardCase(
    name="cat_sharded_dim0_s0_s0_mesh2",
    fn=cat_dim0,
    inputs=[InputSpec((4, 6)), InputSpec((6, 6))],
    placements=[(Shard(0),), (Shard(0),)],
    mesh_shape=MESH2,
    compare=EXACT,
    tags=L0_NPU,
))

register(OpShardCase(
    name="cat_three_unsharded_dim1_s0_mesh4",
    fn=cat_dim1,
    inputs=[InputSpec((8, 2)), InputSpec((8, 3)), InputSpec((8, 5))],
    placements=[(Shard(0),), (Shard(0),), (Shard(0),)],
    mesh_shape=MESH4,
    compare=EXACT,
    tags=L0,
))

register(OpShardCase(
    name="cat_sharded_dim1_s1_r_mesh4",
    fn=cat_dim1,
    inputs=[InputSpec((4, 8)), InputSpec((4, 8))],
    placements=[(Shard(1),), (Replicate(),)],
    mesh_shape=MESH4,
    compare=EXACT,
    tags=L0,
))

register(OpShardCase(
    name="cat_unsharded_dim1_s0s2_dp_tp",
    fn=cat_dim1,
    inputs=[InputSpec((4, 3, 8)), InputSpec((4, 5, 8))],
    placements=[(Shard(0), Shard(2)), (Shard(0), Shard(2))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=EXACT,
    tags=L0,
))

register(OpShardCase(
    name="cat_sharded_dim0_mixed_dp_tp",
    fn=cat_dim0,
    inputs=[InputSpec((4, 6)), InputSpec((4, 6))],
    placements=[(Shard(0), Replicate()), (Replicate(), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=EXACT,
    tags=L1,
))
