"""Matrix products on DTensor: torch.mm and batched torch.matmul.

Covers row sharding of the left operand against a replicated right operand (output stays
Shard(0)), sharding the contracting dim of both operands (``Shard(1) x Shard(0)`` → a Partial
output that ``full_tensor()`` sums), column sharding of the right operand, and 2-D
("dp", "tp") meshes combining those layouts.

Tolerance: a sharded matmul runs BLAS on sub-blocks (different blocking) and, for a sharded
contracting dim, adds per-rank partial products in another order than the reference, so
float32 results differ by a few ulps of the dot products; rtol=1e-5, atol=1e-5 covers that
for inner dims ≤ 16 of standard-normal values.
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
REORDERED_SUM = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def mm(a, b):
    return torch.mm(a, b)


def matmul(a, b):
    return torch.matmul(a, b)


register(OpShardCase(
    name="mm_s0_r_mesh2",
    fn=mm,
    inputs=[InputSpec((8, 6)), InputSpec((6, 4))],
    placements=[(Shard(0),), (Replicate(),)],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="mm_contract_s1_s0_partial_mesh2",
    fn=mm,
    inputs=[InputSpec((8, 6)), InputSpec((6, 4))],
    placements=[(Shard(1),), (Shard(0),)],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="mm_r_s1_colwise_mesh4",
    fn=mm,
    inputs=[InputSpec((6, 8)), InputSpec((8, 12))],
    placements=[(Replicate(),), (Shard(1),)],
    mesh_shape=MESH4,
    compare=REORDERED_SUM,
    tags=L0,
))

register(OpShardCase(
    name="mm_contract_s1_s0_partial_mesh4",
    fn=mm,
    inputs=[InputSpec((4, 16)), InputSpec((16, 8))],
    placements=[(Shard(1),), (Shard(0),)],
    mesh_shape=MESH4,
    compare=REORDERED_SUM,
    tags=L0,
))

# dp shards rows of A, tp shards columns of B: output [Shard(0), Shard(1)].
register(OpShardCase(
    name="mm_dp_rows_tp_cols_dp_tp",
    fn=mm,
    inputs=[InputSpec((8, 6)), InputSpec((6, 4))],
    placements=[(Shard(0), Replicate()), (Replicate(), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

# dp shards rows of A, tp shards the contracting dim: output [Shard(0), Partial()].
register(OpShardCase(
    name="mm_dp_rows_tp_contract_partial_dp_tp",
    fn=mm,
    inputs=[InputSpec((8, 8)), InputSpec((8, 4))],
    placements=[(Shard(0), Shard(1)), (Replicate(), Shard(0))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L0,
))

# Batched: batch dim on dp, contracting dim on tp.
register(OpShardCase(
    name="bmm_batch_dp_contract_tp_dp_tp",
    fn=matmul,
    inputs=[InputSpec((4, 8, 6)), InputSpec((4, 6, 4))],
    placements=[(Shard(0), Shard(2)), (Shard(0), Shard(1))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))
