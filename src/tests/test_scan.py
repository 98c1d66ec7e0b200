"""Static scan: what it reads, and the clear errors for what it cannot read."""
from __future__ import annotations

from meshtest.model.scan import scan_case_source

GOOD = '''
from meshtest import OpShardCase, register, InputSpec, Shard
MESH = (2, 2)
NAMES = ("dp", "tp")
register(OpShardCase(name="a", fn=f, mesh_shape=MESH, mesh_dim_names=NAMES, tags=("cpu_level0", "npu_level1")))
register(OpShardCase(name="b", fn=f, mesh_shape=(8,), tags=("cpu_level1",), solo_launcher=True))
import meshtest as mt
mt.register(mt.OpShardCase(name="c", fn=f, mesh_shape=(2,), needs_mesh=True, mesh_dim_names=("tp",),
                           tags=("npu_level0",)))
'''


def test_reads_literals_and_module_constants():
    scan = scan_case_source("cases/x.py", GOOD)
    assert scan.error is None
    a, b, c = scan.cases
    assert (a.name, a.mesh_shape, a.mesh_dim_names, a.tags) == ("a", (2, 2), ("dp", "tp"), ("cpu_level0", "npu_level1"))
    assert b.solo_launcher and b.world_size == 8
    assert c.needs_mesh and c.tags == ("npu_level0",)
    assert scan.device_need == 8
    assert scan.target_tags() == ("cpu_level0", "cpu_level1", "cpu_local", "mesh:2", "mesh:4", "mesh:8", "npu_level0",
                                  "npu_level1")


def test_a_mesh_above_a_node_tags_the_target_with_the_nodes_it_needs():
    """``nodes:<n>`` from the static scan, against the node size (``[meshtest].slots``): the
    8-rank case needs 2 nodes of 4 slots, none of 8; 16 ranks need 2 nodes of 8, 12 ranks 2 of 6;
    ``--tag=nodes:2`` selects by it."""
    from meshtest.model.rules import nodes_needed
    from meshtest.parent.planner import select_cases

    scan = scan_case_source("cases/x.py", GOOD)
    assert "nodes:2" in scan.target_tags(node_slots=4) and not any(t.startswith("nodes:") for t in scan.target_tags())
    assert [c.name for c in select_cases(scan.cases, "cpu", ["nodes:2"], node_slots=4)] == ["b"]
    assert select_cases(scan.cases, "cpu", ["nodes:2"]) == []
    # 7 ranks split evenly only as 7 nodes of 1 rank
    assert (nodes_needed(16, 8), nodes_needed(12, 8), nodes_needed(8, 8), nodes_needed(7, 4)) == (2, 2, 1, 7)


def test_a_case_without_a_gate_tag_is_a_scan_error():
    scan = scan_case_source("cases/x.py", "register(OpShardCase(name='lost', mesh_shape=(2,)))\n")
    assert scan.cases == () and "case 'lost': rule gate-tag: the case has no gate tag" in scan.errors


def test_non_literal_mesh_is_a_clear_error():
    scan = scan_case_source("cases/x.py",
                            "register(OpShardCase(name='a', mesh_shape=make_mesh(), tags=('cpu_level0',)))\n")
    assert scan.cases == ()
    assert "cases/x.py: case 'a': rule static-scan: mesh_shape= must be a literal" in scan.errors
    assert "make_mesh()" in scan.errors


def test_non_literal_tags_and_rebound_constant():
    src = "T = ('cpu_level0',)\nT = ('cpu_level1',)\nregister(OpShardCase(name='a', mesh_shape=(2,), tags=T))\n"
    assert "tags= must be a literal" in scan_case_source("x.py", src).errors


def test_register_in_loop_is_rejected():
    src = "for i in range(2):\n    register(OpShardCase(name=f'a{i}', mesh_shape=(2,)))\n"
    err = scan_case_source("x.py", src).errors
    assert "x.py:2: rule static-scan: register(...) must be a top-level statement" in err


def test_syntax_error_names_file_and_line():
    err = scan_case_source("x.py", "register(OpShardCase(name='a',\n").errors
    assert err.startswith("x.py:1: rule syntax:")


def test_rules_shared_with_registration():
    src = "register(OpShardCase(name='a', mesh_shape=(2, 2), mesh_dim_names=('dp',), tags=('cpu_level0',)))\n"
    assert "rule mesh-dim-names" in scan_case_source("x.py", src).errors
    src = "register(OpShardCase(name='a', mesh_shape=(2,), tags=('tpu_level0',)))\n"
    assert "rule gate-tag: unknown gate tag 'tpu_level0'" in scan_case_source("x.py", src).errors
    src = "register(OpShardCase(name='a', mesh_shape=(2, -1)))\n"
    assert "rule mesh-shape" in scan_case_source("x.py", src).errors


def test_duplicate_names_in_one_file():
    src = ("register(OpShardCase(name='a', mesh_shape=(2,), tags=('cpu_level0',)))\n"
           "register(OpShardCase(name='a', mesh_shape=(4,), tags=('cpu_level0',)))\n")
    scan = scan_case_source("x.py", src)
    assert "case 'a': rule duplicate-name: declared at line 1 and again at line 2" in scan.errors
    # the first declaration stands; the second is the broken one
    assert [c.mesh_shape for c in scan.cases] == [(2,)] and [b.lineno for b in scan.broken] == [2]


def test_register_needs_a_direct_constructor_call():
    err = scan_case_source("x.py", "case = OpShardCase(name='a', mesh_shape=(2,))\nregister(case)\n").errors
    assert "rule static-scan" in err and "OpShardCase(...) call" in err


def test_placement_shapes_written_as_displays_are_checked_statically():
    src = ("register(OpShardCase(name='a', mesh_shape=(2, 2), inputs=[InputSpec((4, 4))],\n"
           "                     placements=[(Shard(0),)], tags=('cpu_level0',)))\n")
    err = scan_case_source("x.py", src).errors
    assert ("x.py: case 'a': rule placement-arity: inputs[0] placements (Shard(0),) must have one placement per mesh "
            "dimension") in err
    src = ("register(OpShardCase(name='a', mesh_shape=(2,), inputs=[InputSpec((4,)), InputSpec((4,))],\n"
           "                     placements=[(Shard(0),)], tags=('cpu_level0',)))\n")
    assert "rule placement-count: 2 inputs but 1 placement tuple(s)" in scan_case_source("x.py", src).errors
    # Built by code rather than written out: left to registration on the ranks.
    src = "register(OpShardCase(name='a', mesh_shape=(2,), inputs=INPUTS, placements=[P] * 2, tags=('cpu_level0',)))\n"
    assert scan_case_source("x.py", src).errors == ""


SWEEP = """
from meshtest import InputSpec, register_sweep
SHAPE = (4, 6)
register_sweep(name="mm", fn=f, inputs=[InputSpec(SHAPE), InputSpec(shape=(6, 8), seed=1)], mesh_shape=(2,),
               tags=("cpu_level1",), max_partial_inputs=1)
"""


def test_sweep_cases_are_derived_statically_with_counted_skips():
    scan = scan_case_source("x.py", SWEEP)
    assert scan.error is None
    names = [c.name for c in scan.cases]
    assert len(names) == 15 and names[:4] == ["mm[R,R]", "mm[R,S0]", "mm[R,S1]", "mm[R,P]"]
    assert "mm[P,P]" not in names
    assert all(c.tags == ("cpu_level1",) and c.mesh_shape == (2,) for c in scan.cases)
    assert scan.notes == ("x.py: sweep mm: 15 case(s); skipped 1 (more Partial inputs than max_partial_inputs: 1)",)


def test_sweep_needs_written_out_input_shapes():
    src = "register_sweep(name='mm', fn=f, inputs=make_inputs(), mesh_shape=(2,))\n"
    assert "inputs= must be a list of InputSpec(...) calls written out" in scan_case_source("x.py", src).errors
