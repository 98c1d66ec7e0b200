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
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
QKV_G = dict(requires_grad=True)
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


def causal_scores(q, k):
    s = scores(q, k)
    # -inf strictly above the diagonal; full_like keeps s's layout (a DTensor stays a DTensor)
    return s + torch.full_like(s, float("-inf")).triu(1)


def causal_row_max(q, k, v):
    """Derived input: max over the causally visible keys of the full scores."""
    return causal_scores(q, k).amax(dim=-1, keepdim=True)


def attention_causal_shifted(q, k, v, m):
    p = torch.exp(causal_scores(q, k) - m)
    p = p / p.sum(dim=-1, keepdim=True)
    return torch.matmul(p, v)


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

# Level 1 only: ~2-3 s on 2 cores (4-D matmul with batch and heads both sharded goes through
# DTensor's _StridedShard strategy enumeration, see case_mesh3d.py).
register(OpShardCase(
    name="attention_rowmax_derived_batch_dp_heads_tp_dp_tp",
    fn=attention_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[(Shard(0), Shard(1)), (Shard(0), Shard(1)), (Shard(0), Shard(1))],
    derived_inputs=[DerivedSpec(fn=row_max_of_scores, placements=(Shard(0), Shard(1)), ndim=4, name="row_max")],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))

# A truly global statistic: one max over all batches and heads, replicated on every rank.
register(OpShardCase(
    name="attention_globalmax_derived_batch_dp_heads_tp_dp_tp",
    fn=attention_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[(Shard(0), Shard(1)), (Shard(0), Shard(1)), (Shard(0), Shard(1))],
    derived_inputs=[DerivedSpec(fn=global_max_of_scores, placements=(Replicate(), Replicate()), ndim=0,
                                name="global_max")],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))

# Causal, written out (torch's CPU sdpa kernel has no DTensor strategy, see case_sdpa.py): an
# additive -inf upper triangle built with full_like/triu on the scores' own layout; the
# derived row max is over the visible keys only.
register(OpShardCase(
    name="attention_causal_rowmax_derived_heads_s1_mesh2",
    fn=attention_causal_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[(Shard(1),), (Shard(1),), (Shard(1),)],
    derived_inputs=[DerivedSpec(fn=causal_row_max, placements=(Shard(1),), ndim=4, name="causal_row_max")],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

# Backward: the framework optimises L = sum <out, G> (fixed standard-normal G), so dQ, dK, dV
# are single-device autograd's for that L. The derived statistic is a constant (it is built
# from detached copies), and softmax is shift-invariant, so the gradients equal those of plain
# softmax attention; they stay sharded like Q/K/V.
register(OpShardCase(
    name="attention_rowmax_derived_batch_s0_grad_mesh2",
    fn=attention_shifted,
    inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G)],
    placements=[(Shard(0),), (Shard(0),), (Shard(0),)],
    derived_inputs=[DerivedSpec(fn=row_max_of_scores, placements=(Shard(0),), ndim=4, name="row_max")],
    mesh_shape=MESH2,
    compare=REORDERED_SUM,
    tags=L0_NPU,
))

register(OpShardCase(
    name="attention_causal_rowmax_derived_batch_dp_heads_tp_grad_dp_tp",
    fn=attention_causal_shifted,
    inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G)],
    placements=[(Shard(0), Shard(1)), (Shard(0), Shard(1)), (Shard(0), Shard(1))],
    derived_inputs=[DerivedSpec(fn=causal_row_max, placements=(Shard(0), Shard(1)), ndim=4, name="causal_row_max")],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))

# bfloat16 (eps 2^-8 ≈ 3.9e-3): two matmuls over head_dim/seq 8 accumulate in float32 on CPU
# and round once per op; the intermediate p and the written-out softmax are rounded to bf16
# at each step (≈ 4 roundings of values ≤ 1): rtol=atol=3.2e-2 (≈ 8 eps).
register(OpShardCase(
    name="attention_bf16_rowmax_derived_heads_s1_mesh2",
    fn=attention_shifted,
    inputs=[InputSpec(QKV, dtype="bfloat16"), InputSpec(QKV, dtype="bfloat16"), InputSpec(QKV, dtype="bfloat16")],
    placements=[(Shard(1),), (Shard(1),), (Shard(1),)],
    derived_inputs=[DerivedSpec(fn=row_max_of_scores, placements=(Shard(1),), ndim=4, name="row_max")],
    mesh_shape=MESH2,
    compare=CompareSpec.allclose(rtol=3.2e-2, atol=3.2e-2),
    tags=L0,
))
