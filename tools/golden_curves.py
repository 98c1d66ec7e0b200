#!/usr/bin/env python3
"""Record (--write) or check the golden loss curves of the training cases.

The logic lives in :mod:`meshtest.report.golden_curves` (its docstring: what it runs, what it prints,
exit codes); this is its command-line entry point: ``python3 tools/golden_curves.py --help``.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from meshtest.report.golden_curves import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(root=REPO))
