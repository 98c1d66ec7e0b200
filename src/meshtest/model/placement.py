"""Platform-agnostic placement descriptors: ``Shard(d)``, ``Replicate()``, ``Partial(op)``.

Case files describe how each input is laid out on the DeviceMesh with these
descriptors; a :class:`meshtest.platforms.backend.ShardBackend` maps them to its platform's
own placement types (for torch: ``torch.distributed.tensor.Shard`` and friends).
One placement is given per *mesh* dimension, never per tensor dimension
(seed 000 §8.4: placement tuple length == mesh ndim).
"""
from __future__ import annotations

from dataclasses import dataclass

#: Reduce operations a ``Partial`` placement may carry. The names follow
#: ``torch.distributed.tensor.Partial(reduce_op=...)``.
PARTIAL_REDUCE_OPS = ("sum", "avg", "max", "min")


class Placement:
    """Base of the three placement kinds; not instantiated directly."""

    def short(self) -> str:
        """Compact text used in generated case names, e.g. ``S0``, ``R``, ``P``."""
        raise NotImplementedError


@dataclass(frozen=True)
class Shard(Placement):
    """Split tensor dimension ``dim`` evenly (torch's chunk rule) across one mesh dimension.

    ``dim`` may be negative (counted from the last tensor dimension); it must lie in
    ``[-ndim, ndim)`` of the input it is applied to, checked at registration.
    """

    dim: int

    def short(self) -> str:
        return f"S{self.dim}"

    def __repr__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class Replicate(Placement):
    """Every rank of the mesh dimension holds the full tensor."""

    def short(self) -> str:
        return "R"

    def __repr__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True)
class Partial(Placement):
    """Each rank holds a partial value; the logical tensor is their reduction by ``reduce_op``.

    ``reduce_op`` is one of :data:`PARTIAL_REDUCE_OPS`. When a full input is distributed as
    ``Partial``, the platform's own partition rule applies (torch: ``sum`` → ``v / n`` on
    every rank; ``avg``/``max``/``min`` → ``v`` on every rank).
    """

    reduce_op: str = "sum"

    def short(self) -> str:
        return "P" if self.reduce_op == "sum" else f"P{self.reduce_op}"

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op!r})"
