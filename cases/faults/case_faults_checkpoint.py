"""The canary of an op case's ``checkpoint_inputs`` step (tag ``cpu_faults``: no gate runs it;
src/tests/test_declared_steps_torch.py does, on gloo). ``ckpt_uneven_roundtrip`` saves a tensor
of 7 rows placed ``(Shard(0), Shard(0))`` on a 2 x 2 mesh and loads it back with the same
placements, then compares it with the full input: it passes.

With ``MESHTEST_FAULT_DCP_OFFSETS=1`` in the environment this file makes DCP's save record the
shards of ranks 0 and 1 (rows 0-1 and 2-3, two rows each) at each other's row offset: a wrong
offset that DCP's own plan validation cannot see (the chunks still tile the tensor); the same
case must then fail at ``compare``, since the loaded rows are not the saved ones. Without the
checkpoint step an identity case on these placements would pass under the fault.
"""
import os

from meshtest import CompareSpec, InputSpec, OpShardCase, Shard, register

if os.environ.get("MESHTEST_FAULT_DCP_OFFSETS") == "1":
    import torch
    import torch.distributed.checkpoint.planner_helpers as helpers

    right = helpers._create_write_items_for_dtensor

    def even_offsets(fqn, tensor):
        item = right(fqn, tensor)
        swapped = {0: 2, 2: 0}.get(int(item.index.offset[0]), int(item.index.offset[0]))
        offsets = torch.Size((swapped,) + tuple(item.index.offset[1:]))
        chunk = item.tensor_data.chunk
        return item.__class__(index=helpers.MetadataIndex(fqn, offsets), type=item.type,
                              tensor_data=item.tensor_data.__class__(
                                  chunk=chunk.__class__(offsets=offsets, sizes=chunk.sizes),
                                  properties=item.tensor_data.properties, size=item.tensor_data.size))

    helpers._create_write_items_for_dtensor = even_offsets

register(OpShardCase(name="ckpt_uneven_roundtrip", fn=lambda x: x + 0, inputs=[InputSpec((7, 3), init="arange")],
                     placements=[(Shard(0), Shard(0))], checkpoint_inputs=((Shard(0), Shard(0)),), mesh_shape=(2, 2),
                     compare=CompareSpec.equal(), tags=("cpu_faults",), simulation_limit="DCP needs real ranks"))
