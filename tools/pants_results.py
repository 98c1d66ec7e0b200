#!/usr/bin/env python3
"""Judge the result lines of a ``./pants test`` run from its output (``tools/check-incremental``).

Pants prints one line per test run: ``✓ cases/torch/case_sort.py succeeded in 8.12s.`` (``✕ ...
failed``; a batch of case files: ``✓ cases/torch/case_cat.py and 10 other files succeeded ...``),
with ``(cached)`` or ``(memoized)`` when the result came from a cache. Usage::

    ./pants ... test ... 2>&1 | python3 tools/pants_results.py --all-cached    # a warm rerun
    ./pants ... test ... 2>&1 | python3 tools/pants_results.py --some-fresh    # a changed cache key

    ./pants test src:: tools:: 2>&1 | tee log; ./pants peek src:: tools:: >peek.json
    python3 tools/pants_results.py --within-share 0.5 --timeouts peek.json --default-timeout 600 <log

Exit 0 when the lines say what was asked; 1 otherwise — and always 1 when there is no result
line at all (nothing selected, or a changed output format: a check that saw nothing proves
nothing). Prints the count of result lines, cached ones and those that ran.

``--within-share F``: every test target that ran took at most ``F`` of its timeout (the
``timeout`` field ``./pants peek`` prints, else ``--default-timeout``, Pants'
``[test].timeout_default``); prints each target's seconds and share, slowest first, and names
every one over the bound. Stdlib only.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Dict, List, Optional, Tuple

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


_TIMED = re.compile(r"^(?:✓|✕) (\S+)(?: and \d+ other files?)? (?:succeeded|failed) in ([0-9.]+)s")


def durations(text: str) -> Dict[str, float]:
    """Target address → seconds, from the result lines of a ``./pants test`` output that ran (a
    cache hit repeats an earlier run's time: left out)."""
    out = {}
    for line in text.splitlines():
        m = _TIMED.match(line)
        if m and not _CACHED.search(line):
            out[m.group(1)] = float(m.group(2))
    return out


def over_share(seconds: Dict[str, float], timeouts: Dict[str, Optional[int]], default: int, share: float
               ) -> Tuple[List[Tuple[str, float, int]], List[Tuple[str, float, int]]]:
    """(every target as (address, seconds, timeout), slowest share first; those above ``share`` of
    their timeout). ``timeouts``: address → the target's ``timeout`` field (None: ``default``)."""
    rows = sorted(((a, s, timeouts.get(a) or default) for a, s in seconds.items()), key=lambda r: -r[1] / r[2])
    return rows, [r for r in rows if r[1] > share * r[2]]


def _budget(text: str, peek_path: str, default: int, share: float) -> int:
    with open(peek_path, encoding="utf-8") as f:
        timeouts = {t["address"]: t.get("timeout") for t in json.load(f)}
    rows, over = over_share(durations(text), timeouts, default, share)
    if not rows:
        print("no result line that ran (✓/✕ <target> succeeded|failed in Ns): nothing was checked")
        return 1
    print(f"{'seconds':>8} {'timeout':>8} {'share':>6}  target")
    for address, seconds, timeout in rows:
        print(f"{seconds:8.1f} {timeout:8d} {seconds / timeout:6.0%}  {address}")
    for address, seconds, timeout in over:
        print(f"OVER BUDGET: {address} took {seconds:.1f} s, {seconds / timeout:.0%} of its {timeout} s timeout "
              f"(at most {share:.0%}): make it faster, or move it to the nightly job (docs/ci.md)")
    return 1 if over else 0


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    want = ap.add_mutually_exclusive_group(required=True)
    want.add_argument("--all-cached", action="store_true", help="every result came from a cache")
    want.add_argument("--some-fresh", action="store_true", help="at least one result ran (not from a cache)")
    want.add_argument("--within-share", type=float, metavar="F",
                      help="every target that ran took at most F of its timeout (with --timeouts)")
    ap.add_argument("--timeouts", metavar="PEEK_JSON", help="`./pants peek` output of the tested targets")
    ap.add_argument("--default-timeout", type=int, default=600, help="[test].timeout_default (seconds)")
    args = ap.parse_args(argv)
    if args.within_share is not None:
        if not args.timeouts:
            ap.error("--within-share needs --timeouts PEEK_JSON")
        return _budget(sys.stdin.read(), args.timeouts, args.default_timeout, args.within_share)
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
