"""The library asks for ``aten.erf`` on replicated tensors only (``register_sharding`` over
torch's strategy): every rank computes the whole result. torch 2.13 accepts the registration
but keeps its own pointwise strategy for ``erf`` (registered as a single-dim strategy, which
the propagator consults first), so the request has no effect: docs/torch-bugs.md,
"register-sharding-single-dim"."""
from __future__ import annotations

import torch
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.experimental import register_sharding


@register_sharding(torch.ops.aten.erf.default)
def erf_sharding(x):
    """One acceptable pair: replicated in, replicated out."""
    return [([Replicate()], [Replicate()])]
