#!/usr/bin/env python3
"""Print the generated corpus's known failures by class, from the committed manifests.

The logic lives in :mod:`meshtest.strength.classes` (its docstring: what it prints); this is its
command-line entry point: ``python3 tools/known_classes.py [MANIFEST_DIR]``. Runs with the system
``python3`` (stdlib only).
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from meshtest.strength.classes import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv, REPO))
