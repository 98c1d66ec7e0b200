#!/usr/bin/env python3
"""Compare the one-process lane's verdicts with the real lane's, case by case, from runs' results.

The logic lives in :mod:`meshtest.report.lane_diff` (its docstring: what it reads, what it prints,
exit codes); this is its command-line entry point: ``python3 tools/lane_diff.py [ROOT ...]``. Runs
with the system ``python3`` (stdlib only).
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from meshtest.report.lane_diff import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv))
