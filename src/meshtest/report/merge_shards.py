"""Merge the ``dist/test`` trees of a sharded CI run into one, for one index page and one summary.

Each CI node runs ``./pants --tag=GATE test cases:: --test-shard=k/N`` and uploads its
``dist/test``; the merge step downloads them all and runs::

    python3 tools/merge_shards.py OUT SHARD_DIR...     # e.g. merged shard-0/dist/test shard-1/dist/test
    python3 tools/report_index.py OUT                   # one index: targets -> cases -> ranks
    python3 tools/results_summary.py OUT                # one summary; exit 1 on a failing case

Every test-run directory of every shard (one per Pants test process: a case file, or a batch
named after its first file) is copied to ``OUT/<name>``; ``OUT/shards.json`` records which shard
each run and each case file came from. A case file may be reported by one shard only: Pants'
``--test-shard`` assigns each target to exactly one shard (``crc32(address) % N``), so a case
file in two shards — or a run name in two shards — means the shards were not one split of one
gate, and the merge stops with exit 2 naming them (nothing is written over). Stdlib only.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Dict, List


def case_files_of(run_dir: str) -> List[str]:
    """The case files a test run reported: ``targets/<path with / as .>/`` under it (the runner
    writes results per case file there)."""
    targets = os.path.join(run_dir, "targets")
    return sorted(os.listdir(targets)) if os.path.isdir(targets) else []


def merge(out: str, shards: List[str]) -> Dict[str, object]:
    """Copy every run of every shard into ``out``.

    :returns: the ``shards.json`` document (runs and case files by shard).
    :raises ValueError: a run name or a case file reported by two shards; a shard that is not a
        directory.
    """
    runs: Dict[str, str] = {}
    files: Dict[str, str] = {}
    clashes: List[str] = []
    for shard in shards:
        if not os.path.isdir(shard):
            raise ValueError(f"{shard}: not a directory (a shard's dist/test)")
        for name in sorted(os.listdir(shard)):
            run = os.path.join(shard, name)
            if not os.path.isfile(os.path.join(run, "results.jsonl")):
                continue
            if name in runs:
                clashes.append(f"run {name}: in {runs[name]} and {shard}")
            runs[name] = shard
            for f in case_files_of(run):
                if f in files and files[f] != shard:
                    clashes.append(f"case file {f}: in {files[f]} and {shard}")
                files[f] = shard
    if clashes:
        raise ValueError("not one split of one gate:\n  " + "\n  ".join(clashes))
    os.makedirs(out, exist_ok=True)
    for name, shard in sorted(runs.items()):
        dest = os.path.join(out, name)
        if os.path.exists(dest):
            raise ValueError(f"{dest} exists already; merge into an empty directory")
        shutil.copytree(os.path.join(shard, name), dest, symlinks=True)
    doc = {"shards": shards, "runs": runs, "case_files": files}
    with open(os.path.join(out, "shards.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    return doc


def main(argv: List[str]) -> int:
    """``OUT SHARD_DIR...``: exit 0 merged, 2 wrong arguments or not one split of one gate."""
    if len(argv) < 2:
        print("usage: python3 tools/merge_shards.py OUT SHARD_DIR...\n" + __doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    try:
        doc = merge(argv[0], argv[1:])
    except ValueError as e:
        print(f"merge_shards: {e}", file=sys.stderr)
        return 2
    print(f"merge_shards: {len(doc['runs'])} run(s), {len(doc['case_files'])} case file(s) from "
          f"{len(argv) - 1} shard(s) into {argv[0]}")
    return 0

