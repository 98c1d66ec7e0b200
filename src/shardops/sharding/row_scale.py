"""DTensor sharding of ``shardops::row_scale(x, w)`` (``x * w[:, None]``): rows sharded with
their scales, columns sharded with the scales replicated, or everything replicated. A Partial
``x`` stays Partial (the op is linear in ``x``) when ``w`` is replicated."""
from __future__ import annotations

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding


@register_sharding(torch.ops.shardops.row_scale.default)
def row_scale_sharding(x, w):
    """Acceptable (output placements, input placements) pairs, one mesh dim at a time."""
    return [
        ([Replicate()], [Replicate(), Replicate()]),
        ([Shard(0)], [Shard(0), Shard(0)]),
        ([Shard(1)], [Shard(1), Replicate()]),
        ([Partial()], [Partial(), Replicate()]),
    ]
