"""A known-failure rule's ``requires`` (meshtest.strength.predicate): the placement tokens of a
case, the predicate's keys, and the generator refusing a rule that names a case its reason does
not describe (issue 38, item 5). Expected tokens follow DTensor's chunking (torch.chunk: a dim of
size s over n ranks gives ceil(s / n) per rank), not the code under test."""
from __future__ import annotations

import json

import pytest

from meshtest.strength import predicate
from meshtest.strength.triage import apply, load_known

KF = {"kind": "raises", "step": "run", "match": "x", "reason": "a Partial input is refused",
      "upstream": "pytorch/pytorch#1"}


def _entry(name="conv.s0.m2.S0_R", shapes=((1, 2, 4), (3, 2, 3)), placements=(("S(0)",), ("R",)), mesh=(2,),
           op="nn.functional.conv1d", dtype="float32", variant="", grad=()):
    return {"name": name, "shapes": [list(s) for s in shapes], "placements": [list(p) for p in placements],
            "mesh_shape": list(mesh), "op": op, "dtype": dtype, "variant": variant, "grad_inputs": list(grad),
            "tags": ["cpu_level1"], "known_failure": None}


@pytest.mark.parametrize("shape, placements, mesh, expected", [
    ((4, 6), ("S(0)",), (2,), {"in0:S(0)"}),                               # 4 over 2: even
    ((5, 6), ("S(0)",), (2,), {"in0:S(0)", "in0:S(0)~"}),                  # 5 over 2: 3, 2
    ((1, 6), ("S(0)",), (2,), {"in0:S(0)", "in0:S(0)~", "in0:S(0)~empty"}),  # 1 / 2: 1, 0
    ((4, 6), ("S(0)",), (3,), {"in0:S(0)", "in0:S(0)~", "in0:S(0)~empty"}),  # 4 / 3: 2, 2, 0
    ((6, 6), ("S(0)", "S(0)"), (2, 2), {"in0:S(0)", "in0:S(0)~", "in0:S(0)~empty", "in0:SS(0)"}),  # 6 / 4: 2,2,2,0
    ((4, 6), ("S(0)", "P(max)"), (2, 2), {"in0:S(0)", "in0:P(max)"}),
])
def test_placement_tokens_follow_torch_chunk(shape, placements, mesh, expected):
    assert predicate.placement_tokens(_entry(shapes=(shape,), placements=(placements,), mesh=mesh)) == expected


def test_every_key_must_hold_and_unmet_says_what_the_case_has():
    req = {"ops": ["nn.functional.conv*"], "any": [r"in\d:P\(\w+\)", r"in0:S\([2-9]\)"]}
    assert predicate.unmet(req, _entry(placements=(("P(sum)",), ("R",)))) == []
    why = predicate.unmet(req, _entry())  # batch only: neither Partial nor a spatial shard
    assert len(why) == 1 and why[0].startswith("any ") and "in0:S(0)" in why[0]
    assert predicate.unmet({"backward": True}, _entry()) == ["backward True — forward"]
    assert predicate.unmet({"none": [r"in\d:S\(\d\)~"]}, _entry()) != []
    assert predicate.unmet({"all": [r"in\d:R", r"in0:S\(0\).*"]}, _entry()) == []
    assert predicate.unmet({"variants": ["out"], "dtypes": ["bfloat16"], "meshes": ["2x2"]}, _entry()) == [
        "variants ['out'] — functional", "dtypes ['bfloat16'] — float32", "meshes ['2x2'] — 2"]


@pytest.mark.parametrize("requires, says", [
    ({}, "non-empty object"), ({"op": ["x"]}, "unknown key"), ({"ops": []}, "non-empty list of strings"),
    ({"any": ["("]}, "not a regular expression"), ({"variants": ["grad"]}, "variants may hold"),
    ({"backward": "yes"}, "true or false"),
])
def test_a_malformed_requires_names_the_rule(tmp_path, requires, says):
    path = tmp_path / "known_failures.json"
    path.write_text(json.dumps([{"names": ["a"], "known_failure": KF, "requires": requires}]))
    with pytest.raises(ValueError, match=f"rule 0.*{says}"):
        load_known(str(path))


def test_a_known_failure_rule_without_requires_is_refused(tmp_path):
    path = tmp_path / "known_failures.json"
    path.write_text(json.dumps([{"names": ["a"], "known_failure": KF}]))
    with pytest.raises(ValueError, match="rule 0: a known_failure rule states the case property"):
        load_known(str(path))


def test_a_rule_naming_a_case_its_reason_does_not_describe_fails_generation():
    table = [{"names": ["conv.*"], "known_failure": KF, "requires": {"any": [r"in\d:P\(\w+\)"]}}]
    partial = _entry("conv.s0.m2.Psum_R", placements=(("P(sum)",), ("R",)))
    assert apply(table, [partial]) == 1 and partial["known_failure"] == KF
    with pytest.raises(ValueError, match=r"rule 0 marks conv.s0.m2.S0_R, which does not have the property.*"
                                         r"a Partial input is refused"):
        apply(table, [_entry()])


def test_the_committed_table_states_a_predicate_for_every_known_failure_rule():
    table = load_known("cases/torch/opinfo/known_failures.json")
    assert all("requires" in r for r in table if "known_failure" in r)


def test_an_in_float64_rule_states_its_property_too(tmp_path):
    path = tmp_path / "known_failures.json"
    path.write_text(json.dumps([{"names": ["a"], "in_float64": "rounding of a Partial input's reduction"}]))
    with pytest.raises(ValueError, match="rule 0: an in_float64 rule states the case property"):
        load_known(str(path))
    table = [{"names": ["conv.*"], "in_float64": "a Partial input's reduction order",
              "requires": {"any": [r"in\d:P\(\w+\)"]}}]
    entry = {**_entry(), "dtypes": ["float32", "float32"]}
    with pytest.raises(ValueError, match=r"rule 0: in_float64 names conv.s0.m2.S0_R, which does not have the property"):
        apply(table, [entry])
