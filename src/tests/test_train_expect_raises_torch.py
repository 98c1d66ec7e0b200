"""A training case that expects a raise (``TrainCase(expect_raises=...)``), on real ranks: the
expected error at the parallel step passes; a training that completes fails ("completed without
raising"); another message fails naming both (~15 s, one launch)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import meshtest
from tests.helpers import case_file

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))

BODY = '''
from meshtest import TrainCase


def model(api):
    return api.nn.Linear(4, 4)


def data(i, api):
    g = api.torch.Generator().manual_seed(i)
    return api.torch.randn(2, 4, generator=g), api.torch.randn(2, 4, generator=g)


def mse(out, target):
    return ((out - target) ** 2).mean()


def refuse(model, ctx):
    raise ValueError("this plan shares a parameter across two units")


def keep(model, ctx):
    return model


register(TrainCase(name="raises_as_expected", model=model, data=data, loss=mse, parallelize=refuse, steps=1,
                   mesh_shape=(2,), mesh_dim_names=("dp",), tags=("cpu_level1",), layer=1,
                   expect_raises=(ValueError, "shares a parameter")))
register(TrainCase(name="completes_instead", model=model, data=data, loss=mse, parallelize=keep, steps=1,
                   mesh_shape=(2,), mesh_dim_names=("dp",), tags=("cpu_level1",), layer=1,
                   expect_raises=(ValueError, "shares a parameter")))
register(TrainCase(name="raises_another_message", model=model, data=data, loss=mse, parallelize=refuse, steps=1,
                   mesh_shape=(2,), mesh_dim_names=("dp",), tags=("cpu_level1",), layer=1,
                   expect_raises=(ValueError, "tied weights")))
'''


def test_train_expect_raises_passes_only_on_the_expected_error(tmp_path):
    path = case_file(tmp_path, "case_train_raises.py", BODY)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", "run", path, "--artifacts-dir", str(out), "--slot-dir",
                           str(tmp_path / "slots")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    got = {o["case"]: o for o in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert got["raises_as_expected"]["status"] == "pass"
    assert "raised as expected: ValueError: this plan shares" in got["raises_as_expected"]["detail"]
    (failure,) = {f["error"] for f in got["completes_instead"]["failures"]}
    assert got["completes_instead"]["status"] == "fail" and "completed without raising" in failure
    assert "expected ValueError matching 'shares a parameter' at step parallel" in failure
    (failure,) = {f["error"].splitlines()[0] for f in got["raises_another_message"]["failures"]}
    assert got["raises_another_message"]["status"] == "fail"
    assert failure.startswith("expected ValueError matching 'tied weights' at step parallel; got ValueError at step "
                              "parallel: this plan shares")
