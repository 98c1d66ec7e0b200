"""View ops on DTensor: view/reshape and transpose.

Merging or splitting dims that are not sharded keeps the placement. Reshapes that touch the
sharded dim are covered where DTensor can keep it sharded (the sharded dim is the outermost
of a merge, or the outermost piece of a split and divisible by the mesh size); one level-1
case flattens a tensor sharded on its inner dim, which DTensor keeps local as a
``_StridedShard`` of the flat dim that ``full_tensor()`` must de-interleave. Data movement
only, so outputs must be bit-equal.
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
EXACT = CompareSpec.equal()


def merge_last_two(x):
    return x.view(8, 24)


def split_last(x):
    return x.view(8, 4, 6)


def merge_first_two(x):
    return x.reshape(32, 6)


def split_first(x):
    return x.view(2, 4, 6)


def flatten(x):
    return x.reshape(-1)


def transpose_2d(x):
    return x.t()


def transpose_12(x):
    return torch.transpose(x, 1, 2)


register(OpShardCase(
    name="view_merge_unsharded_dims_s0_mesh2",
    fn=merge_last_two,
    inputs=[InputSpec((8, 4, 6), init="arange")],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=EXACT,
    tags=L0_NPU,
))

register(OpShardCase(
    name="view_split_unsharded_dim_s0_mesh4",
    fn=split_last,
    inputs=[InputSpec((8, 24), init="arange")],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    compare=EXACT,
    tags=L0_NPU,
))

# (8, 4, 6) sharded on dim 0 → (32, 6): the sharded dim is the outer one of the merge.
register(OpShardCase(
    name="reshape_merge_sharded_outer_dim_s0_mesh4",
    fn=merge_first_two,
    inputs=[InputSpec((8, 4, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    compare=EXACT,
    tags=L0,
))

# (8, 6) sharded on dim 0 → (2, 4, 6): the sharded dim splits into an outer dim of size 2.
register(OpShardCase(
    name="view_split_sharded_dim_s0_mesh2",
    fn=split_first,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=EXACT,
    tags=L0,
))

register(OpShardCase(
    name="transpose_2d_s0_mesh4",
    fn=transpose_2d,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    compare=EXACT,
    tags=L0_NPU,
))

register(OpShardCase(
    name="transpose_12_s0s2_dp_tp",
    fn=transpose_12,
    inputs=[InputSpec((4, 6, 8))],
    placements=[(Shard(0), Shard(2))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=EXACT,
    tags=L0,
))

register(OpShardCase(
    name="view_merge_unsharded_s0s0_dp_tp",
    fn=merge_last_two,
    inputs=[InputSpec((8, 4, 6))],
    placements=[(Shard(0), Shard(0))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=EXACT,
    tags=L0,
))

# Sharded on the inner dim, flattened: the output is _StridedShard(0, split_factor=8), not Shard.
register(OpShardCase(
    name="reshape_flatten_inner_sharded_s1_mesh2",
    fn=flatten,
    inputs=[InputSpec((8, 6), init="arange")],
    placements=[(Shard(1),)],
    mesh_shape=MESH2,
    compare=EXACT,
    tags=L1,
))
