"""The declared steps between placement and op (tag ``cpu_faults``: no gate runs it;
src/tests/test_declared_steps_torch.py does, on gloo and in the one-process lane, and asserts
each verdict). Each case below passes only if meshtest really runs the step it declares, or
must fail at the step named in its name:

* ``steps_local_fn_allgather``: ``local_fn`` all-gathers the rows with funcol and declares the
  output ``Replicate()``: passes.
* ``steps_local_fn_wrong_placements``: the same ``local_fn`` declares its output ``Shard(0)``,
  so the wrapped output claims twice the global rows: fails at ``compare`` (shape).
* ``steps_local_fn_output_count``: ``local_fn`` returns two tensors for one declared output:
  ``error`` at ``run``, naming both counts.
* ``steps_redistribute_input_reaches_fn``: the input placed ``Shard(0)`` is redistributed to
  ``Replicate()`` and the output must be ``Replicate()``: passes only if the step ran.
* ``steps_redistribute_output_wrong``: the output is redistributed to ``Shard(0)`` while
  ``output_placements`` says ``Shard(1)``: fails at ``placement``.
"""
import torch.distributed._functional_collectives as funcol

from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, Shard, register

T = ("cpu_faults",)
EXACT = CompareSpec.equal()


def identity(x):
    return x.clone()


def times_one(x):
    return x * 1.0


def allgather_rows(x, mesh):
    return funcol.all_gather_tensor(x, gather_dim=0, group=mesh.get_group("tp"))


def two_outputs(x, mesh):
    return x, x


register(OpShardCase(name="steps_local_fn_allgather", fn=identity, local_fn=allgather_rows,
                     local_output_placements=((Replicate(),),), inputs=[InputSpec((4, 3), init="arange")],
                     placements=[(Shard(0),)], mesh_shape=(2,), mesh_dim_names=("tp",), compare=EXACT, tags=T))
register(OpShardCase(name="steps_local_fn_wrong_placements", fn=identity, local_fn=allgather_rows,
                     local_output_placements=((Shard(0),),), inputs=[InputSpec((4, 3), init="arange")],
                     placements=[(Shard(0),)], mesh_shape=(2,), mesh_dim_names=("tp",), compare=EXACT, tags=T))
register(OpShardCase(name="steps_local_fn_output_count", fn=identity, local_fn=two_outputs,
                     local_output_placements=((Shard(0),),), inputs=[InputSpec((4, 3), init="arange")],
                     placements=[(Shard(0),)], mesh_shape=(2,), mesh_dim_names=("tp",), compare=EXACT, tags=T))
register(OpShardCase(name="steps_redistribute_input_reaches_fn", fn=times_one, redistribute_inputs=((Replicate(),),),
                     inputs=[InputSpec((4, 3), init="arange")], placements=[(Shard(0),)], mesh_shape=(2,),
                     compare=EXACT, tags=T, output_placements=((Replicate(),),)))
register(OpShardCase(name="steps_redistribute_output_wrong", fn=times_one, redistribute_outputs=((Shard(0),),),
                     inputs=[InputSpec((4, 4), init="arange")], placements=[(Shard(1),)], mesh_shape=(2,),
                     compare=EXACT, tags=T, output_placements=((Shard(1),),)))
