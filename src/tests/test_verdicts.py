"""Verdicts a user can trust, platform-free: per-rank inputs, placement checks, expected
exceptions, properties and non-finite references, isolation messages, classification, report
grouping, CLI filters and declaration traps. Every test here fails on the code before this work
(the features did not exist, or the old behaviour is what it asserts against)."""
from __future__ import annotations

import numpy as np
import pytest

from meshtest import (
    CaseDeclarationError,
    CompareSpec,
    ExpectRaises,
    InputSpec,
    LocalInput,
    OpShardCase,
    Partial,
    Replicate,
    ScenarioCase,
    Shard,
    StridedShard,
)
from meshtest.contract import CaseOutcome, RankFailure
from meshtest.model.local_input import assemble
from meshtest.model.registry import BrokenCase, Registry, check_against_scan, load_case_file
from meshtest.model.scan import scan_case_file
from meshtest.parent.planner import select_cases
from meshtest.properties import chunks_differ, same_statistics
from meshtest.rank.compare import CompareError, compare_arrays
from meshtest.rank.entry import isolated, state_changes
from meshtest.rank.pipeline import StepResult, run_case, run_scenario
from meshtest.report.reporter import format_outcome
from meshtest.status import Status
from tests.helpers import case_file, scanned

from .test_entry_pipeline import Dist, NumpyBackend
from .test_scenario import FeatureBackend


def _op(fn=lambda x: x, **kw):
    base = dict(name="c", fn=fn, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)], mesh_shape=(2,),
                tags=("cpu_level0",))
    base.update(kw)
    return OpShardCase(**base).validated("f.py")


# --- 1. per-rank inputs ---------------------------------------------------------------------


def _local(shape, fn, dtype="float32"):
    return LocalInput(shape=shape, local=fn, dtype=dtype).validate("f.py", "c", 0)


def test_locals_assemble_by_placement_innermost_first():
    # Shard(0) on both mesh dims: rank (i, j) holds chunk j of chunk i
    spec = _local((4, 2), lambda c: np.full((1, 2), 2 * c[0] + c[1]))
    full, locals_ = assemble(spec, (2, 2), (Shard(0), Shard(0)), np.dtype("float32"))
    assert full[:, 0].tolist() == [0, 1, 2, 3] and locals_[(1, 0)].tolist() == [[2, 2]]
    # distinct integer partial sums reduce exactly; max and min too
    ints = _local((3,), lambda c: np.arange(3) * (c[0] + 1), "int64")
    full, _ = assemble(ints, (3,), (Partial("sum"),), np.dtype("int64"))
    assert full.dtype == np.int64 and full.tolist() == [0, 6, 12]
    full, _ = assemble(ints, (3,), (Partial("max"),), np.dtype("int64"))
    assert full.tolist() == [0, 3, 6]
    # uneven locals concatenate
    uneven = _local((5,), lambda c: np.arange(3) if c == (0,) else np.arange(2) + 10)
    assert assemble(uneven, (2,), (Shard(0),), np.dtype("float32"))[0].tolist() == [0, 1, 2, 10, 11]


@pytest.mark.parametrize("spec,placements,words", [
    ((3,), (Replicate(),), "locals differ over mesh dim 0 (Replicate()) at coordinates ('*',), which is Replicate()"),
    ((4,), (Partial("sum"),), "locals over mesh dim 0 (Partial('sum')) at coordinates ('*',) have different shapes"),
    ((7,), (Shard(0),), "assemble to shape (5,), not the declared (7,)"),
])
def test_locals_that_do_not_assemble_say_why(spec, placements, words):
    differ = _local(spec, lambda c: np.arange(3) + c[0])
    uneven = _local(spec, lambda c: np.arange(3 if c == (0,) else 2))
    with pytest.raises(ValueError) as e:
        assemble(differ if isinstance(placements[0], Replicate) else uneven, (2,), placements, np.dtype("float32"))
    assert words in str(e.value)


@pytest.mark.parametrize("kw,rule,words", [
    (dict(inputs=[InputSpec((4,), dtype="int64", init="arange")], placements=[(Partial("sum"),)]),
     "partial-split", "v / n, which is not an integer; declare the per-rank values with LocalInput"),
    (dict(mesh_shape=(3,), placements=[(Partial("sum"),)], compare=CompareSpec.equal()),
     "partial-split", "v / 3 does not reduce back to v bit for bit"),
    (dict(output_placements=((Shard(0), Shard(1)),)), "expected-placements", "one placement per mesh dimension"),
    (dict(expect_raises=("ValueError", "x")), "expect-raises", "is not an exception class"),
    (dict(expect_raises=(ValueError, "(")), "expect-raises", "does not compile"),
    (dict(tags=()), "gate-tag", "no gate would ever run it"),
    (dict(placements=[(StridedShard(2, 2),)]), "shard-dim", "Shard(d) needs -2 <= d < 2"),
    (dict(redistribute_inputs=((Replicate(),), None)), "declared-steps", "one entry (None or placements) per input"),
    (dict(redistribute_inputs=(None,)), "declared-steps", "redistributes no input"),
    (dict(redistribute_inputs=((Shard(3),),)), "shard-dim", "redistribute_inputs[0]"),
    (dict(local_fn=lambda x, mesh: x), "declared-steps", "add local_output_placements"),
    (dict(local_output_placements=((Shard(0),),)), "declared-steps", "local_fn and local_output_placements go"),
    (dict(local_fn=lambda x, mesh: x, local_output_placements=(None,)), "declared-steps", "(no None)"),
    (dict(local_fn=3, local_output_placements=((Shard(0),),)), "declared-steps", "must be callable"),
    (dict(module=lambda api: None), "module", "module and plan go together"),
    (dict(plan={"lin": object()}), "module", "module and plan go together"),
    (dict(module=3, plan={"lin": object()}), "module", "module must be callable as module(api)"),
    (dict(module=lambda api: None, plan={}), "module", "plan must be a non-empty {fqn: style} dict"),
    (dict(module=lambda api: None, plan={"": object()}, local_fn=lambda x, mesh: x,
          local_output_placements=((Shard(0),),)), "module", "module and local_fn exclude each other"),
    (dict(fn=lambda x, local: x), "local", "fn's parameter local must be keyword-only: def fn(x, *, local)"),
    (dict(fn=lambda x, *, local: x, local_fn=lambda x, mesh: x, local_output_placements=((Shard(0),),)), "local",
     "fn(..., *, local) and local_fn exclude each other"),
    (dict(redistribute_outputs=((Shard(0), Shard(0)),)), "expected-placements", "redistribute_outputs[0]"),
    (dict(checkpoint_inputs=((Shard(0),), None)), "declared-steps", "one entry (None or the placements to load"),
    (dict(checkpoint_inputs=(None,)), "declared-steps", "checkpoints no input"),
    (dict(checkpoint_inputs=((Shard(2),),)), "shard-dim", "checkpoint_inputs[0]"),
    (dict(expect_raises=ExpectRaises(ValueError, "x", or_pass=1)), "expect-raises", "or_pass must be True or False"),
    (dict(inputs=[LocalInput((4,), lambda c: np.ones(2), checked="no")]), "local-input",
     "checked must be True or False"),
])
def test_declaration_traps_are_registration_errors(kw, rule, words):
    with pytest.raises(CaseDeclarationError) as e:
        _op(**kw)
    assert f"rule {rule}" in str(e.value) and words in str(e.value)


def test_zero_size_dims_and_power_of_two_partials_are_allowed():
    assert _op(inputs=[InputSpec((0, 4))]).inputs[0].shape == (0, 4)
    assert _op(placements=[(Partial("sum"),)], compare=CompareSpec.equal()).mesh_shape == (2,)


def test_meshtest_placements_handed_to_the_platform_say_which_class_to_use():
    with pytest.raises(AttributeError) as e:
        Shard(0).is_shard()
    assert "torch.distributed.tensor.Shard" in str(e.value) and "ctx.api.Shard" in str(e.value)


# --- 2. placements are part of the verdict ---------------------------------------------------


class PlacedBackend(NumpyBackend):
    """The stand-in, reporting ``Dist`` tensors as Shard(0) (or what ``placed`` says)."""

    def __init__(self, placed=None):
        self.placed = placed or (Shard(0),)

    def placements_of(self, tensor):
        return self.placed if isinstance(tensor, Dist) else None


def _local_half(x):
    """On the distributed path, a plain array of the first half of the rows (a 'local part')."""
    return x.a[:2] if isinstance(x, Dist) else x


def test_a_plain_output_of_a_distributed_call_is_taken_as_full_and_a_failure_says_so():
    r = run_case(_op(_local_half), PlacedBackend(), None)
    assert (r.status, r.step) == (Status.FAIL, "compare")
    assert "shape (2, 4) != reference shape (4, 4)" in r.error
    assert "output[0] of the distributed call is a plain tensor, which meshtest takes for the full value" in r.error
    assert run_case(_op(lambda x: x.a + 0 if isinstance(x, Dist) else x), PlacedBackend(), None).status is Status.PASS
    wrong = run_case(_op(_wrong_on_dist), PlacedBackend(), None)  # a distributed output: no such hint
    assert wrong.status is Status.FAIL and "plain tensor" not in wrong.error


def test_a_wrong_placement_that_gathers_right_fails_at_step_placement():
    case = _op(lambda x: x + 0, output_placements=((Shard(0),),))
    assert run_case(case, PlacedBackend(), None).status is Status.PASS
    r = run_case(case, PlacedBackend((Replicate(),)), None)
    assert (r.status, r.step) == (Status.FAIL, "placement")
    assert r.error == ("output[0]: placements (Replicate(),) != expected (Shard(0),)\n"
                       "signature: output[0] placements (Replicate(),) vs (Shard(0),)")


# --- 3. expected exceptions -----------------------------------------------------------------


def _raise_on_dist(x):
    if isinstance(x, Dist):
        raise ValueError("sharded dim mismatch")
    return x


def test_expect_raises_passes_on_the_named_exception_and_fails_otherwise():
    ok = run_case(_op(_raise_on_dist, expect_raises=(ValueError, "mismatch")), NumpyBackend(), None)
    assert (ok.status, ok.step) == (Status.PASS, "run") and "raised as expected: ValueError" in ok.detail
    wrong = run_case(_op(_raise_on_dist, expect_raises=(KeyError, "")), NumpyBackend(), None)
    assert wrong.status is Status.FAIL and wrong.error.startswith("expected KeyError at step run; got ValueError")
    quiet = run_case(_op(expect_raises=(ValueError, "")), NumpyBackend(), None)
    assert quiet.status is Status.FAIL and "the case completed without raising" in quiet.error
    elsewhere = run_case(_op(_raise_on_dist, expect_raises=(ValueError, "", "compare")), NumpyBackend(), None)
    assert elsewhere.status is Status.FAIL and "at step compare; got ValueError at step run" in elsewhere.error


def _wrong_on_dist(x):
    return Dist(x.a + 1) if isinstance(x, Dist) else x


def test_raises_or_passes_takes_either_outcome_and_nothing_else():
    either = ExpectRaises(ValueError, "mismatch", or_pass=True)
    raised = run_case(_op(_raise_on_dist, expect_raises=either), NumpyBackend(), None)
    assert raised.status is Status.PASS and "raised as expected: ValueError" in raised.detail
    right = run_case(_op(lambda x: x + 0, expect_raises=either), NumpyBackend(), None)
    assert (right.status, right.step) == (Status.PASS, "compare") and "completed and right" in right.detail
    wrong = run_case(_op(_wrong_on_dist, expect_raises=either), NumpyBackend(), None)
    assert (wrong.status, wrong.step) == (Status.FAIL, "compare")
    assert wrong.error.startswith("expected ValueError matching 'mismatch' at step run (or a pass); neither: it "
                                  "completed and differs at step compare: output[0]")
    other = run_case(_op(_raise_on_dist, expect_raises=ExpectRaises(KeyError, "", or_pass=True)), NumpyBackend(), None)
    assert other.status is Status.FAIL and "got ValueError at step run" in other.error


def _raise_other_on_dist(x):
    if isinstance(x, Dist):
        raise RuntimeError("unrelated failure")
    return x


def test_raises_anything_naming_it_or_passes_takes_any_type_but_not_another_message_or_wrong_values():
    any_kind = ExpectRaises(match="mismatch", or_pass=True)
    raised = run_case(_op(_raise_on_dist, expect_raises=any_kind), NumpyBackend(), None)  # a ValueError
    assert raised.status is Status.PASS and "raised as expected: ValueError" in raised.detail
    right = run_case(_op(lambda x: x + 0, expect_raises=any_kind), NumpyBackend(), None)
    assert right.status is Status.PASS and "completed and right (expect_raises any exception matching" in right.detail
    other = run_case(_op(_raise_other_on_dist, expect_raises=any_kind), NumpyBackend(), None)
    assert other.status is Status.FAIL
    assert other.error.startswith("expected any exception matching 'mismatch' at step run (or a pass); got "
                                  "RuntimeError at step run: unrelated failure")
    wrong = run_case(_op(_wrong_on_dist, expect_raises=any_kind), NumpyBackend(), None)
    assert (wrong.status, wrong.step) == (Status.FAIL, "compare") and "neither: it completed and differs" in wrong.error
    # meshtest's own verdict on the values is never the raise, even where the regex and the step fit it
    at_compare = run_case(_op(_wrong_on_dist, expect_raises=ExpectRaises(match="output", step="compare")),
                          NumpyBackend(), None)
    assert at_compare.status is Status.FAIL and "got CompareError at step compare" in at_compare.error
    with pytest.raises(CaseDeclarationError, match="rule expect-raises: without an exception class, expect_raises "
                                                   "needs the regex"):
        _op(expect_raises=ExpectRaises(or_pass=True))


def test_unchecked_locals_go_to_the_platform_and_without_a_global_tensor_there_is_no_reference():
    class AsGiven(NumpyBackend):
        def from_locals(self, locals_, dtype, mesh, mesh_shape, placements, global_shape, requires_grad=False, *,
                        checked=True):
            self.checked = checked
            return Dist(np.concatenate([locals_[(0,)], locals_[(1,)]]))

    differ = LocalInput((2,), lambda c: np.full(2, float(c[0])), checked=False)  # Replicate, yet they differ
    backend = AsGiven()
    r = run_case(_op(inputs=[differ], placements=[(Replicate(),)]), backend, None)
    assert backend.checked is False and (r.status, r.step) == (Status.ERROR, "reference")
    assert "the platform accepted locals that make no global tensor (locals differ over mesh dim 0" in r.error
    refused = run_case(_op(inputs=[differ], placements=[(Replicate(),)], expect_raises=(ValueError, "make no global",
                                                                                       "reference")),
                       backend, None)
    assert refused.status is Status.PASS
    checked = run_case(_op(inputs=[LocalInput((2,), lambda c: np.full(2, float(c[0])))], placements=[(Replicate(),)]),
                       backend, None)
    assert (checked.status, checked.step) == (Status.ERROR, "build") and "locals differ" in checked.error


def test_a_scenario_expects_an_exception_at_any_step_unless_one_is_named():
    def body(ctx):
        ctx.step("apply")
        raise TypeError("bad plan")

    case = ScenarioCase(name="s", fn=body, mesh_shape=(1,), tags=("cpu_level0",),
                        expect_raises=(TypeError, "bad plan")).validated("f.py")
    assert run_scenario(case, FeatureBackend(), None).status is Status.PASS


# --- 4. properties and non-finite references ------------------------------------------------


def test_a_non_finite_reference_fails_unless_the_case_opts_in():
    nan = np.full((2, 2), np.nan, dtype=np.float32)
    with pytest.raises(CompareError, match="reference has NaN/Inf \\(4 of 4 elements"):
        compare_arrays(nan, nan, "float32", "float32", CompareSpec.allclose())
    compare_arrays(nan, nan, "float32", "float32", CompareSpec.allclose(allow_nonfinite=True))
    with pytest.raises(CompareError, match="reference has NaN/Inf"):
        compare_arrays(nan, nan, "float32", "float32", CompareSpec.equal())


def test_equal_prints_plain_numbers():
    with pytest.raises(CompareError) as e:
        compare_arrays(np.float32([1.5]), np.float32([2.5]), "float32", "float32", CompareSpec.equal())
    assert "got 2.5, expected 1.5" in str(e.value) and "np.float32" not in str(e.value)


def test_properties_for_random_outputs():
    rng = np.random.default_rng(0)
    ref, out = rng.standard_normal((64, 8)), rng.standard_normal((64, 8))
    compare_arrays(ref, out, "float64", "float64", CompareSpec.check(same_statistics()))
    with pytest.raises(CompareError, match="property same_statistics\\(k=5\\) does not hold: mean"):
        compare_arrays(ref, out + 3.0, "float64", "float64", CompareSpec.check(same_statistics()))
    compare_arrays(ref, out, "float64", "float64", CompareSpec.check(chunks_differ(0, 2)))
    twice = np.concatenate([out[:32], out[:32]])
    with pytest.raises(CompareError, match="chunks \\[\\(0, 1\\)\\] along dim 0 are equal"):
        compare_arrays(ref, twice, "float64", "float64", CompareSpec.check(chunks_differ(0, 2)))


# --- 5. isolation ---------------------------------------------------------------------------


def test_state_changes_name_each_setting_and_isolation_keeps_the_case_own_failure():
    changes = state_changes({"default dtype": "float32", "handlers": {"a": 1}, "threads": 2},
                            {"default dtype": "float64", "handlers": {"a": 1, "b": 2}, "threads": 2})
    assert changes == ["default dtype float32 → float64", "handlers +b"]
    r = isolated(StepResult(Status.FAIL, "compare", "output[0]: 1 of 4 elements"), changes)
    assert (r.status, r.step) == (Status.ERROR, "isolation")
    assert "default dtype float32 → float64" in r.error
    assert "before that, the case itself: fail at step compare" in r.error
    assert isolated(StepResult(Status.PASS, "compare"), []).status is Status.PASS


# --- 7. classification and messages ---------------------------------------------------------


def test_an_assertion_raised_inside_the_platform_library_is_an_error(tmp_path):
    lib = tmp_path / "fakeplatform"
    lib.mkdir()
    (lib / "ops.py").write_text("def check(ok):\n    assert ok, 'internal invariant'\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("fakeplatform_ops", lib / "ops.py")
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)

    class LibBackend(FeatureBackend):
        def library_paths(self):
            return (str(lib),)

    def inside(ctx):
        ctx.step("op")
        ops.check(False)

    def own(ctx):
        ctx.step("check")
        assert ctx.rank < 0, "the case's own assertion"

    mk = lambda fn: ScenarioCase(name="s", fn=fn, mesh_shape=(1,), tags=("cpu_level0",)).validated("f.py")  # noqa: E731
    r = run_scenario(mk(inside), LibBackend(), None)
    assert (r.status, r.step) == (Status.ERROR, "op") and "AssertionError raised inside numpy" in r.error
    assert run_scenario(mk(own), LibBackend(), None).status is Status.FAIL


def test_scenario_assert_close_has_compare_spec_defaults():
    def body(ctx):
        b = ctx.backend
        one = b.make_tensor(np.float32([1.0]), "float32")
        ctx.assert_close(one, b.make_tensor(np.float32([1.0 + 1e-6]), "float32"))

    case = ScenarioCase(name="s", fn=body, mesh_shape=(1,), tags=("cpu_level0",)).validated("f.py")
    assert run_scenario(case, FeatureBackend(), None).status is Status.PASS


def test_the_same_failure_on_several_ranks_prints_once():
    o = CaseOutcome("c", "f.py", "w2-2", 2, Status.FAIL, failures=(
        RankFailure(0, Status.FAIL, "run", "AssertionError: out (rank 0): 3 of 4 elements"),
        RankFailure(1, Status.FAIL, "run", "AssertionError: out (rank 1): 3 of 4 elements")))
    assert "rank(s) 0,1: fail at step run: AssertionError: out (rank *): 3 of 4 elements" in format_outcome(o)


# --- 8. CLI and declaration traps -----------------------------------------------------------


def test_file_scoped_case_filters_leave_other_files_whole():
    cases = [scanned("a1", file="A.py"), scanned("a2", file="A.py"), scanned("b1", file="B.py"),
             scanned("b2", file="B.py")]
    picked = select_cases(cases, "cpu", file_patterns={"B.py": ["b2"]})
    assert [c.name for c in picked] == ["a1", "a2", "b2"]


def test_cli_splits_file_specs_per_file():
    from meshtest.queries import split_specs

    assert split_specs(["A.py", "B.py::b2", "B.py::b1"]) == (["A.py", "B.py"], {"B.py": ["b2", "b1"]})
    assert split_specs(["B.py::b2", "B.py"]) == (["B.py"], {})  # named whole as well: runs whole


def test_one_broken_declaration_fails_only_its_own_case(tmp_path):
    path = case_file(tmp_path, "case_mixed.py", """
        def f(x):
            return x
        register(OpShardCase(name="good", fn=f, inputs=[InputSpec((4,))], placements=[(Shard(0),)],
                             mesh_shape=(2,), tags=("cpu_level0",)))
        register(OpShardCase(name="bad", fn=f, inputs=[InputSpec((4,), init="nope")], placements=[(Shard(0),)],
                             mesh_shape=(2,), tags=("cpu_level0",)))
    """)
    loaded = load_case_file(path, Registry(keep_broken=True))
    assert [type(c).__name__ for c in loaded] == ["OpShardCase", "BrokenCase"]
    assert isinstance(loaded[1], BrokenCase) and "rule input-init" in loaded[1].error
    check_against_scan(scan_case_file(path), loaded)  # the broken case still matches its scan
    with pytest.raises(CaseDeclarationError, match="rule input-init"):  # the strict registry of tools and tests
        load_case_file(path, Registry())


def test_a_declared_step_the_platform_lacks_is_unsupported_at_that_step_never_passed():
    r = run_case(_op(lambda x: x + 0, redistribute_inputs=((Replicate(),),)), PlacedBackend(), None)
    assert (r.status, r.step) == (Status.UNSUPPORTED, "redistribute") and "has no redistribute" in r.error
    r = run_case(_op(lambda x: x + 0, local_fn=lambda x, mesh: x, local_output_placements=((Shard(0),),)),
                 PlacedBackend(), None)
    assert (r.status, r.step) == (Status.UNSUPPORTED, "run") and "local_map" in r.error
    r = run_case(_op(lambda x: x + 0, checkpoint_inputs=((Replicate(),),)), PlacedBackend(), None)
    assert (r.status, r.step) == (Status.UNSUPPORTED, "checkpoint") and "no sharded checkpoint" in r.error
