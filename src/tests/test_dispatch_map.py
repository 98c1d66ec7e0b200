"""meshtest.model.dispatch_map: what a stale map is, from the documented rule (a module other
than torch's that served one of a case's operators must be listed for the case; an operator of
a tracked library must be served), and the Pants plugin's reading of it (the modules a case
file's target depends on). Expected answers are written from that rule, not from the code."""
from __future__ import annotations

import os

import pytest

from meshtest.model import dispatch_map as dm

MAP = {"format": 1, "written_by": "x", "libraries": ["shardops"], "cases": {
    "case_a.py::one": {"aten.mul.Tensor": "torch", "shardops.f.default": "shardops.sharding.f"},
    "case_a.py::two": {"aten.erf.default": "torch"},
    "case_b.py::three": {"aten.cumsum.default": "shardops.sharding.aten_cumsum",
                         "shardops.g.default": "shardops.sharding.g"},
}}


def test_a_file_depends_on_the_rule_modules_its_cases_reached():
    assert dm.rule_modules(MAP, "case_a.py") == ["shardops.sharding.f"]
    assert dm.rule_modules(MAP, "case_b.py") == ["shardops.sharding.aten_cumsum", "shardops.sharding.g"]
    assert dm.rule_modules(MAP, "case_c.py") == []


def test_a_case_that_reaches_an_unlisted_module_is_named_with_the_module_and_the_command():
    path = "cases/torch/lib/dispatch_map.json"
    served = {"aten.mul.Tensor": "torch", "shardops.f.default": "shardops.sharding.f_v2"}
    problem = dm.check(MAP, path, "cases/torch/lib/case_a.py", "one", served)
    assert "case_a.py::one" in problem and "shardops.f.default" in problem and "shardops.sharding.f_v2" in problem
    assert "python -m meshtest dispatch-map cases/torch/lib" in problem
    # what the map lists, torch's own rules, and a listed module no longer reached: all fine
    listed = {"shardops.f.default": "shardops.sharding.f"}
    assert dm.check(MAP, path, "cases/torch/lib/case_a.py", "one", listed) is None
    assert dm.check(MAP, path, "cases/torch/lib/case_a.py", "one", {"aten.add.Tensor": "torch"}) is None


def test_a_library_operator_no_rule_served_and_a_case_missing_from_the_map_fail():
    path = "d/dispatch_map.json"
    problem = dm.check(MAP, path, "d/case_a.py", "one", {"shardops.f.default": "none"})
    assert "shardops.f.default" in problem and "no sharding rule served it" in problem
    assert dm.check(MAP, path, "d/case_a.py", "one", {"aten.nonzero.default": "none"}) is None  # not the library's
    assert "has no entry for case_a.py::new" in dm.check(MAP, path, "d/case_a.py", "new", {})


def test_build_merges_ranks_and_keeps_only_the_directory():
    recs = [{"file": "d/case_a.py", "case": "one", "served": {"aten.mul.Tensor": "torch"}},
            {"file": "d/case_a.py", "case": "one", "served": {"shardops.f.default": "shardops.sharding.f"}},
            {"file": "elsewhere/case_z.py", "case": "z", "served": {"aten.mul.Tensor": "torch"}}]
    doc = dm.build(recs, ["shardops"], "d")
    assert doc["cases"] == {"case_a.py::one": {"aten.mul.Tensor": "torch", "shardops.f.default": "shardops.sharding.f"}}
    assert dm.parse(dm.text(doc), "d/dispatch_map.json") == doc


@pytest.mark.parametrize("text, words", [("{", "not JSON"), ('{"format": 2}', "format must be 1"),
                                         ('{"format": 1, "libraries": "x", "cases": {}}', "libraries"),
                                         ('{"format": 1, "libraries": [], "cases": {"nocolons": {}}}', "cases[")])
def test_a_bad_map_names_the_file(text, words):
    with pytest.raises(dm.DispatchMapError) as e:
        dm.parse(text, "cases/x/dispatch_map.json")
    assert "cases/x/dispatch_map.json" in str(e.value) and words in str(e.value)


def test_the_committed_map_covers_every_case_of_its_directory():
    """cases/torch/shardops: every case the static scan finds has an entry, and the map's modules
    exist in src/shardops (the Pants plugin resolves them to their files)."""
    from meshtest.model.scan import scan_case_file

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(dm.__file__))))
    repo = os.path.dirname(root)
    directory = os.path.join(repo, "cases", "torch", "shardops")
    doc = dm.read(os.path.join(directory, dm.FILE))
    files = sorted(f for f in os.listdir(directory) if f.startswith("case_") and f.endswith(".py"))
    keys = {dm.case_key(f, c.name) for f in files for c in scan_case_file(os.path.join(directory, f)).cases}
    assert keys == set(doc["cases"])
    for module in {m for f in files for m in dm.rule_modules(doc, f)}:
        assert os.path.isfile(os.path.join(root, *module.split(".")) + ".py"), module


def test_affected_cases_are_those_whose_entries_list_a_changed_rule_module():
    maps = {"d/dispatch_map.json": MAP}
    assert dm.module_of("src/shardops/sharding/f.py") == "shardops.sharding.f"
    assert dm.module_of("src/shardops/__init__.py") == "shardops" and dm.module_of("README.md") is None
    assert dm.affected_cases(maps, ["src/shardops/sharding/f.py"]) == ["one"]
    assert dm.affected_cases(maps, ["src/shardops/sharding/g.py", "src/shardops/sharding/f.py"]) == ["one", "three"]
    # a change that is not a mapped rule module: the selection stays at file granularity
    assert dm.affected_cases(maps, ["src/shardops/sharding/f.py", "src/shardops/ops.py"]) is None
    assert dm.affected_cases(maps, ["cases/torch/lib/case_a.py"]) is None
