#!/usr/bin/env python3
"""Merge the ``dist/test`` trees of a sharded CI run into one, for one index page and one summary.

The logic lives in :mod:`meshtest.report.merge_shards` (its docstring: what it reads, what it prints,
exit codes); this is its command-line entry point: ``python3 tools/merge_shards.py OUT SHARD_DIR...``. Runs
with the system ``python3`` (stdlib only).
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from meshtest.report.merge_shards import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
