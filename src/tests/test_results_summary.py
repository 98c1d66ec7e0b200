"""tools/results_summary.py (meshtest.report.summary): totals count xfail apart, and a passing
case whose committed golden curve was not compared (its curve missing from the sandbox) fails the
summary, named."""
from __future__ import annotations

import json
import os

import meshtest
from meshtest.contract import CaseOutcome
from meshtest.report.results import write_results

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))


def _tool():
    from meshtest.report import summary  # tools/results_summary.py is its entry point

    return summary


def _repo(tmp_path):
    golden = tmp_path / "repo" / "cases" / "t" / "golden"
    golden.mkdir(parents=True)
    (golden / "a.json").write_text(json.dumps({"case": "a", "build": {}, "losses": [1.0, 0.5]}))
    (golden / "b.json").write_text(json.dumps({"case": "b", "build": {}, "losses": [1.0]}))
    (golden / "u.json").write_text(json.dumps({"case": "u", "no_curve": "unsupported"}))
    return str(tmp_path / "repo")


def test_a_passing_case_whose_curve_was_not_compared_is_named(tmp_path):
    tool = _tool()
    cases = {
        "cases/t/case_x.py::a": CaseOutcome("a", "cases/t/case_x.py", "w2", 2, "pass",
                                            detail="golden curve: 2 step(s) from step 0 equal to a.json"),
        "cases/t/case_x.py::b": CaseOutcome("b", "cases/t/case_x.py", "w2", 2, "pass",
                                            detail="golden curve: none recorded yet (...)"),
        "cases/t/case_x.py::u": CaseOutcome("u", "cases/t/case_x.py", "w2", 2, "unsupported"),
        "cases/t/case_x.py::c": CaseOutcome("c", "cases/t/case_x.py", "w2", 2, "pass"),  # no committed curve
    }
    compared, missed = tool.golden_curves(cases, _repo(tmp_path))
    assert compared == ["cases/t/case_x.py::a"] and missed == ["cases/t/case_x.py::b"]


def test_the_closing_line_counts_xfail_apart(tmp_path, capsys):
    tool = _tool()
    run = tmp_path / "dist" / "t"
    run.mkdir(parents=True)
    write_results(str(run / "results.jsonl"), [CaseOutcome("p", "f.py", "w2", 2, "pass"),
                                               CaseOutcome("x", "f.py", "w2", 2, "xfail", known_failure="bug")])
    assert tool.main(["results_summary.py", str(tmp_path / "dist")], repo=str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "t: 1/2 passed, 1 xfailed" in out and out.splitlines()[-1] == "meshtest: 1 passed, 1 xfailed, 0 failed"


def _pants_results(stdin, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, os.path.join(REPO, "tools", "pants_results.py"), *args], input=stdin,
                          capture_output=True, text=True)


def test_pants_result_lines_no_line_proves_nothing():
    warm = ("✓ cases/torch/case_cat.py and 10 other files succeeded in 8.1s (cached locally).\n"
            "✓ cases/torch/case_sort.py succeeded in 4.2s (memoized).\n")
    assert _pants_results(warm, "--all-cached").returncode == 0
    assert _pants_results(warm, "--some-fresh").returncode == 1
    fresh = warm + "✕ cases/torch/case_mm.py failed in 9.0s.\n"
    assert _pants_results(fresh, "--all-cached").returncode == 1
    assert _pants_results(fresh, "--some-fresh").returncode == 0
    for flag in ("--all-cached", "--some-fresh"):  # the canary: a run that printed no result line
        proc = _pants_results("18:00:01 [INFO] Completed: Run meshtest cases\n", flag)
        assert proc.returncode == 1 and "no result line" in proc.stdout


def test_a_test_over_half_its_timeout_fails_the_budget_naming_it_and_its_share(tmp_path):
    """CI's budget check (`.ci/run`): each project test that ran took at most half its timeout,
    read from the run's own result lines and `./pants peek`'s timeout fields."""
    peek = tmp_path / "peek.json"
    peek.write_text(json.dumps([{"address": "src/tests/test_a.py:tests", "timeout": 300},
                                {"address": "src/tests/test_b.py:tests", "timeout": None},
                                {"address": "src/tests/test_c.py:tests", "timeout": 60}]))
    log = ("✓ src/tests/test_a.py:tests succeeded in 149.0s.\n"
           "✓ src/tests/test_b.py:tests succeeded in 12.5s.\n"
           "✓ src/tests/test_c.py:tests succeeded in 59.0s (cached locally).\n")  # a cache hit did not run
    args = ("--within-share", "0.5", "--timeouts", str(peek), "--default-timeout", "600")
    ok = _pants_results(log, *args)
    assert ok.returncode == 0 and "OVER BUDGET" not in ok.stdout, ok.stdout
    assert " 149.0      300    50%  src/tests/test_a.py:tests" in ok.stdout, ok.stdout  # slowest share first
    slow = _pants_results(log + "✕ src/tests/test_b.py:tests failed in 301.0s.\n", *args)
    assert slow.returncode == 1, slow.stdout
    assert "OVER BUDGET: src/tests/test_b.py:tests took 301.0 s, 50% of its 600 s timeout" in slow.stdout
    over = _pants_results("✓ src/tests/test_a.py:tests succeeded in 151.0s.\n", *args)
    assert over.returncode == 1 and "OVER BUDGET: src/tests/test_a.py:tests took 151.0 s, 50% of its 300 s" \
        in over.stdout, over.stdout
    assert _pants_results("nothing ran\n", *args).returncode == 1  # no line proves nothing
