"""The library pins the DTensor sharding of an existing aten operator, ``aten.logcumsumexp``
(``register_sharding`` over torch's own strategy): the scanned dim is never sharded (its
prefix sums need every element before them), any other dim keeps its shard, and a Partial input
is reduced first (the op is not linear). The same choices as torch's scan strategy in 2.13,
written down so that a change in torch's does not change the library's layouts."""
from __future__ import annotations

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding


@register_sharding(torch.ops.aten.logcumsumexp.default)
def logcumsumexp_sharding(x, dim):
    """Acceptable (output placements, input placements) pairs, one mesh dim at a time."""
    scanned = dim % x.ndim if x.ndim else 0
    return [([Replicate()], [Replicate(), None])] + [
        ([Shard(d)], [Shard(d), None]) for d in range(x.ndim) if d != scanned]
