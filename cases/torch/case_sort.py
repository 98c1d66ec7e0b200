"""torch.sort and torch.topk on DTensor along an unsharded dim, returning (values, indices).

Each rank sorts complete rows; values are copies of inputs and indices are exact integers, so
both outputs must be bit-equal (``CompareSpec.equal()`` applies to every compared output).
Inputs are standard normal (no ties) or, for the integer case, sorted with ``stable=True``,
so the indices are unique.
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


def sort_last(x):
    return torch.sort(x, dim=-1)


def sort_last_descending(x):
    return torch.sort(x, dim=-1, descending=True)


def sort_last_stable(x):
    return torch.sort(x, dim=-1, stable=True)


def topk3_last(x):
    return torch.topk(x, k=3, dim=-1)


def topk2_smallest_dim1(x):
    return torch.topk(x, k=2, dim=1, largest=False)


register(OpShardCase(
    name="sort_dim1_s0_mesh2",
    fn=sort_last,
    inputs=[InputSpec((8, 16))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=EXACT,
    compare_outputs=(0, 1),
    tags=L0_NPU,
))

register(OpShardCase(
    name="topk3_dim1_s0_mesh4",
    fn=topk3_last,
    inputs=[InputSpec((8, 16))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    compare=EXACT,
    compare_outputs=(0, 1),
    tags=L0_NPU,
))

# Only the sorted values are compared.
register(OpShardCase(
    name="sort_descending_values_only_s0s1_dp_tp",
    fn=sort_last_descending,
    inputs=[InputSpec((4, 6, 8))],
    placements=[(Shard(0), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=EXACT,
    compare_outputs=(0,),
    tags=L0,
))

register(OpShardCase(
    name="sort_stable_int64_dim1_s0_mesh2",
    fn=sort_last_stable,
    inputs=[InputSpec((8, 12), init="uniform", dtype="int64", low=0, high=5)],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=EXACT,
    compare_outputs=(0, 1),
    tags=L0,
))

register(OpShardCase(
    name="topk2_smallest_3d_dim1_s0s2_dp_tp",
    fn=topk2_smallest_dim1,
    inputs=[InputSpec((4, 6, 8))],
    placements=[(Shard(0), Shard(2))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=EXACT,
    compare_outputs=(0, 1),
    tags=L1,
))
