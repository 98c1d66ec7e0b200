"""Suite planning: grouping by mesh, ordering, and case selection."""
from __future__ import annotations

import json

import pytest

from meshtest.contract import PLAN_VERSION, ContractError, LaunchPlan
from meshtest.errors import SelectionError
from meshtest.parent.planner import plan_groups, select_cases
from tests.helpers import scanned


def test_meshes_of_one_world_size_share_a_launch():
    cases = [
        scanned("a", (2, 2), ("dp", "tp"), file="f1.py"),
        scanned("b", (2, 2), ("x", "y"), file="f2.py"),
        scanned("c", (4,), None, file="f0.py"),
        scanned("d", (2,), None),
    ]
    groups = plan_groups(cases)
    assert [(g.group_id, [c.name for c in g.cases]) for g in groups] == [("w2", ["d"]),
                                                                        ("w4", ["c", "a", "b"])]
    # the launch's first mesh is its first case's; every case keeps its own shape and names
    assert (groups[1].mesh_shape, groups[1].mesh_dim_names) == ((4,), ("d0",))
    assert [c.mesh_shape for c in groups[1].cases] == [(4,), (2, 2), (2, 2)]


def test_cases_share_a_launch_by_world_size_whatever_their_names_and_solo_gets_its_own():
    cases = [
        scanned("plain", (2, 2), ("dp", "tp")),
        scanned("mc2", (2, 2), ("dp", "tp"), needs_mesh=True, lineno=2),
        scanned("other_names", (2, 2), ("pp", "cp"), needs_mesh=True, lineno=3),
        scanned("flat", (4,), ("dp",), needs_mesh=True, lineno=4),
        scanned("alone", (2, 2), None, solo=True),
    ]
    groups = plan_groups(cases)
    ids = {g.group_id: [c.name for c in g.cases] for g in groups}
    assert ids == {"w4": ["plain", "mc2", "other_names", "flat"], "w4-solo-alone": ["alone"]}
    # the launch's own mesh has label names; each case still declares (and gets) its own
    assert {g.group_id: g.mesh_dim_names for g in groups}["w4"] == ("d0", "d1")


def test_order_is_deterministic_whatever_the_input_order():
    cases = [scanned(n, (2,), file=f, lineno=ln) for n, f, ln in [("z", "b.py", 1), ("y", "a.py", 9), ("x", "a.py", 3)]]
    for perm in (cases, cases[::-1]):
        assert [c.name for c in plan_groups(perm)[0].cases] == ["x", "y", "z"]
    mixed = [scanned("big", (8,)), scanned("small", (2,)), scanned("mid", (2, 2))]
    assert [g.world_size for g in plan_groups(mixed)] == [2, 4, 8]


def test_select_by_device_kind_and_tags_like_pants():
    cases = [
        scanned("l0", (2,), tags=("cpu_level0",)),
        scanned("l1", (4,), tags=("cpu_level1",)),
        scanned("npu", (2,), tags=("npu_level0",)),
        scanned("both", (4,), tags=("cpu_level0", "npu_level0")),
    ]
    names = lambda sel: [c.name for c in sel]
    assert names(select_cases(cases, "cpu")) == ["l0", "l1", "both"]
    assert names(select_cases(cases, "cpu", ["cpu_level0"])) == ["l0", "both"]
    assert names(select_cases(cases, "cpu", ["+mesh:4"])) == ["l1", "both"]
    assert names(select_cases(cases, "cpu", ["cpu_level0", "-mesh:4"])) == ["l0"]
    assert names(select_cases(cases, "npu", ["npu_level0"])) == ["npu", "both"]


def test_name_patterns_and_a_pattern_matching_nothing():
    cases = [scanned("sort_a"), scanned("sort_b"), scanned("topk")]
    assert [c.name for c in select_cases(cases, "cpu", name_patterns=["sort_*"])] == ["sort_a", "sort_b"]
    with pytest.raises(SelectionError, match=r"\['nope\*'\] matches no selected case"):
        select_cases(cases, "cpu", name_patterns=["sort_*", "nope*"])


def test_plan_file_round_trip_and_version(tmp_path):
    (group,) = plan_groups([scanned("a", (2, 2), ("dp", "tp"))])
    path = tmp_path / "plan.json"
    LaunchPlan(group_id=group.group_id, platform="torch", device_kind="cpu", mesh_shape=group.mesh_shape,
               mesh_dim_names=group.mesh_dim_names, out_dir="/o", case_timeout_s=30, cases=group.cases).write(str(path))
    plan = LaunchPlan.read(str(path))
    assert plan.cases == group.cases and plan.mesh_shape == (2, 2)
    raw = json.loads(path.read_text())
    raw["version"] = 99
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="version 99") as e:  # ContractError is a ValueError
        LaunchPlan.read(str(path))
    assert isinstance(e.value, ContractError) and f"reads version {PLAN_VERSION}" in str(e.value)


def test_level0_gates_are_fail_fast_level1_collect_everything():
    from meshtest.parent.planner import gate_is_fail_fast
    assert gate_is_fail_fast(["cpu_level0"]) and gate_is_fail_fast(["+npu_level0", "-mesh:8"])
    assert not gate_is_fail_fast(["cpu_level1"]) and not gate_is_fail_fast([])
    assert not gate_is_fail_fast(["cpu_level0,cpu_level1"]) and not gate_is_fail_fast(["-cpu_level0"])


def test_a_gate_of_another_device_kind_is_refused_not_run_on_this_one():
    from meshtest.parent.planner import device_kind_mismatch

    why = device_kind_mismatch(["npu_level0"], "cpu")
    assert "--tag=npu_level0 selects npu gate(s) but the device kind is 'cpu'" in why
    assert "--device-kind=npu" in why
    assert device_kind_mismatch(["npu_level0"], "npu") is None
    assert device_kind_mismatch(["cpu_ms_level0"], "cpu") is None  # MindSpore on CPU is a cpu gate
    assert device_kind_mismatch(["cpu_level0,npu_level0"], "cpu") is None  # the clause also names a cpu gate
    assert device_kind_mismatch(["-npu_level0", "mesh:2"], "cpu") is None  # exclusions and non-gate tags
    assert "cuda" in device_kind_mismatch(["cuda_level1"], "npu")
