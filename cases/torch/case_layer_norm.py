"""torch.nn.functional.layer_norm on DTensor over the last dim, batch (and seq) dims sharded.

The normalised dim is whole on every rank and weight/bias are replicated, so every rank
normalises complete rows with the same per-row kernel as the reference; the default float32
tolerances apply.
"""
import torch.nn.functional as F

from meshtest import InputSpec, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
MESH4 = (4,)
MESH_2D = (2, 2)
DP_TP = ("dp", "tp")
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
L0_NPU = ("cpu_level0", "cpu_level1", "npu_level0", "npu_level1", "cuda_level0", "cuda_level1")
HIDDEN = 16


def layer_norm_affine(x, weight, bias):
    return F.layer_norm(x, (HIDDEN,), weight, bias, eps=1e-5)


def layer_norm_plain(x):
    return F.layer_norm(x, (HIDDEN,))


register(OpShardCase(
    name="layer_norm_affine_batch_s0_mesh2",
    fn=layer_norm_affine,
    inputs=[InputSpec((8, HIDDEN)), InputSpec((HIDDEN,)), InputSpec((HIDDEN,))],
    placements=[(Shard(0),), (Replicate(),), (Replicate(),)],
    mesh_shape=MESH2,
    tags=L0_NPU,
))

register(OpShardCase(
    name="layer_norm_affine_3d_batch_s0_mesh4",
    fn=layer_norm_affine,
    inputs=[InputSpec((4, 6, HIDDEN)), InputSpec((HIDDEN,)), InputSpec((HIDDEN,))],
    placements=[(Shard(0),), (Replicate(),), (Replicate(),)],
    mesh_shape=MESH4,
    tags=L0_NPU,
))

register(OpShardCase(
    name="layer_norm_plain_batch_s0_mesh4",
    fn=layer_norm_plain,
    inputs=[InputSpec((8, HIDDEN))],
    placements=[(Shard(0),)],
    mesh_shape=MESH4,
    tags=L0,
))

# Batch on dp, sequence on tp (sequence-parallel style).
register(OpShardCase(
    name="layer_norm_affine_batch_dp_seq_tp_dp_tp",
    fn=layer_norm_affine,
    inputs=[InputSpec((4, 6, HIDDEN)), InputSpec((HIDDEN,)), InputSpec((HIDDEN,))],
    placements=[(Shard(0), Shard(1)), (Replicate(), Replicate()), (Replicate(), Replicate())],
    mesh_shape=MESH_2D,
    mesh_dim_names=DP_TP,
    tags=L0,
))
