"""torch.nn.functional.scaled_dot_product_attention on DTensor, sharded on batch and on heads,
causal and not, with an explicit mask, in float32 / bfloat16 / float16, with backward.

Attention is independent per (batch, head), so sharding either dim (or batch on dp and heads
on tp) is local; the sequence and head dims must be whole on every rank. An attn_mask of
shape (batch, 1, q, k) or (q, k) broadcasts over heads and must follow the batch sharding.

Tolerances:
* float32: two matmuls over head_dim 8 / seq 8 and a softmax row sum; CPU attention kernels
  may block differently for a smaller local batch*heads: REASSOC rtol=1e-5/atol=1e-5.
* bfloat16 (eps 2^-8 ≈ 3.9e-3): the CPU flash kernel accumulates in float32 and rounds the
  output once; outputs are convex combinations of V rows (|out| ≲ 2), so a differently
  blocked local kernel may differ by ~1 ulp: rtol=1.6e-2, atol=sqrt(seq)·eps ≈ 1.1e-2
  rounded up to 1.6e-2.
* float16 (eps 2^-11 ≈ 4.9e-4): rtol=2e-3, atol=2e-3.

Backward (``requires_grad=True`` on Q, K, V): the framework optimises ``L = sum <out, G>``
with fixed standard-normal G, so the expected dQ, dK, dV are single-device autograd's for
that L; they stay sharded like Q/K/V and are compared gathered.
"""
import torch
import torch.nn.functional as F

from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1")
L1 = ("cpu_level1", "npu_level1")
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
BF16 = CompareSpec.allclose(rtol=1.6e-2, atol=1.6e-2)
FP16 = CompareSpec.allclose(rtol=2e-3, atol=2e-3)
QKV = (4, 4, 8, 8)  # (batch, heads, seq, head_dim)
QKV_G = dict(requires_grad=True)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def sdpa_float_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def sdpa_scaled(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, scale=0.25)


QKV_SPEC = [InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)]

register(OpShardCase(name="sdpa_batch_s0_grad_mesh2", fn=sdpa,
                     inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G)],
                     placements=[(Shard(0),)] * 3, mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_heads_s1_grad_mesh2", fn=sdpa,
                     inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G)],
                     placements=[(Shard(1),)] * 3, mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_causal_batch_s0_mesh4", fn=sdpa_causal, inputs=QKV_SPEC,
                     placements=[(Shard(0),)] * 3, mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_causal_heads_s1_grad_mesh4", fn=sdpa_causal,
                     inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G)],
                     placements=[(Shard(1),)] * 3, mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_heads_uneven_s1_mesh4", fn=sdpa,
                     inputs=[InputSpec((2, 6, 8, 8)), InputSpec((2, 6, 8, 8)), InputSpec((2, 6, 8, 8))],
                     placements=[(Shard(1),)] * 3, mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_bool_mask_batch_s0_mesh2", fn=sdpa_mask,
                     inputs=QKV_SPEC + [InputSpec((4, 1, 8, 8), dtype="bool",
                                                  data=[[[[j <= i + b for j in range(8)] for i in range(8)]]
                                                        for b in range(4)])],
                     placements=[(Shard(0),)] * 4, mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_float_mask_heads_s1_grad_mesh2", fn=sdpa_float_mask,
                     inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G),
                             InputSpec((8, 8), init="uniform", low=-1.0, high=0.0)],
                     placements=[(Shard(1),)] * 3 + [(Replicate(),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_batch_dp_heads_tp_grad_dp_tp", fn=sdpa,
                     inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G)],
                     placements=[(Shard(0), Shard(1))] * 3, mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_causal_batch_dp_heads_tp_dp_tp", fn=sdpa_causal, inputs=QKV_SPEC,
                     placements=[(Shard(0), Shard(1))] * 3, mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=REASSOC, tags=L0))
register(OpShardCase(name="sdpa_scaled_heads_r_dp_tp", fn=sdpa_scaled, inputs=QKV_SPEC,
                     placements=[(Replicate(), Shard(1))] * 3, mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=REASSOC, tags=L1))
register(OpShardCase(name="sdpa_bf16_batch_s0_mesh2", fn=sdpa,
                     inputs=[InputSpec(QKV, dtype="bfloat16"), InputSpec(QKV, dtype="bfloat16"),
                             InputSpec(QKV, dtype="bfloat16")],
                     placements=[(Shard(0),)] * 3, mesh_shape=MESH2, compare=BF16, tags=L0))
register(OpShardCase(name="sdpa_bf16_causal_heads_s1_mesh4", fn=sdpa_causal,
                     inputs=[InputSpec(QKV, dtype="bfloat16"), InputSpec(QKV, dtype="bfloat16"),
                             InputSpec(QKV, dtype="bfloat16")],
                     placements=[(Shard(1),)] * 3, mesh_shape=MESH4, compare=BF16, tags=L0))
register(OpShardCase(name="sdpa_fp16_batch_dp_heads_tp_dp_tp", fn=sdpa,
                     inputs=[InputSpec(QKV, dtype="float16"), InputSpec(QKV, dtype="float16"),
                             InputSpec(QKV, dtype="float16")],
                     placements=[(Shard(0), Shard(1))] * 3, mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=FP16, tags=L0))
