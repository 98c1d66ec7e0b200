"""Training cases (the training quality net): the declaration rules, the static scan's cap:/layer: tags, the
step-by-step comparison, the coverage matrix, and — end to end on torch — capabilities broken on
purpose caught with a message naming the step, the quantity and the parameter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import meshtest
from meshtest import CaseDeclarationError, Pipeline, Shard, TrainCase
from meshtest.model.scan import scan_case_source
from meshtest.model.train import Stability, placements_for
from meshtest.platforms.ports import TrainSnapshot
from meshtest.rank.compare import CompareError
from meshtest.rank.train import compare_runs
from meshtest.report.coverage import coverage, format_coverage
from meshtest.status import Status

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)


def _split(model, stage, num_stages):
    return model


def _case(**kw):
    base = dict(name="t", model=lambda api: None, data=lambda i, api: None, loss=lambda o, t: None, mesh_shape=(2,),
                mesh_dim_names=("dp",), tags=("cpu_level0",), capabilities=("fsdp",), layer=2)
    base.update(kw)
    return TrainCase(**base).validated("f.py")


@pytest.mark.parametrize("kw,rule,words", [
    (dict(steps=0), "train", "steps must be an integer >= 1"),
    (dict(batch_split="tp"), "train", "batch_split 'tp' is not one of the mesh axis names ('dp',)"),
    (dict(capabilities=("hsdp",)), "capability", "unknown capability domain(s) ['hsdp']"),
    (dict(layer=5), "layer", "layer must be one of (0, 1, 2, 3, 4)"),
    (dict(clip_grad_norm=0), "train", "clip_grad_norm must be a number > 0"),
    (dict(loss=3), "train", "loss must be callable"),
    (dict(loss=lambda out: out), "loss", "loss must be loss(output, target) or loss(output, target, model): it "
                                          "requires 1 positional parameter(s)"),
    (dict(model=lambda api, ctx, extra: None), "model", "model must be model(api) or model(api, ctx): it requires 3"),
    (dict(loss=lambda out, target, model: out, pipeline=Pipeline(_split), requires=("pipelining",)), "loss",
     "loss(output, target, model) is not for a pipeline case"),
    (dict(expect_raises=(ValueError, "x", "gather")), "expect-raises",
     "the step of expect_raises must be one of ('baseline', 'parallel', 'compare', 'golden')"),
    (dict(expect_raises=(ValueError, "x"), steps=4, stability=Stability(warmup=1, rss_growth_mb=8.0)),
     "expect-raises", "not with phases= or stability="),
    (dict(expect_raises=("ValueError", "x")), "expect-raises", "'ValueError' is not an exception class"),
    (dict(pipeline=_split), "pipeline", "pipeline must be Pipeline(...)"),
    (dict(pipeline=Pipeline(_split), requires=("pipelining",), train_step=lambda *a: None), "pipeline",
     "pipeline and train_step exclude each other"),
    (dict(pipeline=Pipeline(_split)), "pipeline", "add requires=('pipelining',)"),
    (dict(pipeline=Pipeline(_split, "Zigzag"), requires=("pipelining",)), "pipeline", "schedule 'Zigzag' unknown"),
    (dict(pipeline=Pipeline(_split, "1F1B", stages_per_rank=2), requires=("pipelining",)), "pipeline",
     "runs one stage per rank"),
    (dict(pipeline=Pipeline(_split, "ZBVZeroBubble", stages_per_rank=3), requires=("pipelining",)), "pipeline",
     "stages_per_rank must be 2"),
    (dict(pipeline=Pipeline(_split, "GPipe", microbatches=0), requires=("pipelining",)), "pipeline",
     "microbatches must be an integer >= 1"),
    (dict(pipeline=Pipeline(_split, "GPipe", axis="pp"), requires=("pipelining",)), "pipeline",
     "axis 'pp' is not one of the mesh axis names ('dp',)"),
    (dict(pipeline=Pipeline(_split, "actions"), requires=("pipelining",)), "pipeline",
     'Pipeline.actions and schedule="actions" go together'),
    (dict(pipeline=Pipeline(_split, "actions", actions={0: "0F0 0B0"}), requires=("pipelining",)), "pipeline",
     "must map every pipeline rank 0..1"),
    (dict(pipeline=Pipeline(_split, "actions", actions={0: "0F0 0SEND_X0", 1: "1F0 1B0"}), requires=("pipelining",)),
     "pipeline", "compute actions '<stage><F|B|I|W><micro>'"),
    (dict(pipeline=Pipeline(_split, "actions", actions={0: "0F0 0B0", 1: "2F0 2B0"}), requires=("pipelining",)),
     "pipeline", "names stage(s) [2]; there are 2"),
    (dict(pipeline=Pipeline(_split, "actions", actions={0: "0F0 0SEND_F0 0B0", 1: "1F0 1B0 1SEND_B0"}),
          requires=("pipelining",)), "pipeline", "sends 0SEND_F0 but the rank of stage 1 posts no 1RECV_F0"),
    (dict(pipeline=Pipeline(_split, "actions", actions={0: "0F0 0SEND_F0 0RECV_B0 0B0",
                                                        1: "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1"}),
          requires=("pipelining",)), "pipeline", "receives 1RECV_F1 but no rank runs 0SEND_F1"),
    (dict(pipeline=Pipeline(_split, "actions", actions={0: "0F0 0SEND_F0 0RECV_B0 0B0",
                                                        1: "1RECV_F0 1F0 1SEND_B0 1B0"}),
          requires=("pipelining",)), "pipeline", "runs 1SEND_B0 before 1B|I0, which makes what it sends"),
    (dict(pipeline=Pipeline(_split, "actions", actions={0: "0F0 0SEND_F0 0B0 0RECV_B0",
                                                        1: "1RECV_F0 1F0 1B0 1SEND_B0"}),
          requires=("pipelining",)), "pipeline", "runs 0RECV_B0 with no 0B|I0 after it"),
    (dict(grad_sync="never"), "grad-sync", "grad_sync must be one of ('every', 'last')"),
    (dict(grad_sync="last"), "grad-sync", "it needs grad_accum >= 2"),
    (dict(checkpoint="zip"), "checkpoint", "checkpoint must be one of ('dcp', 'full', 'full_broadcast')"),
    (dict(checkpoint="full"), "checkpoint", "add phases=(Phase(...),)"),
    (dict(param_placements={"*.weight": (Shard(0), Shard(0))}), "param-placements",
     "one placement per mesh dimension (mesh_shape (2,))"),
    (dict(param_placements={}), "param-placements", "must be a non-empty"),
])
def test_train_declaration_rules(kw, rule, words):
    with pytest.raises(CaseDeclarationError) as e:
        _case(**kw)
    assert f"rule {rule}" in str(e.value) and words in str(e.value)


def test_the_forms_of_model_and_loss_are_told_by_their_required_parameters():
    import torch.nn.functional as F

    plain = _case()
    assert not plain.model_takes_context and not plain.loss_takes_model
    both = _case(model=lambda api, ctx: None, loss=lambda out, target, model: None)
    assert both.model_takes_context and both.loss_takes_model
    # a third positional parameter with a default (F.mse_loss's size_average) is never filled
    assert not _case(loss=F.mse_loss).loss_takes_model


def test_declared_plans_normalise_and_place_stages():
    case = _case(param_placements={"*.weight": (Shard(0),), "head.*": (Shard(1),)}, grad_sync="last", grad_accum=2)
    assert case.param_placements == (("*.weight", (Shard(0),)), ("head.*", (Shard(1),)))
    assert placements_for(case.param_placements, "head.weight") == (Shard(0),)  # the first pattern wins
    assert placements_for(case.param_placements, "head.bias") == (Shard(1),)
    assert placements_for(case.param_placements, "blocks.0.bias") is None  # replicated
    loop = Pipeline(_split, "Interleaved1F1B", stages_per_rank=2)
    assert [loop.stages_of(r, 2) for r in (0, 1)] == [(0, 2), (1, 3)]
    v = Pipeline(_split, "ZBVZeroBubble", stages_per_rank=2)
    assert [v.stages_of(r, 2) for r in (0, 1)] == [(0, 3), (1, 2)]
    table = _case(pipeline=Pipeline(_split, "actions", actions={1: "1F0 1B0", 0: "0F0 0B0"}),
                  requires=("pipelining",)).pipeline
    assert table.actions == ((0, "0F0 0B0"), (1, "1F0 1B0")) and table.stages_of(1, 2) == (1,)


def test_scan_tags_training_targets_by_capability_and_layer():
    src = ('register(TrainCase(name="t", model=m, data=d, loss=l, mesh_shape=(2,), mesh_dim_names=("dp",),\n'
           '                   tags=("cpu_level0",), capabilities=("fsdp", "clip_grad"), layer=2))\n')
    scan = scan_case_source("cases/x.py", src)
    assert scan.error is None
    assert scan.target_tags() == ("cap:clip_grad", "cap:fsdp", "cpu_level0", "layer:2", "mesh:2")
    (c,) = scan.cases
    assert (c.kind, c.needs_mesh) == ("train", True)


def _snap(loss=1.0, w=(1.0, 2.0), partial=False):
    arr = np.array(w, dtype=np.float32)
    return TrainSnapshot(np.array(loss, dtype=np.float32), None, {"w1.weight": arr}, {"w1.weight": arr}, {},
                         partial=partial)


def test_compare_names_the_step_quantity_and_parameter():
    case = _case()
    compare_runs(case, [_snap(), _snap()], [_snap(), _snap()])
    with pytest.raises(CompareError) as e:
        compare_runs(case, [_snap(), _snap()], [_snap(), _snap(w=(1.0, 2.5))])
    assert str(e.value).startswith("step 1 grads w1.weight: 1 of 2 elements outside")
    with pytest.raises(CompareError, match="step 0 loss"):
        compare_runs(case, [_snap()], [_snap(loss=1.1)])
    missing = TrainSnapshot(None, None, {}, {}, {})
    with pytest.raises(CompareError, match="step 0 loss: the baseline has one, the parallel run none"):
        compare_runs(case, [_snap()], [missing])
    # a pipeline stage holds part of the model: the parameters it holds, the loss where computed
    stage = TrainSnapshot(None, None, {"w1.weight": np.float32([1, 2])}, {"w1.weight": np.float32([1, 2])}, {},
                          partial=True)
    compare_runs(case, [_snap()], [stage])


def test_coverage_matrix_reports_gaps():
    src = ('register(ScenarioCase(name="g", fn=f, mesh_shape=(1,), tags=("cpu_level0",), capabilities=("ac",),\n'
           '                      layer=1, requires=("checkpoint",)))\n')
    cov = coverage({"ac": "activation checkpoint", "pp": "pipeline"}, [scan_case_source("x.py", src)])
    assert cov.gaps == [("ac", 2), ("pp", 1), ("pp", 2)] and not cov.ok
    text = "\n".join(format_coverage(cov))
    assert "coverage judged from: declared" in text and "MISSING: domain pp has no layer-1 case" in text


def test_a_cell_is_covered_only_by_what_runs_on_the_platform_or_passed():
    src = ('register(ScenarioCase(name="g", fn=f, mesh_shape=(1,), tags=("cpu_level0",), capabilities=("cp",),\n'
           '                      layer=1, requires=("context_parallel",)))\n'
           'register(ScenarioCase(name="h", fn=f, mesh_shape=(1,), tags=("cpu_level0",), capabilities=("cp",),\n'
           '                      layer=2))\n')
    scans, domains = [scan_case_source("x.py", src)], {"cp": "context parallel"}
    cov = coverage(domains, scans, features={"dtensor"}, platform="torch")
    assert (cov.state("cp", 1), cov.state("cp", 2)) == ("unsupported", "covered") and cov.ok
    text = "\n".join(format_coverage(cov))
    assert "unsupported: cp layer 1: missing context_parallel" in text and "1 of 2 cells covered" in text
    cov = coverage(domains, scans, results={"x.py::g": Status.PASS, "x.py::h": Status.FAIL})
    assert (cov.state("cp", 1), cov.state("cp", 2)) == ("covered", "failing") and cov.gaps == [("cp", 2)]
    cov = coverage(domains, scans, results={"x.py::g": Status.UNSUPPORTED})
    assert (cov.state("cp", 1), cov.state("cp", 2)) == ("unsupported", "not run")


BROKEN = '''
from cases.torch.training.models import mlp, mse, regression
from meshtest import ScenarioCase, TrainCase, register


def data_parallel_without_sync(model, ctx):
    """Splits the batch over dp but never averages the gradients: the missing all-reduce."""
    return model


def tp_with_a_forgotten_output_reduce(model, ctx):
    """Rowwise w2 whose partial output is handed on as if it were whole (no all-reduce)."""
    api = ctx.api
    model = api.parallelize_module(model, ctx.mesh, {"w1": api.ColwiseParallel(), "w2": api.RowwiseParallel()})
    inner = model.w2.forward
    model.w2.forward = lambda x: api.DTensor.from_local(inner(x).to_local(), ctx.mesh, [api.Replicate()])
    return model


def hook_on_forward_instead_of_call(ctx):
    """A capability that hangs its layout injection on forward() itself, not on __call__'s hooks."""
    api = ctx.api
    model, seen = mlp(api), []
    original = model.w1.forward
    model.w1.forward = lambda x: (seen.append("injected"), original(x))[1]
    model.w1.register_forward_pre_hook(lambda m, args: seen.append("pre-hook"))
    model(api.torch.randn(2, 16))
    assert seen == ["pre-hook"], f"layout injection ran as {seen}; it must run through __call__'s hooks"


register(TrainCase(name="broken_dp_without_grad_sync", model=mlp, data=regression, loss=mse,
                   parallelize=data_parallel_without_sync, batch_split="dp", mesh_shape=(2,), mesh_dim_names=("dp",),
                   tags=("cpu_level0",), capabilities=("fsdp",), layer=2))
register(TrainCase(name="broken_tp_forgotten_reduce", model=mlp, data=regression, loss=mse,
                   parallelize=tp_with_a_forgotten_output_reduce, mesh_shape=(2,), mesh_dim_names=("tp",),
                   tags=("cpu_level0",), capabilities=("tp",), layer=2))
register(ScenarioCase(name="broken_hook_on_forward", fn=hook_on_forward_instead_of_call, mesh_shape=(1,),
                      tags=("cpu_level0",), capabilities=("shard",), layer=1))
'''


def test_broken_capabilities_are_caught_naming_step_quantity_and_parameter(tmp_path):
    path = tmp_path / "case_broken_training.py"
    path.write_text(BROKEN)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", str(path), "--artifacts-dir", str(out),
                           "--slot-dir", str(tmp_path / "slots")], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([SRC_ROOT, REPO])}, timeout=300)
    results = {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    text = proc.stdout + proc.stderr
    assert {k: v["status"] for k, v in results.items()} == {
        "broken_dp_without_grad_sync": "fail", "broken_tp_forgotten_reduce": "fail", "broken_hook_on_forward": "fail",
    }, text
    dp = results["broken_dp_without_grad_sync"]["failures"][0]
    assert dp["step"] == "compare" and dp["error"].startswith("step 0 grads w1.bias:"), dp
    assert "max abs diff" in dp["error"]
    tp = results["broken_tp_forgotten_reduce"]["failures"][0]
    assert tp["step"] == "compare" and tp["error"].startswith("step 0 loss:"), tp
    hook = results["broken_hook_on_forward"]["failures"][0]
    assert "layout injection ran as ['pre-hook', 'injected']" in hook["error"]


def test_every_seed001_domain_has_mechanism_and_single_capability_cases():
    """The capability table of cases/torch/training: every capability domain of the training net (minus HSDP and
    torch.compile) has a layer-1 and a layer-2 case (python -m meshtest coverage)."""
    from meshtest.model.scan import scan_case_file
    from meshtest.platforms.torch.gloo import TorchGlooBackend
    from meshtest.report.coverage import read_domains

    root = os.path.join(REPO, "cases", "torch", "training")
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.startswith("case_") and f.endswith(".py"))
    scans = [scan_case_file(f) for f in files]
    assert not [s.error for s in scans if s.error]
    cov = coverage(read_domains(os.path.join(root, "seed001_domains.txt")), scans,
                   features=TorchGlooBackend().features(), platform="torch")
    assert cov.ok, "\n".join(format_coverage(cov))
    # the honest matrix on torch 2.13 / CPU: these cells hold only cases that need a feature the
    # platform lacks (context_parallel, symmetric_memory, dtensor_rng), so they are not covered here
    assert cov.cells_in("unsupported") == [("cp", 2), ("symm_mem", 1), ("symm_mem", 2), ("rng", 2)], \
        "\n".join(format_coverage(cov))
    assert len(cov.cells_in("covered")) == 30
    assert len(cov.domains) == 17 and "hsdp" not in cov.domains
    # layers 3 and 4 of the training net: the table's eleven combinations touch these domains,
    # and long runs or resumes exist for every domain but DTensor random ops
    combined = {d for d in cov.domains if cov.cells.get((d, 3))}
    assert {"shard", "tp", "fsdp", "pp", "cp", "ac", "swap", "dcp", "resume", "clip_grad", "init"} <= combined
    long_run = {d for d in cov.domains if cov.cells.get((d, 4))}
    assert set(cov.domains) - long_run == {"rng"}, long_run


CASE_LINES = Path(os.path.abspath(__file__)).parents[2] / "tools" / "case_lines.py"


def test_case_lines_counts_the_declaration_and_the_functions_it_names(tmp_path):
    """tools/case_lines.py: a case's size is its register(...) statement plus the same-file
    functions it names, also through a factory call; other kinds and layers are left out."""
    path = tmp_path / "case_sizes.py"
    path.write_text('''
def par(model, ctx):
    return model


def factory(name):
    def apply(model, ctx):
        return model
    return apply


register(TrainCase(name="a", model=mlp, parallelize=par, layer=2,
                   tags=("cpu_level0",)))
register(TrainCase(name="b", model=mlp, parallelize=factory("x"), layer=2, tags=("cpu_level0",)))
register(TrainCase(name="c", model=mlp, parallelize=par, layer=1, tags=("cpu_level0",)))
register(ScenarioCase(name="d", fn=par, layer=2, tags=("cpu_level0",)))
''')
    out = subprocess.run([sys.executable, str(CASE_LINES), "--layer", "2", str(path)], capture_output=True,
                         text=True, check=True).stdout
    sizes = {line.split()[1]: int(line.split()[0]) for line in out.splitlines() if line.startswith("  ")}
    assert sizes == {"a": 2 + 2, "b": 1 + 4}, out
    assert "2 TrainCase case(s); median 4.5 lines, max 5" in out, out


def test_case_lines_counts_an_imported_capability_but_not_the_shared_model(tmp_path):
    """The capability under test (parallelize=, train_step=, also inside a Phase) counts wherever
    it is defined; the shared model builder imported from the same helper module does not."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "plans.py").write_text("def shard(model, ctx):\n    x = 1\n    return model\n\n\n"
                                               "def build(api):\n    return api\n")
    path = tmp_path / "case_imported.py"
    path.write_text(
        "from pkg.plans import build, shard\n"
        'register(TrainCase(name="a", model=build, parallelize=shard, layer=2, tags=("cpu_level0",)))\n'
        'register(TrainCase(name="b", model=build, phases=(Phase(steps=1, parallelize=shard),), layer=2,\n'
        '                   tags=("cpu_level0",)))\n')
    out = subprocess.run([sys.executable, str(CASE_LINES), "--layer", "2", str(path)], capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout
    sizes = {line.split()[1]: int(line.split()[0]) for line in out.splitlines() if line.startswith("  ")}
    assert sizes == {"a": 1 + 3, "b": 2 + 3}, out
