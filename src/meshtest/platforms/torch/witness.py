"""Proving a mutant real: replay a recorded DTensor call on fresh inputs, with the mutant off and on.

A recorded call (:func:`meshtest.platforms.torch.rules.call_json`) names the operator, each
tensor input's shape, dtype and placements, the mesh shape and the literal arguments. The replay
draws fresh inputs of those shapes (seeded: floats standard normal, integers in ``[0, 2)`` so
that any index is in range, booleans fair), distributes them with the recorded placements on a
simulated mesh (:class:`meshtest.platforms.torch.local_lane.TorchLocalBackend`), calls the operator
and gathers every output (``full_tensor``) on every simulated rank; the reference is the same
operator on the full tensors. A ``Partial`` input gets different values on the ranks it is
partial over (zero-sum noise for ``sum``/``avg``; lowered/raised non-first ranks for
``max``/``min``): torch's own partition gives every rank the same value, on which a lost
reduction would not show. A mutant is proven real by a **witness**: a call whose replay
matches the reference with the mutant off and differs from it (or raises) with the mutant on,
the mutant having changed at least one propagated call. Comparison: ``numpy.allclose`` with
``rtol=1e-4, atol=1e-5`` (float32 round-off of a sharded reduction; exact for integers and
booleans), NaN equal to NaN.
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.distributed._local_tensor import maybe_disable_local_tensor_mode
from torch.distributed.tensor import DTensor
from torch.utils import _pytree as pytree

from ...model import placement as mp
from ...model.rules import normalised_dim_names
from . import rules

RTOL, ATOL = 1e-4, 1e-5
#: At most this many recorded calls with the fault's site are tried per mutant.
MAX_CALLS = 4


class NotReplayable(Exception):
    """The recorded call cannot be rebuilt (the message says why)."""


def _placement(text: str) -> mp.Placement:
    if text == "R":
        return mp.Replicate()
    if m := re.fullmatch(r"S\((-?\d+)\)", text):
        return mp.Shard(int(m.group(1)))
    if m := re.fullmatch(r"SS\((-?\d+),(\d+)\)", text):
        return mp.StridedShard(int(m.group(1)), int(m.group(2)))
    if m := re.fullmatch(r"P\((\w+)\)", text):
        return mp.Partial(m.group(1))
    raise NotReplayable(f"input placement {text} cannot be declared")


def _draw(a: Dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    dtype = getattr(torch, a["dtype"])
    shape = tuple(a["t"])
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(0, 2, shape, generator=gen).to(dtype)


def _literal(a: Dict[str, Any]) -> Any:
    if "v" in a:
        return a["v"]
    if "dtype" in a and "t" not in a:
        return getattr(torch, a["dtype"])
    raise NotReplayable(f"argument {a} cannot be rebuilt")


def _build(a: Any, fulls: List[torch.Tensor], make) -> Any:
    """Rebuild one argument: a tensor input takes the next full tensor, passed through ``make``."""
    if isinstance(a, dict) and "t" in a:
        return make(fulls.pop(0), a["p"])
    if isinstance(a, dict) and "l" in a:
        return [_build(x, fulls, make) for x in a["l"]]
    return _literal(a)


def _op(name: str) -> Any:
    ns, _, rest = name.partition(".")
    packet_name, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), packet_name), overload or "default")


def _tensors(tree: Any) -> List[Any]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _close(ref: np.ndarray, got: np.ndarray) -> bool:
    if ref.shape != got.shape:
        return False
    if ref.dtype.kind in "fc":
        return bool(np.allclose(got, ref, rtol=RTOL, atol=ATOL, equal_nan=True))
    return bool(np.array_equal(got, ref))


class Replay:
    """One recorded call, ready to run repeatedly on the same drawn inputs.

    :raises NotReplayable: see :func:`meshtest.platforms.torch.rules.replayable`.
    """

    def __init__(self, call: Dict[str, Any], backend: Any, seed: int = 0) -> None:
        why = rules.replayable(call)
        if why:
            raise NotReplayable(why)
        self.call = call
        self.backend = backend
        self.op = _op(call["op"])
        gen = torch.Generator().manual_seed(seed)
        with maybe_disable_local_tensor_mode():
            self.fulls = [_draw(a, gen) for a in rules._tensor_args(call)]
            self.reference = self._numpy(self._run(lambda t, p: t.clone()))

    def _run(self, make) -> Any:
        fulls = list(self.fulls)
        args = [_build(a, fulls, make) for a in self.call["args"]]
        kwargs = {k: _build(v, fulls, make) for k, v in self.call["kwargs"].items()}
        return self.op(*args, **kwargs)

    def _numpy(self, out: Any) -> List[np.ndarray]:
        # numpy has no bfloat16; widening bfloat16/float16 to float32 is exact
        return [(t.detach().float() if t.dtype in (torch.bfloat16, torch.float16) else t.detach()).numpy().copy()
                for t in _tensors(out)]

    def distributed(self, mesh: Any) -> Optional[str]:
        """Run the call on ``mesh``; ``None`` when every simulated rank's gathered outputs equal
        the reference, else what differed (or the exception raised)."""
        gen = torch.Generator().manual_seed(1)

        def make(t: torch.Tensor, placements: Sequence[str]) -> Any:
            declared = [_placement(p) for p in placements]
            d = self.backend.distribute(t.clone(), mesh, declared)
            _spread_partials(d, declared, mesh, gen)
            return d

        try:
            out = self._run(make)
            leaves = _tensors(out)
            if len(leaves) != len(self.reference):
                return f"{len(leaves)} tensor output(s), reference {len(self.reference)}"
            for i, (leaf, ref) in enumerate(zip(leaves, self.reference)):
                full = leaf.full_tensor() if isinstance(leaf, DTensor) else leaf
                for rank, got in self.backend.to_numpy_by_rank(full).items():
                    if not _close(ref, got):
                        return f"output {i} on simulated rank {rank} differs from the reference"
        except Exception as e:  # under a mutant, raising is one way of differing
            return f"raises {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return None


def _spread_partials(d: Any, placements: Sequence[mp.Placement], mesh: Any, gen: torch.Generator) -> None:
    """Make a ``Partial`` input's per-rank values differ, keeping its reduction: torch's own
    partition of a full value (``sum``: ``v/n`` on every rank; ``avg``/``max``/``min``: ``v``)
    hands every rank the same tensor, which would hide a reduction the rule loses. Along each
    Partial mesh dim, ranks that differ only in that coordinate get zero-sum noise (``sum``,
    ``avg``), or all but the first are lowered (``max``) / raised (``min``) by ``|noise|``."""
    local = getattr(d, "_local_tensor", None)
    parts = getattr(local, "_local_tensors", None)
    if parts is None or not d.dtype.is_floating_point:
        return
    ranks = mesh.mesh  # rank ids laid out in the mesh's shape
    for j, p in enumerate(placements):
        if not isinstance(p, mp.Partial):
            continue
        groups = ranks.movedim(j, -1).reshape(-1, ranks.shape[j]).tolist()  # one row per reduction group
        with maybe_disable_local_tensor_mode():
            for group in groups:
                shape = parts[group[0]].shape
                noise = torch.randn((len(group),) + tuple(shape), generator=gen).to(d.dtype)
                for k, r in enumerate(group):
                    if p.reduce_op in ("sum", "avg"):
                        parts[r].add_(noise[k] - noise.mean(0))
                    elif p.reduce_op == "max" and k:
                        parts[r].sub_(noise[k].abs())
                    elif p.reduce_op == "min" and k:
                        parts[r].add_(noise[k].abs())


def prove(mutant: str, calls: Sequence[Dict[str, Any]], backend: Any) -> Tuple[bool, str]:
    """Look for a witness of ``mutant`` among ``calls`` (recorded calls of its operator whose
    output placements or redistributions are the fault's site, tried in order, at most
    :data:`MAX_CALLS`).

    :param backend: a :class:`meshtest.platforms.torch.local_lane.TorchLocalBackend` (its simulated
        world is switched to each call's mesh).
    :returns: (proven, evidence): the witness (``mesh``, input placements, what differed), or
        why no call is one (each tried call's reason, ``;``-separated).
    """
    op, fault = rules.parse_mutant(mutant)
    reasons: List[str] = []
    tried = 0
    for call in calls:
        if call.get("op") != op or fault not in rules.fault_sites(call):
            continue
        if tried == MAX_CALLS:
            break
        tried += 1
        where = f"mesh {call['mesh']} inputs {[a['p'] for a in rules._tensor_args(call)]}"
        mesh = _mesh_for(call, backend)  # a failure here is the simulation's, not the call's: it propagates
        try:
            ok, why = _witness(call, mutant, backend, mesh)
        except NotReplayable as e:
            reasons.append(f"{where}: not replayable ({e})")
            continue
        except Exception as e:  # the single-device reference itself rejects the drawn inputs
            reasons.append(f"{where}: the reference raises on drawn inputs ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''})")
            continue
        if ok:
            return True, f"{where}: {why}"
        reasons.append(f"{where}: {why}")
    if not tried:
        return False, "no recorded call of the operator has this fault's site"
    return False, "; ".join(reasons)


def _mesh_for(call: Dict[str, Any], backend: Any) -> Any:
    shape = tuple(call["mesh"])
    if backend.world_size() != math.prod(shape):
        backend.set_world(math.prod(shape))
    return backend.make_mesh(shape, normalised_dim_names(len(shape)))


def _witness(call: Dict[str, Any], mutant: str, backend: Any, mesh: Any) -> Tuple[bool, str]:
    replay = Replay(call, backend)
    off = replay.distributed(mesh)
    if off is not None:
        return False, f"does not replay without the mutant ({off})"
    rules.activate(mutant)
    try:
        on = replay.distributed(mesh)
        reached = rules.reached()
    finally:
        rules.activate("")
    if not reached:
        return False, "the mutant changed no propagated call"
    if on is None:
        return False, "equal to the reference with the mutant on (an equivalent mutant on this input)"
    return True, on
