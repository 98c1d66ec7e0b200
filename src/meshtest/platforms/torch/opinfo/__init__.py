"""Op cases generated from torch's OpInfo database: every operator with a DTensor sharding rule,
its CPU samples, every placement kind.

torch keeps, per operator, a description of how to call it (``OpInfo`` in
``torch.testing._internal.common_methods_invocations.op_db``): sample inputs (tensors and the
other arguments) per dtype, the dtypes it supports, whether it supports autograd. torch's own
``test_dtensor_ops.py`` runs them on DTensors with ``Shard(0)`` / ``Replicate()`` only. Here
each sample becomes op cases with every placement kind per input (:func:`placement_patterns`):
``Replicate()``, ``Shard(d)`` for every dim (uneven where the dim does not divide), and
``Partial(sum|avg|max|min)`` with distinct per-rank parts (:class:`_Parts`), on 1-D meshes of 2,
3 and 4 ranks and the 2-D mesh ``(2, 2)``; backward where the sample's inputs get gradients.

Two halves, one module each beside the samples both read (:mod:`.samples`):

- :func:`generate` (:mod:`.manifest`; ``python -m meshtest generate opinfo``) discovers the operators, runs each
  usable sample once on plain tensors (to learn the aten operators it dispatches, its outputs
  and which inputs get a gradient) and writes one manifest per rule family
  (:mod:`meshtest.model.generated`), each entry tagged with its gate (:func:`tiers`);
- :func:`materialize` (:mod:`.cases`) builds an entry's :class:`OpShardCase` on the ranks: the sample is
  regenerated from the same seed (cheaply: only when the case runs) and checked against the
  entry's signature, so a torch whose samples differ fails at step ``build`` naming the drift
  instead of testing something else.

The reference is the op on the full tensors and the comparison torch's own
``torch.testing.assert_close`` tolerances for the output dtype (:data:`TOLERANCES`), as for a
hand-written case.

This package is the generator's module (:data:`meshtest.model.generated.GENERATORS`): it gives
what meshtest calls on it — :func:`generate`, :func:`sample_digest` and :func:`opinfos` (the
generator), :func:`materialize` (the ranks), :func:`simpler` (``meshtest shrink``).
"""
from __future__ import annotations

from .cases import materialize, simpler
from .manifest import generate, sample_digest
from .samples import GENERATOR, opinfos

__all__ = ["GENERATOR", "generate", "materialize", "opinfos", "sample_digest", "simpler"]
