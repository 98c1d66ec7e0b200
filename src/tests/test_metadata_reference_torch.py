"""Canary of the output-metadata check against the reference on real torch (issue 44): a seeded
fault in DTensor's sharding propagation that makes every view op's output describe itself as
contiguous (the global stride torch computes from the op on fake tensors replaced by the
row-major one) leaves the gathered values right, so step ``compare`` passes it; the check of
the output's global stride against the single-device result turns the case red at
``output-metadata``. The fault is a ``sitecustomize`` on the run's ``PYTHONPATH``, so every
process of the run has it (~15 s a run).

And a case's verdict does not depend on the cases run before it in the same process: torch's
sharding-propagation caches are dropped before each case (their key misses ``memory_format``,
docs/torch-bugs.md#memory-format-cache-key); with the caches kept, the second of two cases
inherits the first one's strides and fails."""
from __future__ import annotations

import os

import meshtest
from tests.helpers import run_with_site

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)
CASE = "meta_transpose_s0_mesh2"  # a [4, 6] tensor transposed: its reference has strides (1, 6)

SCRIPT = '''
import torch
from torch.distributed.tensor._dtensor_spec import TensorMeta
from torch.distributed.tensor._sharding_prop import ShardingPropagator

real = ShardingPropagator._propagate_tensor_meta_non_cached


def row_major(shape):
    stride, acc = [], 1
    for size in reversed(shape):
        stride.insert(0, acc)
        acc *= max(int(size), 1)
    return tuple(stride)


def views_contiguous(self, op_schema):
    meta = real(self, op_schema)
    if isinstance(meta, TensorMeta) and getattr(op_schema.op, "is_view", False):
        return TensorMeta(meta.shape, row_major(meta.shape), meta.dtype)
    return meta


ShardingPropagator._propagate_tensor_meta_non_cached = views_contiguous
'''


def _run(tmp_path, fault: bool) -> dict:
    args = [os.path.join(REPO, "cases", "torch", "case_metadata.py"), "--lane", "local", "--tag", "cpu_level0",
            "--case", CASE]
    found, told = run_with_site(tmp_path, args, "fault" if fault else "plain", SCRIPT if fault else "")
    assert list(found) == [CASE], told
    return found[CASE]


def test_a_view_whose_dtensor_claims_contiguous_strides_fails_at_output_metadata(tmp_path):
    assert _run(tmp_path, fault=False)["status"] == "pass"
    faulted = _run(tmp_path, fault=True)
    assert faulted["status"] == "fail", faulted
    first = faulted["failures"][0]
    assert first["step"] == "output-metadata", first
    assert "output[0]: global stride" in first["error"]
    assert "output[0]: global stride (4, 1) != reference stride (1, 6)" in first["error"]


ORDER = os.path.join(REPO, "cases", "faults", "case_faults_order.py")
KEEP_CACHES = '''
from meshtest.platforms.torch.backend import TorchBackend

TorchBackend.forget_cached_decisions = lambda self: None
'''


def _order(tmp_path, keep_caches: bool) -> dict:
    args = [ORDER, "--lane", "local", "--local-processes", "1", "--tag", "cpu_faults"]
    label, site = ("kept", KEEP_CACHES) if keep_caches else ("dropped", "")
    found, told = run_with_site(tmp_path, args, label, site)
    assert set(found) == {"order_cast_s1_mesh2", "order_cast_channels_last_s1_mesh2"}, told
    return found


def test_a_case_does_not_inherit_the_sharding_decisions_cached_by_the_case_before_it(tmp_path):
    dropped = _order(tmp_path, keep_caches=False)
    assert {c: o["status"] for c, o in dropped.items()} == {"order_cast_s1_mesh2": "pass",
                                                           "order_cast_channels_last_s1_mesh2": "pass"}
    # the canary: a process that keeps torch's caches between cases gets the first case's strides
    kept = _order(tmp_path, keep_caches=True)["order_cast_channels_last_s1_mesh2"]
    assert kept["status"] == "fail", kept
    assert kept["failures"][0]["step"] == "output-metadata"
    assert "global stride (18, 6, 3, 1) != reference stride (18, 1, 9, 3)" in kept["failures"][0]["error"]
