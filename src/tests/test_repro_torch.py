"""``python -m meshtest repro``: the exported script imports no meshtest and, run under torchrun,
fails as the case's known failure says (an op case's wrong values, a generated case's distinct
Partial parts given rank by rank, an op that raises, a training case that raises in its parallel
run, a local_fn output declared with the wrong placements) and exits 0 for a passing op case
(one with declared redistribute and local_fn steps too) and a passing training case; a training script whose
parallel run drifts reports the step (~2 min)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import meshtest
from meshtest.repro import load_op_case, script
from tests.helpers import nightly

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))

CASES = [
    # (case, expected exit code): the known failure's own match must be in what the script prints
    ("cases/torch/case_conv.py::conv2d_in_channels_partial_grad_mesh2", 1),  # wrong values at compare
    ("cases/torch/opinfo/case_opinfo_pointwise.py::nanmean.float32.s0.m2x2.S0Psum", 1),  # per-rank Partial parts
    # declared steps: an input redistributed, then a local_fn on the shards (local_map), passes
    ("cases/torch/case_collective.py::coll_submesh_tp_colsplit_dp_tp", 0),
    # a training case: clip_grad_norm_ over TP and FSDP meshes raises in the parallel run
    ("cases/torch/training/case_train_l3_combinations.py::clip_grad_fsdp_tp_mixed_meshes", 1),
    # the same paths again (a raise, a plain pass, a training pass): nightly, ~10 s of torchrun each
    pytest.param("cases/torch/case_sdpa.py::sdpa_causal_batch_s0_mesh2", 1, marks=nightly),  # the op raises
    pytest.param("cases/torch/case_sort.py::sort_dim1_s0_mesh2", 0, marks=nightly),  # passes
    pytest.param("cases/torch/training/case_train_l3_combinations.py::clip_grad_fsdp_tp_2d", 0,
                 marks=nightly),  # TP+FSDP+clip, passes
]


def _export(tmp_path, spec, cli=False):
    """The script of ``spec``, written to ``tmp_path/repro.py``: by ``python -m meshtest repro``
    (``cli``), else by the function it calls, in this process (each command's start-up, with
    torch's import, cost ~4 s a case)."""
    out = tmp_path / "repro.py"
    if cli:
        made = subprocess.run([sys.executable, "-m", "meshtest", "repro", spec, "--out", str(out)], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
        assert made.returncode == 0, made.stderr[-3000:]
        assert made.stdout.startswith(f"wrote {out}; run it with: torchrun --nproc-per-node ")
    else:
        cwd = os.getcwd()
        os.chdir(REPO)
        try:
            out.write_text(script(spec))
        finally:
            os.chdir(cwd)
    text = out.read_text()
    assert not re.search(r"^\s*(import|from)\s+(meshtest|cases)\b", text, re.M)  # nor the checkout's modules
    return out, text


def _torchrun(tmp_path, script, text):
    world = int(re.search(r"--nproc-per-node (\d+)", text).group(1))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PEX_EXTRA_SYS_PATH")}
    ran = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
                          str(script)], cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=300)
    return ran, world


@pytest.mark.parametrize("spec,code", CASES)
def test_the_exported_script_fails_as_the_case_does(tmp_path, spec, code):
    out, text = _export(tmp_path, spec, cli=spec == CASES[0][0])  # the command itself, once
    ran, world = _torchrun(tmp_path, out, text)
    said = ran.stdout + ran.stderr
    assert (ran.returncode != 0) == bool(code), said[-3000:]
    _, case = load_op_case_from(spec)
    if case.known_failure is not None:
        assert re.search(case.known_failure.match, said), (case.known_failure.match, said[-3000:])
    else:
        assert said.count("every comparison holds") == world


def test_a_training_script_whose_parallel_run_drifts_names_the_step(tmp_path):
    """The canary of the training script's own comparison: its parallel loss scaled by 1.001."""
    out, text = _export(tmp_path, "cases/torch/training/case_train_l3_combinations.py::clip_grad_fsdp_tp_2d")
    line = "                value = scaled(net(*inputs), target)\n"
    assert text.count(line) == 1
    out.write_text(text.replace(line, line.rstrip("\n") + " * (1.001 if parallel else 1.0)\n"))
    ran, world = _torchrun(tmp_path, out, text)
    assert ran.returncode != 0 and (ran.stdout + ran.stderr).count("step 0 loss: 1 of 1 elements outside") == world


def test_a_local_fn_whose_declared_placements_are_wrong_fails_in_the_script_too(tmp_path):
    """The canary of the exported declared steps: the fixture's replicated local_fn output
    declared Shard(0) claims twice the rows, in the script as in meshtest."""
    out, text = _export(tmp_path, "cases/faults/case_faults_steps.py::steps_local_fn_wrong_placements")
    ran, world = _torchrun(tmp_path, out, text)
    said = ran.stdout + ran.stderr
    wrong = said.count("output[0]: shape (8, 3) != reference shape (4, 3)")
    assert ran.returncode != 0 and wrong == world, said[-3000:]


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
    made = subprocess.run([sys.executable, "-m", "meshtest", "repro", f"{path}::uses_meshtest", "--out",
                           str(tmp_path / "repro.py")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=120)
    assert made.returncode == 2
    assert "case 'uses_meshtest': cannot export: S (f uses it) comes from meshtest" in made.stderr
