#!/usr/bin/env python3
"""Print a pytest ``-k`` expression naming exactly the cases whose dispatch maps list a rule module
changed since REF (``git diff --name-only REF`` and untracked files), or nothing when a change is
not a mapped rule module (the selection then stays at file granularity). Used by tools/pr-test;
the logic is :func:`meshtest.model.dispatch_map.affected_cases`.

Usage: ``python3 tools/affected_cases.py REF``. Stdlib only.
"""
import glob
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from meshtest.model import dispatch_map  # noqa: E402


def main(argv):
    ref = argv[1]
    git = ["git", "-C", REPO]
    changed = subprocess.run(git + ["diff", "--name-only", ref], capture_output=True, text=True, check=True).stdout
    untracked = subprocess.run(git + ["ls-files", "--others", "--exclude-standard"], capture_output=True, text=True,
                               check=True).stdout
    paths = [p for p in (changed + untracked).splitlines() if p.strip()]
    maps = {p: dispatch_map.read(p) for p in glob.glob(os.path.join(REPO, "cases", "**", dispatch_map.FILE),
                                                        recursive=True)}
    names = dispatch_map.affected_cases(maps, paths) if paths else None
    if names:
        print(" or ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
