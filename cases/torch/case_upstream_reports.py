"""Public DTensor bug reports, each written as the op case its report describes (the ones the
corpus lacked; the training and state-dict reports are in
``cases/torch/training/case_train_l2_upstream.py``). A report torch 2.13 still shows is a known
failure with its upstream id; one it fixed is a regression case that must pass.

- pytorch/pytorch#185167: ``nll_loss`` with class weights, ``reduction="mean"``, over a
  batch-sharded input averages the shards' weighted means instead of dividing the weighted sum
  by the weight sum (still wrong); the ``sum`` reduction is the control.
- pytorch/pytorch#179502: ``view(-1, 6)`` of a ``Shard(1)`` 12 x 8 tensor on 4 ranks was labelled
  ``Shard(0)`` without moving data (fixed: torch redistributes first).
- pytorch/pytorch#163193: a ``Partial(sum)`` scalar plus a constant added the constant on every
  rank (fixed), with distinct per-rank partial values.
- pytorch/pytorch#172812: ``local_map`` wraps an uneven output with ``from_local`` and no global
  shape, so each rank infers its own (6 x 3 and 4 x 3 for 5 rows); caught at
  ``output-metadata`` before the gather that would abort a rank (still wrong).
- pytorch/pytorch#144109: ``from_local(run_check=True)`` with the global shape given accepts
  locals that are not torch's chunk layout (1 and 3 columns of 4); the layout check before the
  gather names the ranks (still wrong; the fix is to refuse at ``build``).
- docs/torch-bugs.md#kwarg-tensor-kept-partial: ``linalg.pinv(a, rtol=rtol)`` with a
  ``Partial("sum")`` tensor ``rtol`` thresholds each rank's singular values with its own part (a
  keyword argument is not redistributed) and labels the result ``Replicate()`` (still wrong). The
  generated corpus found it on a sample whose reference is all zero; this case gives the bug a
  reference that is not: ``a = diag(4, 2, 1)``, ``rtol`` 0.1 + 0.3 = 0.4, so the threshold
  0.4 * 4 = 1.6 drops the singular value 1 (``pinv = diag(0.25, 0.5, 0)``); rank 0's part 0.1
  (threshold 0.4) keeps it, rank 1's part 0.3 (threshold 1.2) does not.
- pytorch/pytorch#128365: ``PrepareModuleInput(input_kwarg_layouts=..., desired_input_kwarg_layouts=...)``
  given a keyword input that already is a DTensor wrapped it again with ``from_local`` instead of
  redistributing it (fixed by pytorch/pytorch#128431): a module whose ``bias`` keyword arrives
  ``Shard(0)`` and is wanted ``Replicate()``, declared as ``module=`` / ``plan=`` so that ``fn``
  is the same call on the plain and the parallelized module.
- pytorch/pytorch#162338: gloo's ``ReduceOp.AVG`` in ``reduce_scatter`` / ``all_reduce`` summed
  instead of averaging (what FSDP2's gradient averaging uses; fixed): funcol collectives on
  replicated locals, whose average is the input itself.
"""
import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch.distributed.tensor import Replicate as TReplicate
from torch.distributed.tensor import Shard as TShard
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput

from meshtest import CompareSpec, InputSpec, KnownFailure, LocalInput, OpShardCase, Partial, Replicate, Shard, register

L0 = ("cpu_level0", "cpu_level1")
EXACT = CompareSpec.equal()
CLOSE = CompareSpec.allclose(rtol=1e-5, atol=1e-6)
#: targets whose class weights differ per shard (4 on rank 0's rows, 14 on rank 1's)
TARGET = InputSpec((8,), dtype="int64", data=[0, 0, 0, 0, 1, 2, 3, 4])
WEIGHT = InputSpec((5,), data=[1.0, 2.0, 3.0, 4.0, 5.0])


def nll_weighted(reduction):
    def fn(x, target, weight):
        return F.nll_loss(x.log_softmax(-1), target, weight=weight, reduction=reduction)
    return fn


register(OpShardCase(name="nll_loss_class_weight_mean_batch_s0_mesh2", fn=nll_weighted("mean"),
                     inputs=[InputSpec((8, 5)), TARGET, WEIGHT], placements=[(Shard(0),), (Shard(0),), (Replicate(),)],
                     mesh_shape=(2,), compare=CLOSE, tags=L0,
                     known_failure=KnownFailure(
                         kind="mismatch", step="compare",
                         match=r"output\[0\]: 1 of 1 elements outside",
                         signature="output[0] values 1/1 @2d3fc530 abs 0.04 rel 0.025",
                         reason="nll_loss's DTensor rule returns Partial(avg) of each shard's weighted mean; the "
                                "weighted mean is sum(w[t] * l) / sum(w[t]) over the whole batch, so shards whose "
                                "weight sums differ give a wrong value",
                         upstream="pytorch/pytorch#185167")))
register(OpShardCase(name="nll_loss_class_weight_sum_batch_s0_mesh2", fn=nll_weighted("sum"),
                     inputs=[InputSpec((8, 5)), TARGET, WEIGHT], placements=[(Shard(0),), (Shard(0),), (Replicate(),)],
                     mesh_shape=(2,), compare=CLOSE, tags=L0))
register(OpShardCase(name="view_s1_needs_redistribute_mesh4", fn=lambda x: x.view(-1, 6), inputs=[InputSpec((12, 8))],
                     placements=[(Shard(1),)], mesh_shape=(4,), compare=EXACT, tags=L0))
register(OpShardCase(name="pinv_partial_rtol_kwarg_mesh2", fn=lambda a, rtol: torch.linalg.pinv(a, rtol=rtol),
                     inputs=[InputSpec((3, 3), data=[[4.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]]),
                             LocalInput((), lambda c: (0.1, 0.3)[c[0]])],
                     placements=[(Replicate(),), (Partial("sum"),)], mesh_shape=(2,), compare=CLOSE, tags=L0,
                     known_failure=KnownFailure(
                         kind="mismatch", step="compare", match=r"output\[0\]: 1 of 9 elements outside",
                         signature="ranks 0 of 2: output[0] values 1/9 @7df8b9f2 abs 1 rel inf | ranks 1 of 2: pass",
                         reason="linalg_pinv's rule wants rtol Replicate() but a keyword argument is not "
                                "redistributed: each rank thresholds with its own part of a Partial rtol and the "
                                "output is labelled Replicate(); rank 0 keeps the singular value 1 its part 0.1 "
                                "does not drop",
                         upstream="docs/torch-bugs.md#kwarg-tensor-kept-partial")))
#: a Partial(sum) scalar whose ranks hold 10 and 35 (the sums of 0..4 and 5..9)
PARTIAL_45 = LocalInput((), lambda c: (10.0, 35.0)[c[0]])
register(OpShardCase(name="partial_scalar_plus_python_number_mesh2", fn=lambda s: s + 10, inputs=[PARTIAL_45],
                     placements=[(Partial("sum"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="partial_scalar_plus_0d_tensor_mesh2", fn=lambda s: s + torch.tensor(10.0),
                     inputs=[PARTIAL_45], placements=[(Partial("sum"),)], mesh_shape=(2,), compare=EXACT, tags=L0))


def double_local(t, mesh):
    return t * 2


register(OpShardCase(name="local_map_uneven_output_mesh2", fn=lambda x: x * 2, local_fn=double_local,
                     local_output_placements=((Shard(0),),), inputs=[InputSpec((5, 3))], placements=[(Shard(0),)],
                     mesh_shape=(2,), compare=EXACT, tags=L0,
                     known_failure=KnownFailure(
                         kind="mismatch", step="output-metadata",
                         match=r"rank\(s\) 0: shape \[6, 3\]",
                         signature="output[0] metadata @d4cd38d9",
                         reason="local_map wraps each local output with DTensor.from_local(run_check=False) and no "
                                "shape, so every rank infers local rows x 2: 6 x 3 on rank 0, 4 x 3 on rank 1 for 5 "
                                "rows (its source: 'the current code doesn't consider the uneven sharding case')",
                         upstream="pytorch/pytorch#172812")))
#: columns 1 and 3 of a width-4 tensor: torch's chunk layout gives 2 and 2
NON_CHUNK = LocalInput((2, 4), lambda c: [[1.0], [2.0]] if c[0] == 0 else [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]],
                       checked=False)
register(OpShardCase(name="from_local_run_check_non_chunk_layout_mesh2", fn=lambda x: x + 0, inputs=[NON_CHUNK],
                     placements=[(Shard(1),)], mesh_shape=(2,), compare=EXACT, tags=L0,
                     simulation_limit="the one-process lane checks no local layout before its gather (a simulated "
                                      "gather cannot abort a rank); its gather raises on the sizes instead",
                     known_failure=KnownFailure(
                         kind="mismatch", step="output-metadata", signature="output[0] local-layout @d057ce93",
                         match=r"rank 0: local \(2, 1\); the layout gives \(2, 2\)",
                         reason="DTensor.from_local(run_check=True, shape=(2, 4)) accepts local widths 1 and 3 where "
                                "torch.chunk lays out 2 and 2; every later collective pairs different sizes (the "
                                "gather aborts a rank); the fix refuses the layout in from_local",
                         upstream="pytorch/pytorch#144109")))


def all_reduce_avg(t, mesh):
    return funcol.all_reduce(t, "avg", mesh.get_group())


def reduce_scatter_avg(t, mesh):
    return funcol.reduce_scatter_tensor(t, "avg", scatter_dim=0, group=mesh.get_group())


register(OpShardCase(name="gloo_all_reduce_avg_replicated_mesh4", fn=lambda x: x + 0, local_fn=all_reduce_avg,
                     local_output_placements=((Replicate(),),), inputs=[InputSpec((4, 3))],
                     placements=[(Replicate(),)], mesh_shape=(4,), compare=CLOSE, tags=L0))
register(OpShardCase(name="gloo_reduce_scatter_avg_replicated_mesh2", fn=lambda x: x + 0, local_fn=reduce_scatter_avg,
                     local_output_placements=((Shard(0),),), inputs=[InputSpec((4, 3))],
                     placements=[(Replicate(),)], mesh_shape=(2,), compare=CLOSE, tags=L0,
                     simulation_limit="funcol.reduce_scatter_tensor under LocalTensorMode gives each simulated rank "
                                      "rows other than its scatter chunk (6 of 12 values off); the subject is gloo's "
                                      "own AVG"))


def linear_plus_bias_kwarg(api):
    """``lin`` (6 → 4), plus the keyword input ``bias`` ([8, 4])."""
    nn = api.nn

    class LinearPlusBias(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 4)

        def forward(self, x, *, bias):
            return self.lin(x) + bias

    return LinearPlusBias()


KWARG_PLAN = {"": PrepareModuleInput(input_kwarg_layouts={"bias": TShard(0)},
                                     desired_input_kwarg_layouts={"bias": TReplicate()}),
              "lin": ColwiseParallel(output_layouts=TReplicate(), use_local_output=False)}


def call_with_bias(module, x, bias):
    return module(x, bias=bias)


register(OpShardCase(name="tp_prepare_module_input_dtensor_kwarg_mesh2", fn=call_with_bias,
                     module=linear_plus_bias_kwarg, plan=KWARG_PLAN, inputs=[InputSpec((8, 6)), InputSpec((8, 4))],
                     placements=[(Replicate(),), (Shard(0),)], mesh_shape=(2,), compare=CLOSE, tags=L0,
                     output_placements=((Replicate(),),)))
