"""``shardops::row_scale(x, w)`` (``x * w[:, None]``, src/shardops) on DTensor, through the
library's ``register_sharding`` rule (src/shardops/sharding/row_scale.py): rows sharded with
their scales (even and uneven), columns sharded with the scales replicated, a Partial ``x``
(linear in ``x``), a 2-D mesh; backward through the operator's registered autograd formula
(``dx = g * w[:, None]``, ``dw = sum(g * x, -1)``), compared with the single-device autograd.
The reference is the same operator on plain tensors (its CPU kernel). Tolerance: a Partial
input is split as ``v / n`` and summed back (float32 re-association: rtol/atol 1e-5)."""
import torch

import shardops  # noqa: F401 — defines torch.ops.shardops.* and registers their sharding
from meshtest import CompareSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def row_scale(x, w):
    return torch.ops.shardops.row_scale(x, w)


register(OpShardCase(name="row_scale_rows_s0_grad_mesh2", fn=row_scale,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((8,), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=(2,),
                     output_placements=((Shard(0),),), tags=L0))
register(OpShardCase(name="row_scale_rows_uneven_s0_mesh4", fn=row_scale,
                     inputs=[InputSpec((7, 3)), InputSpec((7,))],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=(4,),
                     output_placements=((Shard(0),),), tags=L1))
register(OpShardCase(name="row_scale_cols_s1_replicated_scales_grad_mesh2", fn=row_scale,
                     inputs=[InputSpec((4, 5), requires_grad=True), InputSpec((4,), requires_grad=True)],
                     placements=[(Shard(1),), (Replicate(),)], mesh_shape=(2,),
                     output_placements=((Shard(1),),), tags=L0))
register(OpShardCase(name="row_scale_partial_x_mesh2", fn=row_scale,
                     inputs=[InputSpec((4, 6)), InputSpec((4,))],
                     placements=[(Partial(),), (Replicate(),)], mesh_shape=(2,),
                     output_placements=((Partial(),),), compare=REASSOC, tags=L1))
register(OpShardCase(name="row_scale_s0_s1_grad_mesh2x2", fn=row_scale,
                     inputs=[InputSpec((6, 8), requires_grad=True), InputSpec((6,), requires_grad=True)],
                     placements=[(Shard(0), Shard(1)), (Shard(0), Replicate())], mesh_shape=(2, 2),
                     output_placements=((Shard(0), Shard(1)),), tags=L1))
