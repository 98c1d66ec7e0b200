#!/usr/bin/env python3
"""Print peak device-slot usage and slot-time utilization from a slot pool's audit log.

Usage: ``python3 tools/slot_report.py [SLOT_DIR] [--since UNIX_TIME] [--target TEXT] [--exclude-target LABEL]``

SLOT_DIR defaults to ``$MESHTEST_SLOT_DIR``, else Pants' named cache
``~/.cache/pants/named_caches/meshtest_slots`` (where ``./pants test`` keeps the pool).
The figures come from :func:`meshtest.parent.slots.audit_stats`.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from meshtest.parent.slots import audit_stats, read_audit  # noqa: E402

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "pants", "named_caches", "meshtest_slots")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("slot_dir", nargs="?", default=os.environ.get("MESHTEST_SLOT_DIR", DEFAULT_DIR))
    ap.add_argument("--since", type=float, default=0.0, help="ignore records before this Unix time")
    ap.add_argument("--target", default="", help="only records whose target label contains TEXT (e.g. a case file, "
                                                  "when other runs share the pool)")
    ap.add_argument("--exclude-target", action="append", default=[], metavar="LABEL",
                    help="leave out records whose target label is exactly LABEL (another job's, on the same pool)")
    args = ap.parse_args(argv)
    records = [r for r in read_audit(args.slot_dir) if r["t"] >= args.since and args.target in str(r.get("target", ""))
               and str(r.get("target", "")) not in args.exclude_target]
    if not records:
        print(f"no audit records in {args.slot_dir}" + (f" since {args.since}" if args.since else ""))
    s = audit_stats(records)
    print(f"pool size          {s.size}")
    print(f"leases             {s.leases} ({s.open_leases} never released)")
    print(f"launches           {s.launches}")
    print(f"peak slots in use  {s.peak_in_use}")
    print(f"span               {s.span_s:.1f} s")
    print(f"slot-time used     {s.utilization:.1%}")
    print(f"mean wait          {s.mean_wait_s:.2f} s")
    return 0 if records or args.since else 1


if __name__ == "__main__":
    sys.exit(main())
