"""Binary elementwise ops on DTensor with broadcasting: add, sub, mul, div, pow, maximum, where,
plus integer/bool operands and comparisons.

Regular families are placement sweeps (``register_sweep``): every Replicate / Shard(d) /
Partial combination of the inputs on the mesh, so the pointwise sharding strategy must line
up (or redistribute) any pair of layouts, including a broadcast operand sharded on the dim it
shares with the other input. Partial rules exercised: add/sub of Partial("sum") operands stay
Partial only when both are Partial (otherwise the Replicate operand would be added n times);
mul/div are linear in one Partial("sum") operand; maximum of Partial("max") operands stays
Partial("max"). Skipped combinations are counted by the sweep (see ``meshtest scan``).

Tolerance: Partial("sum") inputs are split as v/n per rank and summed back, which re-associates
float32 sums: rtol=1e-5/atol=1e-5 (a few ulps of values ~1). Exact values (integers, bool,
comparisons, maximum) use ``equal()``.

Backward (sweeps/cases with ``requires_grad=True``): the framework optimises
``L = sum_i <out_i, G_i>`` (fixed standard-normal G), so the expected gradients are
``dL/dx = G`` and ``dL/dy = sum over broadcast dims of G`` for add, ``G * y`` / ``G * x`` for
mul; they are compared against the single-device autograd result whatever the input placement
(a Partial input's gradient is the full gradient, whatever its DTensor placement).
"""
import torch

from meshtest import (
    CompareSpec,
    ExpectRaises,
    InputSpec,
    OpShardCase,
    Partial,
    Replicate,
    Shard,
    register,
    register_sweep,
)

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L0_CPU1 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
EXACT = CompareSpec.equal()
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def add(x, y):
    return x + y


def sub(x, y):
    return x - y


def mul(x, y):
    return x * y


def div(x, y):
    return x / y


def maximum(x, y):
    return torch.maximum(x, y)


def where(c, x, y):
    return torch.where(c, x, y)


def pow_tensor(x, y):
    return torch.pow(x, y)


def pow_int_exponent(x):
    return torch.pow(x, 3)


def gt(x, y):
    return x > y


def eq_int(x, y):
    return x == y


def logical_and(a, b):
    return torch.logical_and(a, b)


def bitwise_xor(a, b):
    return a ^ b


def floor_divide(a, b):
    return torch.floor_divide(a, b)


def add_alpha(x, y):
    return torch.add(x, y, alpha=-0.5)


def minimum(x, y):
    return torch.minimum(x, y)


# ---------------------------------------------------------------- sweeps
# add with a broadcast bias, both inputs requiring grad: 4 x 3 layouts on (2,).
register_sweep(
    name="bin_add_bcast_mesh2",
    fn=add,
    inputs=[InputSpec((6, 4), requires_grad=True), InputSpec((4,), requires_grad=True)],
    mesh_shape=MESH2,
    partial_ops=("sum",),
    compare=REASSOC,
    tags=L0,
)

# mul on an uneven dim 0 (5 rows on 2 ranks), with grads: 4 x 4 layouts on (2,).
register_sweep(
    name="bin_mul_uneven_mesh2",
    fn=mul,
    inputs=[InputSpec((5, 4), requires_grad=True), InputSpec((5, 4), requires_grad=True)],
    mesh_shape=MESH2,
    partial_ops=("sum",),
    compare=REASSOC,
    tags=L0,
)

# sub with broadcasting on the 2-D mesh, Shard/Replicate only (Partial would make 16 x 16).
register_sweep(
    name="bin_sub_bcast_dp_tp",
    fn=sub,
    inputs=[InputSpec((4, 6)), InputSpec((6,))],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    partial_ops=(),
    tags=L1,
)

# div: only the numerator may be Partial (x/y is linear in x), with sum and avg.
register_sweep(
    name="bin_div_mesh4",
    fn=div,
    inputs=[InputSpec((8, 5)), InputSpec((8, 5), init="uniform", low=0.5, high=2.0)],
    mesh_shape=MESH4,
    partial_inputs=(0,),
    partial_ops=("sum", "avg"),
    compare=REASSOC,
    tags=L0,
)

# maximum with Partial("max") operands: max of maxes stays Partial("max").
register_sweep(
    name="bin_maximum_mesh2",
    fn=maximum,
    inputs=[InputSpec((6, 4)), InputSpec((6, 4))],
    mesh_shape=MESH2,
    partial_ops=("max",),
    compare=EXACT,
    tags=L0,
)

# where(cond, x, y) with a broadcast y: 3 x 3 x 2 Shard/Replicate layouts.
register_sweep(
    name="bin_where_bcast_mesh2",
    fn=where,
    inputs=[InputSpec((6, 4), init="uniform", dtype="bool"), InputSpec((6, 4)), InputSpec((4,))],
    mesh_shape=MESH2,
    partial_ops=(),
    compare=EXACT,
    tags=L0,
)

# ---------------------------------------------------------------- hand-written
register(OpShardCase(name="bin_pow_tensor_s0_s0_grad_mesh2", fn=pow_tensor,
                     inputs=[InputSpec((8, 6), init="uniform", low=0.5, high=2.0, requires_grad=True),
                             InputSpec((8, 6), init="uniform", low=-2.0, high=2.0, requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="bin_pow_bcast_uneven_s1_r_mesh4", fn=pow_tensor,
                     inputs=[InputSpec((4, 7), init="uniform", low=0.5, high=2.0), InputSpec((7,))],
                     placements=[(Shard(1),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))
# x^3 of a Partial("sum") is not linear: DTensor must reduce before cubing.
register(OpShardCase(name="bin_pow_int_exponent_partial_sum_mesh2", fn=pow_int_exponent, inputs=[InputSpec((8, 6))],
                     placements=[(Partial("sum"),)], mesh_shape=MESH2, compare=REASSOC, tags=L0))
register(OpShardCase(name="bin_pow_int_exponent_s0s1_grad_dp_tp", fn=pow_int_exponent,
                     inputs=[InputSpec((4, 6), requires_grad=True)],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC,
                     tags=L0))
register(OpShardCase(name="bin_where_s0s1_grad_dp_tp", fn=where,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="bool"), InputSpec((4, 6), requires_grad=True),
                             InputSpec((4, 6), requires_grad=True)],
                     placements=[(Shard(0), Shard(1)), (Shard(0), Replicate()), (Replicate(), Shard(1))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="bin_add_alpha_s0s1_s1s0_dp_tp", fn=add_alpha, inputs=[InputSpec((4, 8)), InputSpec((4, 8))],
                     placements=[(Shard(0), Shard(1)), (Shard(1), Shard(0))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     tags=L0))
register(OpShardCase(name="bin_mul_bcast_outer_dp_tp", fn=mul, inputs=[InputSpec((6, 1)), InputSpec((1, 8))],
                     placements=[(Shard(0), Replicate()), (Replicate(), Shard(1))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, tags=L0))
register(OpShardCase(name="bin_add_partial_sum_both_axes_dp_tp", fn=add, inputs=[InputSpec((4, 6)), InputSpec((4, 6))],
                     placements=[(Partial("sum"), Partial("sum")), (Partial("sum"), Shard(0))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="bin_minimum_partial_min_dp_tp", fn=minimum, inputs=[InputSpec((4, 6)), InputSpec((4, 6))],
                     placements=[(Partial("min"), Shard(1)), (Partial("min"), Replicate())], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=EXACT, tags=L0))
register(OpShardCase(name="bin_sub_uneven_s0s1_dp_tp", fn=sub, inputs=[InputSpec((5, 7)), InputSpec((5, 7))],
                     placements=[(Shard(0), Shard(1)), (Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP,
                     tags=L0))
register(OpShardCase(name="bin_div_uneven_bcast_grad_mesh4", fn=div,
                     inputs=[InputSpec((9, 3), requires_grad=True),
                             InputSpec((3,), init="uniform", low=0.5, high=2.0, requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC, tags=L0))

# ---------------------------------------------------------------- integer / bool operands
register(OpShardCase(name="bin_add_int64_s0_s1_mesh4", fn=add,
                     inputs=[InputSpec((8, 8), init="uniform", dtype="int64", low=-1000, high=1000),
                             InputSpec((8, 8), init="uniform", dtype="int64", low=-1000, high=1000)],
                     placements=[(Shard(0),), (Shard(1),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
register(OpShardCase(name="bin_floor_divide_int32_uneven_mesh4", fn=floor_divide,
                     inputs=[InputSpec((7, 4), init="uniform", dtype="int32", low=-100, high=100),
                             InputSpec((4,), init="uniform", dtype="int32", low=1, high=9)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
register(OpShardCase(name="bin_eq_int64_s0s1_dp_tp", fn=eq_int,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=3),
                             InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=3)],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Replicate())], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=EXACT, tags=L0))
register(OpShardCase(name="bin_gt_float_to_bool_s0_mesh2", fn=gt, inputs=[InputSpec((8, 6)), InputSpec((8, 6))],
                     placements=[(Shard(0),), (Shard(1),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
register(OpShardCase(name="bin_logical_and_bool_s1_mesh2", fn=logical_and,
                     inputs=[InputSpec((6, 8), init="uniform", dtype="bool"),
                     InputSpec((6, 8), init="uniform", dtype="bool")],
                     placements=[(Shard(1),), (Shard(1),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
register(OpShardCase(name="bin_xor_uint8_uneven_dp_tp", fn=bitwise_xor,
                     inputs=[InputSpec((5, 6), init="uniform", dtype="uint8", low=0, high=255),
                             InputSpec((5, 6), init="uniform", dtype="uint8", low=0, high=255)],
                     placements=[(Shard(0), Shard(1)), (Shard(0), Replicate())], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=EXACT, tags=L0))


def plus_plain_bias(x):
    """``x`` plus a bias the function makes itself: a plain tensor beside a DTensor ``x``."""
    return x + torch.arange(6.0)


# DTensor refuses a plain tensor beside a DTensor outside torch's experimental implicit_replication()
# ("got mixed torch.Tensor and DTensor"); a torch that replicated it implicitly would be right too.
# The exception's type is not part of that contract, so the case names none: any exception whose
# message says so, or the right sum.
register(OpShardCase(name="bin_add_plain_tensor_s0_mesh2", fn=plus_plain_bias, inputs=[InputSpec((8, 6))],
                     placements=[(Shard(0),)], mesh_shape=MESH2, compare=EXACT, tags=L0,
                     expect_raises=ExpectRaises(match=r"mixed torch\.Tensor and DTensor", or_pass=True)))
