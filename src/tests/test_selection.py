"""pytest's selection words on cases: ``-k`` with pytest's grammar over a case's keywords, the
last-failed cache and ``--lf`` / ``--ff``, and the planner putting last failures first."""
from __future__ import annotations

import json

import pytest

from meshtest.errors import SelectionError
from meshtest.parent.planner import plan_groups, plan_local_groups
from meshtest.parent.selection import (
    LASTFAILED_FILE,
    apply_last_failed,
    case_keywords,
    keyword_matcher,
    read_lastfailed,
    update_lastfailed,
)
from tests.helpers import scanned

CASES = [
    scanned("sort_dim0_mesh2", file="cases/torch/case_sort.py", tags=("cpu_level0",)),
    scanned("topk3_backward_mesh4", mesh_shape=(4,), file="cases/torch/case_sort.py", tags=("cpu_level0",)),
    scanned("mm_s0_r", mesh_shape=(2, 2), file="cases/torch/case_matmul.py", tags=("cpu_level1",)),
]


def _k(expr):
    match = keyword_matcher(expr)
    return [c.name for c in CASES if match(c)]


def test_k_takes_pytests_grammar_over_name_file_and_tags():
    assert _k("mesh4 and not backward") == []
    assert _k("mesh4 or mm") == ["topk3_backward_mesh4", "mm_s0_r"]
    assert _k("not backward") == ["sort_dim0_mesh2", "mm_s0_r"]
    assert _k("case_matmul") == ["mm_s0_r"]  # the file's name
    assert _k("torch and cpu_level1") == ["mm_s0_r"]  # a directory, a gate tag
    assert _k("mesh:4") == ["topk3_backward_mesh4", "mm_s0_r"]  # the mesh:<world size> tag
    assert _k("SORT_DIM0") == ["sort_dim0_mesh2"]  # case-insensitive, as pytest
    assert _k("(sort or topk) and not mesh:4") == ["sort_dim0_mesh2"]
    assert "mesh:2" in case_keywords(CASES[0]) and "case_sort.py" in case_keywords(CASES[0])


def test_a_k_expression_that_does_not_parse_names_it():
    with pytest.raises(SelectionError, match=r"-k 'mesh4 and': not a pytest expression"):
        keyword_matcher("mesh4 and")


def test_the_last_failed_cache_keeps_failures_until_they_pass(tmp_path):
    d = str(tmp_path / "cache")
    assert read_lastfailed(d) == {}
    update_lastfailed(d, ran=["a::x", "a::y", "b::z"], failed=["a::y", "b::z"])
    assert read_lastfailed(d) == {"a::y": True, "b::z": True}
    update_lastfailed(d, ran=["a::y"], failed=[])  # a::y passed; b::z did not run: it stays
    assert read_lastfailed(d) == {"b::z": True}
    (tmp_path / "cache" / LASTFAILED_FILE).write_text("[1]")
    with pytest.raises(SelectionError, match="lastfailed.json: expected a JSON object"):
        read_lastfailed(d)
    update_lastfailed(d, ran=[], failed=["c::w"])  # a broken cache is replaced, not a lost run
    assert json.loads((tmp_path / "cache" / LASTFAILED_FILE).read_text()) == {"c::w": True}


def test_lf_runs_only_last_failures_and_all_when_there_were_none():
    failed = {CASES[2].id: True, "elsewhere.py::gone": True}
    kept, line = apply_last_failed(CASES, "lf", failed)
    assert [c.name for c in kept] == ["mm_s0_r"] and "2 deselected" in line
    kept, line = apply_last_failed(CASES, "ff", failed)
    assert [c.name for c in kept] == ["mm_s0_r", "sort_dim0_mesh2", "topk3_backward_mesh4"]
    kept, line = apply_last_failed(CASES, "lf", {"elsewhere.py::gone": True})
    assert kept == CASES and "running all 3" in line
    assert apply_last_failed(CASES, "", failed) == (CASES, None)


def test_ff_puts_last_failures_first_in_their_launch_and_their_launch_first():
    cases = [scanned(f"c{i}", mesh_shape=(2,) if i < 3 else (4,), lineno=i) for i in range(5)]
    groups = plan_groups(cases, failed_first={cases[4].id, cases[2].id})
    assert [g.group_id for g in groups] == ["w2", "w4"]  # both hold a last failure: plan order
    assert [c.name for c in groups[0].cases] == ["c2", "c0", "c1"]
    groups = plan_groups(cases, failed_first={cases[4].id})
    assert [g.group_id for g in groups] == ["w4", "w2"]
    assert [c.name for c in plan_groups(cases)[0].cases] == ["c0", "c1", "c2"]
    local = plan_local_groups(cases, 2, failed_first={cases[1].id})[0]
    assert [c.name for c in local.cases][:2] == ["c1", "c3"]


def test_list_prints_what_run_would_select_with_its_expected_verdict(tmp_path, capsys):
    from meshtest.cli import main
    from tests.helpers import case_file

    path = case_file(tmp_path, "case_ls.py", """
        from meshtest import KnownFailure

        def f(x):
            return x

        register(OpShardCase(name="plain_mesh2", fn=f, inputs=[InputSpec((4,))], placements=[(Shard(0),)],
                             mesh_shape=(2,), tags=("cpu_level0",)))
        register(OpShardCase(name="known_mesh4", fn=f, inputs=[InputSpec((4,))], placements=[(Shard(0),)],
                             mesh_shape=(4,), tags=("cpu_level1",),
                             known_failure=KnownFailure(kind="raises", step="run", match="boom", reason="it booms",
                                                        upstream="x/y#1")))
        """)
    assert main(["list", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["ID", "kind", "mesh", "expected"]
    assert out[1].split()[:4] == [f"{path}::plain_mesh2", "op", "2", "pass"]
    assert out[2].split()[:4] == [f"{path}::known_mesh4", "op", "4", "xfail"] and "it booms (x/y#1)" in out[2]
    assert out[-1].startswith("2 case(s) selected of 2 in 1 file(s): 1 pass, 1 xfail")
    assert main(["list", path, "-k", "not known", "--tag", "cpu_level0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "plain_mesh2" in out[1]
    assert main(["list", path, "-k", "("]) == 2
