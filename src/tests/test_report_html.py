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


def test_a_training_case_draws_its_losses_against_the_baseline_and_the_golden_curve(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)  # the golden curve is read from the case file's directory
    (tmp_path / "cases" / "t" / "golden").mkdir(parents=True)
    (tmp_path / "cases" / "t" / "golden" / "train_a.json").write_text(json.dumps({"losses": [1.5, 1.25, 1.0]}))
    out = tmp_path / "extra-output"
    case_dir = out / "cases" / "train_a"
    case_dir.mkdir(parents=True)
    (case_dir / "losses_rank1.json").write_text(json.dumps({"losses": [None, None, None]}))  # a first pipeline stage
    (case_dir / "losses_rank0.phase1.json").write_text(json.dumps({"losses": [9.0]}))  # a phase's: not this chart
    (case_dir / "losses_rank0.json").write_text(json.dumps({
        "losses": [1.5, 1.25, 1.0], "baseline": [1.5, 1.2, 0.9], "grad_norm": [3.0, 2.0, 1.0],
        "baseline_grad_norm": [3.0, 2.1, 1.1]}))
    outcomes = [CaseOutcome("train_a", "cases/t/case_train.py", "w2", 2, "pass", launch_dir="w2", kind="train"),
                CaseOutcome("train_b", "cases/t/case_train.py", "w2", 2, "pass", launch_dir="w2", kind="train")]
    write_html_report(str(out / "report.html"), outcomes)
    html = (out / "report.html").read_text()
    row = html.split('id="train_a"', 1)[1].split("</tr>", 1)[0]
    assert row.count('<figure class="curve train">') == 2  # loss, grad norm
    loss, grad = row.split('<figure class="curve train">')[1:]
    assert [s.split('"')[0] for s in loss.split('data-series="')[1:]] == ["parallel", "single device", "golden"]
    assert [s.split('"')[0] for s in grad.split('data-series="')[1:]] == ["parallel", "single device"]
    assert "loss per step: 0.9 to 1.5" in " ".join(loss.split())
    assert "curve" not in html.split('id="train_b"', 1)[1].split("</tr>", 1)[0]  # no losses file: no chart


def test_a_phased_case_links_every_phase_logs(tmp_path):
    out = tmp_path / "extra-output"
    for launch, ranks in (("w2", 2), ("w4-phase2", 4)):
        (out / "ranks" / launch).mkdir(parents=True)
        for r in range(ranks):
            (out / "ranks" / launch / f"rank{r}.log").write_text("log\n")
    o = CaseOutcome("resume_x", "cases/t.py", "w4-phase2", 4, "pass", launch_dir="w4-phase2",
                    detail="phase 1/2 pass in w2; phase 2/2 pass in w4-phase2")
    write_html_report(str(out / "report.html"), [o])
    row = (out / "report.html").read_text().split('id="resume_x"', 1)[1].split("</tr>", 1)[0]
    assert 'phase 1 (w2):' in row and row.count('href="ranks/w2/rank') == 2  # the earlier phase, each rank
    assert row.count('href="ranks/w4-phase2/rank') == 4 * 2  # the last phase: its rank cells (log, jsonl)
