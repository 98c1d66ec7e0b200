"""Linear algebra on DTensor: mm (placement sweep), bmm, matmul broadcasting, linear in DP / TP
column / TP row layouts with weight and bias gradients, addmm, baddbmm and einsum, including
contracting-dim sharding that produces a ``Partial`` output, Partial inputs, and bf16/fp16.

Rules DTensor must follow: sharding a free dim of one operand keeps the output sharded on the
matching output dim; sharding the contracting dim of both operands gives Partial("sum"); a
Partial operand is linear through a matmul with a Replicate one; a bias added to a Partial
product must be added once (addmm, baddbmm, row-parallel linear).

Tolerances:
* float32: BLAS on sub-blocks and per-rank partial products summed in another order reorder
  the K-term dot products (K ≤ 16 here, standard-normal terms): error ~ sqrt(K)·eps·|x||y|
  ≈ 4 · 1.2e-7 · 4 ≈ 2e-6; rtol=1e-5/atol=1e-5 (REASSOC).
* bfloat16: 8 significant bits, unit roundoff eps = 2^-8 ≈ 3.9e-3. CPU kernels accumulate
  in float32 and round once, but a Partial output rounds each rank's partial sum to bf16
  before the cross-rank sum, adding up to ~1 ulp per partial (2 ulps ≈ 1.6e-2 relative); near
  zero, cancellation of partials of size ~sqrt(K)=4 leaves an absolute error of a few
  eps·sqrt(K): rtol=1.6e-2, atol=sqrt(K)·eps·2 ≈ 3.2e-2 (BF16).
* float16: 11 significant bits, eps = 2^-11 ≈ 4.9e-4; same reasoning: rtol=2e-3 (≈ 4 eps),
  atol=sqrt(K)·eps·2 ≈ 4e-3 (FP16).

Backward (``requires_grad=True`` cases): the framework optimises ``L = sum_i <out_i, G_i>``
(fixed standard-normal G), so for ``out = x @ W^T + b`` the expected gradients are
``dL/dx = G @ W``, ``dL/dW = G^T @ x`` and ``dL/db = G.sum(batch dims)``; for mm,
``dA = G @ B^T`` and ``dB = A^T @ G``. Gradients of sharded/Partial inputs are compared in
full (gathered) against single-device autograd with the forward tolerance.
"""
import torch
import torch.nn.functional as F

from meshtest import CompareSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register, register_sweep

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
BF16 = CompareSpec.allclose(rtol=1.6e-2, atol=3.2e-2)
FP16 = CompareSpec.allclose(rtol=2e-3, atol=4e-3)


def mm(a, b):
    return torch.mm(a, b)


def bmm(a, b):
    return torch.bmm(a, b)


def matmul(a, b):
    return torch.matmul(a, b)


def linear(x, w, b):
    return F.linear(x, w, b)


def linear_no_bias(x, w):
    return F.linear(x, w)


def addmm(c, a, b):
    return torch.addmm(c, a, b)


def addmm_scaled(c, a, b):
    return torch.addmm(c, a, b, beta=0.5, alpha=2.0)


def baddbmm(c, a, b):
    return torch.baddbmm(c, a, b)


def einsum_bmm(a, b):
    return torch.einsum("bij,bjk->bik", a, b)


def einsum_mm(a, b):
    return torch.einsum("ij,jk->ik", a, b)


def einsum_scores(q, k):
    return torch.einsum("bhqd,bhkd->bhqk", q, k)


def einsum_outer(a, b):
    return torch.einsum("i,j->ij", a, b)


def einsum_rowsum(a):
    return torch.einsum("ij->i", a)


def einsum_bilinear(x, w, y):
    return torch.einsum("bi,ij,bj->b", x, w, y)


# ---------------------------------------------------------------- mm placement sweep on (2,), with grads
# 4 x 4 layouts (R, S0, S1, Partial sum) of A (6, 8) and B (8, 4); both Partial is valid too
# (DTensor must reduce one side first: (sum A_r)(sum B_r) != sum A_r B_r).
register_sweep(
    name="linalg_mm_mesh2",
    fn=mm,
    inputs=[InputSpec((6, 8), requires_grad=True), InputSpec((8, 4), requires_grad=True)],
    mesh_shape=MESH2,
    partial_ops=("sum",),
    compare=REASSOC,
    tags=L0,
)

# ---------------------------------------------------------------- bmm / matmul
register(OpShardCase(name="linalg_bmm_batch_s0_grad_mesh2", fn=bmm,
                     inputs=[InputSpec((4, 6, 8), requires_grad=True), InputSpec((4, 8, 5), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_bmm_contract_partial_grad_mesh4", fn=bmm,
                     inputs=[InputSpec((2, 4, 16), requires_grad=True), InputSpec((2, 16, 3), requires_grad=True)],
                     placements=[(Shard(2),), (Shard(1),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_bmm_rows_s1_r_uneven_mesh4", fn=bmm,
                     inputs=[InputSpec((2, 7, 4)), InputSpec((2, 4, 3))],
                     placements=[(Shard(1),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_bmm_batch_uneven_s0_grad_mesh4", fn=bmm,
                     inputs=[InputSpec((5, 3, 4), requires_grad=True), InputSpec((5, 4, 2), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_bmm_batch_dp_cols_tp_dp_tp", fn=bmm,
                     inputs=[InputSpec((4, 3, 8)), InputSpec((4, 8, 6))],
                     placements=[(Shard(0), Replicate()), (Shard(0), Shard(2))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_matmul_3d_2d_x_s0_grad_mesh2", fn=matmul,
                     inputs=[InputSpec((4, 3, 8), requires_grad=True), InputSpec((8, 5), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_matmul_3d_2d_contract_partial_mesh2", fn=matmul,
                     inputs=[InputSpec((4, 3, 8)), InputSpec((8, 5))],
                     placements=[(Shard(2),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_matmul_vec_s0_mesh4", fn=matmul,
                     inputs=[InputSpec((8, 6)), InputSpec((6,))],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_matmul_bcast_batch_s1_dp_tp", fn=matmul,
                     inputs=[InputSpec((2, 4, 6)), InputSpec((6, 4))],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Replicate())], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))

# ---------------------------------------------------------------- Partial inputs through a matmul
register(OpShardCase(name="linalg_mm_partial_sum_lhs_r_mesh4", fn=mm,
                     inputs=[InputSpec((4, 8)), InputSpec((8, 4))],
                     placements=[(Partial("sum"),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_mm_partial_avg_lhs_s1_rhs_mesh2", fn=mm,
                     inputs=[InputSpec((6, 8)), InputSpec((8, 4))],
                     placements=[(Partial("avg"),), (Shard(1),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_mm_partial_dp_contract_tp_dp_tp", fn=mm,
                     inputs=[InputSpec((4, 8)), InputSpec((8, 4))],
                     placements=[(Partial("sum"), Shard(1)), (Replicate(), Shard(0))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))

# ---------------------------------------------------------------- linear: DP, TP column, TP row, with weight grads
register(OpShardCase(name="linalg_linear_dp_grad_mesh2", fn=linear,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((4, 6), requires_grad=True),
                             InputSpec((4,), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),), (Replicate(),)], mesh_shape=MESH2, compare=REASSOC,
                     tags=L0))
register(OpShardCase(name="linalg_linear_tp_col_grad_mesh2", fn=linear,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((8, 6), requires_grad=True),
                             InputSpec((8,), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_linear_tp_row_grad_mesh2", fn=linear,
                     inputs=[InputSpec((8, 8), requires_grad=True), InputSpec((4, 8), requires_grad=True),
                             InputSpec((4,), requires_grad=True)],
                     placements=[(Shard(1),), (Shard(1),), (Replicate(),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_linear_dp_uneven_batch_grad_mesh4", fn=linear,
                     inputs=[InputSpec((7, 6), requires_grad=True), InputSpec((5, 6), requires_grad=True),
                             InputSpec((5,), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC,
                     tags=L0))
register(OpShardCase(name="linalg_linear_tp_col_uneven_out_grad_mesh4", fn=linear,
                     inputs=[InputSpec((4, 8), requires_grad=True), InputSpec((6, 8), requires_grad=True),
                             InputSpec((6,), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(0),), (Shard(0),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_linear_tp_row_3d_grad_mesh4", fn=linear,
                     inputs=[InputSpec((2, 3, 16), requires_grad=True), InputSpec((5, 16), requires_grad=True),
                             InputSpec((5,), requires_grad=True)],
                     placements=[(Shard(2),), (Shard(1),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_linear_dp_tp_col_grad_dp_tp", fn=linear,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((8, 6), requires_grad=True),
                             InputSpec((8,), requires_grad=True)],
                     placements=[(Shard(0), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_linear_dp_tp_row_grad_dp_tp", fn=linear,
                     inputs=[InputSpec((4, 3, 8), requires_grad=True), InputSpec((6, 8), requires_grad=True),
                             InputSpec((6,), requires_grad=True)],
                     placements=[(Shard(0), Shard(2)), (Replicate(), Shard(1)), (Replicate(), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_linear_no_bias_seq_tp_grad_dp_tp", fn=linear_no_bias,
                     inputs=[InputSpec((2, 8, 6), requires_grad=True), InputSpec((4, 6), requires_grad=True)],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L1))

# ---------------------------------------------------------------- addmm / baddbmm
register(OpShardCase(name="linalg_addmm_rows_s0_grad_mesh2", fn=addmm,
                     inputs=[InputSpec((4,), requires_grad=True), InputSpec((8, 6), requires_grad=True),
                             InputSpec((6, 4), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(0),), (Replicate(),)], mesh_shape=MESH2, compare=REASSOC,
                     tags=L0))
# The bias is replicated while the product is Partial: it must be added once, not n times.
register(OpShardCase(name="linalg_addmm_contract_partial_bias_r_grad_mesh4", fn=addmm,
                     inputs=[InputSpec((4, 4), requires_grad=True), InputSpec((4, 8), requires_grad=True),
                             InputSpec((8, 4), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(1),), (Shard(0),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_addmm_scaled_cols_dp_tp", fn=addmm_scaled,
                     inputs=[InputSpec((6, 8)), InputSpec((6, 4)), InputSpec((4, 8))],
                     placements=[(Shard(0), Shard(1)), (Shard(0), Replicate()), (Replicate(), Shard(1))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_baddbmm_batch_s0_grad_mesh2", fn=baddbmm,
                     inputs=[InputSpec((4, 3, 5), requires_grad=True), InputSpec((4, 3, 6), requires_grad=True),
                             InputSpec((4, 6, 5), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_baddbmm_contract_partial_mesh2", fn=baddbmm,
                     inputs=[InputSpec((2, 3, 5)), InputSpec((2, 3, 8)), InputSpec((2, 8, 5))],
                     placements=[(Replicate(),), (Shard(2),), (Shard(1),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))

# ---------------------------------------------------------------- einsum
register(OpShardCase(name="linalg_einsum_bmm_batch_s0_grad_mesh2", fn=einsum_bmm,
                     inputs=[InputSpec((4, 3, 6), requires_grad=True), InputSpec((4, 6, 5), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_einsum_mm_contract_partial_mesh4", fn=einsum_mm,
                     inputs=[InputSpec((4, 8)), InputSpec((8, 6))],
                     placements=[(Shard(1),), (Shard(0),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_einsum_scores_heads_s1_grad_mesh2", fn=einsum_scores,
                     inputs=[InputSpec((2, 4, 5, 8), requires_grad=True), InputSpec((2, 4, 6, 8), requires_grad=True)],
                     placements=[(Shard(1),), (Shard(1),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_einsum_outer_s0_s0_uneven_mesh4", fn=einsum_outer,
                     inputs=[InputSpec((5,)), InputSpec((6,))],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_einsum_rowsum_partial_s1_mesh2", fn=einsum_rowsum,
                     inputs=[InputSpec((6, 8))], placements=[(Shard(1),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_einsum_bilinear_dp_tp", fn=einsum_bilinear,
                     inputs=[InputSpec((4, 6)), InputSpec((6, 8)), InputSpec((4, 8))],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Shard(0)), (Shard(0), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="linalg_einsum_scores_batch_dp_heads_tp_dp_tp", fn=einsum_scores,
                     inputs=[InputSpec((2, 4, 3, 8)), InputSpec((2, 4, 5, 8))],
                     placements=[(Shard(0), Shard(1)), (Shard(0), Shard(1))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, tags=L1))

# ---------------------------------------------------------------- bfloat16 / float16
register(OpShardCase(name="linalg_mm_bf16_rows_s0_mesh2", fn=mm,
                     inputs=[InputSpec((8, 16), dtype="bfloat16"), InputSpec((16, 4), dtype="bfloat16")],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH2, compare=BF16, tags=L0))
register(OpShardCase(name="linalg_mm_bf16_contract_partial_mesh2", fn=mm,
                     inputs=[InputSpec((8, 16), dtype="bfloat16"), InputSpec((16, 4), dtype="bfloat16")],
                     placements=[(Shard(1),), (Shard(0),)], mesh_shape=MESH2, compare=BF16, tags=L0))
register(OpShardCase(name="linalg_mm_fp16_contract_partial_mesh4", fn=mm,
                     inputs=[InputSpec((4, 16), dtype="float16"), InputSpec((16, 8), dtype="float16")],
                     placements=[(Shard(1),), (Shard(0),)], mesh_shape=MESH4, compare=FP16, tags=L0))
register(OpShardCase(name="linalg_bmm_fp16_batch_s0_grad_mesh2", fn=bmm,
                     inputs=[InputSpec((4, 3, 16), dtype="float16", requires_grad=True),
                             InputSpec((4, 16, 5), dtype="float16", requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=FP16, tags=L0))
register(OpShardCase(name="linalg_linear_bf16_tp_row_grad_mesh2", fn=linear,
                     inputs=[InputSpec((8, 16), dtype="bfloat16", requires_grad=True),
                             InputSpec((4, 16), dtype="bfloat16", requires_grad=True),
                             InputSpec((4,), dtype="bfloat16", requires_grad=True)],
                     placements=[(Shard(1),), (Shard(1),), (Replicate(),)], mesh_shape=MESH2, compare=BF16, tags=L0))
register(OpShardCase(name="linalg_linear_bf16_tp_col_grad_dp_tp", fn=linear,
                     inputs=[InputSpec((8, 16), dtype="bfloat16", requires_grad=True),
                             InputSpec((8, 16), dtype="bfloat16", requires_grad=True),
                             InputSpec((8,), dtype="bfloat16", requires_grad=True)],
                     placements=[(Shard(0), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=BF16, tags=L0))
register(OpShardCase(name="linalg_matmul_fp16_rows_dp_cols_tp_dp_tp", fn=matmul,
                     inputs=[InputSpec((8, 16), dtype="float16"), InputSpec((16, 8), dtype="float16")],
                     placements=[(Shard(0), Replicate()), (Replicate(), Shard(1))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=FP16, tags=L1))
