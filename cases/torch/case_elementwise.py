"""Elementwise ops on DTensor: add (with broadcasting), mul, abs.

Covers Shard/Replicate mixes that force a redistribute, broadcasting of a lower-rank operand
against a sharded one, and linear ops on ``Partial("sum")`` inputs (which stay Partial until
``full_tensor()`` reduces them). Elementwise results are computed on the same values in the
same order as the reference, so the default float32 tolerances apply.
"""
import torch

from meshtest import CompareSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")


def add(x, y):
    return x + y


def mul(x, y):
    return x * y


def abs_(x):
    return torch.abs(x)


def scale_by_two(x):
    return x * 2.0


def add_then_scale(x, y):
    return (x + y) * 0.5


register(OpShardCase(
    name="add_bcast_s0_r_mesh2",
    fn=add,
    inputs=[InputSpec((8, 6)), InputSpec((6,))],
    placements=[(Shard(0),), (Replicate(),)],
    mesh_shape=MESH2,
    tags=L0_NPU,
))

register(OpShardCase(
    name="add_s0_s0_mesh4",
    fn=add,
    inputs=[InputSpec((8, 6)), InputSpec((8, 6))],
    placements=[(Shard(0),), (Shard(0),)],
    mesh_shape=MESH4,
    tags=L0_NPU,
))

register(OpShardCase(
    name="add_s1_r_redistribute_mesh4",
    fn=add,
    inputs=[InputSpec((4, 8)), InputSpec((4, 8))],
    placements=[(Shard(1),), (Replicate(),)],
    mesh_shape=MESH4,
    tags=L0,
))

register(OpShardCase(
    name="add_bcast_s0s1_rs0_dp_tp",
    fn=add,
    inputs=[InputSpec((8, 6)), InputSpec((6,))],
    placements=[(Shard(0), Shard(1)), (Replicate(), Shard(0))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    tags=L0_NPU,
))

register(OpShardCase(
    name="mul_s0_s1_redistribute_mesh2",
    fn=mul,
    inputs=[InputSpec((8, 6)), InputSpec((8, 6))],
    placements=[(Shard(0),), (Shard(1),)],
    mesh_shape=MESH2,
    tags=L0,
))

register(OpShardCase(
    name="mul_bcast_col_vector_dp_tp",
    fn=mul,
    inputs=[InputSpec((8, 6)), InputSpec((8, 1))],
    placements=[(Shard(0), Replicate()), (Shard(0), Replicate())],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    tags=L0,
))

register(OpShardCase(
    name="abs_s0_mesh4",
    fn=abs_,
    inputs=[InputSpec((8, 5))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    tags=L0_NPU,
))

register(OpShardCase(
    name="abs_int64_s1_r_dp_tp",
    fn=abs_,
    inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=-50, high=50)],
    placements=[(Shard(1), Replicate())],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=CompareSpec.equal(),
    tags=L0,
))

# x * 2.0 is linear, so DTensor keeps the Partial("sum") input Partial; full_tensor() sums.
register(OpShardCase(
    name="mul_scalar_partial_mesh2",
    fn=scale_by_two,
    inputs=[InputSpec((8, 6))],
    placements=[(Partial(),)],
    mesh_shape=MESH2,
    tags=L0_NPU,
))

# Partial + Partial stays Partial; rank-local parts are v/4, so the sum is re-associated.
register(OpShardCase(
    name="add_partial_partial_scale_mesh4",
    fn=add_then_scale,
    inputs=[InputSpec((4, 6)), InputSpec((4, 6))],
    placements=[(Partial(),), (Partial(),)],
    mesh_shape=MESH4,
    tags=L1,
))
