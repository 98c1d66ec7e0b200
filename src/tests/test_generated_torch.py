"""The generated cases on torch: the committed manifests are what the generator writes for the
locked torch (every landing: the incremental check; nightly: the whole regeneration), a drifted
sample fails naming the command that regenerates, a sample is named alike on another CPU, and a
Partial input's per-rank parts are distinct and assemble to the sample."""
from __future__ import annotations

import io
import json
import os
import shutil

import numpy as np
import pytest

import meshtest
from meshtest.model.generated import OPINFO_DIR, manifest_text
from meshtest.model.local_input import assemble
from meshtest.model.placement import Partial, Shard
from meshtest.platforms.torch.opinfo import cases as opinfo_cases
from meshtest.platforms.torch.opinfo import manifest as opinfo_manifest
from meshtest.platforms.torch.opinfo import samples as opinfo_samples
from meshtest.strength.generate import COMMAND, check_incremental, differences, manifests
from meshtest.strength.triage import load_known
from tests.helpers import nightly

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
COMMITTED = os.path.join(REPO, OPINFO_DIR)


def _entries(manifest="manifest_pointwise.json"):
    with open(os.path.join(COMMITTED, manifest), encoding="utf-8") as f:
        return json.load(f)["cases"]


def _check(directory):
    out = io.StringIO()
    return check_incremental(str(directory), out), out.getvalue()


def test_the_committed_manifests_pass_the_landing_check_and_each_kind_of_drift_is_named(tmp_path):
    """``generate opinfo --check`` (every landing): the committed files pass; in a copy, a
    family whose samples changed is regenerated and named, and so are an entry edited by hand, a
    triage table edited without regenerating, and another generator source (named without
    regenerating anything)."""
    code, text = _check(COMMITTED)
    assert code == 0, text
    assert "changed: none" in text

    def copy(name):
        target = tmp_path / name
        shutil.copytree(COMMITTED, target)
        return target

    def edit(path, change):
        doc = json.loads(path.read_text())
        change(doc)
        path.write_text(manifest_text(doc) if path.name.startswith("manifest_") else json.dumps(doc))

    # samples: the smallest family (one OpInfo) recorded with other samples is regenerated
    samples = copy("samples")
    edit(samples / "manifest_embedding.json", lambda d: d["produced_by"].update(samples="0" * 16))
    code, text = _check(samples)
    assert code == 1 and "changed: embedding" in text, text
    assert "manifest_embedding.json: its family's samples changed" in text
    assert "manifest_embedding_level1_0.json" not in text and "manifest_view.json" not in text, text
    # an entry edited by hand, its digest left as it was
    by_hand = copy("by_hand")
    edit(by_hand / "manifest_view.json", lambda d: d["cases"][0].update(mesh_shape=[3]))
    code, text = _check(by_hand)
    assert code == 1 and "manifest_view.json: its entries are not the ones the generator wrote" in text, text
    # a triage rule dropped without regenerating: its cases keep a mark nothing gives them now
    table = copy("table")
    rules = json.loads((table / "known_failures.json").read_text())
    marked = next(r for r in rules if "known_failure" in r)["names"][0]
    (table / "known_failures.json").write_text(json.dumps([r for r in rules if marked not in r["names"]]))
    code, text = _check(table)
    assert code == 1 and "known_failures.json or signatures.json marks its entries otherwise now" in text, text
    # another generator source: nothing is regenerated, the command is named
    source = copy("source")
    edit(source / "manifest_math.json", lambda d: d["produced_by"].update(generator="f" * 16))
    code, text = _check(source)
    assert code == 1 and "manifest_math.json: written by another generator source" in text, text
    assert "run it and commit the result" in text and COMMAND in text


@nightly  # regenerates all 41,285 cases (~2.5 min on 2 cores); every landing runs the incremental check above
def test_the_whole_regeneration_equals_the_committed_manifests_and_a_stale_file_is_named(tmp_path):
    files = manifests(known=load_known(os.path.join(COMMITTED, "known_failures.json")))
    assert differences(COMMITTED, files) == ([], []), f"run: {COMMAND}, and commit"
    # the check itself: a copy with one entry changed and one file too many
    copy = tmp_path / "opinfo"
    shutil.copytree(COMMITTED, copy)
    doc = json.loads((copy / "manifest_view.json").read_text())
    doc["cases"][0]["mesh_shape"] = [3]
    (copy / "manifest_view.json").write_text(json.dumps(doc))
    (copy / "manifest_gone.json").write_text("{}")
    assert differences(str(copy), files) == (["manifest_view.json"], ["manifest_gone.json"])


def test_a_sample_that_drifted_from_the_manifest_names_the_command_that_regenerates():
    entry = dict(_entries()[0])
    entry["sig"] = "float32[9]|00000000|00000000"
    with pytest.raises(RuntimeError, match="regenerate with python -m meshtest generate opinfo"):
        opinfo_cases.sample_of(entry)


def test_a_sample_signature_ignores_the_last_bits_of_floats_and_names_everything_else():
    """Another CPU computes a sample's floats differently in the last bits (``ctc_loss``'s
    ``log_softmax``, the linalg factorizations): the signature, and so the sample's index and the
    case names, must not move with them; a shape, an integer tensor or an argument must."""
    import torch
    from torch.testing._internal.opinfo.core import SampleInput

    x, idx = torch.randn(4, 3), torch.tensor([2, 0, 1])
    base = opinfo_samples.signature(SampleInput(x, args=(idx,), kwargs={"dim": 1}))
    nudged = torch.nextafter(x, torch.full_like(x, float("inf")))  # one ulp up, every element
    assert opinfo_samples.signature(SampleInput(nudged, args=(idx,), kwargs={"dim": 1})) == base
    assert opinfo_samples.signature(SampleInput(x[:3], args=(idx,), kwargs={"dim": 1})) != base
    assert opinfo_samples.signature(SampleInput(x, args=(idx.flip(0),), kwargs={"dim": 1})) != base
    assert opinfo_samples.signature(SampleInput(x, args=(idx,), kwargs={"dim": 0})) != base


def test_samples_are_named_alike_under_another_cpu_instruction_set():
    """The samples whose floats differ between AVX2 and AVX-512 (measured: linalg.inv's sample 4,
    cholesky_solve's sample 6) keep their signatures and order in a process that runs torch's
    AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``; on a machine without AVX-512 both are AVX2)."""
    import subprocess
    import sys

    ops = [("linalg.inv", "float32"), ("cholesky_solve", "float32"), ("nn.functional.ctc_loss", "float32")]
    script = ("import json,sys; from meshtest.platforms.torch.opinfo import samples as t; "
              f"print(json.dumps([[t.signature(s) for s in t.samples(k, d)] for k, d in {ops!r}]))")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    there = json.loads(out.stdout.strip().splitlines()[-1])
    here = [[opinfo_samples.signature(s) for s in opinfo_samples.samples(k, d)] for k, d in ops]
    assert there == here


def test_random_is_told_by_the_seed_and_by_filled_memory_never_by_the_last_bits():
    """A sample's values are not compared place for place when two seeds give different results
    (``random``) or uninitialised memory shows (``uninitialised``): a deterministic kernel that
    rounds differently in the last bits from call to call (a matmul's blocking follows buffer
    alignment) gave ``__rmatmul__``, ``linalg.cond`` ``random`` in one process and not in the
    next, so the committed manifests failed their regeneration check on CI; ``new_empty`` must
    be uninitialised (not random) when two calls happen to find the same garbage, or other
    garbage."""
    import torch

    a = torch.randn(16, 16)
    assert opinfo_manifest._close(a, torch.nextafter(a, torch.full_like(a, float("inf"))))
    assert not opinfo_manifest._close(a, a * 1.001) and not opinfo_manifest._close(a, a[:8])
    for key, expect in (("new_empty", "uninitialised"), ("empty_like", "uninitialised"), ("__rmatmul__", ""),
                        ("linalg.cond", ""), ("linalg.svdvals", ""), ("norm.nuc", "")):
        op = opinfo_samples.opinfos()[key]
        seen = []
        for i, s in enumerate(opinfo_samples.samples(key, "float32")):
            out = opinfo_samples.call(op, s, opinfo_samples.tensors_of(s))
            if isinstance(out, torch.Tensor) and out.numel():
                for _ in range(3):  # the garbage, the rounding: the verdict must not change with the try
                    facts, why = opinfo_manifest.sample_facts(op, key, "float32", i, s, {})
                    if facts is not None:  # else a sample the generator leaves out (``why``)
                        seen.append("random" if facts.random else "uninitialised" if facts.uninitialised else "")
        assert seen and set(seen) == {expect}, (key, seen)


def test_a_self_seeding_op_is_random_and_its_case_is_unsupported_on_a_cpu_mesh(tmp_path):
    """Issue 38, item 2: OpInfo wraps random ops in ``wrapper_set_seed``, which reseeds inside the
    call, so "do two seeds differ?" asked from outside saw the same values twice and called
    ``nn.functional.dropout`` deterministic (its cases were compared with one single-device draw
    and marked as a torch bug). The generator now bypasses the wrapper for that question; a
    random case runs the op on DTensors, then is ``unsupported``, naming torch's own probe
    (``is_rng_supported_mesh``: no DTensor RNG on a CPU mesh)."""
    import subprocess
    import sys

    op = opinfo_samples.opinfos()["nn.functional.dropout"]
    assert opinfo_samples.seeds_itself(op) and not opinfo_samples.seeds_itself(opinfo_samples.opinfos()["add"])
    sample = next(s for s in opinfo_samples.samples("nn.functional.dropout", "float32")
                  if s.kwargs.get("p", 0.5) not in (0.0, 1.0) and s.kwargs.get("training", True))
    index = opinfo_samples.samples("nn.functional.dropout", "float32").index(sample)
    facts, why = opinfo_manifest.sample_facts(op, "nn.functional.dropout", "float32", index, sample, {})
    assert facts is not None and facts.random, why
    out = tmp_path / "run"
    name = "bernoulli.float32.s1.m2x2.S1Pmax"  # a level-0 case of a random op
    subprocess.run([sys.executable, "-m", "meshtest", "run", os.path.join(COMMITTED, "case_opinfo_random.py"),
                    "--tag", "cpu_local", "--case", name, "--artifacts-dir", str(out), "--slot-dir",
                    str(tmp_path / "slots"), "-q"], env={**os.environ, "PYTHONPATH": os.path.join(REPO, "src")},
                   timeout=240,
                   capture_output=True, text=True)
    found = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(o["case"], o["status"]) for o in found] == [(name, "unsupported")]
    assert "is_rng_supported_mesh" in found[0]["failures"][0]["error"]


def test_a_random_case_is_judged_as_a_draw_and_uninitialised_memory_by_shape():
    """Issue 38, item 2, where DTensor has an RNG: a random op's case compares its output as a
    draw (``random_draw``: the reference's distribution, shards that differ where the
    reference's do, from the inputs' ``Shard`` placements), not place for place. An op that
    returns uninitialised memory (``new_empty``: its two seeded runs agree once memory is
    filled) is not random: it runs on a CPU mesh, compared by shape and dtype only."""
    for key, random_, uninitialised in (("nn.functional.dropout", True, False), ("new_empty", False, True)):
        op = opinfo_samples.opinfos()[key]
        drawn = opinfo_samples.samples(key, "float32")
        found = [opinfo_manifest.sample_facts(op, key, "float32", i, s, {})[0] for i, s in enumerate(drawn)
                 if s.kwargs.get("p", 0.5) not in (0.0, 1.0) and s.kwargs.get("training", True)]
        found = [f for f in found if f is not None]
        assert {f.random for f in found} == {random_}, key  # new_empty: an empty output is neither
        assert (random_, uninitialised) in {(f.random, f.uninitialised) for f in found}, key
    entries = [e for e in _entries("manifest_pointwise_level1_4.json") + _entries("manifest_tensor.json")
               if e["op"] in ("nn.functional.dropout", "new_empty")]
    dropout = next(e for e in entries if e["op"] == "nn.functional.dropout" and "S(0)" in e["placements"][0])
    compare = opinfo_cases.materialize(dropout, {}).compare
    assert compare.kind == "check" and "Kolmogorov" in compare.reason
    assert "shards=[(0, " in compare.fn.__name__
    empty = next(e for e in entries if e["op"] == "new_empty")
    assert empty["uninitialised"] and not empty["random"]
    assert opinfo_cases.materialize(empty, {}).compare.kind == "shape"


def test_a_degenerate_reference_is_weak_and_goes_after_the_samples_that_can_tell():
    """``weak_reference`` from its documented cases (issue 38, item 6): no element, every element
    0 or within float32's atol (1e-5) of 0, every float element NaN/Inf, a mix of those; one
    element that tells is enough. And the generator draws another sample first: ``zeros_like``
    has no sample that tells (its cases are weak), ``argmin``'s first level-1 samples are not."""
    import torch

    weak = opinfo_manifest.weak_reference
    assert weak([torch.empty(0, 3)]) == "empty output"
    assert weak([torch.zeros(3), torch.full((2,), 5e-6)]) == "all-zero reference"
    assert weak([torch.zeros(2, dtype=torch.bool)]) == "all-zero reference"
    assert weak([torch.tensor([float("nan"), float("inf")])]) == "non-finite reference"
    assert weak([torch.tensor([0.0, float("nan")])]) == "zero or non-finite reference"
    assert weak([torch.tensor([0.0, 1e-3])]) == "" and weak([torch.zeros(2), torch.tensor([1])]) == ""
    found = opinfo_manifest.discover({**opinfo_cases._rules()}, only=["zeros_like", "argmin"])
    assert all(f.weak for f in found.ops["zeros_like"]["float32"])
    first = found.ops["argmin"]["float32"]
    assert not any(f.weak for f in first[:opinfo_manifest.LEVEL1_SAMPLES]) and any(f.weak for f in first)


@pytest.mark.parametrize("op", ["sum", "avg", "max", "min"])
def test_partial_parts_are_distinct_per_rank_and_assemble_to_the_sample(op):
    entry = next(e for e in _entries() if e["dtypes"][0] == "float32" and e["shapes"][0])
    entry = {**entry, "name": f"t.{op}", "mesh_shape": [2, 2], "placements": [["S(0)", f"P({op})"]]
             + [["R", "R"]] * (len(entry["shapes"]) - 1)}
    spec = opinfo_cases.materialize(entry, {}).inputs[0]
    whole, locals_ = assemble(spec, (2, 2), (Shard(0), Partial(op)), np.dtype("float32"))
    value = opinfo_samples._numpy(opinfo_samples.tensors_of(opinfo_cases.sample_of(entry))[0])
    np.testing.assert_allclose(whole, value, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(locals_[(0, 0)], locals_[(0, 1)])  # the two ranks of a Partial hold different parts


def test_a_case_moved_to_float64_passes_and_a_wrong_rule_still_fails_it(tmp_path):
    """The canary of ``in_float64`` (a triage rule moving a float32 case that differs by rounding
    only to float64): the case runs in float64 and passes, and under a mutant that drops the
    reduction of bmm's Partial output it fails as a float32 case would."""
    import subprocess
    import sys

    name = "bmm.float32.s0.m2.R_Psum.in_float64"
    entry = next(e for e in _entries("manifest_matrix_level1_0.json") if e["name"] == name)
    assert entry["in_float64"] and entry["dtypes"] == ["float32", "float32"]
    case = opinfo_cases.materialize(entry, {})
    assert [i.dtype for i in case.inputs] == ["float64", "float64"] and case.compare.rtol == 1e-7

    def run(*extra):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        return subprocess.run([sys.executable, "-m", "meshtest", "run", "--lane", "local", "--artifacts-dir",
                               str(tmp_path / f"a{len(extra)}"), "--slot-dir", str(tmp_path / "slots"),
                               f"{COMMITTED}/case_opinfo_matrix_level1_0.py::{name}", *extra],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    ok = run()
    assert ok.returncode == 0 and f"PASS    {name}" in ok.stdout, ok.stdout[-3000:] + ok.stderr[-2000:]
    bad = run("--mutant", "aten.bmm.default:partial_as_replicate")
    assert bad.returncode == 1 and f"FAIL    {name}" in bad.stdout, bad.stdout[-3000:] + bad.stderr[-2000:]
