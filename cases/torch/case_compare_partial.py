"""Comparisons with a scalar on a ``Partial`` input whose parts straddle the threshold.

``aten.ge.Scalar`` / ``aten.lt.Scalar`` are reached by the generated cases only inside composites,
where their result never depends on the reduction of a ``Partial`` input (level-1 mutation: the
``reduce_skipped`` / ``reduce_op_swapped`` mutants of these two rules survived every generated
case). Here each rank's part alone is on the other side of the threshold from the reduced value,
so a comparison of the unreduced parts, or of parts reduced with another op, gives another result.
"""
import numpy as np

from meshtest import CompareSpec, LocalInput, OpShardCase, Partial, register

L0 = ("cpu_level0", "cpu_level1")
EXACT = CompareSpec.equal()

#: parts [0.2, 0.9, -0.4] and [1.0, -0.1, 0.6]: sum [1.2, 0.8, 0.2], avg [0.6, 0.4, 0.1],
#: max [1.0, 0.9, 0.6], min [0.2, -0.1, -0.4]
PARTS = {(0,): [0.2, 0.9, -0.4], (1,): [1.0, -0.1, 0.6]}


def parts(coord):
    return np.array(PARTS[coord])


STRADDLING = LocalInput((3,), parts)

register(OpShardCase(name="ge_scalar_partial_sum_straddling_mesh2", fn=lambda x: x.ge(0.5), inputs=[STRADDLING],
                     placements=[(Partial("sum"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="lt_scalar_partial_sum_straddling_mesh2", fn=lambda x: x.lt(0.5), inputs=[STRADDLING],
                     placements=[(Partial("sum"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="ge_scalar_partial_avg_straddling_mesh2", fn=lambda x: x.ge(0.5), inputs=[STRADDLING],
                     placements=[(Partial("avg"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="lt_scalar_partial_avg_straddling_mesh2", fn=lambda x: x.lt(0.5), inputs=[STRADDLING],
                     placements=[(Partial("avg"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="ge_scalar_partial_max_straddling_mesh2", fn=lambda x: x.ge(0.5), inputs=[STRADDLING],
                     placements=[(Partial("max"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="lt_scalar_partial_max_straddling_mesh2", fn=lambda x: x.lt(0.5), inputs=[STRADDLING],
                     placements=[(Partial("max"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="ge_scalar_partial_min_straddling_mesh2", fn=lambda x: x.ge(0.5), inputs=[STRADDLING],
                     placements=[(Partial("min"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="lt_scalar_partial_min_straddling_mesh2", fn=lambda x: x.lt(0.5), inputs=[STRADDLING],
                     placements=[(Partial("min"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
