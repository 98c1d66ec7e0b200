"""torch.nn.functional.embedding on DTensor with int64 indices.

Row-wise (vocab) sharding, weight ``Shard(0)``: each rank looks up only the ids it owns and
masks the rest, giving a masked-Partial output that ``full_tensor()`` sums. Column-wise
(embedding dim) sharding, weight ``Shard(1)``: each rank looks up every id and the output is
sharded on its last dim. Looked-up rows are copies (the masked sum adds exact zeros), so the
default float32 tolerances apply.
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
VOCAB = 16
DIM = 8


def embedding(ids, weight):
    return F.embedding(ids, weight)


register(OpShardCase(
    name="embedding_rowwise_w_s0_ids_r_mesh2",
    fn=embedding,
    inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=VOCAB), InputSpec((VOCAB, DIM))],
    placements=[(Replicate(),), (Shard(0),)],
    mesh_shape=MESH2,
    compare=CompareSpec.allclose(),
    tags=L0_NPU,
))

register(OpShardCase(
    name="embedding_colwise_w_s1_ids_r_mesh2",
    fn=embedding,
    inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=VOCAB), InputSpec((VOCAB, DIM))],
    placements=[(Replicate(),), (Shard(1),)],
    mesh_shape=MESH2,
    compare=CompareSpec.allclose(),
    tags=L0_NPU,
))

register(OpShardCase(
    name="embedding_rowwise_w_s0_ids_r_mesh4",
    fn=embedding,
    inputs=[InputSpec((3, 5), init="uniform", dtype="int64", low=0, high=VOCAB), InputSpec((VOCAB, DIM))],
    placements=[(Replicate(),), (Shard(0),)],
    mesh_shape=MESH4,
    compare=CompareSpec.allclose(),
    tags=L0,
))

register(OpShardCase(
    name="embedding_colwise_w_s1_ids_s0_mesh4",
    fn=embedding,
    inputs=[InputSpec((8, 3), init="uniform", dtype="int64", low=0, high=VOCAB), InputSpec((VOCAB, DIM))],
    placements=[(Shard(0),), (Shard(1),)],
    mesh_shape=MESH4,
    compare=CompareSpec.allclose(),
    tags=L1,
))

# ids batch-sharded on dp, vocab-sharded weight on tp: output [Shard(0), masked Partial].
register(OpShardCase(
    name="embedding_dp_ids_tp_rowwise_w_dp_tp",
    fn=embedding,
    inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=VOCAB), InputSpec((VOCAB, DIM))],
    placements=[(Shard(0), Replicate()), (Replicate(), Shard(0))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=CompareSpec.allclose(),
    tags=L0,
))
