"""The two training-case forms that read more than the batch, on real ranks (issue 43, item 4):
``loss(output, target, model)`` and ``model(api, ctx)``, through the corpus's own cases
(``cases/torch/training/case_train_l2_model_reads.py``, 2 ranks, ~10 s). Both pass. The canary:
a baseline whose context stays at micro-batch 0 (its model never adds the ``late`` layer, the
parallel model does on the last micro-batch) fails at ``compare`` from step 0's loss on — the
parallel and baseline models must read the same ``ctx.micro``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)
FILE = os.path.join("cases", "torch", "training", "case_train_l2_model_reads.py")

STUCK_BASELINE = '''
from meshtest.platforms import torch_gloo
from meshtest.platforms.backend import TrainContext


class StuckAtFirstMicroBatch(TrainContext):
    def __setattr__(self, name, value):
        object.__setattr__(self, name, 0 if name == "micro" else value)


real = torch_gloo.TorchGlooBackend._train_step


def baseline_stuck(self, case, model, opt, sched, named, step, ctx, custom, parallel, light=False):
    if not parallel:
        ctx.__class__ = StuckAtFirstMicroBatch
    return real(self, case, model, opt, sched, named, step, ctx, custom, parallel, light)


torch_gloo.TorchGlooBackend._train_step = baseline_stuck
'''


def _run(tmp_path, fault: bool) -> dict:
    out = tmp_path / ("fault" if fault else "plain")
    path = [SRC_ROOT, REPO]
    if fault:
        (tmp_path / "site").mkdir(exist_ok=True)
        (tmp_path / "site" / "sitecustomize.py").write_text(STUCK_BASELINE)
        path.insert(0, str(tmp_path / "site"))
    proc = subprocess.run([sys.executable, "-m", "meshtest", "run", FILE, "--tag", "cpu_level1", "--artifacts-dir",
                           str(out), "--slot-dir", str(tmp_path / "slots"), "-q"], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}, timeout=300)
    lines = (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").exists() else []
    found = {json.loads(line)["case"]: json.loads(line) for line in lines}
    assert set(found) == {"fsdp2_aux_loss_on_a_submodule", "fsdp2_parameter_used_on_the_last_micro_batch"}, (
        proc.stdout[-3000:] + proc.stderr[-3000:])
    return found


def test_a_loss_that_reads_the_model_and_a_model_that_reads_the_micro_batch(tmp_path):
    plain = _run(tmp_path, fault=False)
    assert {c: o["status"] for c, o in plain.items()} == {"fsdp2_aux_loss_on_a_submodule": "pass",
                                                         "fsdp2_parameter_used_on_the_last_micro_batch": "pass"}
    stuck = _run(tmp_path, fault=True)
    assert stuck["fsdp2_aux_loss_on_a_submodule"]["status"] == "pass"  # one micro-batch: nothing to get wrong
    late = stuck["fsdp2_parameter_used_on_the_last_micro_batch"]
    assert late["status"] == "fail", late
    first = late["failures"][0]
    assert first["step"] == "compare" and first["error"].startswith("step 0 loss:"), first


def test_a_compute_and_comms_pipeline_table_runs_as_written_and_trains_like_the_baseline(tmp_path):
    """``Pipeline(actions=...)`` with sends and receives (issue 43, item 2): stage 1 runs both
    backwards before its first ``SEND_B``; torch runs the table as written (its ``compute_comms``
    format) and the stages' gradients and the last stage's loss equal the baseline's."""
    out = tmp_path / "out"
    pipeline = os.path.join("cases", "torch", "training", "case_train_l2_pipeline.py")
    proc = subprocess.run([sys.executable, "-m", "meshtest", "run", pipeline, "--tag", "cpu_level1", "--case",
                           "train_pp_comms_table_backward_before_send", "--artifacts-dir", str(out), "--slot-dir",
                           str(tmp_path / "slots"), "-q"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([SRC_ROOT, REPO])}, timeout=300)
    (line,) = (out / "results.jsonl").read_text().splitlines()
    result = json.loads(line)
    assert result["status"] == "pass", proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "golden curve: 2 step(s) from step 0 equal to" in result["detail"], result
