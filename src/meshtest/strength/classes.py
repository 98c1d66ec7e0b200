"""Print the generated corpus's known failures by class, from the committed manifests: one line
per class (a rule's step, kind and the first words of its reason, with its upstream reference)
with its case count, then the totals (cases, marked, random, value marks pinned by a signature),
then the OpInfos with no case expected to pass (every case marked or random), then the weak cases
(a degenerate reference: docs/strength.md, "No verdict from a degenerate comparison") by reason;
and the level-0 sample's marks by reference.
The figures docs/strength.md quotes for the classes come from it.

Command line: ``python3 tools/known_classes.py [--doc] [MANIFEST_DIR]`` (default
``cases/torch/opinfo``; ``--doc``: the sentence docs/strength.md quotes).
Reads files only; stdlib only.
"""
from __future__ import annotations

import collections
import glob
import json
import os
from dataclasses import dataclass, field
from typing import List


@dataclass
class Classes:
    """The corpus's marks and its cases that tell nothing, counted from the manifests."""

    total: int = 0
    random: int = 0
    uninitialised: int = 0
    pinned: int = 0
    #: (step, kind, reason's first 80 characters, reference) → cases
    classes: "collections.Counter[tuple]" = field(default_factory=collections.Counter)
    #: OpInfo → cases expected to pass (not marked, not random)
    passing: "collections.Counter[str]" = field(default_factory=collections.Counter)
    random_ops: set = field(default_factory=set)
    weak: "collections.Counter[str]" = field(default_factory=collections.Counter)
    weak_ops: "collections.Counter[str]" = field(default_factory=collections.Counter)
    cases_of: "collections.Counter[str]" = field(default_factory=collections.Counter)
    level0: "collections.Counter[str]" = field(default_factory=collections.Counter)

    @property
    def no_passing(self) -> List[str]:
        """The OpInfos with no case expected to pass, sorted."""
        return sorted(op for op, n in self.passing.items() if n == 0)


def count(where: str) -> Classes:
    """Count the ``manifest_*.json`` files in ``where``."""
    c = Classes()
    for path in sorted(glob.glob(os.path.join(where, "manifest_*.json"))):
        with open(path, encoding="utf-8") as f:
            for entry in json.load(f)["cases"]:
                c.total += 1
                c.random += bool(entry.get("random"))
                c.uninitialised += bool(entry.get("uninitialised"))
                known = entry.get("known_failure")
                c.passing[entry["op"]] += not known and not entry.get("random")
                c.cases_of[entry["op"]] += 1
                if entry.get("random"):
                    c.random_ops.add(entry["op"])
                if entry.get("weak"):
                    c.weak[entry["weak"]] += 1
                    c.weak_ops[entry["op"]] += 1
                if known and "cpu_local" in entry["tags"]:
                    c.level0[known.get("upstream") or "divergence"] += 1
                if known:
                    c.pinned += "signature" in known
                    c.classes[(known["step"], known["kind"], known["reason"][:80],
                               known.get("upstream") or "divergence")] += 1
    return c


def doc_sentence(c: Classes) -> str:
    """The figures docs/strength.md quotes, as one sentence (between its ``known_classes``
    markers; ``src/tests/test_known_classes.py`` fails when the page says otherwise)."""
    none = c.no_passing
    rnd = sum(op in c.random_ops for op in none)
    return (f"{c.total:,} generated cases, {sum(c.classes.values()):,} marked in {len(c.classes)} classes, "
            f"{c.pinned:,} of them pinned by a value signature, {c.random:,} random and {c.uninitialised:,} "
            f"that return uninitialised memory; {len(none)} of {len(c.passing)} OpInfos have no case expected "
            f"to pass ({rnd} random, {len(none) - rnd} failing for another reason); "
            f"{sum(c.weak.values()):,} weak cases in {len(c.weak_ops)} OpInfos.")


def main(argv: list, root: str = ".") -> int:
    """Print the classes of the manifests in ``argv[1]`` (default: ``cases/torch/opinfo`` under
    ``root``); with ``--doc`` only :func:`doc_sentence`; exit 0."""
    doc = "--doc" in argv
    args = [a for a in argv[1:] if a != "--doc"]
    c = count(args[0] if args else os.path.join(root, "cases", "torch", "opinfo"))
    if doc:
        print(doc_sentence(c))
        return 0
    for (step, kind, reason, ref), n in sorted(c.classes.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{n:6d}  {kind:8s} at {step:15s} {reason}... ({ref})")
    print(f"total: {c.total} generated case(s), {sum(c.classes.values())} marked in {len(c.classes)} class(es), "
          f"{c.pinned} of them pinned by a value signature; {c.random} random, {c.uninitialised} uninitialised memory")
    print(f"level 0 (cpu_local): {sum(c.level0.values())} marked in {len(c.level0)} group(s) by reference: "
          + ", ".join(f"{ref} {n}" for ref, n in c.level0.most_common()))
    none = c.no_passing
    print(f"OpInfos with no case expected to pass: {len(none)} of {len(c.passing)} "
          f"({sum(op in c.random_ops for op in none)} random): "
          + ", ".join(op + (" (random)" if op in c.random_ops else "") for op in none))
    every = sorted(op for op, n in c.weak_ops.items() if n == c.cases_of[op])
    print(f"weak cases (a degenerate reference no other drawn sample could replace): {sum(c.weak.values())} in "
          f"{len(c.weak_ops)} OpInfos ({', '.join(f'{n} {why}' for why, n in c.weak.most_common())}); "
          f"every case weak: {', '.join(every) or 'none'}")
    return 0
