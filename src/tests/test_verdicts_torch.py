"""Verdicts a user can trust, end to end on torch/gloo (2 ranks, one launch): per-rank inputs
(distinct integer partial sums, uneven locals, a layout torch cannot hold), zero-size and strided
placements, placement expectations, expected exceptions, a property check for a random op,
declared mesh names in an op case, meshtest placements handed to torch, one broken declaration
among good ones, and ``A.py B.py::case`` selection. Each assertion fails on the code before this
work (the fields did not exist, the file failed as a whole, or the case was selected wrongly)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))

CASES = '''
import numpy as np
import torch
from torch.distributed.tensor import DTensor, Replicate as TReplicate, Shard as TShard

from meshtest import (CompareSpec, InputSpec, LocalInput, OpShardCase, Partial, Replicate, ScenarioCase, Shard,
                      StridedShard, register)
from meshtest.properties import same_statistics

L0 = ("cpu_level0",)
EXACT = CompareSpec.equal()


def double(x):
    return x * 2


def column_sums(x):
    return x.sum(dim=0)


def relabel_replicate(x):
    """Right values, wrong label: the gathered output is correct, its placement is not Shard(0)."""
    if isinstance(x, DTensor):
        return DTensor.from_local(x.full_tensor(), x.device_mesh, [TReplicate()])
    return x


def raise_on_dtensor(x):
    if isinstance(x, DTensor):
        raise ValueError(f"refusing a DTensor on rank {torch.distributed.get_rank()}")
    return x


def raise_on_rank0(x):
    if isinstance(x, DTensor) and torch.distributed.get_rank() == 0:
        raise ValueError("only rank 0 refuses")
    return x


def needs_tp_axis(x):
    if isinstance(x, DTensor):
        assert x.device_mesh.mesh_dim_names == ("tp",), x.device_mesh.mesh_dim_names
        return x.redistribute(x.device_mesh["tp"], [TReplicate()]) * 1
    return x * 1


def meshtest_placement_to_torch(x):
    if isinstance(x, DTensor):
        return x.redistribute(x.device_mesh, [Replicate()])
    return x


def dropout(x):
    return torch.nn.functional.dropout(x, p=0.5, training=True)


register(OpShardCase(name="v_partial_int64_distinct", fn=double,
                     inputs=[LocalInput(shape=(4,), local=lambda c: np.arange(4) * (c[0] + 1), dtype="int64")],
                     placements=[(Partial("sum"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="v_partial_max_distinct", fn=double,
                     inputs=[LocalInput(shape=(3, 2), local=lambda c: np.full((3, 2), 5.0 * c[0] - 1.0))],
                     placements=[(Partial("max"),)], mesh_shape=(2,), compare=EXACT, tags=L0))
# torch hands the gradient of a column sum back Replicate (the sum's backward expands a replicated grad)
register(OpShardCase(name="v_uneven_locals_grad", fn=column_sums,
                     inputs=[LocalInput(shape=(5, 3), local=lambda c: np.full((3 - c[0], 3), 1.0 + c[0]),
                                        requires_grad=True)],
                     placements=[(Shard(0),)], mesh_shape=(2,), grad_placements=((Replicate(),),), tags=L0))
register(OpShardCase(name="v_locals_torch_cannot_hold", fn=double,
                     inputs=[LocalInput(shape=(5,), local=lambda c: np.ones(1 + 3 * c[0]))],
                     placements=[(Shard(0),)], mesh_shape=(2,),
                     expect_raises=(ValueError, "the placements lay out", "build"), tags=L0))
register(OpShardCase(name="v_zero_size_dim", fn=double, inputs=[InputSpec((0, 4))], placements=[(Shard(1),)],
                     mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="v_strided_shard", fn=double, inputs=[InputSpec((8, 3))],
                     placements=[(StridedShard(0, split_factor=2),)], mesh_shape=(2,), compare=EXACT, tags=L0))
register(OpShardCase(name="v_output_placement_holds", fn=double, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), output_placements=((Shard(0),),), tags=L0))
register(OpShardCase(name="v_output_placement_wrong_label", fn=relabel_replicate, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), output_placements=((Shard(0),),), tags=L0))
register(OpShardCase(name="v_expect_raises", fn=raise_on_dtensor, inputs=[InputSpec((4,))],
                     placements=[(Shard(0),)], mesh_shape=(2,), expect_raises=(ValueError, "refusing a DTensor"),
                     tags=L0))
register(OpShardCase(name="v_expect_raises_one_rank_only", fn=raise_on_rank0, inputs=[InputSpec((4,))],
                     placements=[(Replicate(),)], mesh_shape=(2,), expect_raises=(ValueError, "refuses"), tags=L0))
register(OpShardCase(name="v_declared_axis_names", fn=needs_tp_axis, inputs=[InputSpec((4,))],
                     placements=[(Shard(0),)], mesh_shape=(2,), mesh_dim_names=("tp",), tags=L0))
register(OpShardCase(name="v_meshtest_placement_in_fn", fn=meshtest_placement_to_torch, inputs=[InputSpec((4,))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=L0))
register(OpShardCase(name="v_dropout_statistics", fn=dropout, inputs=[InputSpec((64, 16))],
                     placements=[(Shard(0),)], mesh_shape=(2,), compare=CompareSpec.check(same_statistics()),
                     tags=L0))
register(OpShardCase(name="v_broken_declaration", fn=double,
                     inputs=[InputSpec((4,), dtype="int64", init="arange")], placements=[(Partial("sum"),)],
                     mesh_shape=(2,), tags=L0))


def check_in_library(ctx):
    ctx.step("torch internals")
    ctx.api.torch._assert(False, "an internal torch check")


register(ScenarioCase(name="v_torch_internal_assert", fn=check_in_library, mesh_shape=(2,), tags=L0))
'''

OTHER = '''
from meshtest import InputSpec, OpShardCase, Shard, register

def same(x):
    return x + 0

register(OpShardCase(name="w_one", fn=same, inputs=[InputSpec((4,))], placements=[(Shard(0),)], mesh_shape=(2,),
                     tags=("cpu_level0",)))
register(OpShardCase(name="w_two", fn=same, inputs=[InputSpec((4,))], placements=[(Shard(0),)], mesh_shape=(2,),
                     tags=("cpu_level0",)))
'''


def test_verdicts_on_torch(tmp_path):
    a, b = tmp_path / "case_verdicts.py", tmp_path / "case_other.py"
    a.write_text(CASES)
    b.write_text(OTHER)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", str(a), f"{b}::w_two", "--artifacts-dir", str(out),
                           "--slot-dir", str(tmp_path / "slots")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    text = proc.stdout + proc.stderr
    results = {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    status = {k: v["status"] for k, v in results.items()}
    assert status == {
        "v_partial_int64_distinct": "pass", "v_partial_max_distinct": "pass", "v_uneven_locals_grad": "pass",
        "v_locals_torch_cannot_hold": "pass", "v_zero_size_dim": "pass", "v_strided_shard": "pass",
        "v_output_placement_holds": "pass", "v_output_placement_wrong_label": "fail",
        "v_expect_raises": "pass", "v_expect_raises_one_rank_only": "fail",
        "v_declared_axis_names": "pass", "v_meshtest_placement_in_fn": "error", "v_dropout_statistics": "pass",
        "v_broken_declaration": "error", "v_torch_internal_assert": "error",
        "w_two": "pass",  # and not w_one: B.py::w_two selects one case of B, all of A
    }, text

    def first(case):
        return results[case]["failures"][0]

    wrong = first("v_output_placement_wrong_label")
    assert wrong["step"] == "placement"
    assert wrong["error"] == ("output[0]: placements (Replicate(),) != expected (Shard(0),)\n"
                              "signature: output[0] placements (Replicate(),) vs (Shard(0),)")
    one_rank = {f["rank"]: f for f in results["v_expect_raises_one_rank_only"]["failures"]}
    assert one_rank.keys() == {1} and "the case completed without raising" in one_rank[1]["error"]
    assert "torch.distributed.tensor.Replicate" in first("v_meshtest_placement_in_fn")["error"]
    broken = first("v_broken_declaration")
    assert broken["step"] == "register" and "rule partial-split" in broken["error"]
    internal = first("v_torch_internal_assert")
    assert internal["step"] == "torch internals" and "AssertionError raised inside torch" in internal["error"]
