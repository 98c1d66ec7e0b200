"""softmax / log_softmax on DTensor over an unsharded dim, with another dim sharded.

The normalised dim is whole on every rank, so each rank computes complete rows with the same
kernel as the reference and the default float32 tolerances apply. One level-1 case
normalises over the sharded dim, which DTensor must first redistribute to Replicate.
"""
import torch
import torch.nn.functional as F

from meshtest import InputSpec, OpShardCase, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")


def softmax_last(x):
    return torch.softmax(x, dim=-1)


def log_softmax_last(x):
    return F.log_softmax(x, dim=-1)


def softmax_dim0(x):
    return F.softmax(x, dim=0)


register(OpShardCase(
    name="softmax_dim1_s0_mesh2",
    fn=softmax_last,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    tags=L0_NPU,
))

register(OpShardCase(
    name="log_softmax_dim1_s0_mesh4",
    fn=log_softmax_last,
    inputs=[InputSpec((8, 10))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    tags=L0_NPU,
))

register(OpShardCase(
    name="softmax_3d_last_s0s1_dp_tp",
    fn=softmax_last,
    inputs=[InputSpec((4, 6, 8))],
    placements=[(Shard(0), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    tags=L0,
))

register(OpShardCase(
    name="log_softmax_3d_last_s1s0_dp_tp",
    fn=log_softmax_last,
    inputs=[InputSpec((4, 6, 8))],
    placements=[(Shard(1), Shard(0))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    tags=L0,
))

# Normalised dim is the sharded one: DTensor replicates it before the kernel runs.
register(OpShardCase(
    name="softmax_over_sharded_dim0_mesh4",
    fn=softmax_dim0,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    tags=L1,
))
