"""A few cases on a 3-D mesh (2, 2, 2) named ("dp", "cp", "tp"): 8 ranks.

Kept few on purpose: an 8-rank launch costs ~11 s on a 2-core machine. Each case places
tensors on all three mesh dims: batch on dp, sequence on cp, hidden/heads on tp.

Tolerance for the matmul-based cases: sub-block BLAS and partial products summed across ranks
reorder float32 accumulations; rtol=1e-5, atol=1e-5 covers inner dims ≤ 8 of standard-normal
values. The reduction over the cp-sharded dim reorders its sum the same way.
"""
import math

import torch
import torch.nn.functional as F

from meshtest import CompareSpec, DerivedSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register

MESH_3D = (2, 2, 2)
DP_CP_TP = ("dp", "cp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
REORDERED_SUM = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
QKV = (8, 8, 8)  # (batch * heads, seq, head_dim) for batch 2, heads 4
SCALE = 1.0 / math.sqrt(QKV[-1])


def add(x, y):
    return x + y


def mm(a, b):
    return torch.mm(a, b)


def sum_seq(x):
    return x.sum(dim=1)


def row_max_of_scores(q, k, v):
    """Derived input: max over keys of the full scores, shape (batch * heads, seq, 1)."""
    return (torch.matmul(q, k.transpose(-2, -1)) * SCALE).amax(dim=-1, keepdim=True)


def attention_shifted(q, k, v, m):
    p = torch.exp(torch.matmul(q, k.transpose(-2, -1)) * SCALE - m)
    p = p / p.sum(dim=-1, keepdim=True)
    return torch.matmul(p, v)


register(OpShardCase(
    name="add_bcast_s0s1s2_3d_mesh",
    fn=add,
    inputs=[InputSpec((4, 8, 6)), InputSpec((6,))],
    placements=[(Shard(0), Shard(1), Shard(2)), (Replicate(), Replicate(), Shard(0))],
    mesh_shape=MESH_3D,
    mesh_dim_names=DP_CP_TP,
    tags=L0_NPU,
))

# Rows on dp, contracting dim on tp: output [Shard(0), Replicate(), Partial()].
register(OpShardCase(
    name="mm_dp_rows_tp_contract_3d_mesh",
    fn=mm,
    inputs=[InputSpec((8, 8)), InputSpec((8, 4))],
    placements=[(Shard(0), Replicate(), Shard(1)), (Replicate(), Replicate(), Shard(0))],
    mesh_shape=MESH_3D,
    mesh_dim_names=DP_CP_TP,
    compare=REORDERED_SUM,
    tags=L0,
))

register(OpShardCase(
    name="sum_cp_sharded_seq_3d_mesh",
    fn=sum_seq,
    inputs=[InputSpec((4, 8, 6))],
    placements=[(Shard(0), Shard(1), Shard(2))],
    mesh_shape=MESH_3D,
    mesh_dim_names=DP_CP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))

# Batch and heads folded into dim 0 (dp outer, tp inner: the same split as batch on dp and
# heads on tp), query sequence on cp, K/V whole along the sequence.
register(OpShardCase(
    name="attention_rowmax_derived_dp_cp_tp_3d_mesh",
    fn=attention_shifted,
    inputs=[InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)],
    placements=[
        (Shard(0), Shard(1), Shard(0)),
        (Shard(0), Replicate(), Shard(0)),
        (Shard(0), Replicate(), Shard(0)),
    ],
    derived_inputs=[DerivedSpec(fn=row_max_of_scores, placements=(Shard(0), Shard(1), Shard(0)), ndim=3,
    name="row_max")],
    mesh_shape=MESH_3D,
    mesh_dim_names=DP_CP_TP,
    compare=REORDERED_SUM,
    tags=L1,
))

# ---------------------------------------------------------------- more families on (2, 2, 2)
# Backward cases: the framework optimises L = sum_i <out_i, G_i> (fixed standard-normal G_i),
# so the expected input/weight gradients are single-device autograd's for that L.
G = dict(requires_grad=True)


def gelu(x):
    return F.gelu(x)


def amax_seq(x):
    return x.amax(dim=1)


def linear(x, w, b):
    return F.linear(x, w, b)


def layer_norm(x, w, b):
    return F.layer_norm(x, (8,), w, b)


def softmax_last(x):
    return torch.softmax(x, dim=-1)


def permute_reshape(x):
    return x.permute(1, 0, 2).reshape(8, 24)


def gather_last(x, i):
    return torch.gather(x, 2, i)


def conv1d(x, w, b):
    return F.conv1d(x, w, b, padding=1)


def cross_entropy(x, t):
    return F.cross_entropy(x, t, reduction="none")


def sort_last(x):
    return torch.sort(x, dim=-1)


def cumsum_seq(x):
    return x.cumsum(dim=1)


register(OpShardCase(name="m3d_gelu_uneven_s0s1s2_grad_3d_mesh", fn=gelu, inputs=[InputSpec((4, 5, 6), **G)],
                     placements=[(Shard(0), Shard(1), Shard(2))], mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP, tags=L0))
register(OpShardCase(name="m3d_add_partial_tp_3d_mesh", fn=add, inputs=[InputSpec((4, 8, 6)), InputSpec((4, 8, 6))],
                     placements=[(Shard(0), Shard(1), Partial("sum")), (Shard(0), Shard(1), Partial("sum"))],
                     mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP, compare=REORDERED_SUM, tags=L1))
register(OpShardCase(name="m3d_amax_cp_sharded_seq_3d_mesh", fn=amax_seq, inputs=[InputSpec((4, 8, 6))],
                     placements=[(Shard(0), Shard(1), Shard(2))], mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP,
                     compare=CompareSpec.equal(), tags=L1))
# 2-D activations (batch*seq folded by the caller): rows on dp and cp, out features on tp.
# Not registered: the same linear on a 3-D (batch, seq, hidden) input with batch on dp and seq
# on cp: F.linear folds the two sharded dims into a _StridedShard for its mm, and the backward
# mm then takes DTensor's exhaustive _StridedShard strategy enumeration (same slow path as
# the attention note at the end of this file): it exceeded the 120 s case deadline.
register(OpShardCase(name="m3d_linear_tp_col_grad_3d_mesh", fn=linear,
                     inputs=[InputSpec((8, 6), **G), InputSpec((8, 6), **G), InputSpec((8,), **G)],
                     placements=[(Shard(0), Shard(0), Replicate()), (Replicate(), Replicate(), Shard(0)),
                                 (Replicate(), Replicate(), Shard(0))],
                     mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP, compare=REORDERED_SUM, tags=L0))
register(OpShardCase(name="m3d_layer_norm_grad_3d_mesh", fn=layer_norm,
                     inputs=[InputSpec((4, 8, 8), **G), InputSpec((8,), **G), InputSpec((8,), **G)],
                     placements=[(Shard(0), Shard(1), Replicate()), (Replicate(),) * 3, (Replicate(),) * 3],
                     mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP, compare=REORDERED_SUM, tags=L1))
register(OpShardCase(name="m3d_softmax_over_tp_sharded_3d_mesh", fn=softmax_last, inputs=[InputSpec((4, 8, 6))],
                     placements=[(Shard(0), Shard(1), Shard(2))], mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP,
                     compare=REORDERED_SUM, tags=L1))
register(OpShardCase(name="m3d_permute_reshape_3d_mesh", fn=permute_reshape,
                     inputs=[InputSpec((2, 8, 12), init="arange")],
                     placements=[(Shard(0), Shard(1), Shard(2))], mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP,
                     compare=CompareSpec.equal(), tags=L1))
register(OpShardCase(name="m3d_gather_last_3d_mesh", fn=gather_last,
                     inputs=[InputSpec((4, 4, 6)), InputSpec((4, 4, 3), init="uniform", dtype="int64", low=0, high=6)],
                     placements=[(Shard(0), Shard(1), Replicate()), (Shard(0), Shard(1), Replicate())],
                     mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP, compare=CompareSpec.equal(), tags=L1))
register(OpShardCase(name="m3d_conv1d_batch_dp_3d_mesh", fn=conv1d,
                     inputs=[InputSpec((4, 3, 8)), InputSpec((4, 3, 3)), InputSpec((4,))],
                     placements=[(Shard(0), Replicate(), Replicate()), (Replicate(),) * 3, (Replicate(),) * 3],
                     mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP, compare=CompareSpec.allclose(rtol=1e-5, atol=2e-5),
                     tags=L1))
register(OpShardCase(name="m3d_cross_entropy_none_3d_mesh", fn=cross_entropy,
                     inputs=[InputSpec((8, 6)), InputSpec((8,), init="uniform", dtype="int64", low=0, high=6)],
                     placements=[(Shard(0), Shard(0), Replicate()), (Shard(0), Shard(0), Replicate())],
                     mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP, compare=REORDERED_SUM, tags=L1))
register(OpShardCase(name="m3d_sort_last_3d_mesh", fn=sort_last, inputs=[InputSpec((4, 4, 8))],
                     placements=[(Shard(0), Shard(1), Replicate())], mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP,
                     compare=CompareSpec.equal(), compare_outputs=(0, 1), tags=L1))
register(OpShardCase(name="m3d_cumsum_cp_sharded_3d_mesh", fn=cumsum_seq, inputs=[InputSpec((4, 8, 6))],
                     placements=[(Shard(0), Shard(1), Shard(2))], mesh_shape=MESH_3D, mesh_dim_names=DP_CP_TP,
                     compare=REORDERED_SUM, tags=L1))

# Not registered: the same attention on 4-D (batch, heads, seq, dim) tensors with batch on dp
# and heads on tp. torch.matmul flattens the two sharded batch dims into a _StridedShard
# placement; for _StridedShard inputs DTensor's bmm sharding propagation skips its Dijkstra
# search and enumerates every strategy on the 3-D mesh, each with a graph-search redistribute
# cost (torch 2.13 _ops/single_dim_strategy.py, _dijkstra_expand_single_dim_strategy_to_mesh:
# "Returns None if any input has _StridedShard"; fallback described in pytorch/pytorch#177799).
# Measured ~180-240 s of CPU for ONE matmul in a single process: far past the launch deadline
# with 8 ranks on 2 cores. The result is correct, so known_failure cannot express it (a launch
# timeout is not an xfail). The (2, 2)-mesh version runs in case_attention.py (~1 s).
