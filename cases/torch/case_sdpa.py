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

What torch 2.13 does on CPU (repro /tmp/repro/sdpa.py): sdpa picks the CPU flash kernel
``aten._scaled_dot_product_flash_attention_for_cpu``, which has no DTensor sharding strategy
(``torch/distributed/tensor/_ops/_matrix_ops.py`` registers only the CUDA flash / efficient /
cudnn kernels and their backwards). Causal calls fail at once with NotImplementedError; these
are registered as known failures (they fail in milliseconds). Non-causal forward calls are
run through the kernel's decomposition instead, op by op: correct but slow (measured 8-19 s
per case on this 2-core machine, and > 120 s — the case deadline — with an explicit
attn_mask), so only two mesh-(2,) forward cases are registered, in level 1. Not registered
because of that cost: bool/float attn_mask cases (timed out at 120 s), (2, 2)-mesh
batch-dp/heads-tp cases (16-19 s each), heads-uneven on (4,) (18 s). Backward of non-causal
sdpa needs ``_scaled_dot_product_flash_attention_for_cpu_backward`` (no strategy either) after
a slow forward, so it is covered by the (fast-failing) causal-with-grad known failure; the
written-out attention in case_attention.py covers sharded attention gradients.

Backward (``requires_grad=True`` on Q, K, V): the framework optimises ``L = sum <out, G>``
with fixed standard-normal G, so the expected dQ, dK, dV are single-device autograd's for
that L; they stay sharded like Q/K/V and are compared gathered.
"""
import torch.nn.functional as F

from meshtest import CompareSpec, InputSpec, KnownFailure, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
# CPU-only tags: everything here is about torch's CPU sdpa kernels (on NPU sdpa dispatches to
# other kernels), so these cases carry no npu_* gates.
L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
BF16 = CompareSpec.allclose(rtol=1.6e-2, atol=1.6e-2)
FP16 = CompareSpec.allclose(rtol=2e-3, atol=2e-3)
QKV = (4, 4, 8, 8)  # (batch, heads, seq, head_dim)
QKV_G = dict(requires_grad=True)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


QKV_SPEC = [InputSpec(QKV), InputSpec(QKV), InputSpec(QKV)]
NO_CPU_FLASH_STRATEGY = KnownFailure(
    kind="raises", step="run", match=r"aten\._scaled_dot_product_flash_attention_for_cpu\.default does not have a "
                                     r"sharding strategy",
    reason="sdpa on CPU dispatches to aten._scaled_dot_product_flash_attention_for_cpu, which has no DTensor "
           "sharding strategy (_ops/_matrix_ops.py covers only the CUDA flash/efficient/cudnn kernels)",
    upstream="docs/torch-bugs.md#sdpa-cpu-flash-strategy")

# Non-causal forward: correct through the decomposition, but slow: DTensor propagates sharding
# through the decomposition of the CPU flash kernel op by op (the near-deadline note names
# torch/_ops.py decompose and prims ops). 16-31 s alone here, 44-78 s in a loaded level1 launch,
# once past the default 120 s deadline: each gets a deadline of its own (SLOW_S), and a run
# that comes near it says so (docs/strength.md, "Clocks").
SLOW_S = 300.0
register(OpShardCase(name="sdpa_batch_s0_mesh2", fn=sdpa, inputs=QKV_SPEC,
                     placements=[(Shard(0),)] * 3, mesh_shape=MESH2, compare=REASSOC, tags=L1, timeout_s=SLOW_S))
register(OpShardCase(name="sdpa_bf16_batch_s0_mesh2", fn=sdpa,
                     inputs=[InputSpec(QKV, dtype="bfloat16"), InputSpec(QKV, dtype="bfloat16"),
                             InputSpec(QKV, dtype="bfloat16")],
                     placements=[(Shard(0),)] * 3, mesh_shape=MESH2, compare=BF16, tags=L1, timeout_s=SLOW_S))

# Causal: the CPU flash kernel is required and has no strategy (fails in milliseconds).
register(OpShardCase(name="sdpa_causal_batch_s0_mesh2", fn=sdpa_causal, inputs=QKV_SPEC,
                     placements=[(Shard(0),)] * 3, mesh_shape=MESH2, compare=REASSOC, tags=L0,
                     known_failure=NO_CPU_FLASH_STRATEGY))
register(OpShardCase(name="sdpa_causal_batch_s0_mesh4", fn=sdpa_causal, inputs=QKV_SPEC,
                     placements=[(Shard(0),)] * 3, mesh_shape=MESH4, compare=REASSOC, tags=L1,
                     known_failure=NO_CPU_FLASH_STRATEGY))
register(OpShardCase(name="sdpa_causal_heads_s1_grad_mesh4", fn=sdpa_causal,
                     inputs=[InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G), InputSpec(QKV, **QKV_G)],
                     placements=[(Shard(1),)] * 3, mesh_shape=MESH4, compare=REASSOC, tags=L0,
                     known_failure=NO_CPU_FLASH_STRATEGY))
register(OpShardCase(name="sdpa_causal_batch_dp_heads_tp_dp_tp", fn=sdpa_causal, inputs=QKV_SPEC,
                     placements=[(Shard(0), Shard(1))] * 3, mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=REASSOC, tags=L0, known_failure=NO_CPU_FLASH_STRATEGY))
register(OpShardCase(name="sdpa_bf16_causal_heads_s1_mesh4", fn=sdpa_causal,
                     inputs=[InputSpec(QKV, dtype="bfloat16"), InputSpec(QKV, dtype="bfloat16"),
                             InputSpec(QKV, dtype="bfloat16")],
                     placements=[(Shard(1),)] * 3, mesh_shape=MESH4, compare=BF16, tags=L1,
                     known_failure=NO_CPU_FLASH_STRATEGY))
register(OpShardCase(name="sdpa_fp16_causal_heads_tp_dp_tp", fn=sdpa_causal,
                     inputs=[InputSpec(QKV, dtype="float16"), InputSpec(QKV, dtype="float16"),
                             InputSpec(QKV, dtype="float16")],
                     placements=[(Replicate(), Shard(1))] * 3, mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=FP16, tags=L1, known_failure=NO_CPU_FLASH_STRATEGY))
