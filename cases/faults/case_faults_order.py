"""Two op cases whose verdicts would depend on their order (tag ``cpu_faults``: no gate runs them;
src/tests/test_metadata_reference_torch.py does, in one process, this order).

The first casts a DTensor to float32; the second casts a tensor of the same placements with
``memory_format=torch.channels_last``. torch 2.13's sharding-propagation cache key leaves
``memory_format`` out for ``_to_copy`` (docs/torch-bugs.md#memory-format-cache-key), so in a
process that kept the cache the second case would get the first one's row-major strides and fail
at ``output-metadata``. meshtest drops the platform's cached decisions before every case
(``ShardBackend.forget_cached_decisions``): run after the first, the second passes, as it does alone.
"""
import torch

from meshtest import CompareSpec, InputSpec, OpShardCase, Shard, register

NCHW = (2, 3, 2, 3)


def cast(x):
    return x.float()


def cast_channels_last(x):
    return x.float(memory_format=torch.channels_last)


register(OpShardCase(name="order_cast_s1_mesh2", fn=cast, inputs=[InputSpec(NCHW, dtype="bfloat16")],
                     placements=[(Shard(1),)], mesh_shape=(2,), compare=CompareSpec.equal(), tags=("cpu_faults",)))
register(OpShardCase(name="order_cast_channels_last_s1_mesh2", fn=cast_channels_last,
                     inputs=[InputSpec(NCHW, dtype="bfloat16")], placements=[(Shard(1),)], mesh_shape=(2,),
                     compare=CompareSpec.equal(), tags=("cpu_faults",)))
