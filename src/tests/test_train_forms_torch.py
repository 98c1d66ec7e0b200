"""The two training-case forms that read more than the batch, on real ranks (issue 43, item 4):
``loss(output, target, model)`` and ``model(api, ctx)``, through the corpus's own cases
(``cases/torch/training/case_train_l2_model_reads.py``, 2 ranks, ~10 s). Both pass. The canary:
a baseline whose context stays at micro-batch 0 (its model never adds the ``late`` layer, the
parallel model does on the last micro-batch) fails at ``compare`` from step 0's loss on — the
parallel and baseline models must read the same ``ctx.micro``."""
from __future__ import annotations

import os

import meshtest
from tests.helpers import run_with_site

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)
FILE = os.path.join("cases", "torch", "training", "case_train_l2_model_reads.py")

STUCK_BASELINE = '''
from meshtest.platforms.ports import TrainContext
from meshtest.platforms.torch import training


class StuckAtFirstMicroBatch(TrainContext):
    def __setattr__(self, name, value):
        object.__setattr__(self, name, 0 if name == "micro" else value)


real = training.train_step


def baseline_stuck(backend, case, model, opt, sched, named, step, ctx, custom, parallel, light=False):
    if not parallel:
        ctx.__class__ = StuckAtFirstMicroBatch
    return real(backend, case, model, opt, sched, named, step, ctx, custom, parallel, light)


training.train_step = baseline_stuck
'''


def _run(tmp_path, fault: bool) -> dict:
    found, told = run_with_site(tmp_path, [FILE, "--tag", "cpu_level1"], "fault" if fault else "plain",
                                STUCK_BASELINE if fault else "", extra_path=(REPO,))
    assert set(found) == {"fsdp2_aux_loss_on_a_submodule", "fsdp2_parameter_used_on_the_last_micro_batch"}, told
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
    pipeline = os.path.join("cases", "torch", "training", "case_train_l2_pipeline.py")
    found, told = run_with_site(tmp_path, [pipeline, "--tag", "cpu_level1", "--case",
                                           "train_pp_comms_table_backward_before_send"], "comms", extra_path=(REPO,))
    result = found["train_pp_comms_table_backward_before_send"]
    assert result["status"] == "pass", told
    assert "golden curve: 2 step(s) from step 0 equal to" in result["detail"], result
