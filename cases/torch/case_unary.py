"""Unary elementwise ops on DTensor: abs, neg, exp, log, sqrt, tanh, gelu, silu, relu,
their in-place variants, and scalar operands (Python scalar and 0-d tensor), also against
``Partial`` inputs.

Elementwise ops keep any Shard/Replicate placement. On a ``Partial`` input only ops that are
linear for the Partial's reduce op may stay Partial (``neg``/``x * c`` for sum; ``relu`` is
monotone, so it commutes with max/min); every other op must reduce the Partial first, or the
result is wrong. Adding a scalar to a ``Partial("sum")`` is the classic trap: adding it on
every rank would add it ``n`` times.

Tolerance: each rank runs the same kernel on the same values as the reference, but vectorised
and scalar tail loops (which differ at uneven shard boundaries) may round transcendental
functions differently by 1 ulp (float32 eps 2^-23 ≈ 1.2e-7), inside the default
rtol=1.3e-6/atol=1e-5. Partial("sum") inputs are split as v/n per rank and summed back, which
re-associates: rtol=1e-5/atol=1e-5 there.

Backward (cases with ``requires_grad=True``): the framework optimises
``L = sum_i <out_i, G_i>`` with fixed standard-normal ``G_i``, so the expected input gradient
is ``G * f'(x)`` elementwise (e.g. ``G * sign(x)`` for abs, ``G * exp(x)`` for exp,
``G / x`` for log); it keeps the input's sharding.
"""
import torch
import torch.nn.functional as F

from meshtest import CompareSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
L0_CPU = ("cpu_level0", "cpu_level1")
EXACT = CompareSpec.equal()
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def abs_(x):
    return torch.abs(x)


def neg(x):
    return torch.neg(x)


def exp(x):
    return torch.exp(x)


def log(x):
    return torch.log(x)


def sqrt(x):
    return torch.sqrt(x)


def tanh(x):
    return torch.tanh(x)


def gelu(x):
    return F.gelu(x)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def silu(x):
    return F.silu(x)


def bitwise_not(x):
    return torch.bitwise_not(x)


def relu(x):
    return F.relu(x)


def add_py_scalar(x):
    return x + 2.5


def rsub_py_scalar(x):
    return 1.0 - x


def mul_py_scalar(x):
    return x * -3.0


def div_py_scalar(x):
    return x / 4.0


def pow_py_scalar(x):
    return x ** 2


# InputSpec(()) currently builds a 1-element 1-D tensor (np.ascontiguousarray promotes 0-d
# arrays to 1-d in the framework's make_tensor), so the case makes it 0-d itself: reshape(())
# is a view, a Replicate DTensor stays Replicate, and the gradient flows back to the (1,) leaf.
def add_0d_tensor(x, s):
    return x + s.reshape(())


def mul_0d_tensor(x, s):
    return x * s.reshape(())


def add_plain_0d_tensor(x):
    # a plain (non-distributed) 0-d tensor: DTensor treats it as an implicitly replicated scalar
    return x + torch.tensor(1.5)


def mul_plain_0d_tensor(x):
    return x * torch.tensor(-2.0)


def inplace_add_scalar(x):
    y = x * 1.0
    y.add_(2.5)
    return y


def inplace_mul_scalar(x):
    y = x * 1.0
    y.mul_(0.5)
    return y


def inplace_relu(x):
    y = x * 1.0
    y.relu_()
    return y


def inplace_neg(x):
    y = x * 1.0
    y.neg_()
    return y


def inplace_exp(x):
    y = x * 1.0
    y.exp_()
    return y


def inplace_sqrt_abs(x):
    y = x.abs()
    y.sqrt_()
    return y


def inplace_tanh(x):
    y = x * 1.0
    y.tanh_()
    return y


def inplace_add_tensor(x, z):
    y = x * 1.0
    y.add_(z)
    return y


def inplace_mul_0d(x, s):
    y = x * 1.0
    y.mul_(s.reshape(()))
    return y


def inplace_clamp(x):
    y = x * 1.0
    y.clamp_(-0.5, 0.5)
    return y


POS = dict(init="uniform", low=0.5, high=3.0)

# ---------------------------------------------------------------- mesh (2,): row-sharded, with backward
register(OpShardCase(name="unary_abs_s0_grad_mesh2", fn=abs_, inputs=[InputSpec((8, 6), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_neg_s0_grad_mesh2", fn=neg, inputs=[InputSpec((8, 6), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_exp_s1_grad_mesh2", fn=exp, inputs=[InputSpec((4, 10), requires_grad=True)],
                     placements=[(Shard(1),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_log_s0_grad_mesh2", fn=log, inputs=[InputSpec((8, 6), requires_grad=True, **POS)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_sqrt_s0_grad_mesh2", fn=sqrt, inputs=[InputSpec((8, 6), requires_grad=True, **POS)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_tanh_s1_grad_mesh2", fn=tanh, inputs=[InputSpec((6, 8), requires_grad=True)],
                     placements=[(Shard(1),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_gelu_s0_grad_mesh2", fn=gelu, inputs=[InputSpec((8, 6), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_silu_s0_grad_mesh2", fn=silu, inputs=[InputSpec((8, 6), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_relu_r_grad_mesh2", fn=relu, inputs=[InputSpec((8, 6), requires_grad=True)],
                     placements=[(Replicate(),)], mesh_shape=MESH2, tags=L0))

# ---------------------------------------------------------------- mesh (4,): uneven shards (7 or 5 rows over 4 ranks)
register(OpShardCase(name="unary_abs_uneven7_s0_mesh4", fn=abs_, inputs=[InputSpec((7, 5))],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_neg_uneven5_s1_mesh4", fn=neg, inputs=[InputSpec((3, 5))],
                     placements=[(Shard(1),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_exp_uneven7_s0_grad_mesh4", fn=exp, inputs=[InputSpec((7, 3), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_log_uneven9_s1_mesh4", fn=log, inputs=[InputSpec((2, 9), **POS)],
                     placements=[(Shard(1),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_sqrt_uneven6_s0_grad_mesh4", fn=sqrt,
                     inputs=[InputSpec((6, 4), requires_grad=True, **POS)],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_tanh_uneven3_s0_mesh4", fn=tanh, inputs=[InputSpec((3, 8))],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_gelu_tanh_uneven10_s1_grad_mesh4", fn=gelu_tanh,
                     inputs=[InputSpec((4, 10), requires_grad=True)],
                     placements=[(Shard(1),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_silu_uneven5_s0_mesh4", fn=silu, inputs=[InputSpec((5, 6))],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_relu_uneven7_s0_grad_mesh4", fn=relu, inputs=[InputSpec((7, 4), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))

# ---------------------------------------------------------------- mesh (2, 2): sharded on both axes
register(OpShardCase(name="unary_abs_s0s1_dp_tp", fn=abs_, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="unary_exp_s1s0_grad_dp_tp", fn=exp, inputs=[InputSpec((6, 4), requires_grad=True)],
                     placements=[(Shard(1), Shard(0))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="unary_gelu_3d_s0s2_grad_dp_tp", fn=gelu, inputs=[InputSpec((2, 3, 8), requires_grad=True)],
                     placements=[(Shard(0), Shard(2))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="unary_silu_s0s0_dp_tp", fn=silu, inputs=[InputSpec((8, 3))],
                     placements=[(Shard(0), Shard(0))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="unary_log_r_s1_uneven5_dp_tp", fn=log, inputs=[InputSpec((4, 5), **POS)],
                     placements=[(Replicate(), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L1))
register(OpShardCase(name="unary_tanh_s0s1_uneven_grad_dp_tp", fn=tanh, inputs=[InputSpec((5, 3), requires_grad=True)],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L1))
register(OpShardCase(name="unary_neg_int32_s0s1_dp_tp", fn=neg,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="int32", low=-100, high=100)],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=EXACT,
                     tags=L0))
register(OpShardCase(name="unary_abs_int8_uneven_s0_mesh4", fn=abs_,
                     inputs=[InputSpec((6, 3), init="uniform", dtype="int8", low=-100, high=100)],
                     placements=[(Shard(0),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
# bitwise_not was reached only inside cumprod's backward (a known torch failure), so no passing
# case could catch a fault in its rule (`mutate --tag cpu_level1`: aten.bitwise_not.default
# :wrong_shard_dim proven, no case to kill it).
register(OpShardCase(name="unary_bitwise_not_int32_s0_mesh2", fn=bitwise_not,
                     inputs=[InputSpec((6, 4), init="uniform", dtype="int32", low=-100, high=100)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, compare=EXACT, tags=L1))
register(OpShardCase(name="unary_relu_bf16_s0_mesh2", fn=relu,
                     inputs=[InputSpec((8, 6), dtype="bfloat16")],
                     placements=[(Shard(0),)], mesh_shape=MESH2, compare=EXACT, tags=L0))

# ---------------------------------------------------------------- Partial inputs
# Linear in a sum: stays Partial("sum") and full_tensor() sums the negated parts.
register(OpShardCase(name="unary_neg_partial_sum_mesh2", fn=neg, inputs=[InputSpec((8, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
# Not linear: abs/exp of a Partial("sum") must reduce first.
register(OpShardCase(name="unary_abs_partial_sum_mesh4", fn=abs_, inputs=[InputSpec((4, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="unary_exp_partial_sum_grad_mesh2", fn=exp, inputs=[InputSpec((4, 6), requires_grad=True)],
                     placements=[(Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
# neg of a Partial("max") is a Partial("min") in value, never a Partial("max"): must reduce first.
register(OpShardCase(name="unary_neg_partial_max_mesh2", fn=neg, inputs=[InputSpec((8, 6))],
                     placements=[(Partial("max"),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="unary_relu_partial_max_mesh4", fn=relu, inputs=[InputSpec((4, 6))],
                     placements=[(Partial("max"),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="unary_tanh_partial_avg_mesh4", fn=tanh, inputs=[InputSpec((4, 6))],
                     placements=[(Partial("avg"),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="unary_sqrt_partial_min_dp_tp", fn=sqrt, inputs=[InputSpec((4, 6), **POS)],
                     placements=[(Partial("min"), Shard(0))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="unary_gelu_partial_sum_s1_dp_tp", fn=gelu, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(1), Partial("sum"))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=REASSOC, tags=L1))

# ---------------------------------------------------------------- scalar operands
register(OpShardCase(name="scalar_add_py_s0_grad_mesh2", fn=add_py_scalar,
                     inputs=[InputSpec((8, 6), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="scalar_rsub_py_uneven_s1_mesh4", fn=rsub_py_scalar, inputs=[InputSpec((4, 7))],
                     placements=[(Shard(1),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="scalar_div_py_s0s1_dp_tp", fn=div_py_scalar, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="scalar_pow_py_s0_grad_mesh4", fn=pow_py_scalar,
                     inputs=[InputSpec((8, 3), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
# Python scalar against Partial: x * c stays Partial("sum"); x + c must not add c on every rank.
register(OpShardCase(name="scalar_mul_py_partial_sum_mesh4", fn=mul_py_scalar, inputs=[InputSpec((4, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_add_py_partial_sum_mesh2", fn=add_py_scalar, inputs=[InputSpec((8, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_add_py_partial_sum_mesh4", fn=add_py_scalar, inputs=[InputSpec((4, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_add_py_partial_max_mesh2", fn=add_py_scalar, inputs=[InputSpec((8, 6))],
                     placements=[(Partial("max"),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="scalar_rsub_py_partial_avg_dp_tp", fn=rsub_py_scalar, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0), Partial("avg"))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     compare=REASSOC, tags=L0))
# 0-d tensor operand, distributed (Replicate) or plain.
register(OpShardCase(name="scalar_add_0d_dtensor_s0_grad_mesh2", fn=add_0d_tensor,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_mul_0d_dtensor_uneven_s0_grad_mesh4", fn=mul_0d_tensor,
                     inputs=[InputSpec((5, 4), requires_grad=True), InputSpec((), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_mul_0d_dtensor_partial_sum_mesh2", fn=mul_0d_tensor,
                     inputs=[InputSpec((8, 6)), InputSpec(())],
                     placements=[(Partial("sum"),), (Replicate(),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_add_0d_dtensor_partial_sum_mesh4", fn=add_0d_tensor,
                     inputs=[InputSpec((4, 6)), InputSpec(())],
                     placements=[(Partial("sum"),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
# Both operands Partial("sum"), the 0-d one too: x + s is linear in (x, s) and may stay Partial.
register(OpShardCase(name="scalar_add_0d_partial_both_mesh2", fn=add_0d_tensor,
                     inputs=[InputSpec((8, 6)), InputSpec(())],
                     placements=[(Partial("sum"),), (Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_add_plain_0d_s0s1_dp_tp", fn=add_plain_0d_tensor, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="scalar_mul_plain_0d_partial_sum_mesh2", fn=mul_plain_0d_tensor, inputs=[InputSpec((8, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="scalar_add_plain_0d_partial_sum_mesh4", fn=add_plain_0d_tensor, inputs=[InputSpec((4, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))

# ---------------------------------------------------------------- in-place variants (on a non-leaf copy)
register(OpShardCase(name="inplace_add_scalar_s0_mesh2", fn=inplace_add_scalar, inputs=[InputSpec((8, 6))],
                     placements=[(Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="inplace_mul_scalar_partial_sum_mesh2", fn=inplace_mul_scalar, inputs=[InputSpec((8, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="inplace_relu_uneven_s0_grad_mesh4", fn=inplace_relu,
                     inputs=[InputSpec((7, 4), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="inplace_neg_s0s1_dp_tp", fn=inplace_neg, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="inplace_exp_s1_grad_mesh2", fn=inplace_exp, inputs=[InputSpec((4, 6), requires_grad=True)],
                     placements=[(Shard(1),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="inplace_sqrt_abs_uneven_s1_mesh4", fn=inplace_sqrt_abs, inputs=[InputSpec((3, 6))],
                     placements=[(Shard(1),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="inplace_tanh_s0s0_dp_tp", fn=inplace_tanh, inputs=[InputSpec((8, 3))],
                     placements=[(Shard(0), Shard(0))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L1))
register(OpShardCase(name="inplace_add_tensor_s0_s0_grad_mesh2", fn=inplace_add_tensor,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((8, 6), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH2, tags=L0))
register(OpShardCase(name="inplace_add_tensor_bcast_s0_r_mesh4", fn=inplace_add_tensor,
                     inputs=[InputSpec((8, 6)), InputSpec((6,))],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH4, tags=L0))
register(OpShardCase(name="inplace_add_tensor_partial_partial_mesh2", fn=inplace_add_tensor,
                     inputs=[InputSpec((8, 6)), InputSpec((8, 6))],
                     placements=[(Partial("sum"),), (Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="inplace_mul_0d_dtensor_s0s1_dp_tp", fn=inplace_mul_0d,
                     inputs=[InputSpec((4, 6)), InputSpec(())],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Replicate())], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="inplace_clamp_uneven_s0_mesh4", fn=inplace_clamp, inputs=[InputSpec((5, 5))],
                     placements=[(Shard(0),)], mesh_shape=MESH4, tags=L0))
