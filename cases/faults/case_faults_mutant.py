"""Cases that misbehave only under a sharding-rule mutant, for mutation mode's own test
(src/tests/test_strength_torch.py): under ``aten.mm.default:partial_as_replicate`` the product
of a contracting-dim shard is no longer Partial, and then one case loops forever (a hang the
driver must kill at its deadline) and one exits its process (a crash). Both count as kills."""
import os
import time

import torch

from meshtest import InputSpec, OpShardCase, Shard, register

FAULTS = ("cpu_faults",)


def hang_unless_partial(a, b):
    y = torch.mm(a, b)
    while hasattr(y, "placements") and not y.placements[0].is_partial():  # the reference is a plain tensor
        time.sleep(0.05)
    return y


def exit_unless_partial(a, b):
    y = torch.mm(a, b)
    if hasattr(y, "placements") and not y.placements[0].is_partial():
        os._exit(7)
    return y


register(OpShardCase(
    name="mutant_hangs",
    fn=hang_unless_partial,
    inputs=[InputSpec((4, 6)), InputSpec((6, 3))],
    placements=[(Shard(1),), (Shard(0),)],
    mesh_shape=(2,),
    tags=FAULTS,
))
register(OpShardCase(
    name="mutant_exits",
    fn=exit_unless_partial,
    inputs=[InputSpec((4, 6)), InputSpec((6, 3))],
    placements=[(Shard(1),), (Shard(0),)],
    mesh_shape=(2,),
    tags=FAULTS,
))
