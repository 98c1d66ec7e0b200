"""Cases for the example platform ``numpy-example`` (one rank). Run with::

    python -m meshtest run examples/numpy_platform/case_numpy_example.py --platform numpy-example
"""
from meshtest import CompareSpec, InputSpec, OpShardCase, ScenarioCase, Shard, register

ONE = (1,)
GATES = ("cpu_level1",)


def scaled_sum(x, y):
    return x * 2.0 + y


def scenario_sum(ctx):
    np = ctx.api.np
    ctx.step("compute")
    placed = ctx.backend.distribute(np.arange(6.0).reshape(2, 3), ctx.mesh, ("S0",))
    ctx.assert_close(ctx.backend.local_to_global(placed).sum(axis=0), np.array([3.0, 5.0, 7.0]),
                     rtol=0, atol=0, label="column sums")
    ctx.note(f"mesh {ctx.mesh.shape} {ctx.mesh.mesh_dim_names}")


def needs_tp(ctx):
    raise AssertionError("never runs: the platform has no tensor-parallel styles")


register(OpShardCase(name="np_scaled_sum", fn=scaled_sum, inputs=[InputSpec((4, 3)), InputSpec((4, 3))],
                     placements=[(Shard(0),), (Shard(0),)], mesh_shape=ONE, tags=GATES,
                     compare=CompareSpec.allclose(rtol=0, atol=0)))
register(ScenarioCase(name="np_scenario_sum", fn=scenario_sum, mesh_shape=ONE, mesh_dim_names=("tp",), tags=GATES))
register(ScenarioCase(name="np_needs_tp_styles", fn=needs_tp, mesh_shape=ONE, tags=GATES, requires=("tp.styles",)))
