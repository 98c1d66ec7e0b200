#!/usr/bin/env python3
"""Print one line per case target and a closing total from the per-target results that
``./pants test`` leaves under ``dist/test/<target>/results.jsonl``. The total counts each case
once (from the newest run that recorded it), so a case run at two gates is not counted twice.

When cases carry test-plan IDs (``spec_id``), it also prints the ID table over all runs.

What passes, fails or neither is meshtest's own rule (``meshtest.status``): ``pass`` and
``xfail`` pass; ``unsupported`` and ``not_run`` are neither (listed); every other status fails.

Usage: ``python3 tools/results_summary.py [dist/test]``. Exit code 1 when a recorded case
failed (or no results were found), else 0. Reads files only; stdlib only.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from meshtest.contract import CaseOutcome  # noqa: E402
from meshtest.report.reporter import spec_table  # noqa: E402
from meshtest.report.results import collect  # noqa: E402
from meshtest.status import Status  # noqa: E402


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


def _line(target: str, outcomes: List[CaseOutcome]) -> str:
    ok = sum(o.status.passing for o in outcomes)
    unsupported = sum(o.status is Status.UNSUPPORTED for o in outcomes)
    not_run = sum(o.status is Status.NOT_RUN for o in outcomes)
    bad = [f"{o.case}={o.status}" for o in outcomes if o.status.failing]
    return (f"{target}: {ok}/{len(outcomes)} passed"
            + (f", {unsupported} unsupported on platform" if unsupported else "")
            + (f", {not_run} not run (fail-fast)" if not_run else "")
            + (f"; failing: {', '.join(bad)}" if bad else ""))


def main(argv: List[str]) -> int:
    root = argv[1] if len(argv) > 1 else os.path.join("dist", "test")
    found = collect(root)
    for target in sorted(found):
        print(_line(target, found[target]))
    if not found:
        print(f"no results.jsonl under {root}")
    cases = newest_per_case(root, found)
    for line in spec_table_lines(cases):
        print(line)
    passed = sum(o.status.passing for o in cases.values())
    failed = sum(o.status.failing for o in cases.values())
    unsupported = sum(o.status is Status.UNSUPPORTED for o in cases.values())
    not_run = sum(o.status is Status.NOT_RUN for o in cases.values())
    if unsupported:
        print(f"meshtest: {unsupported} unsupported on platform")
    if not_run:
        print(f"meshtest: {not_run} not run (a fail-fast gate stopped first)")
    print(f"meshtest: {passed} passed, {failed} failed")
    return 0 if found and not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
