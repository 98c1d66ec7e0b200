"""Print one line per case target and a closing total from the per-target results that
``./pants test`` leaves under ``dist/test/<target>/results.jsonl``. The total counts each case
once (from the newest run that recorded it), so a case run at two gates is not counted twice.

When cases carry test-plan IDs (``spec_id``), it also prints the ID table over all runs.

What passes, fails or neither is meshtest's own rule (``meshtest.status``): ``pass`` passes,
``xfail`` (a known failure reproduced as declared) is counted apart; ``unsupported`` and
``not_run`` are neither (listed); every other status fails.

Golden curves: every passing training case whose committed curve
(``<case file dir>/golden/<case>.json``, relative to the repository root) stores losses must
record a curve comparison (a ``golden curve: N step(s) ...`` note in its outcome); one that
does not — its curve was not in the test's sandbox, or the check did not run — fails this
summary, named.

Usage: ``python3 tools/results_summary.py [dist/test]``. Exit code 1 when a recorded case
failed, a curve was not compared (or no results were found), else 0. Reads files only; stdlib only.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Tuple

from meshtest.contract import CaseOutcome
from meshtest.model.rules import GOLDEN_NOTE
from meshtest.report.reporter import closing_line, counts, spec_table
from meshtest.report.results import collect
from meshtest.status import Status


def newest_per_case(root: str, found: Dict[str, List[CaseOutcome]]) -> Dict[str, CaseOutcome]:
    """Each case once: a case that several runs recorded (e.g. the cpu_level0 job and a
    cpu_level1 run of the same files) is taken from the run whose results.jsonl is newest."""
    order = sorted(found, key=lambda name: os.path.getmtime(os.path.join(root, name, "results.jsonl")))
    return {f"{o.file}::{o.case}": o for name in order for o in found[name]}


def spec_table_lines(cases: Dict[str, CaseOutcome]) -> List[str]:
    """The table test-plan ID → outcomes over every case (see :func:`newest_per_case`), rendered
    by meshtest's own reporter so it reads as each run's table does."""
    lines = spec_table([o for o in cases.values() if o.spec_id])
    return ["all runs: " + line if i == 0 else line for i, line in enumerate(lines)]


def golden_curves(cases: Dict[str, CaseOutcome], repo: str) -> Tuple[List[str], List[str]]:
    """(compared, not compared): passing cases with a committed curve that stores losses, split by
    whether their outcome records a comparison (:data:`meshtest.model.rules.GOLDEN_NOTE`)."""
    compared, missed = [], []
    for key, o in sorted(cases.items()):
        path = os.path.join(repo, os.path.dirname(o.file), "golden", f"{o.case}.json")
        if o.status is not Status.PASS or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            if "losses" not in json.load(f):
                continue
        done = any(ln.startswith(GOLDEN_NOTE) and " step(s) " in ln for ln in o.detail.splitlines())
        (compared if done else missed).append(key)
    return compared, missed


def _line(target: str, outcomes: List[CaseOutcome]) -> str:
    ok = sum(o.status.passing for o in outcomes)
    xfail = sum(o.status is Status.XFAIL for o in outcomes)
    unsupported = sum(o.status is Status.UNSUPPORTED for o in outcomes)
    not_run = sum(o.status is Status.NOT_RUN for o in outcomes)
    bad = [f"{o.case}={o.status}" for o in outcomes if o.status.failing]
    return (f"{target}: {ok}/{len(outcomes)} passed"
            + (f", {xfail} xfailed" if xfail else "")
            + (f", {unsupported} unsupported on platform" if unsupported else "")
            + (f", {not_run} not run (fail-fast)" if not_run else "")
            + (f"; failing: {', '.join(bad)}" if bad else ""))


def main(argv: List[str], repo: str = "") -> int:
    root = argv[1] if len(argv) > 1 else os.path.join("dist", "test")
    found = collect(root)
    for target in sorted(found):
        print(_line(target, found[target]))
    if not found:
        print(f"no results.jsonl under {root}")
    cases = newest_per_case(root, found)
    for line in spec_table_lines(cases):
        print(line)
    compared, missed = golden_curves(cases, repo or os.getcwd())
    print(f"golden curves: {len(compared)} passing case(s) with a committed curve compared with it"
          + (f"; NOT compared ({len(missed)}): {', '.join(missed)}" if missed else ""))
    c = counts(list(cases.values()))
    print(closing_line(c))
    return 0 if found and not any(s.failing for s in c) and not missed else 1

