#!/usr/bin/env python3
"""Print one line per case target and a closing total from the per-target results that
``./pants test`` leaves under ``dist/test/<target>/results.jsonl``. The total counts each case
once (from the newest run that recorded it), so a case run at two gates is not counted twice.

When cases carry test-plan IDs (``spec_id``), it also prints the ID table over all runs.

Usage: ``python3 tools/results_summary.py [dist/test]``. Exit code 1 when a recorded case
did not pass (or no results were found), else 0. Reads files only; stdlib only.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Dict, List

PASSING = ("pass", "xfail")
#: not run because the platform lacks a feature: neither passed nor failed, listed
NEUTRAL = ("unsupported",)


def collect(root: str) -> Dict[str, List[dict]]:
    """``{test result dir: [outcome, ...]}`` from ``<root>/<dir>/results.jsonl`` (one level deep:
    the per-file copies under ``targets/`` are not counted twice)."""
    found: Dict[str, List[dict]] = {}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, name, "results.jsonl")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                found[name] = [json.loads(line) for line in f if line.strip()]
    return found


def spec_table_lines(cases: Dict[str, dict]) -> List[str]:
    """The table test-plan ID → outcomes over every case (see :func:`newest_per_case`), rendered
    by meshtest's own reporter (stdlib-only) so it reads as each run's table does."""
    with_id = [o for o in cases.values() if o.get("spec_id")]
    if not with_id:
        return []
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    from meshtest.reporter import CaseOutcome, spec_table

    fields = set(CaseOutcome.__dataclass_fields__)
    return ["all runs: " + line if i == 0 else line
            for i, line in enumerate(spec_table([CaseOutcome(**{k: v for k, v in o.items() if k in fields})
                                                 for o in with_id]))]


def newest_per_case(root: str, found: Dict[str, List[dict]]) -> Dict[str, dict]:
    """Each case once: a case that several runs recorded (e.g. the cpu_level0 job and a
    cpu_level1 run of the same files) is taken from the run whose results.jsonl is newest."""
    order = sorted(found, key=lambda name: os.path.getmtime(os.path.join(root, name, "results.jsonl")))
    return {f"{o['file']}::{o['case']}": o for name in order for o in found[name]}


def main(argv: List[str]) -> int:
    root = argv[1] if len(argv) > 1 else os.path.join("dist", "test")
    found = collect(root)
    for target in sorted(found):
        outcomes = found[target]
        ok = sum(o["status"] in PASSING for o in outcomes)
        neutral = sum(o["status"] in NEUTRAL for o in outcomes)
        bad = [f"{o['case']}={o['status']}" for o in outcomes if o["status"] not in PASSING + NEUTRAL]
        print(f"{target}: {ok}/{len(outcomes)} passed" + (f", {neutral} unsupported on platform" if neutral else "")
              + (f"; failing: {', '.join(bad)}" if bad else ""))
    if not found:
        print(f"no results.jsonl under {root}")
    cases = newest_per_case(root, found)
    for line in spec_table_lines(cases):
        print(line)
    passed = sum(o["status"] in PASSING for o in cases.values())
    unsupported = sum(o["status"] in NEUTRAL for o in cases.values())
    failed = len(cases) - passed - unsupported
    if unsupported:
        print(f"meshtest: {unsupported} unsupported on platform")
    print(f"meshtest: {passed} passed, {failed} failed")
    return 0 if found and not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
