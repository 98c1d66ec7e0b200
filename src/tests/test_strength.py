"""Suite strength without torch: placement kinds, merging recorded calls, baselines, the
mutant list, scores and the kill matrix (meshtest.strength.coverage / .mutate)."""
from __future__ import annotations

import json

import pytest

from meshtest.strength import coverage, mutate
from meshtest.strength.mutate import MutantResult


def _call(op, inputs, to=None, mesh=(2,), out=(("P(sum)",),), rule=True):
    args = [{"t": list(shape), "dtype": "float32", "p": list(p)} for shape, p in inputs]
    rec = {"op": op, "mesh": list(mesh), "args": args, "kwargs": {}, "rule": rule,
           "out": [list(o) for o in out], "to": [list(t) for t in (to or [p for _, p in inputs])]}
    return rec


def test_placement_kinds_mark_uneven_shards_and_redistributions():
    call = _call("aten.mm.default", [((5, 6), ("S(0)",)), ((6, 4), ("S(1)",))], to=[("S(0)",), ("R",)])
    assert coverage.placement_kinds(call) == {"S(0)~", "S(1)→R"}
    nested = {"op": "aten.cat.default", "mesh": [2, 2], "rule": True, "kwargs": {},
              "args": [{"l": [{"t": [4, 4], "p": ["R", "S(1)"]}, {"t": [4, 3], "p": ["P(sum)", "S(1)"]}]}, {"v": 0}],
              "to": [["R", "S(1)"], ["R", "S(1)"]]}
    assert coverage.placement_kinds(nested) == {"R", "S(1)", "P(sum)→R", "S(1)~"}


def test_calls_merge_per_case_and_a_bad_line_names_file_and_line(tmp_path):
    a = _call("aten.mm.default", [((4, 6), ("S(1)",)), ((6, 4), ("S(0)",))])
    b = _call("aten.sum.default", [((4, 4), ("P(sum)",))])
    (tmp_path / "w2").mkdir()
    (tmp_path / "ops0.jsonl").write_text(json.dumps({"case": "c1", "file": "f.py", "calls": [a]}) + "\n")
    (tmp_path / "w2" / "ops1.jsonl").write_text(json.dumps({"case": "c1", "file": "f.py", "calls": [a, b]}) + "\n")
    (tmp_path / "opsx.jsonl").write_text("not read: not ops<k>.jsonl\n")
    files = coverage.ops_files(str(tmp_path))
    assert [p.rsplit("/", 1)[-1] for p in files] == ["ops0.jsonl", "ops1.jsonl"]
    calls = coverage.read_calls(files)
    assert calls == {"f.py::c1": [a, b]}
    ops = coverage.by_operator(calls)
    assert ops["aten.mm.default"].cases == {"f.py::c1"} and ops["aten.mm.default"].meshes == {1}
    (tmp_path / "ops2.jsonl").write_text('{"case": "c2"}\n')
    with pytest.raises(ValueError, match=r"ops2.jsonl:1: not a call record"):
        coverage.read_calls([str(tmp_path / "ops2.jsonl")])


def test_families_list_uncovered_operators_and_dispatches_without_a_rule():
    ops = coverage.by_operator({"f::a": [_call("aten.mm.default", [((4, 4), ("R",))]),
                                        _call("aten.mv.default", [((4, 4), ("R",))], rule=False)]})
    fams = {f.family: f for f in coverage.by_family(ops, {"aten.mm.default": "matrix", "aten.bmm.default": "matrix",
                                                          "aten.add.Tensor": "pointwise"})}
    assert fams["matrix"].covered == ["aten.mm.default"] and fams["matrix"].uncovered == ["aten.bmm.default"]
    assert fams["pointwise"].covered == [] and fams["(no rule)"].covered == ["aten.mv.default"]
    assert ops["aten.mm.default"].uncovered_kinds() == ["in0: S(0) S(1) P(sum)", "uneven"]
    text = "\n".join(coverage.format_table(list(fams.values()), ops))
    assert "1 of 3 registered operators exercised" in text and "pointwise (1): aten.add.Tensor" in text
    assert "uncovered kinds: in0: S(0) S(1) P(sum); uneven" in text


def test_list_operators_are_a_family_of_their_own_whatever_module_registers_them():
    ops = coverage.by_operator({"f::a": [_call("aten._foreach_add.List", [((4,), ("S(0)",))])]})
    rules = {"aten._foreach_add.List": "pointwise", "aten._fused_adam_.default": "pointwise",
             "aten.add.Tensor": "pointwise", "aten._foreach_norm.Scalar": "math"}
    fams = {f.family: f for f in coverage.by_family(ops, rules)}
    assert fams[coverage.LIST_OPS].registered == ["aten._foreach_add.List", "aten._foreach_norm.Scalar",
                                                   "aten._fused_adam_.default"]
    assert fams[coverage.LIST_OPS].covered == ["aten._foreach_add.List"]
    assert fams["pointwise"].registered == ["aten.add.Tensor"] and "math" not in fams


def test_only_a_pass_or_a_pinned_known_failure_exercises_an_operator():
    """An operator counts as exercised only through a case that passed or reproduced a known
    failure that pins its values; one reached only by failing cases is listed with their classes
    (docs/strength.md, "Coverage counts what passes")."""
    from meshtest.contract import CaseOutcome, RankFailure
    from meshtest.model.known import KnownFailure
    from meshtest.status import Status

    pinned = KnownFailure(kind="mismatch", step="compare", match="elements outside", reason="the rule is wrong",
                          upstream="docs/torch-bugs.md#x", signature="out0 values 1/4 @0a0b0c0d abs 1 rel 1")
    raising = KnownFailure(kind="raises", step="run", match="NotImplementedError", reason="no rule for it",
                           upstream="docs/torch-bugs.md#y")

    def outcome(case, status, known=None, step="compare"):
        failures = () if status is Status.PASS else (RankFailure(0, status, step, "boom"),)
        return CaseOutcome(case, "f.py", "g", 2, status, failures=failures,
                           known_failure=known.describe() if known else "")

    calls = {"f.py::ok": [_call("aten.mm.default", [((4, 4), ("R",))])],
             "f.py::pinned": [_call("aten.bmm.default", [((2, 4, 4), ("R",))])],
             "f.py::raises": [_call("aten.add.Tensor", [((4, 4), ("R",))]),
                              _call("aten.mm.default", [((4, 4), ("R",))])],
             "f.py::wrong": [_call("aten.add.Tensor", [((4, 4), ("S(0)",))])],
             "f.py::unfinished": [_call("aten.sub.Tensor", [((4, 4), ("R",))])]}
    verdicts = [outcome("ok", Status.PASS), outcome("pinned", Status.XFAIL, pinned),
                outcome("raises", Status.XFAIL, raising, step="run"), outcome("wrong", Status.FAIL)]
    kept, failing = coverage.split_by_verdict(calls, verdicts)
    assert sorted(kept) == ["f.py::ok", "f.py::pinned"]
    assert set(failing) == {"aten.add.Tensor", "aten.sub.Tensor"}  # mm is exercised by f.py::ok
    assert failing["aten.add.Tensor"] == {"xfail at run: no rule for it": 1, "fail at compare: boom": 1}
    assert failing["aten.sub.Tensor"] == {"no verdict (the run did not finish it)": 1}
    ops = coverage.by_operator(kept)
    rules = {op: "x" for op in ("aten.mm.default", "aten.bmm.default", "aten.add.Tensor", "aten.sub.Tensor")}
    text = "\n".join(coverage.format_table(coverage.by_family(ops, rules), ops, failing=failing))
    assert "2 of 4 registered operators exercised" in text
    assert "not exercised: every case fails (2 operators" in text
    assert "aten.add.Tensor: 1 fail at compare: boom; 1 xfail at run: no rule for it" in text or \
        "aten.add.Tensor: 1 xfail at run: no rule for it; 1 fail at compare: boom" in text


def test_a_weak_case_exercises_nothing_even_when_it_passes(tmp_path):
    """A generated case whose reference is degenerate (all zero, empty, non-finite) cannot tell a
    wrong answer from a right one: its pass does not count (issue 38, item 6)."""
    from meshtest.contract import CaseOutcome
    from meshtest.status import Status

    manifest = tmp_path / "manifest_x.json"
    manifest.write_text(json.dumps({"cases": [{"name": "zeros_like.s0", "weak": "all-zero reference"},
                                              {"name": "add.s0", "weak": ""}]}))
    weak = coverage.weak_cases([str(manifest)])
    assert weak == {"zeros_like.s0": "all-zero reference"}
    calls = {"f.py::zeros_like.s0": [_call("aten.zeros_like.default", [((4,), ("S(0)",))])],
             "f.py::add.s0": [_call("aten.add.Tensor", [((4,), ("S(0)",))])]}
    verdicts = [CaseOutcome(name, "f.py", "g", 2, Status.PASS) for name in ("zeros_like.s0", "add.s0")]
    kept, failing = coverage.split_by_verdict(calls, verdicts, weak)
    assert sorted(kept) == ["f.py::add.s0"]
    assert failing == {"aten.zeros_like.default": {"weak: all-zero reference": 1}}


def test_every_operator_not_exercised_is_counted_under_a_reason(tmp_path):
    manifest = {"cases": [{"op": "addmm", "aten": ["aten.addmm.default", "aten.mm.default"]}]}
    (tmp_path / "manifest_x.json").write_text(json.dumps(manifest))
    by_opinfo = coverage.dispatched_by_opinfo([str(tmp_path / "manifest_x.json")])
    assert by_opinfo == {"aten.addmm.default": {"addmm"}, "aten.mm.default": {"addmm"}}
    reason = coverage.unexercised_reason
    assert reason("aten.addmm.default", by_opinfo).startswith("dispatched on plain tensors by OpInfo addmm")
    assert reason("aten._foreach_add.List", {}).startswith("a _foreach_ list op")
    assert reason("aten.add.out", {}) == "an out= overload no case reached"
    assert reason("aten.add_.Tensor", {}) == "an in-place overload no case reached"
    assert reason("aten.gelu_backward.default", {}) == "a backward op no backward case reached"
    assert reason("aten.frobnicate.default", {}) == "no OpInfo's CPU samples dispatch it"
    rules = {"aten.addmm.default": "matrix", "aten.add_.Tensor": "pointwise", "aten.mm.default": "matrix"}
    ops = coverage.by_operator({"f::a": [_call("aten.mm.default", [((4, 4), ("R",))])]})
    text = "\n".join(coverage.format_table(coverage.by_family(ops, rules), ops, by_opinfo=by_opinfo))
    assert "not exercised, by reason (2 operators, each with one):" in text
    assert "     1  an in-place overload no case reached: aten.add_.Tensor" in text
    assert "     1  dispatched on plain tensors by an OpInfo, not reached on DTensors: aten.addmm.default" in text


def test_a_baseline_diff_names_lost_and_gained_kinds(tmp_path):
    old = {"aten.mm.default": ["1d mesh", "S(0)", "S(1)"], "aten.sum.default": ["R"]}
    new = {"aten.mm.default": ["1d mesh", "S(0)", "P(sum)"], "aten.bmm.default": ["R"]}
    lost, gained = coverage.diff_baseline(old, new)
    assert lost == ["aten.mm.default S(1)", "aten.sum.default (operator no longer dispatched)"]
    assert gained == ["aten.bmm.default (operator newly dispatched)", "aten.mm.default P(sum)"]
    path = str(tmp_path / "b.json")
    coverage.write_baseline(path, new, "test")
    assert coverage.read_baseline(path) == new and coverage.read_baseline(str(tmp_path / "none.json")) is None
    (tmp_path / "bad.json").write_text('{"ops": {"aten.mm.default": "R"}}')
    with pytest.raises(ValueError, match="not a coverage baseline"):
        coverage.read_baseline(str(tmp_path / "bad.json"))


def test_mutants_come_from_every_exercised_operator_with_a_fault_site():
    ops = coverage.by_operator({"f::a": [_call("aten.mm.default", [((4, 4), ("R",))]),
                                        _call("aten.mv.default", [((4, 4), ("R",))], rule=False)],
                                "f::b": [_call("aten.relu.default", [((4, 4), ("S(0)",))], out=(("S(0)",),))]})

    def sites(call):
        partial = any(p.startswith("P(") for o in call["out"] for p in o)
        return ["partial_as_replicate"] if partial else ["wrong_shard_dim"]

    got = mutate.mutants_of(ops, ["partial_as_replicate", "wrong_shard_dim", "gather_skipped"], sites)
    # mv has no rule to mutate; relu's output is a Shard, mm's a Partial
    assert got == [("aten.mm.default", "partial_as_replicate"), ("aten.relu.default", "wrong_shard_dim")]


def test_scores_count_a_mutant_for_the_gates_whose_cases_killed_it():
    killed0 = MutantResult("a:f", "a", "f", "killed", killers={"x.py::l0": "fail"})
    killed1 = MutantResult("b:f", "b", "f", "killed", killers={"x.py::l1": "error"})
    survived = MutantResult("a:g", "a", "g", "survived", evidence="witness")
    unproven = MutantResult("b:g", "b", "g", "unproven", evidence="equivalent")
    gates = {"x.py::l0": ("cpu_level0", "cpu_level1"), "x.py::l1": ("cpu_level1",)}
    scores = mutate.scores([killed0, killed1, survived, unproven], gates,
                           {"cpu_level0": {"a"}, "cpu_level1": {"a", "b"}})
    assert scores == {"cpu_level0": (1, 2), "cpu_level1": (2, 3)}
    text = "\n".join(mutate.format_matrix([killed0, killed1, survived, unproven], scores, 1.0))
    assert "KILLED   a:f: 1/0  l0(fail)" in text and "SURVIVED a:g" in text and "unproven b:g: equivalent" in text
    assert "mutation score cpu_level0: 1/2 = 50.0 %" in text
    grid = mutate.format_grid([killed0, killed1, survived, unproven], ["f", "g", "h"])
    assert grid == ["kill grid: 1=f, 2=g; K killed, S survived, u unproven, . no site", "     1 2",
                    "  a  K S", "  b  K u"]


def test_scores_by_fault_and_origin_count_each_origins_cases_apart():
    results = [MutantResult("aten.exp.default:reduce_skipped", "aten.exp.default", "reduce_skipped", state="killed",
                            killers={"gen.py::a": "fail"}),
               MutantResult("aten.mm.default:reduce_skipped", "aten.mm.default", "reduce_skipped", state="survived")]
    origins = {"gen.py::a": ("generated",), "hand.py::b": ("hand-written",)}
    ops_of = {"generated": {"aten.exp.default", "aten.mm.default"}, "hand-written": {"aten.exp.default"}}
    per = mutate.scores(results, origins, ops_of)
    assert per == {"generated": (1, 2), "hand-written": (0, 1)}
    lines = mutate.format_by_origin({"reduce_skipped": per}, {"reduce_skipped": "a Partial input unreduced"})
    assert lines[1] == ("  reduce_skipped  generated 1/2 = 50 %; hand-written 0/1 = 0 %   "
                        "(a Partial input unreduced)")
