"""Collectives as ops, declared: ``fn`` is the single-device reference on full tensors; the
distributed path is declared by the case's steps, so no function branches on the tensor type:

* ``local_fn(*locals, mesh=mesh)`` runs on each rank's local shards and calls the collective
  over ``mesh.get_group("tp")`` (the mesh has the case's own axis names, while its launch is
  shared with other cases of the same mesh shape); meshtest wraps what it returns with
  ``local_output_placements`` (torch's ``local_map``: ``to_local`` in, ``from_local`` out);
* ``redistribute_inputs`` redistributes an input before the op (``DTensor.redistribute``:
  an all-gather over one mesh axis), ``redistribute_outputs`` an output after it (a Partial
  matmul output reduce-scattered to Shard).

Patterns (tensor/sequence parallel building blocks):
* all-gather then matmul: rows sharded on "tp" are all-gathered with
  ``torch.distributed._functional_collectives.all_gather_tensor`` over
  ``mesh.get_group("tp")`` (or with ``DTensor.redistribute``), then multiplied;
* matmul then reduce-scatter: a contracting dim sharded on "tp" gives per-rank partial
  products, reduce-scattered over "tp" (funcol ``reduce_scatter_tensor``, or
  ``redistribute`` from the Partial output to Shard);
* all-reduce over "dp" of a Partial input, all-to-all over "tp" turning row sharding into
  column sharding, and work on the 1-D sub-mesh ``mesh["tp"]``.
The funcol results are wrapped back with the placements the collective produced, so the
framework's ``full_tensor()`` gather checks them.

Tolerance: REASSOC rtol=1e-5/atol=1e-5 (matmul blocks and cross-rank partial sums re-associate
float32 sums over K ≤ 8 standard-normal products); data-movement-only patterns are exact.

Backward (cases with ``requires_grad=True``, only through ``DTensor.redistribute``, whose
autograd is DTensor's own): the framework optimises ``L = sum <out, G>`` (fixed
standard-normal G), so the expected gradients are ``dX = G @ W^T`` and ``dW = X^T @ G``
as for a plain matmul. The funcol cases are forward-only: their from_local wrapping
(``run_check=False``) defines no cross-rank gradient semantics worth testing here.
"""
import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.tensor import DTensor
from torch.distributed.tensor import Replicate as TReplicate
from torch.distributed.tensor import Shard as TShard

from meshtest import CompareSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register

MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
MESH4 = (4,)
TP = ("tp",)
L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
EXACT = CompareSpec.equal()
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
G = dict(requires_grad=True)


def matmul(x, w):
    """The reference of every matmul pattern: the full product."""
    return x @ w


def allgather_rows_matmul_local(x, w, mesh):
    """x's rows all-gathered over "tp" (funcol), then multiplied: rows stay sharded on "dp"."""
    return funcol.all_gather_tensor(x, gather_dim=0, group=mesh.get_group("tp")) @ w


def matmul_reduce_scatter_local(x, w, mesh):
    """Per-rank partial products over the contracting dim on "tp", reduce-scattered by rows."""
    return funcol.reduce_scatter_tensor(x @ w, "sum", scatter_dim=0, group=mesh.get_group("tp"))


def allreduce_dp_local(x, mesh):
    """The dp partials summed explicitly (funcol all_reduce over "dp")."""
    return funcol.all_reduce(x, "sum", group=mesh.get_group("dp"))


def submesh_tp_colsplit_local(x, mesh):
    """The dp-local rows (already gathered over "tp") re-sharded by columns on the 1-D sub-mesh
    ``mesh["tp"]``, then doubled."""
    tp = mesh["tp"]
    return DTensor.from_local(x, tp, [TReplicate()]).redistribute(tp, [TShard(1)]).to_local() * 2.0


def alltoall_rows_to_cols_local(x, mesh):
    """Shard(0) on the 1-D "tp" mesh -> Shard(1) with one all_to_all_single."""
    send = torch.cat(x.chunk(mesh.size(0), dim=1), dim=0).contiguous()
    return funcol.all_to_all_single(send, None, None, group=mesh.get_group("tp"))


def allgather_cols_local(x, mesh):
    return funcol.all_gather_tensor(x, gather_dim=1, group=mesh.get_group("tp"))


def identity(x):
    return x.clone()


def times_one(x):
    return x * 1.0


def times_two(x):
    return x * 2.0


register(OpShardCase(name="coll_allgather_matmul_funcol_dp_tp", fn=matmul,
                     local_fn=allgather_rows_matmul_local, local_output_placements=((Shard(0), Replicate()),),
                     inputs=[InputSpec((8, 6)), InputSpec((6, 4))],
                     placements=[(Shard(0), Shard(0)), (Replicate(), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_matmul_reduce_scatter_funcol_dp_tp", fn=matmul,
                     local_fn=matmul_reduce_scatter_local, local_output_placements=((Replicate(), Shard(0)),),
                     inputs=[InputSpec((8, 6)), InputSpec((6, 4))],
                     placements=[(Replicate(), Shard(1)), (Replicate(), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_allgather_matmul_redistribute_grad_dp_tp", fn=matmul,
                     redistribute_inputs=((Shard(0), Replicate()), None),  # all-gather over "tp" only
                     inputs=[InputSpec((8, 6), **G), InputSpec((6, 4), **G)],
                     placements=[(Shard(0), Shard(0)), (Replicate(), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0,
                     output_placements=((Shard(0), Replicate()),)))
register(OpShardCase(name="coll_matmul_reduce_scatter_redistribute_grad_dp_tp", fn=matmul,
                     # contracting dim on "tp": the product is (Shard(0), Partial()), reduce-scattered over "tp"
                     redistribute_outputs=((Shard(0), Shard(1)),),
                     inputs=[InputSpec((8, 8), **G), InputSpec((8, 4), **G)],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0,
                     output_placements=((Shard(0), Shard(1)),)))
register(OpShardCase(name="coll_allreduce_dp_partial_funcol_dp_tp", fn=times_one,
                     local_fn=allreduce_dp_local, local_output_placements=((Replicate(), Shard(0)),),
                     inputs=[InputSpec((8, 6))], placements=[(Partial("sum"), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_submesh_tp_colsplit_dp_tp", fn=times_two,
                     redistribute_inputs=((Shard(0), Replicate()),),
                     local_fn=submesh_tp_colsplit_local, local_output_placements=((Shard(0), Shard(1)),),
                     inputs=[InputSpec((8, 6), init="arange")], placements=[(Shard(0), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=EXACT, tags=L1))
register(OpShardCase(name="coll_alltoall_rows_to_cols_tp4", fn=identity,
                     local_fn=alltoall_rows_to_cols_local, local_output_placements=((Shard(1),),),
                     inputs=[InputSpec((8, 8), init="arange")], placements=[(Shard(0),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=EXACT, tags=L0))
register(OpShardCase(name="coll_allgather_cols_funcol_tp4", fn=identity,
                     local_fn=allgather_cols_local, local_output_placements=((Replicate(),),),
                     inputs=[InputSpec((4, 8), init="arange")], placements=[(Shard(1),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=EXACT, tags=L0))
register(OpShardCase(name="coll_matmul_reduce_scatter_funcol_tp4", fn=matmul,
                     local_fn=matmul_reduce_scatter_local, local_output_placements=((Shard(0),),),
                     inputs=[InputSpec((8, 16)), InputSpec((16, 4))], placements=[(Shard(1),), (Shard(0),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_partial_to_replicate_grad_tp4", fn=times_one,
                     redistribute_inputs=((Replicate(),),),
                     inputs=[InputSpec((4, 6), **G)], placements=[(Partial("sum"),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=REASSOC, tags=L1,
                     output_placements=((Replicate(),),)))
