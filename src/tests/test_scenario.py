"""Scenario cases end to end on the platform-free side: declaration rules, static scan, the
scan check, the rank-side runner (features → unsupported, assertions → fail, other errors →
error, steps and notes), aggregation, the spec-ID table and JUnit."""
from __future__ import annotations

from dataclasses import replace

import pytest
from junitparser import JUnitXml

from meshtest import CaseDeclarationError, KnownFailure, ScenarioCase
from meshtest.contract import RankRecord
from meshtest.errors import CaseFileError
from meshtest.model.known import judge
from meshtest.model.registry import check_against_scan
from meshtest.model.scan import scan_case_source
from meshtest.parent.outcomes import aggregate
from meshtest.rank.pipeline import run_scenario
from meshtest.report.junit import write_junit
from meshtest.report.reporter import spec_table, summary_lines
from meshtest.status import Status

from .test_entry_pipeline import NumpyBackend

SOURCE = '''
from meshtest import ScenarioCase, register
MESH = (2,)
def f(ctx):
    pass
register(ScenarioCase(name="tp_A1_x", fn=f, mesh_shape=MESH, mesh_dim_names=("tp",), tags=("cpu_level0",),
                      requires=("tp.styles", "comm_debug_mode"), spec_id="A1"))
'''


class FeatureBackend(NumpyBackend):
    platform = "numpy"

    def __init__(self, features=()):
        self._features = frozenset(features)

    def features(self):
        return self._features

    def scenario_api(self):
        return {"api": True}


def _scenario(fn=lambda ctx: None, **kw):
    base = dict(name="s", fn=fn, mesh_shape=(1,), tags=("cpu_level0",))
    base.update(kw)
    return ScenarioCase(**base).validated("f.py")


def test_scan_reads_scenario_fields():
    scan = scan_case_source("f.py", SOURCE)
    assert scan.error is None
    (c,) = scan.cases
    assert (c.kind, c.requires, c.spec_id, c.needs_mesh, c.mesh_dim_names) == (
        "scenario", ("tp.styles", "comm_debug_mode"), "A1", True, ("tp",))
    assert scan.target_tags() == ("cpu_level0", "mesh:2")


def test_scan_rejects_unknown_feature_naming_file_case_rule():
    scan = scan_case_source("f.py", SOURCE.replace('"comm_debug_mode"', '"tp.magic"'))
    assert scan.cases == ()
    assert all(part in scan.errors for part in ("f.py", "tp_A1_x", "rule feature", "tp.magic"))


def test_scan_rejects_non_literal_requires():
    scan = scan_case_source("f.py", SOURCE.replace('requires=("tp.styles", "comm_debug_mode")', "requires=make()"))
    assert "rule static-scan" in scan.errors and "requires=" in scan.errors


@pytest.mark.parametrize("field,value,rule", [
    ("requires", "tp.styles", "feature"),
    ("spec_id", "A 1", "spec-id"),
    ("divergence", "  ", "reason"),
    ("timeout_s", 0, "timeout"),
    ("fn", None, "fn"),
])
def test_declaration_rules(field, value, rule):
    with pytest.raises(CaseDeclarationError) as e:
        _scenario(**{"fn": lambda ctx: None, field: value})
    assert f"rule {rule}" in str(e.value) and "f.py" in str(e.value)


def test_check_against_scan_catches_a_requires_drift():
    scan = scan_case_source("f.py", SOURCE)
    loaded = [ScenarioCase(name="tp_A1_x", fn=lambda c: None, mesh_shape=(2,), mesh_dim_names=("tp",),
                           tags=("cpu_level0",), requires=("tp.styles",), spec_id="A1").validated("f.py")]
    with pytest.raises(CaseFileError) as e:
        check_against_scan(scan, loaded)
    assert "scan-mismatch" in str(e.value) and "requires" in str(e.value)


def test_missing_feature_is_unsupported_and_the_fn_never_runs():
    ran = []
    case = _scenario(lambda ctx: ran.append(1), requires=("tp.styles", "tp.no_parallel"),
                     known_failure=KnownFailure(kind="mismatch", step="run", match="x", reason="bug",
                                                upstream="pytorch/pytorch#1"))
    r = run_scenario(case, FeatureBackend({"tp.styles"}), None)
    assert (r.status, r.step, ran) == ("unsupported", "features", [])
    assert "unsupported on platform numpy" in r.error and "tp.no_parallel" in r.error and "tp.styles" not in r.error
    assert judge(case.known_failure, r.status, r.step, r.error)[0] == "unsupported"  # never turned into xfail


def test_scenario_steps_notes_and_outcomes():
    def body(ctx):
        assert ctx.api == {"api": True} and ctx.rank == 0 and ctx.world_size == 1
        ctx.step("forward")
        ctx.note("max error 1e-7")
        ctx.assert_close(ctx.backend.make_tensor([1.0, 2.0], "float32"),
                         ctx.backend.make_tensor([1.0, 2.5], "float32"), rtol=0, atol=0.1, label="out")

    steps = []
    r = run_scenario(_scenario(body), FeatureBackend(), None, on_step=steps.append)
    assert (r.status, r.step, r.detail, steps) == ("fail", "forward", "max error 1e-7", ["run", "forward"])
    assert "out (rank 0)" in r.error

    def boom(ctx):
        ctx.step("apply")
        raise RuntimeError("kaput")

    r = run_scenario(_scenario(boom), FeatureBackend(), None)
    assert (r.status, r.step) == ("error", "apply") and "RuntimeError: kaput" in r.error
    r = run_scenario(_scenario(lambda ctx: None), FeatureBackend(), None)
    assert (r.status, r.step) == ("pass", "run")


def _rec(status, **kw):
    base = dict(case="c", file="f.py", group="g", rank=0, status=Status(status), step="run", duration_s=0.1)
    base.update(kw)
    return RankRecord(**base)


def test_spec_table_counts_and_reasons(tmp_path):
    miss = "unsupported on platform torch: missing feature(s) tp.no_parallel"
    outs = [
        aggregate("a1", "f.py", "g", 2, {0: _rec("pass"), 1: _rec("pass")}, ""),
        aggregate("a2", "f.py", "g", 2, {0: _rec("pass", divergence="seed: X; torch: Y"), 1: _rec("pass")}, ""),
        aggregate("b6", "f.py", "g", 2, {r: _rec("unsupported", step="features", error=miss) for r in (0, 1)}, ""),
        replace(aggregate("c2", "f.py", "g", 2, {r: _rec("xfail") for r in (0, 1)}, ""), known_failure="torch bug"),
        aggregate("c10", "f.py", "g", 2, {0: _rec("fail", error="AssertionError: off"), 1: _rec("pass")}, ""),
    ]
    outs = [replace(o, spec_id=sid) for o, sid in zip(outs, ("A1", "A2", "B6", "C2", "C10"))]
    table = spec_table(outs)
    text = "\n".join(table)
    assert [ln.split()[0] for ln in table[1:] if ln.startswith("  ") and not ln.startswith("   ")] == \
        ["A1", "A2", "B6", "C2", "C10"]
    assert "A2    divergence x1" in text and "seed: X; torch: Y" in text
    assert "unsupported-on-platform x1" in text and "tp.no_parallel" in text
    assert "expected-failure x1" in text and "torch bug" in text
    assert "C10   FAIL x1" in text
    assert table[-1] == ("spec IDs by outcome: FAIL=1, divergence=1, expected-failure=1, pass=1, "
                         "unsupported-on-platform=1")
    lines = summary_lines(outs)
    assert "meshtest: 1 case(s) unsupported on platform (listed above)" in lines
    assert lines[-1] == "meshtest: 2 passed, 1 xfailed, 1 unsupported, 1 failed"  # xfail counted apart from pass

    path = tmp_path / "junit.xml"
    write_junit(str(path), outs)
    cases = {c.name: c for suite in JUnitXml.fromfile(str(path)) for c in suite}
    (skip,) = cases["b6"].result
    assert skip.type == "unsupported" and "tp.no_parallel" in skip.message
    (xfail,) = cases["c2"].result  # as pytest writes an xfail: skipped, the reason as its message
    assert xfail.type == "pytest.xfail" and xfail.message == "known failure: torch bug"
    assert cases["a1"].result == []


def test_scan_rejects_a_field_the_constructor_does_not_have():
    scan = scan_case_source("f.py", SOURCE.replace('spec_id="A1"', 'spec_id="A1", needs_mesh=False'))
    assert "tp_A1_x" in scan.errors and "rule unknown-field" in scan.errors and "needs_mesh" in scan.errors


def test_scanned_field_lists_match_the_dataclasses():
    import dataclasses

    from meshtest.model.schema import KINDS
    from meshtest.model.spec import OpShardCase

    assert KINDS["ScenarioCase"].names == tuple(f.name for f in dataclasses.fields(ScenarioCase))
    assert KINDS["OpShardCase"].names == tuple(f.name for f in dataclasses.fields(OpShardCase))
