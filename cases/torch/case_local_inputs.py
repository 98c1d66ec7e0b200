"""Per-rank inputs and placement expectations: what a full-tensor InputSpec cannot declare.

``LocalInput`` gives each rank its own local tensor (``DTensor.from_local`` semantics) and
meshtest assembles the global reference from all of them: partial values that differ by rank
and reduce to the global value (sum, avg, max, min, integer sums reduced exactly), and uneven
local shards (torch's chunk layout: 5 rows over 2 ranks are 3 + 2). ``output_placements`` makes
the placement of an op's output part of the verdict, checked on every rank before the gather:
a linear op on a ``Partial`` input stays ``Partial``, a matmul over a sharded contracting dim
is ``Partial("sum")``, a transpose moves the shard, a softmax over an unsharded dim keeps it.

Tolerances: EXACT for integer and data-movement ops; REASSOC (rtol=atol=1e-5) where float
partial sums or matmul blocks re-associate.
"""
import numpy as np
import torch

from meshtest import CompareSpec, InputSpec, LocalInput, OpShardCase, Partial, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
EXACT = CompareSpec.equal()
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
PSUM = (Partial("sum"),)


def rank_values(shape, scale=1.0, dtype=np.float32):
    """A local that differs by rank: the rank k at a coordinate of a 1-D or (2, 2) mesh holds
    ``arange * scale * (k + 1) - k``."""
    def local(coord):
        k = coord[0] * 2 + coord[1] if len(coord) == 2 else coord[0]
        return (np.arange(int(np.prod(shape))).reshape(shape) * scale * (k + 1) - k).astype(dtype)
    return local


def rows(counts, width, offset=0.0):
    """Uneven row shards: coordinate k holds ``counts[k]`` rows of value ``k + offset``."""
    return lambda coord: np.full((counts[coord[0]], width), coord[0] + offset, dtype=np.float32)


def triple(x):
    return x * 3


def double(x):
    return x * 2


def add(x, y):
    return x + y


def mm(x, w):
    return x @ w


def total(x):
    return x.sum()


def exp(x):
    return torch.exp(x)


def neg(x):
    return -x


def relu(x):
    return torch.relu(x)


def maximum(x, y):
    return torch.maximum(x, y)


def minimum(x, y):
    return torch.minimum(x, y)


def tanh(x):
    return torch.tanh(x)


def transpose(x):
    return x.t()


def softmax_rows(x):
    return torch.softmax(x, dim=1)


def cumsum_rows(x):
    return torch.cumsum(x, dim=0)


# ---------------------------------------------------------------- partials that differ by rank
register(OpShardCase(name="local_partial_sum_int64_scale_mesh2", fn=triple,
                     inputs=[LocalInput(shape=(6,), local=rank_values((6,), dtype=np.int64), dtype="int64")],
                     placements=[PSUM], mesh_shape=MESH2, compare=EXACT, output_placements=(PSUM,), tags=L0))
register(OpShardCase(name="local_partial_sum_distinct_mm_mesh2", fn=mm,
                     inputs=[LocalInput(shape=(4, 6), local=rank_values((4, 6), 0.25)), InputSpec((6, 3))],
                     placements=[PSUM, (Replicate(),)], mesh_shape=MESH2, compare=REASSOC, output_placements=(PSUM,),
                     tags=L0))
register(OpShardCase(name="local_partial_sum_distinct_total_mesh2", fn=total,
                     inputs=[LocalInput(shape=(3, 4), local=rank_values((3, 4), 0.5))],
                     placements=[PSUM], mesh_shape=MESH2, compare=REASSOC, output_placements=(PSUM,), tags=L1))
register(OpShardCase(name="local_partial_sum_plus_replicate_mesh2", fn=add,
                     inputs=[LocalInput(shape=(4, 4), local=rank_values((4, 4), 0.5)), InputSpec((4, 4))],
                     placements=[PSUM, (Replicate(),)], mesh_shape=MESH2, compare=REASSOC, tags=L1))
register(OpShardCase(name="local_partial_max_distinct_neg_mesh2", fn=neg,
                     inputs=[LocalInput(shape=(2, 5), local=rank_values((2, 5), -1.0))],
                     placements=[(Partial("max"),)], mesh_shape=MESH2, compare=EXACT, tags=L1))
# relu is monotone, so relu of a Partial("max") stays Partial("max"). With distinct per-rank
# values (torch's own partition of a full input gives every rank the same v) a rule that drops
# the max or reduces with another op shows: `python -m meshtest mutate` found
# aten.relu.default:partial_as_replicate / :wrong_reduce_op surviving unary_relu_partial_max_mesh4.
register(OpShardCase(name="local_partial_max_distinct_relu_mesh4", fn=relu,
                     inputs=[LocalInput(shape=(3, 4), local=rank_values((3, 4), 0.5))],
                     placements=[(Partial("max"),)], mesh_shape=MESH4, compare=EXACT,
                     tags=("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")))
# The same gap for two-input max/min (a Partial("max") pair stays Partial("max")) and for a
# non-linear op on a Partial("avg") input, which must be reduced first: survivors of
# aten.maximum / aten.minimum :partial_as_replicate, :wrong_reduce_op and
# aten.tanh.default:missing_redistribute over InputSpec partials (every rank the same value).
register(OpShardCase(name="local_partial_max_distinct_maximum_mesh2", fn=maximum,
                     inputs=[LocalInput(shape=(3, 4), local=rank_values((3, 4), 0.5)),
                             LocalInput(shape=(3, 4), local=rank_values((3, 4), -0.25))],
                     placements=[(Partial("max"),), (Partial("max"),)], mesh_shape=MESH2, compare=EXACT,
                     tags=("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")))
register(OpShardCase(name="local_partial_min_distinct_minimum_mesh2", fn=minimum,
                     inputs=[LocalInput(shape=(3, 4), local=rank_values((3, 4), 0.5)),
                             LocalInput(shape=(3, 4), local=rank_values((3, 4), -0.25))],
                     placements=[(Partial("min"),), (Partial("min"),)], mesh_shape=MESH2, compare=EXACT,
                     tags=("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")))
register(OpShardCase(name="local_partial_avg_distinct_tanh_mesh4", fn=tanh,
                     inputs=[LocalInput(shape=(3, 4), local=rank_values((3, 4), 0.25))],
                     placements=[(Partial("avg"),)], mesh_shape=MESH4, compare=REASSOC,
                     tags=("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")))
register(OpShardCase(name="local_partial_min_distinct_double_mesh2", fn=double,
                     inputs=[LocalInput(shape=(2, 5), local=rank_values((2, 5), 2.0))],
                     placements=[(Partial("min"),)], mesh_shape=MESH2, compare=EXACT, tags=L1))
register(OpShardCase(name="local_partial_avg_distinct_double_mesh2", fn=double,
                     inputs=[LocalInput(shape=(3, 3), local=rank_values((3, 3), 1.0))],
                     placements=[(Partial("avg"),)], mesh_shape=MESH2, compare=REASSOC, tags=L1))
register(OpShardCase(name="local_shard_partial_tp_dp_tp", fn=double,
                     inputs=[LocalInput(shape=(4, 3), local=rank_values((2, 3), 0.5))],
                     placements=[(Shard(0), Partial("sum"))], mesh_shape=MESH_2D, mesh_dim_names=("dp", "tp"),
                     compare=REASSOC, output_placements=((Shard(0), Partial("sum")),), tags=L0))

# ---------------------------------------------------------------- uneven local shards
register(OpShardCase(name="local_uneven_rows_exp_mesh2", fn=exp,
                     inputs=[LocalInput(shape=(5, 4), local=rows((3, 2), 4), requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, compare=REASSOC, output_placements=((Shard(0),),),
                     tags=L0))
register(OpShardCase(name="local_uneven_rows_cumsum_mesh4", fn=cumsum_rows,
                     inputs=[LocalInput(shape=(7, 3), local=rows((2, 2, 2, 1), 3, 0.5))],
                     placements=[(Shard(0),)], mesh_shape=MESH4, compare=REASSOC, tags=L1))
register(OpShardCase(name="local_uneven_rows_total_mesh4", fn=total,
                     inputs=[LocalInput(shape=(7, 3), local=rows((2, 2, 2, 1), 3, 1.0))],
                     placements=[(Shard(0),)], mesh_shape=MESH4, compare=REASSOC, output_placements=(PSUM,), tags=L1))

# ---------------------------------------------------------------- placement expectations
register(OpShardCase(name="placement_mm_contracting_is_partial_mesh2", fn=mm,
                     inputs=[InputSpec((4, 6)), InputSpec((6, 3))], placements=[(Shard(1),), (Shard(0),)],
                     mesh_shape=MESH2, compare=REASSOC, output_placements=(PSUM,), tags=L0))
register(OpShardCase(name="placement_transpose_moves_shard_grad_mesh2", fn=transpose,
                     inputs=[InputSpec((4, 6), requires_grad=True)], placements=[(Shard(0),)], mesh_shape=MESH2,
                     compare=EXACT, output_placements=((Shard(1),),), grad_placements=((Shard(0),),), tags=L0))
register(OpShardCase(name="placement_softmax_keeps_row_shard_mesh4", fn=softmax_rows,
                     inputs=[InputSpec((8, 5))], placements=[(Shard(0),)], mesh_shape=MESH4, compare=REASSOC,
                     output_placements=((Shard(0),),), tags=L0))
register(OpShardCase(name="placement_elementwise_keeps_shards_dp_tp", fn=exp,
                     inputs=[InputSpec((4, 6))], placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D,
                     compare=REASSOC, output_placements=((Shard(0), Shard(1)),), tags=L1))
