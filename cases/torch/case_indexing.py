"""Indexing ops on DTensor: index_select, gather, scatter, scatter_add, index_add, index_put /
``__setitem__``, masked_fill, masked_scatter, nonzero, and embedding backward.

The rule DTensor must follow: indexing along an unsharded dim is local (the index tensor is
read whole, or sharded like the output); indexing along the sharded dim needs the indexed
data replicated first (or, for embedding's vocab dim, a masked lookup producing a Partial
that ``full_tensor()`` sums). Index tensors are int64 inputs with their own placements.

Values: gathers/selects/fills copy values, so outputs are bit-equal (``equal()``); adds with
possibly repeated indices (scatter_add, index_add) sum in another order than the reference:
rtol=1e-5/atol=1e-5. scatter uses per-row permutations, so there are no write collisions and
the result is deterministic.

Backward (``requires_grad=True`` cases): the framework optimises ``L = sum_i <out_i, G_i>``
(fixed standard-normal G), so the expected gradient of the indexed input is G scattered
back (accumulated over repeated indices) for index_select/gather/embedding, G with the written
positions zeroed for scatter/index_put/masked_fill, and G gathered at the written positions
for the written source values. Embedding weight gradients are row sums of G per id.
"""
import numpy as np
import torch
import torch.nn.functional as F

from meshtest import CompareSpec, InputSpec, KnownFailure, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
L1 = ("cpu_level1", "npu_level1", "cuda_level1")
EXACT = CompareSpec.equal()
REASSOC = CompareSpec.allclose(rtol=1e-5, atol=1e-5)
GRAD = CompareSpec.allclose(rtol=1e-5, atol=1e-5)

_RNG = np.random.default_rng(2024)
PERM_ROWS_8x6 = np.stack([_RNG.permutation(6) for _ in range(8)]).tolist()  # distinct per row
PERM_ROWS_6x5 = np.stack([_RNG.permutation(5) for _ in range(6)]).tolist()
MASK_8x6 = (_RNG.random((8, 6)) < 0.4).tolist()
MASK_6x5 = (_RNG.random((6, 5)) < 0.5).tolist()
IDX = lambda n, high, **kw: InputSpec((n,), init="uniform", dtype="int64", low=0, high=high, **kw)  # noqa: E731


def index_select0(x, i):
    return torch.index_select(x, 0, i)


def index_select1(x, i):
    return x.index_select(1, i)


def gather1(x, i):
    return torch.gather(x, 1, i)


def gather0(x, i):
    return torch.gather(x, 0, i)


def scatter1(x, i, src):
    return torch.scatter(x, 1, i, src)


def scatter_value1(x, i):
    return x.scatter(1, i, -1.0)


def scatter_add1(x, i, src):
    return torch.scatter_add(x, 1, i, src)


def scatter_add0(x, i, src):
    return x.scatter_add(0, i, src)


def index_add0(x, i, src):
    return torch.index_add(x, 0, i, src)


def index_add1_alpha(x, i, src):
    return x.index_add(1, i, src, alpha=2.0)


def index_put_rows(x, i, v):
    return x.index_put((i,), v)


def index_put_accumulate(x, i, v):
    return torch.index_put(x, (i,), v, accumulate=True)


def setitem_rows(x, i, v):
    y = x.clone()
    y[i] = v
    return y


def setitem_mask_scalar(x, m):
    y = x.clone()
    y[m] = 0.0
    return y


def setitem_column(x):
    y = x.clone()
    y[:, 1] = 5.0
    return y


def setitem_slice_tensor(x, v):
    y = x.clone()
    y[1:3] = v
    return y


def getitem_index_tensor(x, i):
    return x[i]


def getitem_bool_mask_rows(x, m):
    return x[m]


def masked_fill(x, m):
    return x.masked_fill(m, -2.0)


def masked_fill_0d(x, m, v):
    return torch.masked_fill(x, m, v.reshape(()))


def masked_scatter(x, m, src):
    return x.masked_scatter(m, src)


def nonzero(x):
    return torch.nonzero(x)


def nonzero_tuple_count(x):
    return torch.nonzero(x).shape[0] * torch.ones(1)


def embedding(ids, w):
    return F.embedding(ids, w)


def embedding_padding_idx(ids, w):
    return F.embedding(ids, w, padding_idx=0)


# ---------------------------------------------------------------- index_select
register(OpShardCase(name="idx_index_select_unsharded_dim0_x_s1_grad_mesh2", fn=index_select0,
                     inputs=[InputSpec((8, 6), requires_grad=True), IDX(5, 8)],
                     placements=[(Shard(1),), (Replicate(),)], mesh_shape=MESH2, compare=EXACT, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_index_select_sharded_dim0_x_s0_grad_mesh4", fn=index_select0,
                     inputs=[InputSpec((8, 6), requires_grad=True), IDX(6, 8)],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH4, compare=EXACT, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_index_select_index_sharded_uneven_mesh4", fn=index_select0,
                     inputs=[InputSpec((8, 6)), IDX(7, 8)],
                     placements=[(Replicate(),), (Shard(0),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
register(OpShardCase(name="idx_index_select_dim1_x_s0s1_dp_tp", fn=index_select1,
                     inputs=[InputSpec((4, 8)), IDX(5, 8)],
                     placements=[(Shard(0), Shard(1)), (Replicate(), Replicate())], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=EXACT, tags=L0))

# ---------------------------------------------------------------- gather
register(OpShardCase(name="idx_gather_dim1_s0_s0_grad_mesh2", fn=gather1,
                     inputs=[InputSpec((8, 6), requires_grad=True),
                             InputSpec((8, 4), init="uniform", dtype="int64", low=0, high=6)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=EXACT, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_gather_dim1_sharded_s1_s1_mesh2", fn=gather1,
                     inputs=[InputSpec((4, 8)), InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=8)],
                     placements=[(Shard(1),), (Shard(1),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
register(OpShardCase(name="idx_gather_dim0_uneven_x_s1_grad_mesh4", fn=gather0,
                     inputs=[InputSpec((6, 5), requires_grad=True),
                             InputSpec((3, 5), init="uniform", dtype="int64", low=0, high=6)],
                     placements=[(Shard(1),), (Shard(1),)], mesh_shape=MESH4, compare=EXACT, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_gather_dim1_s0r_dp_tp", fn=gather1,
                     inputs=[InputSpec((4, 6)), InputSpec((4, 3), init="uniform", dtype="int64", low=0, high=6)],
                     placements=[(Shard(0), Replicate()), (Shard(0), Replicate())], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=EXACT, tags=L0))

# ---------------------------------------------------------------- scatter / scatter_add
register(OpShardCase(name="idx_scatter_dim1_s0_grad_mesh2", fn=scatter1,
                     inputs=[InputSpec((8, 6), requires_grad=True),
                     InputSpec((8, 6), dtype="int64", data=PERM_ROWS_8x6),
                             InputSpec((8, 6), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=EXACT,
                     grad_compare=GRAD, tags=L0))
register(OpShardCase(name="idx_scatter_dim1_sharded_s1_mesh4", fn=scatter1,
                     inputs=[InputSpec((8, 6)), InputSpec((8, 6), dtype="int64", data=PERM_ROWS_8x6),
                     InputSpec((8, 6))],
                     placements=[(Shard(1),), (Replicate(),), (Replicate(),)], mesh_shape=MESH4, compare=EXACT,
                     tags=L0))
register(OpShardCase(name="idx_scatter_value_uneven_s0_mesh4", fn=scatter_value1,
                     inputs=[InputSpec((6, 5)), InputSpec((6, 5), dtype="int64", data=PERM_ROWS_6x5)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
register(OpShardCase(name="idx_scatter_add_dim1_s0_grad_mesh2", fn=scatter_add1,
                     inputs=[InputSpec((8, 6), requires_grad=True),
                             InputSpec((8, 10), init="uniform", dtype="int64", low=0, high=6),
                             InputSpec((8, 10), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC,
                     grad_compare=GRAD, tags=L0))
register(OpShardCase(name="idx_scatter_add_dim0_sharded_mesh4", fn=scatter_add0,
                     inputs=[InputSpec((8, 6)), InputSpec((12, 6), init="uniform", dtype="int64", low=0, high=8),
                             InputSpec((12, 6))],
                     placements=[(Shard(0),), (Replicate(),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC,
                     tags=L0))
register(OpShardCase(name="idx_scatter_add_dim1_s0s0_dp_tp", fn=scatter_add1,
                     inputs=[InputSpec((8, 6)), InputSpec((8, 4), init="uniform", dtype="int64", low=0, high=6),
                             InputSpec((8, 4))],
                     placements=[(Shard(0), Shard(0)), (Shard(0), Shard(0)), (Shard(0), Shard(0))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))

# ---------------------------------------------------------------- index_add
register(OpShardCase(name="idx_index_add_dim0_x_s1_grad_mesh2", fn=index_add0,
                     inputs=[InputSpec((8, 6), requires_grad=True), IDX(10, 8), InputSpec((10, 6), requires_grad=True)],
                     placements=[(Shard(1),), (Replicate(),), (Shard(1),)], mesh_shape=MESH2, compare=REASSOC,
                     grad_compare=GRAD, tags=L0))
register(OpShardCase(name="idx_index_add_sharded_dim0_mesh4", fn=index_add0,
                     inputs=[InputSpec((8, 6)), IDX(5, 8), InputSpec((5, 6))],
                     placements=[(Shard(0),), (Replicate(),), (Replicate(),)], mesh_shape=MESH4, compare=REASSOC,
                     tags=L0))
register(OpShardCase(name="idx_index_add_dim1_alpha_uneven_dp_tp", fn=index_add1_alpha,
                     inputs=[InputSpec((5, 6)), IDX(4, 6), InputSpec((5, 4))],
                     placements=[(Shard(0), Replicate()), (Replicate(), Replicate()), (Shard(0), Replicate())],
                     mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=REASSOC, tags=L0))

# ---------------------------------------------------------------- index_put / setitem
register(OpShardCase(name="idx_index_put_rows_x_s1_mesh2", fn=index_put_rows,
                     inputs=[InputSpec((8, 6)), InputSpec((3,), dtype="int64", data=[1, 4, 6]), InputSpec((3, 6))],
                     placements=[(Shard(1),), (Replicate(),), (Shard(1),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
register(OpShardCase(name="idx_index_put_rows_sharded_x_s0_mesh4", fn=index_put_rows,
                     inputs=[InputSpec((8, 6)), InputSpec((3,), dtype="int64", data=[0, 5, 7]), InputSpec((3, 6))],
                     placements=[(Shard(0),), (Replicate(),), (Replicate(),)], mesh_shape=MESH4, compare=EXACT,
                     tags=L0))
register(OpShardCase(name="idx_index_put_accumulate_r_mesh2", fn=index_put_accumulate,
                     inputs=[InputSpec((8, 6)), InputSpec((4,), dtype="int64", data=[1, 1, 3, 6]), InputSpec((4, 6))],
                     placements=[(Replicate(),), (Replicate(),), (Replicate(),)], mesh_shape=MESH2, compare=REASSOC,
                     tags=L0))
register(OpShardCase(name="idx_setitem_rows_x_s1_mesh4", fn=setitem_rows,
                     inputs=[InputSpec((6, 8)), InputSpec((2,), dtype="int64", data=[0, 4]), InputSpec((2, 8))],
                     placements=[(Shard(1),), (Replicate(),), (Shard(1),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
# y[mask] = 0 lowers to the in-place index_put_ with a bool index over every dim, which
# DTensor can only run replicated; on a Shard(0) copy it refuses ("in-place operations that
# require placement changes are not supported"), by design, so the case is Replicate.
register(OpShardCase(name="idx_setitem_bool_mask_scalar_r_mesh2", fn=setitem_mask_scalar,
                     inputs=[InputSpec((8, 6)), InputSpec((8, 6), dtype="bool", data=MASK_8x6)],
                     placements=[(Replicate(),), (Replicate(),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
# y[:, 1] = 5.0 lowers to select + fill_(0-d tensor): aten.fill_.Tensor has no sharding strategy.
register(OpShardCase(name="idx_setitem_column_scalar_s0s1_dp_tp", fn=setitem_column, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0), Shard(1))], mesh_shape=MESH_2D, mesh_dim_names=DP_TP, compare=EXACT,
                     tags=L1,
                     known_failure=KnownFailure(
                         kind="raises", step="run", match=r"NotImplementedError: .*aten\.fill_\.Tensor",
                         reason="y[:, 1] = 5.0 lowers to aten.fill_.Tensor (a 0-d tensor value), which has no DTensor "
                                "sharding strategy in torch 2.13 (aten.fill_.Scalar has one)",
                         upstream="docs/torch-bugs.md#fill-tensor-strategy")))
register(OpShardCase(name="idx_setitem_slice_tensor_s1_mesh2", fn=setitem_slice_tensor,
                     inputs=[InputSpec((6, 4)), InputSpec((2, 4))],
                     placements=[(Shard(1),), (Shard(1),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
register(OpShardCase(name="idx_getitem_index_tensor_s1_grad_mesh2", fn=getitem_index_tensor,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((4,), dtype="int64", data=[7, 0, 3, 3])],
                     placements=[(Shard(1),), (Replicate(),)], mesh_shape=MESH2, compare=EXACT, grad_compare=GRAD,
                     tags=L0))

# ---------------------------------------------------------------- masked_fill / masked_scatter
register(OpShardCase(name="idx_masked_fill_s0_grad_mesh2", fn=masked_fill,
                     inputs=[InputSpec((8, 6), requires_grad=True), InputSpec((8, 6), dtype="bool", data=MASK_8x6)],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=MESH2, compare=EXACT, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_masked_fill_bcast_mask_uneven_mesh4", fn=masked_fill,
                     inputs=[InputSpec((6, 5)), InputSpec((5,), dtype="bool", data=[True, False, False, True, False])],
                     placements=[(Shard(0),), (Replicate(),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
register(OpShardCase(name="idx_masked_fill_mask_s1_x_s0_dp_tp", fn=masked_fill,
                     inputs=[InputSpec((8, 6)), InputSpec((8, 6), dtype="bool", data=MASK_8x6)],
                     placements=[(Shard(0), Replicate()), (Replicate(), Shard(1))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=EXACT, tags=L0))
register(OpShardCase(name="idx_masked_fill_0d_value_s1_mesh4", fn=masked_fill_0d,
                     inputs=[InputSpec((6, 8)), InputSpec((6, 8), init="uniform", dtype="bool"), InputSpec(())],
                     placements=[(Shard(1),), (Shard(1),), (Replicate(),)], mesh_shape=MESH4, compare=EXACT, tags=L0))
MASKED_SCATTER_NO_STRATEGY = KnownFailure(
    kind="raises", step="run", match=r"aten\.masked_scatter\.default does not have a sharding strategy",
    reason="masked_scatter has no DTensor rule in torch 2.13, even for all-Replicate inputs; a replicate-only "
           "rule is proposed upstream",
    upstream="pytorch/pytorch#177414, pytorch/pytorch#177409")
register(OpShardCase(name="idx_masked_scatter_r_mesh2", fn=masked_scatter,
                     inputs=[InputSpec((6, 5)), InputSpec((6, 5), dtype="bool", data=MASK_6x5), InputSpec((6, 5))],
                     placements=[(Replicate(),), (Replicate(),), (Replicate(),)], mesh_shape=MESH2, compare=EXACT,
                     tags=L1,
                     known_failure=MASKED_SCATTER_NO_STRATEGY))
register(OpShardCase(name="idx_masked_scatter_s0_mesh2", fn=masked_scatter,
                     inputs=[InputSpec((6, 5)), InputSpec((6, 5), dtype="bool", data=MASK_6x5), InputSpec((6, 5))],
                     placements=[(Shard(0),), (Shard(0),), (Replicate(),)], mesh_shape=MESH2, compare=EXACT, tags=L1,
                     known_failure=MASKED_SCATTER_NO_STRATEGY))

# ------------------------------------------------------- nonzero / boolean-mask getitem (data-dependent shapes)
# The result is fully defined (indices of the global tensor), so equal(), not shape(), is the
# right comparison: a shape-only check would hide wrong local (unshifted) indices.
# Every variant currently fails in sharding propagation: DTensor computes the output meta
# by running the op on fake tensors, and fake nonzero raises DynamicOutputShapeException.
NONZERO_FAKE_PROP = KnownFailure(
    kind="raises", step="run", match=r"aten\.nonzero\.default",
    reason="nonzero on a DTensor (even Replicate) fails in sharding propagation: output metadata is propagated "
           "through FakeTensor, whose nonzero raises DynamicOutputShapeException (x[bool_mask] lowers to it too)",
    upstream="pytorch/pytorch#124990, pytorch/pytorch#177407")
register(OpShardCase(name="idx_nonzero_replicate_mesh2", fn=nonzero,
                     inputs=[InputSpec((6, 5), init="uniform", dtype="int64", low=0, high=2)],
                     placements=[(Replicate(),)], mesh_shape=MESH2, compare=EXACT, tags=L1,
                     known_failure=NONZERO_FAKE_PROP))
register(OpShardCase(name="idx_nonzero_sharded_s0_mesh2", fn=nonzero,
                     inputs=[InputSpec((6, 5), init="uniform", dtype="int64", low=0, high=2)],
                     placements=[(Shard(0),)], mesh_shape=MESH2, compare=EXACT, tags=L1,
                     known_failure=NONZERO_FAKE_PROP))
register(OpShardCase(name="idx_getitem_bool_mask_r_mesh4", fn=getitem_bool_mask_rows,
                     inputs=[InputSpec((6, 5)), InputSpec((6, 5), dtype="bool", data=MASK_6x5)],
                     placements=[(Replicate(),), (Replicate(),)], mesh_shape=MESH4, compare=EXACT, tags=L1,
                     known_failure=NONZERO_FAKE_PROP))

# ---------------------------------------------------------------- embedding backward (weight grads)
register(OpShardCase(name="idx_embedding_rowwise_w_s0_grad_mesh2", fn=embedding,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=16),
                             InputSpec((16, 8), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_embedding_colwise_w_s1_grad_mesh2", fn=embedding,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=16),
                             InputSpec((16, 8), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(1),)], mesh_shape=MESH2, compare=REASSOC, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_embedding_rowwise_uneven_vocab_grad_mesh4", fn=embedding,
                     inputs=[InputSpec((3, 5), init="uniform", dtype="int64", low=0, high=10),
                             InputSpec((10, 4), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(0),)], mesh_shape=MESH4, compare=REASSOC, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_embedding_colwise_uneven_dim_ids_s0_grad_mesh4", fn=embedding,
                     inputs=[InputSpec((8, 3), init="uniform", dtype="int64", low=0, high=12),
                             InputSpec((12, 6), requires_grad=True)],
                     placements=[(Shard(0),), (Shard(1),)], mesh_shape=MESH4, compare=REASSOC, grad_compare=GRAD,
                     tags=L0))
register(OpShardCase(name="idx_embedding_dp_ids_tp_rowwise_grad_dp_tp", fn=embedding,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=16),
                             InputSpec((16, 8), requires_grad=True)],
                     placements=[(Shard(0), Replicate()), (Replicate(), Shard(0))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, grad_compare=GRAD, tags=L0))
register(OpShardCase(name="idx_embedding_dp_ids_tp_colwise_grad_dp_tp", fn=embedding,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=16),
                             InputSpec((16, 8), requires_grad=True)],
                     placements=[(Shard(0), Replicate()), (Replicate(), Shard(1))], mesh_shape=MESH_2D,
                     mesh_dim_names=DP_TP, compare=REASSOC, grad_compare=GRAD, tags=L0))
register(OpShardCase(name="idx_embedding_padding_idx_rowwise_grad_mesh2", fn=embedding_padding_idx,
                     inputs=[InputSpec((4, 6), init="uniform", dtype="int64", low=0, high=8),
                             InputSpec((8, 4), requires_grad=True)],
                     placements=[(Replicate(),), (Shard(0),)], mesh_shape=MESH2, compare=REASSOC, grad_compare=GRAD,
                     tags=L1))
