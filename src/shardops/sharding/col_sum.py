"""DTensor sharding of ``shardops::col_sum(x, alpha)`` (``alpha * x.sum(0)``): rows sharded give
partial sums (``Partial()`` output), columns sharded give a sharded output, a Partial ``x`` a
Partial output (the op is linear)."""
from __future__ import annotations

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding


@register_sharding(torch.ops.shardops.col_sum.default)
def col_sum_sharding(x, alpha):
    """Acceptable (output placements, input placements) pairs, one mesh dim at a time
    (``None`` for the non-tensor ``alpha``)."""
    return [
        ([Replicate()], [Replicate(), None]),
        ([Partial()], [Shard(0), None]),
        ([Shard(0)], [Shard(1), None]),
        ([Partial()], [Partial(), None]),
    ]
