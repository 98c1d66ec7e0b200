"""tools/perf_guard.py: figures from long-run curves (median step time of the slowest rank, the
largest peak RSS) and the regression flags against a baseline."""
from __future__ import annotations

import json
import os

import meshtest
from meshtest.report import perf_guard  # tools/perf_guard.py is its entry point

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))


def _curve(tmp_path, case, rank, wall, rss_mib):
    d = tmp_path / "cases" / case
    d.mkdir(parents=True, exist_ok=True)
    (d / f"curve_rank{rank}.json").write_text(json.dumps({
        "case": case, "rank": rank, "build": {"torch": "x"}, "warmup": 2, "loss": [1.0] * len(wall),
        "wall_s": wall, "rss_kb": [int(rss_mib * 1024)] * len(wall)}))


def test_figures_take_the_slowest_rank_median_and_the_largest_rss(tmp_path):
    _curve(tmp_path, "long_run_tp", 0, [9.0, 9.0, 0.1, 0.1, 5.0], 300)   # median after warm-up 0.1
    _curve(tmp_path, "long_run_tp", 1, [9.0, 9.0, 0.2, 0.2, 0.2], 310)   # 0.2: the slower rank
    fig = perf_guard.figures(str(tmp_path))["long_run_tp"]
    assert fig == {"steps_per_s": 5.0, "peak_rss_mib": 310.0, "ranks": 2, "build": {"torch": "x"}}


def test_regressions_are_flagged_past_the_thresholds_and_a_missing_case_too():
    base = {"thresholds": {"throughput_drop": 0.3, "rss_growth": 0.15},
            "cases": {name: {"steps_per_s": 10.0, "peak_rss_mib": 100.0} for name in ("a", "b", "c", "gone")}}
    now = {"a": {"steps_per_s": 7.5, "peak_rss_mib": 114.0, "ranks": 1},  # within both thresholds
           "b": {"steps_per_s": 6.5, "peak_rss_mib": 100.0, "ranks": 1},  # 35 % slower
           "c": {"steps_per_s": 10.0, "peak_rss_mib": 120.0, "ranks": 1}}  # 20 % more memory
    lines = perf_guard.compare(now, base)
    flagged = [line.split()[1] for line in lines if line.startswith("REGRESSION")]
    assert flagged == ["b", "c", "gone:"], lines
    assert "(throughput)" in next(line for line in lines if " b " in line)
    assert "(peak RSS)" in next(line for line in lines if " c " in line)
    best = perf_guard.best_of([{"a": {"steps_per_s": 1.0, "peak_rss_mib": 5.0}},
                               {"a": {"steps_per_s": 2.0, "peak_rss_mib": 4.0}}])
    assert best["a"]["steps_per_s"] == 2.0 and best["a"]["peak_rss_mib"] == 5.0
