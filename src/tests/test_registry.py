"""Loading case files on the rank side, and the check against the static scan."""
from __future__ import annotations

import pytest

from meshtest.errors import CaseDeclarationError, CaseFileError
from meshtest.model.registry import Registry, check_against_scan, load_case_file
from meshtest.model.scan import scan_case_file
from tests.helpers import case_file

GOOD = """
def f(x):
    return x

register(OpShardCase(name="a", fn=f, inputs=[InputSpec((4,))], placements=[(Shard(0),)], mesh_shape=(2,),
                     tags=("cpu_level0",)))
register(OpShardCase(name="b", fn=f, inputs=[InputSpec((4,))], placements=[(Replicate(),)], mesh_shape=(2,),
                     tags=("cpu_level1",)))
"""


def test_load_and_check_good_file(tmp_path):
    path = case_file(tmp_path, "case_good.py", GOOD)
    loaded = load_case_file(path, Registry())
    assert [c.name for c in loaded] == ["a", "b"]
    check_against_scan(scan_case_file(path), loaded)


def test_import_error_keeps_the_traceback(tmp_path):
    path = case_file(tmp_path, "case_bad.py", "import not_a_module_anywhere\n")
    with pytest.raises(CaseFileError) as info:
        load_case_file(path, Registry())
    assert info.value.rule == "import" and "not_a_module_anywhere" in str(info.value) and path in str(info.value)


def test_declaration_error_surfaces_with_file_and_case(tmp_path):
    body = ("register(OpShardCase(name='a', fn=print, inputs=[InputSpec((4,))], placements=[(Shard(1),)], "
            "mesh_shape=(2,), tags=('cpu_level0',)))\n")
    path = case_file(tmp_path, "case_dim.py", body)
    with pytest.raises(CaseDeclarationError, match=r"case_dim.py: case 'a': rule shard-dim"):
        load_case_file(path, Registry())


def test_disagreement_with_scan_fails_loudly(tmp_path):
    # A file whose runtime registrations differ from what its syntax tree declares.
    body = GOOD + """
_real = OpShardCase
def OpShardCase(**kw):
    kw["tags"] = ("cpu_level1",)
    return _real(**kw)
register(OpShardCase(name="c", fn=f, inputs=[InputSpec((4,))], placements=[(Shard(0),)], mesh_shape=(2,),
                     tags=("cpu_level0",)))
"""
    path = case_file(tmp_path, "case_drift.py", body)
    loaded = load_case_file(path, Registry())
    with pytest.raises(CaseFileError) as info:
        check_against_scan(scan_case_file(path), loaded)
    assert info.value.rule == "scan-mismatch" and "case 'c'" in str(info.value)


def test_hidden_registration_is_a_mismatch(tmp_path):
    body = GOOD + """
def _more():
    pass
exec("register(OpShardCase(name='d', fn=f, inputs=[InputSpec((4,))], placements=[(Shard(0),)], mesh_shape=(4,), "
     "tags=('cpu_level0',)))")
"""
    path = case_file(tmp_path, "case_hidden.py", body)
    loaded = load_case_file(path, Registry())
    with pytest.raises(CaseFileError, match="static scan found cases"):
        check_against_scan(scan_case_file(path), loaded)


SWEEP = """
def add(x, y):
    return x + y

register_sweep(name="add", fn=add, inputs=[InputSpec((4, 6)), InputSpec((4, 6))], mesh_shape=(2,),
               tags=("cpu_level1",), partial_inputs=(0,))
"""


def test_sweep_registers_what_the_scan_derives(tmp_path):
    path = case_file(tmp_path, "case_sweep.py", "from meshtest import register_sweep\n" + SWEEP)
    loaded = load_case_file(path, Registry())
    scan = scan_case_file(path)
    check_against_scan(scan, loaded)
    assert len(loaded) == 12  # input 0: R,S0,S1,P; input 1: R,S0,S1
    by_name = {c.name: c for c in loaded}
    assert by_name["add[P,R]"].placements[0][0].reduce_op == "sum" and "add[R,P]" not in by_name
    assert "skipped 4 (Partial not enabled for this input (partial_inputs): 4)" in scan.notes[0]
