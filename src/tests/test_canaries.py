"""The canary table (docs/strength.md, "Canaries"): every check that guards a verdict names a
project test whose fixture must turn the check red. Here: every named test exists, asserts
something, and runs on every landing (not ``nightly``), so a canary cannot silently go away."""
from __future__ import annotations

import ast
import os
import re

import meshtest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
TABLE = os.path.join(REPO, "docs", "strength.md")
#: The checks the table must list (issue "Every check can fail").
REQUIRED = {"golden curve", "known-failure signature", "baseline training comparison", "resume continuity",
            "case isolation", "non-finite reference guard", "placement expectation", "lane agreement",
            "incremental selection", "coverage matrix", "mutation proof"}


def canary_rows(text: str):
    """(check, [test ids]) per row of the table between its markers."""
    body = text.split("<!-- canaries:", 1)[1].split("<!-- /canaries -->", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("check", "") or set(cells[0]) <= {"-"}:
            continue
        rows.append((cells[0], re.findall(r"`([\w/.]+\.py::\w+)`", cells[3])))
    return rows


def _function(test_id: str):
    path, name = test_id.split("::")
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def test_every_check_has_a_canary_test_that_exists_asserts_and_runs_on_every_landing():
    with open(TABLE, encoding="utf-8") as f:
        rows = canary_rows(f.read())
    checks = {check for check, _ in rows}
    assert REQUIRED <= checks, f"checks without a canary row: {sorted(REQUIRED - checks)}"
    problems = []
    for check, tests in rows:
        if not tests:
            problems.append(f"{check}: no test named")
        for test_id in tests:
            fn = _function(test_id)
            if fn is None:
                problems.append(f"{check}: {test_id} does not exist")
                continue
            if any(isinstance(d, ast.Name) and d.id == "nightly" or isinstance(d, ast.Attribute) and
                   d.attr == "nightly" for d in fn.decorator_list):
                problems.append(f"{check}: {test_id} is nightly; a canary runs on every landing")
            asserts = [n for n in ast.walk(fn) if isinstance(n, ast.Assert)
                       or isinstance(n, ast.Attribute) and n.attr == "raises"]
            if not asserts:
                problems.append(f"{check}: {test_id} asserts nothing")
    assert not problems, "\n".join(problems)


def test_the_table_reader_sees_a_missing_or_nightly_canary(tmp_path):
    text = ("<!-- canaries: x -->\n| check | guards | canary fixture | test |\n|---|---|---|---|\n"
            "| golden curve | g | f | `src/tests/test_golden.py::test_no_such_test` |\n<!-- /canaries -->\n")
    ((check, tests),) = canary_rows(text)
    assert check == "golden curve" and tests == ["src/tests/test_golden.py::test_no_such_test"]
    assert _function(tests[0]) is None
    nightly = _function("src/tests/test_phases_torch.py::"
                        "test_kill_9_during_a_phase_leaves_nothing_and_a_rerun_starts_from_phase_1")
    assert nightly is not None and any(getattr(d, "id", "") == "nightly" for d in nightly.decorator_list)
