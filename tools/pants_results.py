#!/usr/bin/env python3
"""Judge the result lines of a ``./pants test`` run from its output (``tools/check-incremental``).

Pants prints one line per test run: ``✓ cases/torch/case_sort.py succeeded in 8.12s.`` (``✕ ...
failed``; a batch of case files: ``✓ cases/torch/case_cat.py and 10 other files succeeded ...``),
with ``(cached)`` or ``(memoized)`` when the result came from a cache. Usage::

    ./pants ... test ... 2>&1 | python3 tools/pants_results.py --all-cached    # a warm rerun
    ./pants ... test ... 2>&1 | python3 tools/pants_results.py --some-fresh    # a changed cache key

Exit 0 when the lines say what was asked; 1 otherwise — and always 1 when there is no result
line at all (nothing selected, or a changed output format: a check that saw nothing proves
nothing). Prints the count of result lines, cached ones and those that ran. Stdlib only.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import List, Tuple

_RESULT = re.compile(r"^(✓|✕) \S+( and \d+ other files?)? (succeeded|failed)")
_CACHED = re.compile(r"\((cached|memoized)")


def result_lines(text: str) -> Tuple[List[str], List[str]]:
    """(cached, ran): the result lines of a ``./pants test`` output, split by whether Pants served
    them from a cache."""
    cached, ran = [], []
    for line in text.splitlines():
        if _RESULT.match(line):
            (cached if _CACHED.search(line) else ran).append(line)
    return cached, ran


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    want = ap.add_mutually_exclusive_group(required=True)
    want.add_argument("--all-cached", action="store_true", help="every result came from a cache")
    want.add_argument("--some-fresh", action="store_true", help="at least one result ran (not from a cache)")
    args = ap.parse_args(argv)
    cached, ran = result_lines(sys.stdin.read())
    print(f"pants results: {len(cached) + len(ran)} line(s), {len(cached)} cached, {len(ran)} ran")
    if not cached and not ran:
        print("no result line (✓/✕ <target> succeeded|failed): nothing was checked")
        return 1
    if args.all_cached and ran:
        print("ran instead of a cache hit:\n" + "\n".join(ran))
        return 1
    if args.some_fresh and not ran:
        print("every result came from a cache")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
