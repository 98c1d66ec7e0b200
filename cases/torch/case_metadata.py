"""Output metadata against the single-device result: strides, contiguity, memory format.

The values of these ops are exact copies; what can go wrong is how the DTensor describes its
global layout (step ``output-metadata``, docs/cases.md "Output metadata is compared with the
reference's"). A view keeps the transposed strides of its single-device result, ``contiguous``
restores row-major ones, and a cast or a ``*_like`` factory with
``memory_format=torch.channels_last`` gives channels-last strides whatever the placement. In
torch 2.13 the last two lose ``memory_format`` from DTensor's sharding-propagation cache key: an
earlier call without it, on a tensor of the same placement, hands its contiguous strides to the
later one (docs/torch-bugs.md#memory-format-cache-key).
"""
import torch

from meshtest import CompareSpec, InputSpec, KnownFailure, OpShardCase, Replicate, Shard, register

MESH2 = (2,)
L0 = ("cpu_level0", "cpu_level1", "npu_level1", "cuda_level1")
EXACT = CompareSpec.equal()
NCHW = (2, 3, 2, 3)  # N, C, H, W: channels-last strides (18, 1, 9, 3), row-major (18, 6, 3, 1)
CACHE_KEY = ("DTensor's sharding-propagation cache key leaves out memory_format for this op (its registration "
             "passes its own RuntimeSchemaInfo, which replaces the generic memory_format specialisation), so "
             "after a call without it on the same input placements the channels-last call gets the cached "
             "row-major strides while its local tensors are channels-last")
BUG = "docs/torch-bugs.md#memory-format-cache-key"


def transpose(x):
    return x.transpose(0, 1)


def contiguous_after_transpose(x):
    return x.transpose(0, 1).contiguous()


def cast_channels_last(x):
    return x.float(memory_format=torch.channels_last)


def cast_then_cast_channels_last(x):
    x.float()
    return x.float(memory_format=torch.channels_last)


def zeros_like_then_channels_last(x):
    torch.zeros_like(x)
    return torch.zeros_like(x, memory_format=torch.channels_last)


register(OpShardCase(name="meta_transpose_s0_mesh2", fn=transpose, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
register(OpShardCase(name="meta_contiguous_after_transpose_s1_mesh2", fn=contiguous_after_transpose,
                     inputs=[InputSpec((4, 6))], placements=[(Shard(1),)], mesh_shape=MESH2, compare=EXACT, tags=L0))
register(OpShardCase(name="meta_cast_channels_last_s1_mesh2", fn=cast_channels_last,
                     inputs=[InputSpec(NCHW, dtype="bfloat16")], placements=[(Shard(1),)], mesh_shape=MESH2,
                     compare=EXACT, tags=L0))
register(OpShardCase(name="meta_cast_twice_channels_last_s1_mesh2", fn=cast_then_cast_channels_last,
                     inputs=[InputSpec(NCHW, dtype="bfloat16")], placements=[(Shard(1),)], mesh_shape=MESH2,
                     compare=EXACT, tags=L0,
                     known_failure=KnownFailure(kind="mismatch", step="output-metadata", match=r"global stride",
                                                reason=CACHE_KEY, upstream=BUG,
                                                signature="output[0] stride (18, 6, 3, 1) vs (18, 1, 9, 3)")))
register(OpShardCase(name="meta_zeros_like_twice_channels_last_r_mesh2", fn=zeros_like_then_channels_last,
                     inputs=[InputSpec(NCHW)], placements=[(Replicate(),)], mesh_shape=MESH2, compare=EXACT,
                     tags=L0,
                     known_failure=KnownFailure(kind="mismatch", step="output-metadata", match=r"global stride",
                                                reason=CACHE_KEY, upstream=BUG,
                                                signature="output[0] stride (18, 6, 3, 1) vs (18, 1, 9, 3)")))
