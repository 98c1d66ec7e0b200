"""Canary of the local-layout oracle on real torch (issue 44): a seeded fault in torch's
``compute_local_shape_and_global_offset`` that stays consistent with itself (every torch module
that imported the function sees the faulty one: each rank's local size on a sharded dim is the
full chunk, ``ceil(size / n)``, even where the rank holds less or nothing) turns an uneven case
red at ``build``, saying torch's layout is wrong — not that the case's inputs are. Before,
meshtest took the expected local shape from that same function. The fault is a
``sitecustomize`` on the run's ``PYTHONPATH``, so every process of the run has it (~15 s)."""
from __future__ import annotations

import os

import meshtest
from tests.helpers import run_with_site

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)
CASE = "add.float32.s1.m2x2.S1Psum_RR"  # input 0 [10, 1, 5] sharded on its size-1 dim: coordinate 1 holds none

SCRIPT = '''
import sys

import torch.distributed.tensor._utils as utils
from torch.distributed.tensor.placement_types import Shard

real = utils.compute_local_shape_and_global_offset


def full_chunk(global_shape, mesh, placements, *args, **kwargs):
    shape, offset = real(global_shape, mesh, placements, *args, **kwargs)
    shape = list(shape)
    for j, p in enumerate(placements):
        if isinstance(p, Shard):
            shape[p.dim] = -(-int(global_shape[p.dim]) // mesh.size(j))
    return tuple(shape), offset


for module in list(sys.modules.values()):
    if getattr(module, "compute_local_shape_and_global_offset", None) is real:
        module.compute_local_shape_and_global_offset = full_chunk
'''


def _run(tmp_path, fault: bool) -> dict:
    args = [os.path.join(REPO, "cases", "torch", "opinfo", "case_opinfo_pointwise.py"), "--lane", "local",
            "--tag", "cpu_local", "--case", CASE]
    found, told = run_with_site(tmp_path, args, "fault" if fault else "plain", SCRIPT if fault else "")
    assert list(found) == [CASE], told
    return found[CASE]


def test_a_self_consistent_fault_in_torchs_local_shapes_is_reported_as_torchs(tmp_path):
    assert _run(tmp_path, fault=False)["status"] == "pass"
    faulted = _run(tmp_path, fault=True)
    assert faulted["status"] == "error"
    first = faulted["failures"][0]
    assert first["step"] == "build"
    assert "torch's local layout is wrong" in first["error"]
    assert "mesh coordinate (1, " in first["error"]  # the ranks at coordinate 1 of mesh dim 0 hold none
    assert "the placements give local shape (10, 0, 5)" in first["error"]
