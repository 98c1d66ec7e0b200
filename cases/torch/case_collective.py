"""Collectives as ops, written against the mesh's real axis names: the distributed call reads
them from its input's mesh (``x.device_mesh.get_group("tp")``: an op case sees the axis names it
declares, while its launch is shared with other cases of the same mesh shape); the reference call
gets plain tensors and computes the single-device result.

Patterns (tensor/sequence parallel building blocks):
* all-gather then matmul: rows sharded on "tp" are all-gathered with
  ``torch.distributed._functional_collectives.all_gather_tensor`` over
  ``mesh.get_group("tp")`` (or with ``DTensor.redistribute``), then multiplied;
* matmul then reduce-scatter: a contracting dim sharded on "tp" gives per-rank partial
  products, reduce-scattered over "tp" (funcol ``reduce_scatter_tensor``, or
  ``redistribute`` from the Partial output to Shard);
* all-reduce over "dp" of a Partial input, all-to-all over "tp" turning row sharding into
  column sharding, and work on the 1-D sub-mesh ``mesh["tp"]``.
The funcol results are wrapped back with ``DTensor.from_local`` using the placements the
collective produced, so the framework's ``full_tensor()`` gather checks them.

Tolerance: REASSOC rtol=1e-5/atol=1e-5 (matmul blocks and cross-rank partial sums re-associate
float32 sums over K ≤ 8 standard-normal products); data-movement-only patterns are exact.

Backward (cases with ``requires_grad=True``, only through ``DTensor.redistribute``, whose
autograd is DTensor's own): the framework optimises ``L = sum <out, G>`` (fixed
standard-normal G), so the expected gradients are ``dX = G @ W^T`` and ``dW = X^T @ G``
as for a plain matmul. The funcol cases are forward-only: their hand-written from_local
wrapping defines no cross-rank gradient semantics worth testing here.
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


def allgather_matmul_funcol(x, w):
    """x: (Shard(0) on dp, Shard(0) on tp) rows; w replicated."""
    if not isinstance(x, DTensor):  # the reference
        return x @ w
    mesh = x.device_mesh
    rows = funcol.all_gather_tensor(x.to_local(), gather_dim=0, group=mesh.get_group("tp"))
    out = rows @ w.to_local()
    return DTensor.from_local(out, mesh, [TShard(0), TReplicate()])


def matmul_reduce_scatter_funcol(x, w):
    """x: (Replicate, Shard(1) on tp); w: (Replicate, Shard(0) on tp): partial products on tp."""
    if not isinstance(x, DTensor):  # the reference
        return x @ w
    mesh = x.device_mesh
    partial = x.to_local() @ w.to_local()
    out = funcol.reduce_scatter_tensor(partial, "sum", scatter_dim=0, group=mesh.get_group("tp"))
    return DTensor.from_local(out, mesh, [TReplicate(), TShard(0)])


def allgather_matmul_redistribute(x, w):
    if not isinstance(x, DTensor):  # the reference
        return x @ w
    mesh = x.device_mesh
    rows = x.redistribute(mesh, [TShard(0), TReplicate()])  # all-gather over "tp" only
    return rows @ w


def matmul_reduce_scatter_redistribute(x, w):
    if not isinstance(x, DTensor):  # the reference
        return x @ w
    mesh = x.device_mesh
    out = x @ w  # contracting dim on "tp": (Shard(0), Partial())
    return out.redistribute(mesh, [TShard(0), TShard(1)])  # reduce-scatter over "tp"


def allreduce_dp_funcol(x):
    """x: (Partial on dp, Shard(0) on tp): sum the dp partials explicitly."""
    if not isinstance(x, DTensor):  # the reference
        return x * 1.0
    mesh = x.device_mesh
    out = funcol.all_reduce(x.to_local(), "sum", group=mesh.get_group("dp"))
    return DTensor.from_local(out, mesh, [TReplicate(), TShard(0)])


def submesh_tp_colsplit(x):
    """Re-shard the dp-local rows by columns on the 1-D sub-mesh mesh["tp"]."""
    if not isinstance(x, DTensor):  # the reference
        return x * 2.0
    mesh = x.device_mesh
    tp = mesh["tp"]
    local = x.redistribute(mesh, [TShard(0), TReplicate()]).to_local()
    on_tp = DTensor.from_local(local, tp, [TReplicate()]).redistribute(tp, [TShard(1)])
    return DTensor.from_local(on_tp.to_local() * 2.0, mesh, [TShard(0), TShard(1)])


def alltoall_rows_to_cols(x):
    """x: Shard(0) on the 1-D "tp" mesh -> Shard(1) with one all_to_all_single."""
    if not isinstance(x, DTensor):  # the reference
        return x.clone()
    mesh = x.device_mesh
    n = mesh.size(0)
    local = x.to_local()
    send = torch.cat(local.chunk(n, dim=1), dim=0).contiguous()
    recv = funcol.all_to_all_single(send, None, None, group=mesh.get_group("tp"))
    return DTensor.from_local(recv, mesh, [TShard(1)])


def allgather_cols_funcol_1d(x):
    if not isinstance(x, DTensor):  # the reference
        return x.clone()
    mesh = x.device_mesh
    full = funcol.all_gather_tensor(x.to_local(), gather_dim=1, group=mesh.get_group("tp"))
    return DTensor.from_local(full, mesh, [TReplicate()])


def matmul_reduce_scatter_1d(x, w):
    if not isinstance(x, DTensor):  # the reference
        return x @ w
    mesh = x.device_mesh
    partial = x.to_local() @ w.to_local()
    out = funcol.reduce_scatter_tensor(partial, "sum", scatter_dim=0, group=mesh.get_group("tp"))
    return DTensor.from_local(out, mesh, [TShard(0)])


def partial_to_replicate_1d(x):
    if not isinstance(x, DTensor):  # the reference
        return x * 1.0
    mesh = x.device_mesh
    return x.redistribute(mesh, [TReplicate()]) * 1.0


register(OpShardCase(name="coll_allgather_matmul_funcol_dp_tp", fn=allgather_matmul_funcol,
                     inputs=[InputSpec((8, 6)), InputSpec((6, 4))],
                     placements=[(Shard(0), Shard(0)), (Replicate(), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_matmul_reduce_scatter_funcol_dp_tp", fn=matmul_reduce_scatter_funcol,
                     inputs=[InputSpec((8, 6)), InputSpec((6, 4))],
                     placements=[(Replicate(), Shard(1)), (Replicate(), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_allgather_matmul_redistribute_grad_dp_tp", fn=allgather_matmul_redistribute,
                     inputs=[InputSpec((8, 6), **G), InputSpec((6, 4), **G)],
                     placements=[(Shard(0), Shard(0)), (Replicate(), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0,
                     output_placements=((Shard(0), Replicate()),)))
register(OpShardCase(name="coll_matmul_reduce_scatter_redistribute_grad_dp_tp", fn=matmul_reduce_scatter_redistribute,
                     inputs=[InputSpec((8, 8), **G), InputSpec((8, 4), **G)],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0,
                     output_placements=((Shard(0), Shard(1)),)))
register(OpShardCase(name="coll_allreduce_dp_partial_funcol_dp_tp", fn=allreduce_dp_funcol,
                     inputs=[InputSpec((8, 6))], placements=[(Partial("sum"), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_submesh_tp_colsplit_dp_tp", fn=submesh_tp_colsplit,
                     inputs=[InputSpec((8, 6), init="arange")], placements=[(Shard(0), Shard(0))],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=EXACT, tags=L1))
register(OpShardCase(name="coll_alltoall_rows_to_cols_tp4", fn=alltoall_rows_to_cols,
                     inputs=[InputSpec((8, 8), init="arange")], placements=[(Shard(0),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=EXACT, tags=L0))
register(OpShardCase(name="coll_allgather_cols_funcol_tp4", fn=allgather_cols_funcol_1d,
                     inputs=[InputSpec((4, 8), init="arange")], placements=[(Shard(1),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=EXACT, tags=L0))
register(OpShardCase(name="coll_matmul_reduce_scatter_funcol_tp4", fn=matmul_reduce_scatter_1d,
                     inputs=[InputSpec((8, 16)), InputSpec((16, 4))], placements=[(Shard(1),), (Shard(0),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=REASSOC, tags=L0))
register(OpShardCase(name="coll_partial_to_replicate_grad_tp4", fn=partial_to_replicate_1d,
                     inputs=[InputSpec((4, 6), **G)], placements=[(Partial("sum"),)],
                     mesh_shape=MESH4, mesh_dim_names=TP, compare=REASSOC, tags=L1,
                     output_placements=((Replicate(),),)))
