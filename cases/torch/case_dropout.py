"""torch.nn.functional.dropout on DTensor.

With p > 0 the mask depends on each rank's RNG state, so only shape and dtype are compared.
With p = 0 dropout is the identity even in training mode, so the output must be bit-equal.
"""
import torch.nn.functional as F

from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
RANDOM_MASK = CompareSpec.shape(reason="dropout mask is random per rank/RNG state")


def dropout_half(x):
    return F.dropout(x, p=0.5, training=True)


def dropout_zero(x):
    return F.dropout(x, p=0.0, training=True)


register(OpShardCase(
    name="dropout_p05_train_s0_mesh2",
    fn=dropout_half,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=RANDOM_MASK,
    tags=L0_NPU,
))

register(OpShardCase(
    name="dropout_p0_train_exact_s0_mesh2",
    fn=dropout_zero,
    inputs=[InputSpec((8, 6))],
    placements=[(Shard(0),)],
    mesh_shape=MESH2,
    compare=CompareSpec.equal(),
    tags=L0_NPU,
))

register(OpShardCase(
    name="dropout_p05_train_replicate_mesh4",
    fn=dropout_half,
    inputs=[InputSpec((4, 8))],
    placements=[(Replicate(),)],
    mesh_shape=MESH4,
    compare=RANDOM_MASK,
    tags=L0,
))

register(OpShardCase(
    name="dropout_p0_train_exact_s0s1_dp_tp",
    fn=dropout_zero,
    inputs=[InputSpec((4, 6, 8))],
    placements=[(Shard(0), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=CompareSpec.equal(),
    tags=L1,
))
