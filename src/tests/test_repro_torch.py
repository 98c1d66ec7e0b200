"""``python -m meshtest repro``: the exported script imports no meshtest and, run under torchrun,
fails as the case's known failure says (an op case's wrong values, a generated case's distinct
Partial parts given rank by rank, an op that raises) and exits 0 for a passing case (~40 s)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import meshtest
from meshtest.repro import load_op_case

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))

CASES = [
    # (case, expected exit code): the known failure's own match must be in what the script prints
    ("cases/torch/case_conv.py::conv2d_in_channels_partial_grad_mesh2", 1),  # wrong values at compare
    ("cases/torch/opinfo/case_opinfo_pointwise.py::nanmean.float32.s0.m2x2.S0Psum", 1),  # per-rank Partial parts
    ("cases/torch/case_sdpa.py::sdpa_causal_batch_s0_mesh2", 1),  # the op raises
    ("cases/torch/case_sort.py::sort_dim1_s0_mesh2", 0),  # passes
]


@pytest.mark.parametrize("spec,code", CASES)
def test_the_exported_script_fails_as_the_case_does(tmp_path, spec, code):
    out = tmp_path / "repro.py"
    made = subprocess.run([sys.executable, "-m", "meshtest", "repro", spec, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    text = out.read_text()
    assert not re.search(r"^\s*(import|from)\s+meshtest", text, re.M)
    world = int(re.search(r"--nproc-per-node (\d+)", text).group(1))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PEX_EXTRA_SYS_PATH")}
    ran = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
                          str(out)], cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=300)
    said = ran.stdout + ran.stderr
    assert (ran.returncode != 0) == bool(code), said[-3000:]
    _, case = load_op_case_from(spec)
    if case.known_failure is not None:
        assert re.search(case.known_failure.match, said), (case.known_failure.match, said[-3000:])
    else:
        assert said.count("every comparison holds") == world


def load_op_case_from(spec):
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        return load_op_case(spec)
    finally:
        os.chdir(cwd)


def test_what_cannot_be_exported_is_named(tmp_path):
    from tests.helpers import case_file

    path = case_file(tmp_path, "case_x.py", """
        from meshtest.model.placement import Shard as S

        def f(x):
            return x * S(0).dim

        register(OpShardCase(name="uses_meshtest", fn=f, inputs=[InputSpec((4,))], placements=[(Shard(0),)],
                             mesh_shape=(2,), tags=("cpu_level1",)))
        """)
    made = subprocess.run([sys.executable, "-m", "meshtest", "repro", f"{path}::uses_meshtest"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=120)
    assert made.returncode == 2
    assert "case 'uses_meshtest': cannot export: S (f uses it) comes from meshtest" in made.stderr
