#!/usr/bin/env python3
"""Totals over the test runs' ``results.jsonl`` (each case once), the spec-ID table, golden curves.

The logic lives in :mod:`meshtest.report.summary` (its docstring: what it reads, what it prints,
exit codes); this is its command-line entry point: ``python3 tools/results_summary.py [ROOT ...]``. Runs
with the system ``python3`` (stdlib only).
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from meshtest.report.summary import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv, repo=REPO))
