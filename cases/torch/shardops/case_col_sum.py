"""``shardops::col_sum(x, alpha)`` (``alpha * x.sum(0)``, src/shardops) on DTensor, through the
library's rule (src/shardops/sharding/col_sum.py): rows sharded give partial sums (the output
``Partial()``), columns sharded (even and uneven) a sharded output, a Partial ``x`` a Partial
output; backward (``dx = alpha * g`` broadcast over the rows). Tolerance: partial sums reduced
across ranks re-associate a float32 sum (rtol/atol 1e-5)."""
import torch

import shardops  # noqa: F401 — defines torch.ops.shardops.* and registers their sharding
from meshtest import CompareSpec, InputSpec, OpShardCase, Partial, Shard, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def col_sum(x):
    return torch.ops.shardops.col_sum(x, 0.5)


register(OpShardCase(name="col_sum_rows_s0_partial_out_grad_mesh2", fn=col_sum,
                     inputs=[InputSpec((8, 6), requires_grad=True)], placements=[(Shard(0),)], mesh_shape=(2,),
                     output_placements=((Partial(),),), compare=REASSOC, tags=L0))
register(OpShardCase(name="col_sum_cols_uneven_s1_mesh4", fn=col_sum,
                     inputs=[InputSpec((4, 7))], placements=[(Shard(1),)], mesh_shape=(4,),
                     output_placements=((Shard(0),),), tags=L1))
register(OpShardCase(name="col_sum_partial_x_mesh2", fn=col_sum,
                     inputs=[InputSpec((4, 6))], placements=[(Partial(),)], mesh_shape=(2,),
                     output_placements=((Partial(),),), compare=REASSOC, tags=L1))
