"""Platform-agnostic placement descriptors: ``Shard(d)``, ``Replicate()``, ``Partial(op)``,
``StridedShard(d, split_factor)``.

Case files describe how each input is laid out on the DeviceMesh with these
descriptors; a :class:`meshtest.platforms.backend.ShardBackend` maps them to its platform's
own placement types (for torch: ``torch.distributed.tensor.Shard`` and friends).
One placement is given per *mesh* dimension, never per tensor dimension
(the placement rule: placement tuple length == mesh ndim).

They are declarations, not the platform's objects: handed to the platform inside a case's
``fn`` (``x.redistribute(mesh, [Shard(0)])``), any attribute the platform asks of them raises an
``AttributeError`` that names the import to use instead (``ctx.api.Shard`` in a scenario,
``torch.distributed.tensor.Shard`` in an op's ``fn``).
"""
from __future__ import annotations

from dataclasses import dataclass

#: Reduce operations a ``Partial`` placement may carry. The names follow
#: ``torch.distributed.tensor.Partial(reduce_op=...)``.
PARTIAL_REDUCE_OPS = ("sum", "avg", "max", "min")


class Placement:
    """Base of the placement kinds; not instantiated directly."""

    def short(self) -> str:
        """Compact text used in generated case names, e.g. ``S0``, ``R``, ``P``."""
        raise NotImplementedError

    def __getattr__(self, name: str):
        # Only called for attributes the class lacks: the platform probing a placement it was
        # handed (torch calls p.is_shard(), p.dim, ...). Say which object it wanted.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{self!r} is meshtest's declaration of a placement (for a case's placements=), not the "
            f"platform's; it has no {name!r}. Inside fn use the platform's own class: "
            f"torch.distributed.tensor.{type(self).__name__.replace('StridedShard', '_StridedShard')} "
            f"(ctx.api.{type(self).__name__} in a scenario)")


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
class StridedShard(Placement):
    """torch's ``_StridedShard(dim, split_factor)``: dim ``dim`` cut into ``split_factor *
    mesh_size`` pieces dealt round-robin, so each rank holds ``split_factor`` strided pieces (the
    layout FSDP over TP leaves, where another mesh dimension already split the dim). Checked at
    registration like ``Shard(d)``; ``split_factor`` is an integer >= 1.
    """

    dim: int
    split_factor: int

    def short(self) -> str:
        return f"SS{self.dim}x{self.split_factor}"

    def __repr__(self) -> str:
        return f"StridedShard({self.dim}, split_factor={self.split_factor})"


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

    ``reduce_op`` is one of :data:`PARTIAL_REDUCE_OPS`. When a full input (an ``InputSpec``) is
    distributed as ``Partial``, the platform's own partition rule applies (torch: ``sum`` → ``v / n``
    on every rank; ``avg``/``max``/``min`` → ``v`` on every rank). Distinct per-rank partials are
    declared with :class:`meshtest.model.local_input.LocalInput`.
    """

    reduce_op: str = "sum"

    def short(self) -> str:
        return "P" if self.reduce_op == "sum" else f"P{self.reduce_op}"

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op!r})"
