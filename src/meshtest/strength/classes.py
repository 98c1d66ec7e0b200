"""Print the generated corpus's known failures by class, from the committed manifests: one line
per class (a rule's step, kind and the first words of its reason, with its upstream reference)
with its case count, then the totals (cases, marked, random, value marks pinned by a signature),
then the OpInfos with no case expected to pass (every case marked or random), then the weak cases
(a degenerate reference: docs/strength.md, "No verdict from a degenerate comparison") by reason;
and the level-0 sample's marks by reference.
The figures docs/strength.md quotes for the classes come from it.

Command line: ``python3 tools/known_classes.py [MANIFEST_DIR]`` (default ``cases/torch/opinfo``).
Reads files only; stdlib only.
"""
from __future__ import annotations

import collections
import glob
import json
import os


def main(argv: list, root: str = ".") -> int:
    """Print the classes of the manifests in ``argv[1]`` (default: ``cases/torch/opinfo`` under
    ``root``); exit 0."""
    where = argv[1] if len(argv) > 1 else os.path.join(root, "cases", "torch", "opinfo")
    classes: "collections.Counter[tuple]" = collections.Counter()
    total = random_ = uninitialised = pinned = 0
    passing: "collections.Counter[str]" = collections.Counter()
    random_ops = set()
    weak: "collections.Counter[str]" = collections.Counter()
    weak_ops: "collections.Counter[str]" = collections.Counter()
    cases_of: "collections.Counter[str]" = collections.Counter()
    level0: "collections.Counter[str]" = collections.Counter()
    for path in sorted(glob.glob(os.path.join(where, "manifest_*.json"))):
        with open(path, encoding="utf-8") as f:
            for entry in json.load(f)["cases"]:
                total += 1
                random_ += bool(entry.get("random"))
                uninitialised += bool(entry.get("uninitialised"))
                known = entry.get("known_failure")
                passing[entry["op"]] += not known and not entry.get("random")
                cases_of[entry["op"]] += 1
                if entry.get("random"):
                    random_ops.add(entry["op"])
                if entry.get("weak"):
                    weak[entry["weak"]] += 1
                    weak_ops[entry["op"]] += 1
                if known and "cpu_local" in entry["tags"]:
                    level0[known.get("upstream") or "divergence"] += 1
                if known:
                    pinned += "signature" in known
                    classes[(known["step"], known["kind"], known["reason"][:80],
                             known.get("upstream") or "divergence")] += 1
    for (step, kind, reason, ref), n in sorted(classes.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{n:6d}  {kind:8s} at {step:15s} {reason}... ({ref})")
    print(f"total: {total} generated case(s), {sum(classes.values())} marked in {len(classes)} class(es), "
          f"{pinned} of them pinned by a value signature; {random_} random, {uninitialised} uninitialised memory")
    print(f"level 0 (cpu_local): {sum(level0.values())} marked in {len(level0)} group(s) by reference: "
          + ", ".join(f"{ref} {n}" for ref, n in level0.most_common()))
    none = sorted(op for op, n in passing.items() if n == 0)
    print(f"OpInfos with no case expected to pass: {len(none)} of {len(passing)} "
          f"({sum(op in random_ops for op in none)} random): "
          + ", ".join(op + (" (random)" if op in random_ops else "") for op in none))
    every = sorted(op for op, n in weak_ops.items() if n == cases_of[op])
    print(f"weak cases (a degenerate reference no other drawn sample could replace): {sum(weak.values())} in "
          f"{len(weak_ops)} OpInfos ({', '.join(f'{n} {why}' for why, n in weak.most_common())}); "
          f"every case weak: {', '.join(every) or 'none'}")
    return 0
