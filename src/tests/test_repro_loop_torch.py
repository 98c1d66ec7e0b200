"""The training loop of an exported script (``python -m meshtest repro``, templates/repro_train.py.j2)
and the one meshtest's torch backend runs (:func:`meshtest.platforms.torch.training.train`) are
two texts of one loop: on the same training case, on real ranks, both are run as the baseline and
as the parallel run, and every step's loss, grad norm, gradients, parameters and optimizer state
must be bitwise the same (~30 s on 2 cores). The canary: the script's copy with one rule of the
loop changed (its gradient accumulation) differs, named by step and quantity."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)

DRIVER = r'''
import os
import sys

import numpy as np
import torch.distributed as dist

from meshtest.platforms.torch import training
from meshtest.platforms.torch.gloo import TorchGlooBackend
from meshtest.repro import load_op_case, script

spec, drift = sys.argv[1], sys.argv[2]
path, case = load_op_case(spec)
repro = {"__name__": "repro"}
exec(compile(script(spec), "repro", "exec"), repro)
if drift:
    name, value = drift.split("=")
    repro[name] = int(value)
backend = TorchGlooBackend()
backend.init("cpu", 120)
names = case.mesh_dim_names or tuple(f"d{k}" for k in range(len(case.mesh_shape)))
mesh = backend.make_mesh(tuple(case.mesh_shape), tuple(names))


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def first_difference():
    for parallel in (False, True):
        run = "parallel" if parallel else "baseline"
        ours = training.train(backend, case, mesh, parallel)
        theirs = repro["train"](mesh, parallel)
        if len(ours) != len(theirs):
            return f"{run}: {len(ours)} steps in the backend, {len(theirs)} in the script"
        for step, (o, t) in enumerate(zip(ours, theirs)):
            for quantity in ("loss", "grad_norm"):
                if not same(getattr(o, quantity), t[quantity]):
                    return f"{run} step {step} {quantity}: backend {getattr(o, quantity)}, script {t[quantity]}"
            for quantity in ("grads", "params", "optim"):
                mine, its = getattr(o, quantity), t[quantity]
                if sorted(mine) != sorted(its):
                    return f"{run} step {step} {quantity}: names {sorted(mine)} vs {sorted(its)}"
                for n in sorted(mine):
                    if not same(mine[n], its[n]):
                        return f"{run} step {step} {quantity} {n}: not bitwise equal"
    return None


found = first_difference()
print(f"rank {dist.get_rank()}: {found or 'the same loop'}", flush=True)
dist.barrier()
backend.shutdown()
'''

CASES = [
    # FSDP2 per block, momentum SGD, 2 micro-batches, the batch split over dp
    "cases/torch/training/case_train_l2_sharding.py::train_fsdp2_grad_accum_momentum",
    # a model that reads ctx.micro (its last micro-batch uses a layer the others do not)
    "cases/torch/training/case_train_l2_model_reads.py::fsdp2_parameter_used_on_the_last_micro_batch",
]


def _run(tmp_path, spec, drift=""):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((SRC_ROOT, REPO))}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(driver), spec, drift], cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    # the ranks share torchrun's stdout: a line of one may land inside a line of the other
    return proc, sorted(re.findall(r"rank \d: (?:the same loop|baseline [^\n]*?|parallel [^\n]*?)(?=rank \d: |\n|$)",
                                   proc.stdout))


@pytest.mark.parametrize("spec", CASES)
def test_the_script_and_the_backend_train_alike_step_by_step(tmp_path, spec):
    proc, lines = _run(tmp_path, spec)
    assert proc.returncode == 0 and lines == ["rank 0: the same loop", "rank 1: the same loop"], \
        proc.stdout + proc.stderr[-3000:]


def test_a_script_whose_loop_drifted_is_told_apart_by_step_and_quantity(tmp_path):
    proc, lines = _run(tmp_path, CASES[0], drift="GRAD_ACCUM=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert lines and all(line.split(": ", 1)[1].startswith("baseline step 0 loss:") for line in lines), lines
