"""DTensor-level op cases for MindSpore, written as the framework design's examples write them (full inputs, one
placement per mesh dimension), run through HyperParallel's ``distribute_tensor`` / ``full_tensor``
(the platform port) where it is installed. MindSpore 2.10 has no DTensor of its own and HyperParallel
is not on PyPI: here each case is reported ``unsupported on platform mindspore: ...`` at its
``distribute`` step — counted and listed, never passed.
"""
from mindspore import ops

from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

TAGS = ("cpu_ms_level0", "cpu_ms_level1", "npu_level0", "npu_level1")


def matmul(x, w):
    return ops.matmul(x, w)


def add(x, y):
    return ops.add(x, y)


def sum_dim0(x):
    return ops.sum(x, dim=0)


register(OpShardCase(
    name="ms_matmul_s0_r_mesh2", fn=matmul,
    inputs=[InputSpec((8, 4), seed=1), InputSpec((4, 6), seed=2)],
    placements=[(Shard(0),), (Replicate(),)],
    mesh_shape=(2,), compare=CompareSpec.allclose(rtol=1e-5, atol=1e-5), tags=TAGS,
))
register(OpShardCase(
    name="ms_add_s1_s1_mesh2", fn=add,
    inputs=[InputSpec((4, 8), seed=3), InputSpec((4, 8), seed=4)],
    placements=[(Shard(1),), (Shard(1),)],
    mesh_shape=(2,), compare=CompareSpec.equal(), tags=TAGS,
))
register(OpShardCase(
    name="ms_sum_s0_mesh4", fn=sum_dim0,
    inputs=[InputSpec((8, 3), seed=5)],
    placements=[(Shard(0),)],
    mesh_shape=(4,), compare=CompareSpec.allclose(rtol=1e-5, atol=1e-5), tags=TAGS,
))
