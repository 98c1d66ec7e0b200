"""torch.nn.functional.linear on DTensor, Megatron-style layouts.

Column-parallel: the weight ``(out, in)`` is sharded on out features (``Shard(0)``), with its
bias likewise, giving an output sharded on the last dim. Row-parallel: the input is sharded on
in features (``Shard(1)``/``Shard(-1)``) and the weight too (``Shard(1)``), giving a Partial
matmul result; the replicated bias must be added once, not once per rank.

Tolerance: as for matmul, sub-block BLAS and partial products summed across ranks reorder the
float32 dot products; rtol=1e-5, atol=1e-5 covers inner dims ≤ 16 of standard-normal values.
"""
import torch.nn.functional as F

from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
REORDERED_SUM = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def linear(x, w, b):
    return F.linear(x, w, b)


def linear_no_bias(x, w):
    return F.linear(x, w)


register(OpShardCase(
    name="linear_colwise_w_s0_bias_s0_mesh2",
    fn=linear,
    inputs=[InputSpec((8, 6)), InputSpec((8, 6)), InputSpec((8,))],
    placements=[(Replicate(),), (Shard(0),), (Shard(0),)],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="linear_rowwise_x_s1_w_s1_partial_bias_r_mesh2",
    fn=linear,
    inputs=[InputSpec((8, 6)), InputSpec((4, 6)), InputSpec((4,))],
    placements=[(Shard(1),), (Shard(1),), (Replicate(),)],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="linear_rowwise_3d_x_s2_w_s1_partial_bias_r_mesh4",
    fn=linear,
    inputs=[InputSpec((2, 4, 16)), InputSpec((6, 16)), InputSpec((6,))],
    placements=[(Shard(2),), (Shard(1),), (Replicate(),)],
    mesh_shape=MESH4,
    compare=REORDERED_SUM,
    tags=L0,
))

register(OpShardCase(
    name="linear_3d_batch_s0_w_r_no_bias_mesh4",
    fn=linear_no_bias,
    inputs=[InputSpec((4, 3, 6)), InputSpec((5, 6))],
    placements=[(Shard(0),), (Replicate(),)],
    mesh_shape=MESH4,
    compare=REORDERED_SUM,
    tags=L0,
))

# Batch on dp, column-parallel on tp.
register(OpShardCase(
    name="linear_colwise_dp_batch_tp_out_dp_tp",
    fn=linear,
    inputs=[InputSpec((8, 6)), InputSpec((8, 6)), InputSpec((8,))],
    placements=[(Shard(0), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(0))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

# Batch on dp, row-parallel on tp: output [Shard(0), Partial()] before the bias.
register(OpShardCase(
    name="linear_rowwise_dp_batch_tp_in_dp_tp",
    fn=linear,
    inputs=[InputSpec((8, 8)), InputSpec((4, 8)), InputSpec((4,))],
    placements=[(Shard(0), Shard(1)), (Replicate(), Shard(1)), (Replicate(), Replicate())],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L0,
))
