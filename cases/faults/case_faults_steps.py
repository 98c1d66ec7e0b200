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
* ``steps_local_region_not_shard_local``: ``fn(x, *, local)`` normalises each column over the
  rows in its local code while the rows are sharded (each rank divides by its own rows' sum), then
  sums over the rows with a DTensor op: the values after the round trip are wrong, so the case
  fails at ``compare``; ``steps_local_region_shard_local`` normalises each row instead (whole on
  every rank) and passes, backward included.
* ``steps_module_plan_kept_sharded`` / ``steps_module_plan_replicated``: ``module=`` / ``plan=``
  (``fn(module, x, bias)``); the plan's ``PrepareModuleInput`` replicates the ``Shard(0)`` keyword
  input ``bias`` and the output is declared ``Replicate()``: passes; without it, ``bias`` stays
  sharded, the sum comes out ``Shard(0)`` and the case fails at ``placement``.
"""
import torch.distributed._functional_collectives as funcol
from torch.distributed.tensor import Replicate as TReplicate
from torch.distributed.tensor import Shard as TShard
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput

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


def normalise_columns(t, mesh):
    return t / t.sum(dim=0, keepdim=True)


def normalise_rows(t, mesh):
    return t / t.sum(dim=1, keepdim=True)


def columns_then_sum(x, *, local):
    return local(normalise_columns, (Shard(0),))(x).sum(0)


def rows_then_sum(x, *, local):
    return local(normalise_rows, (Shard(0),))(x * 1.0).sum(0)


POSITIVE = InputSpec((6, 4), init="uniform", low=1.0, high=2.0)
register(OpShardCase(name="steps_local_region_not_shard_local", fn=columns_then_sum, inputs=[POSITIVE],
                     placements=[(Shard(0),)], mesh_shape=(2,), compare=CompareSpec.allclose(), tags=T))
register(OpShardCase(name="steps_local_region_shard_local", fn=rows_then_sum,
                     inputs=[InputSpec((6, 4), init="uniform", low=1.0, high=2.0, requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=(2,), compare=CompareSpec.allclose(), tags=T))


def linear_plus_bias(api):
    nn = api.nn

    class LinearPlusBias(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 4)

        def forward(self, x, *, bias):
            return self.lin(x) + bias

    return LinearPlusBias()


def call_with_bias(module, x, bias):
    return module(x, bias=bias)


COLWISE = ColwiseParallel(output_layouts=TReplicate(), use_local_output=False)
REPLICATE_BIAS = PrepareModuleInput(input_kwarg_layouts={"bias": TShard(0)},
                                    desired_input_kwarg_layouts={"bias": TReplicate()})
MODULE_INPUTS = [InputSpec((8, 6)), InputSpec((8, 4))]
register(OpShardCase(name="steps_module_plan_replicated", fn=call_with_bias, module=linear_plus_bias,
                     plan={"": REPLICATE_BIAS, "lin": COLWISE}, inputs=MODULE_INPUTS,
                     placements=[(Replicate(),), (Shard(0),)], mesh_shape=(2,), compare=CompareSpec.allclose(), tags=T,
                     output_placements=((Replicate(),),)))
register(OpShardCase(name="steps_module_plan_kept_sharded", fn=call_with_bias, module=linear_plus_bias,
                     plan={"lin": COLWISE}, inputs=MODULE_INPUTS, placements=[(Replicate(),), (Shard(0),)],
                     mesh_shape=(2,), compare=CompareSpec.allclose(), tags=T, output_placements=((Replicate(),),)))
