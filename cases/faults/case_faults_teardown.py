"""Faults around gloo teardown (see WORKSPACE-notes.md, "teardown aborts"): an abort after every
result is recorded and the closing barrier passed is a teardown warning and the results stand;
an abort before the result is recorded is a crash."""
import os

from meshtest import InputSpec, OpShardCase, Replicate, Shard, register

FAULTS = ("cpu_faults",)


def abort_in_teardown(x):
    # Rank 1's process-group teardown, which runs only after every result is recorded and the
    # closing barrier passed, raises SIGABRT (what gloo does ~3 times in 100 launches here).
    import torch.distributed as dist

    if hasattr(x, "placements") and dist.get_rank() == 1:
        dist.destroy_process_group = lambda *a, **k: os.abort()
    return x * 2.0


def doubled(x):
    return x * 2.0


def abort_now(x):
    import torch.distributed as dist

    if hasattr(x, "placements") and dist.get_rank() == 1:
        os.abort()
    return x * 2.0


register(OpShardCase(name="teardown_abort_after_results", fn=abort_in_teardown, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=FAULTS))
register(OpShardCase(name="teardown_fine", fn=doubled, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=FAULTS))
# a launch of its own: the first two cases' launch must end normally (then abort in teardown)
register(OpShardCase(name="teardown_abort_before_recording", fn=abort_now, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0), Replicate())], mesh_shape=(2, 1), tags=FAULTS, solo_launcher=True))
