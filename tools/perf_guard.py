#!/usr/bin/env python3
"""Throughput and peak RSS of the long-run training cases against tools/perf_baseline.json.

The logic lives in :mod:`meshtest.report.perf_guard` (its docstring: what it runs, what it prints,
exit codes); this is its command-line entry point: ``python3 tools/perf_guard.py --help``.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from meshtest.report.perf_guard import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(root=REPO))
