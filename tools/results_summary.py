#!/usr/bin/env python3
"""Print one line per case target and a closing total from the per-target results that
``./pants test`` leaves under ``dist/test/<target>/results.jsonl``.

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


def spec_table_lines(found: Dict[str, List[dict]]) -> List[str]:
    """The table test-plan ID → outcomes over every run under the root (each case once: a case
    that ran in several runs, e.g. at level0 and at level1, is taken from the last run listed),
    rendered by meshtest's own reporter (stdlib-only) so it reads as each run's table does."""
    by_case: Dict[str, dict] = {}
    for target in sorted(found):
        for o in found[target]:
            if o.get("spec_id"):
                by_case[o["case"]] = o
    if not by_case:
        return []
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    from meshtest.reporter import CaseOutcome, spec_table

    fields = set(CaseOutcome.__dataclass_fields__)
    return ["all runs: " + line if i == 0 else line
            for i, line in enumerate(spec_table([CaseOutcome(**{k: v for k, v in o.items() if k in fields})
                                                 for o in by_case.values()]))]


def main(argv: List[str]) -> int:
    root = argv[1] if len(argv) > 1 else os.path.join("dist", "test")
    found = collect(root)
    passed = failed = unsupported = 0
    for target in sorted(found):
        outcomes = found[target]
        ok = sum(o["status"] in PASSING for o in outcomes)
        neutral = sum(o["status"] in NEUTRAL for o in outcomes)
        passed += ok
        unsupported += neutral
        failed += len(outcomes) - ok - neutral
        bad = [f"{o['case']}={o['status']}" for o in outcomes if o["status"] not in PASSING + NEUTRAL]
        print(f"{target}: {ok}/{len(outcomes)} passed" + (f", {neutral} unsupported on platform" if neutral else "")
              + (f"; failing: {', '.join(bad)}" if bad else ""))
    if not found:
        print(f"no results.jsonl under {root}")
    for line in spec_table_lines(found):
        print(line)
    if unsupported:
        print(f"meshtest: {unsupported} unsupported on platform")
    print(f"meshtest: {passed} passed, {failed} failed")
    return 0 if found and not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
