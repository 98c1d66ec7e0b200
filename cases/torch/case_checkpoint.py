"""A DCP save and load between placement and op (``checkpoint_inputs``): each input is saved as
placed (every rank writes its shards with their global offsets) and loaded into a fresh DTensor
— with the same placements (a round trip) or others (a reshard on load) — before the op. The
op is the identity, so the loaded tensor itself is compared with the full input: a wrong saved
offset or a wrong reshard shows as wrong values. Uneven shards (7 rows over 2 and 4 ranks, both
mesh dims sharding the same tensor dim) are where the offsets are least trivial.
"""
from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

L0 = ("cpu_level0", "cpu_level1")
EXACT = CompareSpec.equal()
DCP = "DCP writes and reads files through a real process group; the one-process lane has none"


def identity(x):
    return x + 0


register(OpShardCase(name="dcp_roundtrip_uneven_s0s0_mesh2x2", fn=identity, inputs=[InputSpec((7, 3))],
                     placements=[(Shard(0), Shard(0))], checkpoint_inputs=((Shard(0), Shard(0)),),
                     mesh_shape=(2, 2), compare=EXACT, tags=L0, simulation_limit=DCP))
register(OpShardCase(name="dcp_reshard_s0s0_to_rs1_mesh2x2", fn=identity, inputs=[InputSpec((7, 5))],
                     placements=[(Shard(0), Shard(0))], checkpoint_inputs=((Replicate(), Shard(1)),),
                     mesh_shape=(2, 2), compare=EXACT, tags=L0, simulation_limit=DCP))
register(OpShardCase(name="dcp_reshard_s1_to_s0_uneven_mesh4", fn=identity, inputs=[InputSpec((6, 7))],
                     placements=[(Shard(1),)], checkpoint_inputs=((Shard(0),),), mesh_shape=(4,), compare=EXACT,
                     tags=L0, simulation_limit=DCP))
register(OpShardCase(name="dcp_roundtrip_then_matmul_grad_mesh2", fn=lambda a, b: a @ b,
                     inputs=[InputSpec((5, 4), requires_grad=True), InputSpec((4, 3), requires_grad=True)],
                     placements=[(Shard(0),), (Replicate(),)], checkpoint_inputs=((Shard(1),), None),
                     mesh_shape=(2,), compare=CompareSpec.allclose(), tags=L0, simulation_limit=DCP))
# Every declared step at once (docs/cases.md's example): a to the contraction dim, b through a DCP
# round trip, the Partial(sum) product reduce-scattered to rows.
register(OpShardCase(
    name="dcp_then_mm_partial_reduce_scattered_mesh2", fn=lambda a, b: a @ b,
    inputs=[InputSpec((8, 6)), InputSpec((6, 4))], placements=[(Replicate(),), (Shard(0),)],
    redistribute_inputs=((Shard(1),), None),        # step redistribute: a to the contraction dim
    checkpoint_inputs=(None, (Shard(0),)),          # step checkpoint: b saved and loaded back as placed
    redistribute_outputs=((Shard(0),),),            # step redistribute-output: the Partial(sum) product
    output_placements=((Shard(0),),), mesh_shape=(2,), compare=CompareSpec.allclose(), tags=L0,
    simulation_limit=DCP))
