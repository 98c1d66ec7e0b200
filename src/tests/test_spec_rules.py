"""Registration-time validation: each broken rule names the file, the case and the rule."""
from __future__ import annotations

import numpy as np
import pytest

from meshtest import (
    CaseDeclarationError,
    CompareSpec,
    DerivedSpec,
    InputSpec,
    KnownFailure,
    OpShardCase,
    Partial,
    Replicate,
    Shard,
)
from meshtest.model.registry import Registry


def _fn(*xs):
    return xs[0]


def _case(**kw) -> OpShardCase:
    base = dict(name="c1", fn=_fn, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)], mesh_shape=(2,),
                tags=("cpu_level0",))
    base.update(kw)
    return OpShardCase(**base)


@pytest.mark.parametrize(
    "kw, rule, words",
    [
        (dict(placements=[(Shard(0),)], mesh_shape=(2, 2)), "placement-arity", "one placement per mesh dimension"),
        (dict(placements=[(Shard(0),), (Replicate(),)]), "placement-count", "1 inputs but 2"),
        (dict(placements=[(Shard(2),)]), "shard-dim", "Shard(d) needs -2 <= d < 2"),
        (dict(placements=[("S0",)]), "placement-kind", "not a placement"),
        (dict(placements=[(Partial("prod"),)]), "placement-kind", "reduce_op 'prod' unknown"),
        (dict(inputs=[InputSpec((4, 4), init="normal")]), "input-init", "'normal' unknown"),
        (dict(inputs=[InputSpec((4, 4), dtype="float8")]), "input-dtype", "'float8' unknown"),
        (dict(inputs=[InputSpec((4, -1))]), "input-shape", "integers >= 0"),
        (dict(inputs=[InputSpec((4, 4), data=np.zeros((3, 4)))]), "input-data", "(3, 4)"),
        (dict(inputs=[InputSpec((4,), dtype="int64")], placements=[(Shard(0),)]), "input-init", "needs a float dtype"),
        (dict(mesh_shape=(2, 2), mesh_dim_names=("dp",), placements=[(Shard(0), Replicate())]), "mesh-dim-names",
        "1 name(s)"),
        (dict(mesh_shape=(0,)), "mesh-shape", "integers >= 1"),
        (dict(tags=("gpu_level0",)), "gate-tag", "unknown gate tag 'gpu_level0'"),
        (dict(tags="cpu_level0"), "gate-tag", "tuple of gate tags"),
        (dict(name="has space"), "name", "non-empty string"),
        (dict(needs_mesh="yes"), "flag", "needs_mesh must be True or False"),
        (dict(compare_outputs=(-1,)), "compare-outputs", "indices >= 0"),
        (dict(compare=None), "compare", "CompareSpec"),
        (dict(derived_inputs=[DerivedSpec(fn=_fn, placements=(Shard(3),), ndim=2)]), "shard-dim", "derived_inputs[0]"),
        (dict(known_failure="torch bug #1"), "known-failure", "saying which failure is expected"),
        (dict(known_failure=KnownFailure(kind="wrong", step="run", match="x", reason="r", upstream="a/b#1")),
         "known-failure", "kind='wrong': must be one of mismatch, raises, crash"),
        (dict(known_failure=KnownFailure(kind="raises", step="run", match="(", reason="r", upstream="a/b#1")),
         "known-failure", "not a regular expression"),
        (dict(known_failure=KnownFailure(kind="raises", step="run", match="x", reason="r")),
         "known-failure", "exactly one of upstream="),
        (dict(known_failure=KnownFailure(kind="raises", step="run", match="x", reason="r", upstream="see torch")),
         "known-failure", "must be 'owner/repo#123'"),
        (dict(known_failure=KnownFailure(kind="raises", step="run", match="x", reason="r", upstream="a/b#1"),
              expect_raises=(ValueError, "x")), "known-failure", "exclude each other"),
    ],
)
def test_each_rule_names_file_case_and_rule(kw, rule, words):
    with pytest.raises(CaseDeclarationError) as info:
        Registry().add(_case(**kw), "cases/torch/case_x.py")
    err = info.value
    assert err.rule == rule
    assert err.file == "cases/torch/case_x.py"
    msg = str(err)
    assert "cases/torch/case_x.py" in msg and f"rule {rule}" in msg and words in msg
    if rule != "name":
        assert "'c1'" in msg


def test_a_name_is_unique_within_its_file_and_two_files_may_share_it():
    reg = Registry()
    reg.add(_case(), "a.py")
    reg.add(_case(), "b.py")  # a case's ID is file::name
    assert [c.name for c in reg.cases("a.py")] == ["c1"] and [c.name for c in reg.cases("b.py")] == ["c1"]
    with pytest.raises(CaseDeclarationError, match=r"a.py: case 'c1': rule duplicate-name: a.py already registered"):
        reg.add(_case(), "a.py")


def test_valid_case_is_normalised():
    case = Registry().add(_case(placements=[(Shard(-1),)], mesh_shape=[2]), "a.py")
    assert case.placements == ((Shard(1),),)
    assert case.mesh_shape == (2,)
    assert case.world_size == 2


def test_inputs_are_deterministic_and_distinct_per_index():
    case = _case(inputs=[InputSpec((3, 3)), InputSpec((3, 3))], placements=[(Shard(0),), (Shard(0),)])
    a0 = case.inputs[0].build_numpy(case.input_seed(0))
    assert np.array_equal(a0, case.inputs[0].build_numpy(case.input_seed(0)))
    assert not np.array_equal(a0, case.inputs[1].build_numpy(case.input_seed(1)))
    assert InputSpec((2, 3), init="arange").build_numpy(0).tolist() == [[0, 1, 2], [3, 4, 5]]
    ints = InputSpec((100,), init="uniform", dtype="int64", low=0, high=5).build_numpy(1)
    assert ints.dtype == np.int64 and ints.min() >= 0 and ints.max() < 5
    assert InputSpec((2,), data=[1.5, 2.5]).build_numpy(0).tolist() == [1.5, 2.5]


def test_compare_spec_constructors():
    assert CompareSpec.allclose(rtol=1e-4, atol=1e-3) == CompareSpec("allclose", 1e-4, 1e-3)
    assert CompareSpec.equal().kind == "equal"
    assert CompareSpec.shape("random").reason == "random"
