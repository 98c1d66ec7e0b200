"""report.html's case rows: one error block per distinct error with the ranks that agree named
together, the failing file and case first, paths under the artifacts directory made relative."""
from __future__ import annotations

from meshtest.contract import CaseOutcome, RankFailure
from meshtest.report.html import write_html_report


def test_agreeing_ranks_share_one_error_block_and_failures_come_first(tmp_path):
    out = tmp_path / "extra-output"
    out.mkdir()
    same = "AssertionError: out (rank {r}): 3 of 8 elements outside rtol=1e-05"
    outcomes = [
        CaseOutcome("a_pass", "cases/a.py", "w4", 4, "pass", launch_dir="w4"),
        CaseOutcome("b_fail", "cases/b.py", "w4", 4, "fail", launch_dir="w4", failures=[
            RankFailure(0, "fail", "compare", same.format(r=0)),
            RankFailure(1, "fail", "compare", same.format(r=1)),
            RankFailure(3, "error", "gather", f"RuntimeError: peer gone, see {out}/ranks/w4/rank3.log")]),
        CaseOutcome("a_xfail", "cases/a.py", "w4", 4, "xfail", launch_dir="w4", known_failure="raises: it does",
                    kind="op"),
        CaseOutcome("s_xfail", "cases/a.py", "w2", 2, "xfail", launch_dir="w2", known_failure="raises: too",
                    kind="scenario"),
    ]
    write_html_report(str(out / "report.html"), outcomes, notes=[f"artifacts in {out}/ranks"])
    html = (out / "report.html").read_text()
    row = html.split('id="b_fail"', 1)[1].split("</tr>", 1)[0]
    assert row.count('class="error-block"') == 2
    assert "rank(s) 0,1: fail at step\n compare" in row and "rank(s) 3: error at step\n gather" in row
    assert "see ranks/w4/rank3.log" in row and str(tmp_path) not in html  # relative, in rows and notes
    assert "artifacts in ranks" in html
    assert html.index("<h2>cases/b.py</h2>") < html.index("<h2>cases/a.py</h2>")  # the failing file first
    assert html.index('id="failures"') < html.index('id="legend"') < html.index("<h2>cases/b.py</h2>")
    assert html.count('<li class="fail"><a href="#b_fail">cases/b.py::b_fail</a>') == 1
    assert 'class="badge xfail">xfail: 2' in html and 'class="badge pass">pass: 1' in html
    # a known failure of an op case says how to get its standalone script; a scenario has none
    assert html.count("python -m meshtest repro ") == 1 and "python -m meshtest repro cases/a.py::a_xfail" in html
