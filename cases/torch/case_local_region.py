"""A part of the distributed call written on local tensors, with DTensor ops before and after it:
``fn(..., *, local)`` (docs/cases.md, "Declared steps"). ``local(g, *out_placements)`` runs
``g(*local_tensors, mesh=mesh)`` on each rank's local parts and wraps what it returns with the
placements (torch: ``to_local`` in, ``from_local`` out, differentiable); on the reference call it
runs ``g`` (or ``reference=``) on the full tensors. The verdict is on what the ops *after* the
round trip compute, and the backward goes through all of it.

- ``local_softmax_rows_then_matmul_s0_mesh2``: rows sharded, a row softmax computed locally (each
  rank holds whole rows, so the local softmax is the global one), back to ``Shard(0)``, then a
  matmul with a replicated weight and a sum over the sharded rows (a ``Partial`` reduction);
  gradients of both inputs through the round trip.
- ``local_all_gather_then_matmul_s0_mesh2``: an explicit all-gather of the row shards inside the
  local code (funcol over the mesh's group), wrapped ``Replicate()``, then a DTensor matmul;
  the reference is the identity on the full tensor. Forward only: a ``from_local(Replicate)``
  hands every rank the full gradient, which the all-gather's own backward would sum again.
"""
import torch
import torch.distributed._functional_collectives as funcol

from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

L0 = ("cpu_level0", "cpu_level1")
CLOSE = CompareSpec.allclose(rtol=1e-5, atol=1e-5)


def softmax_rows(t, mesh):
    return torch.softmax(t, dim=1)


def double_softmax_matmul_sum(x, w, *, local):
    z = local(softmax_rows, (Shard(0),))(x * 2)
    return (z @ w).sum(0)


def all_gather_rows(t, mesh):
    return funcol.all_gather_tensor(t, gather_dim=0, group=mesh.get_group())


def identity(t, mesh):
    return t


def gather_then_matmul(x, w, *, local):
    return local(all_gather_rows, (Replicate(),), reference=identity)(x) @ w


register(OpShardCase(name="local_softmax_rows_then_matmul_s0_mesh2", fn=double_softmax_matmul_sum,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((6, 4), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=(2,), compare=CLOSE, tags=L0))
register(OpShardCase(name="local_all_gather_then_matmul_s0_mesh2", fn=gather_then_matmul,
                     inputs=[InputSpec((8, 6)), InputSpec((6, 4))], placements=[(Shard(0),), (Replicate(),)],
                     mesh_shape=(2,), compare=CLOSE, tags=L0))
