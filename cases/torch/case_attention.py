"""Attention-like cases on DTensor, with a statistic derived from the FULL Q/K.

``softmax(Q K^T * scale - m) @ V`` where ``m`` is a max of the scores, computed once on the
full (unsharded) Q and K by a :class:`DerivedSpec`, then distributed with the case's layout.
Computing ``m`` from each rank's shard would change its meaning (a shard's max is not the
global one); deriving it keeps reference and distributed runs on the same statistic. The
softmax is written out (exp, sum, divide) so that ``m`` is really used.

Tolerance: two matmuls on sub-blocks plus a row sum reorder float32 accumulations;
rtol=1e-5, atol=1e-5 covers that for head dim 8 and sequence 8 of standard-normal values.
"""
import math

import torch

from meshtest import CompareSpec, DerivedSpec, InputSpec, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1")
L1 = ("cpu_level1", "npu_level1")
REORDERED_SUM = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
QKV = (4, 4, 8, 8)  # (batch, heads, seq, head_dim)
SCALE = 1.0 / math.sqrt(QKV[-1])


def scores(q, k):
    return torch.matmul(q, k.transpose(-2, -1)) * SCALE


def row_max_of_scores(q, k, v):
    """Derived input: max over keys of the full scores, shape (batch, heads, seq, 1)."""
    return scores(q, k).amax(dim=-1, keepdim=True)


def global_max_of_scores(q, k, v):
    """Derived input: one max over every score of every batch and head (0-d)."""
    return scores(q, k).amax()


def attention_shifted(q, k, v, m):
    p = torch.exp(scores(q, k) - m)
    p = p / p.sum(dim=-1, keepdim=True)
    return torch.matmul(p, v)


register(OpShardCase(
    name="attention_rowmax_derived_batch_s0_mesh2",
    fn=attention_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[(Shard(0),), (Shard(0),), (Shard(0),)],
    derived_inputs=[DerivedSpec(fn=row_max_of_scores, placements=(Shard(0),), ndim=4, name="row_max")],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

# Query sequence sharded (context-parallel style), K/V replicated; the row max follows Q.
register(OpShardCase(
    name="attention_rowmax_derived_seq_s2_kv_r_mesh2",
    fn=attention_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[(Shard(2),), (Replicate(),), (Replicate(),)],
    derived_inputs=[DerivedSpec(fn=row_max_of_scores, placements=(Shard(2),), ndim=4, name="row_max")],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0,
))

register(OpShardCase(
    name="attention_rowmax_derived_batch_dp_heads_tp_dp_tp",
    fn=attention_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[(Shard(0), Shard(1)), (Shard(0), Shard(1)), (Shard(0), Shard(1))],
    derived_inputs=[DerivedSpec(fn=row_max_of_scores, placements=(Shard(0), Shard(1)), ndim=4, name="row_max")],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

# A truly global statistic: one max over all batches and heads, replicated on every rank.
register(OpShardCase(
    name="attention_globalmax_derived_batch_dp_heads_tp_dp_tp",
    fn=attention_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[(Shard(0), Shard(1)), (Shard(0), Shard(1)), (Shard(0), Shard(1))],
    derived_inputs=[DerivedSpec(fn=global_max_of_scores, placements=(Replicate(), Replicate()), ndim=0, name="global_max")],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))
