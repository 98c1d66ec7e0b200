#!/usr/bin/env python3
"""Compare the verdicts of the one-process lane (``--tag=cpu_local``: every rank simulated in one
process) with the real lane (one process per rank, gloo) case by case, from the runs' results.

Usage::

    python3 tools/lane_diff.py [ROOT ...]      # default: dist/test

Every ``results.jsonl`` one level under each ROOT is read (``./pants test`` leaves one per test
run in ``dist/test/<target>/``; ``python -m meshtest run --artifacts-dir D`` leaves ``D/results.jsonl``,
so pass ``D``'s parent, or ``D`` itself). An outcome belongs to the local lane when its launch
group is the local one (``local``), else to the real lane; the newest result per case
and lane is kept. Printed: how many cases both lanes ran and agree on; each disagreement (case,
file, both verdicts, the local lane's failing step and first line); the cases the local lane
ran that no real-lane run covers; and the cases that declare a ``simulation_limit`` (they run on
real ranks only), with their reasons, read from the case files' static scan.

A disagreement is a bug to fix — in meshtest's simulation backend
(``src/meshtest/platforms/torch_local.py``) or in torch's simulator — or a known limit of the
simulation, which the case then declares (``OpShardCase(simulation_limit="...")``) so that the
local lane no longer runs it. Exit code 1 when there is a disagreement or nothing to compare.
Reads files only; stdlib only.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from meshtest.contract import CaseOutcome  # noqa: E402
from meshtest.model.scan import scan_case_file  # noqa: E402
from meshtest.report.results import read_results, results_files  # noqa: E402

#: Launch-group id of the one-process lane (:func:`meshtest.parent.planner.plan_local_groups`).
LOCAL_GROUP = "local"


def by_lane(paths: List[str]) -> Tuple[Dict[str, CaseOutcome], Dict[str, CaseOutcome]]:
    """(local lane, real lane): the newest outcome per ``file::case`` in each."""
    local: Dict[str, CaseOutcome] = {}
    ranks: Dict[str, CaseOutcome] = {}
    for path in paths:
        for o in read_results(path):
            if o.case.startswith("<file "):
                continue
            (local if o.group == LOCAL_GROUP else ranks)[f"{o.file}::{o.case}"] = o
    return local, ranks


def disagreements(local: Dict[str, CaseOutcome], ranks: Dict[str, CaseOutcome]) -> List[Tuple[str, CaseOutcome,
                                                                                                CaseOutcome]]:
    """The cases both lanes ran whose statuses differ: (key, local outcome, real outcome)."""
    return [(k, local[k], ranks[k]) for k in sorted(local) if k in ranks and local[k].status != ranks[k].status]


def declared_limits(files: List[str]) -> List[Tuple[str, str, str]]:
    """(file, case, reason) of every case in ``files`` that declares a ``simulation_limit``."""
    out = []
    for f in sorted(set(files)):
        if os.path.isfile(f):
            out += [(f, c.name, c.simulation_limit) for c in scan_case_file(f).cases if c.simulation_limit]
    return out


def _first_line(o: CaseOutcome) -> str:
    text = next((f.error for f in o.failures if f.error), "")
    return text.strip().splitlines()[0][:160] if text.strip() else ""


def main(argv: List[str]) -> int:
    roots = argv[1:] or [os.path.join("dist", "test")]
    local, ranks = by_lane(results_files(roots))
    both = [k for k in local if k in ranks]
    differ = disagreements(local, ranks)
    print(f"lane diff over {', '.join(roots)}: local lane {len(local)} case(s), real lane {len(ranks)}; "
          f"both ran {len(both)}, agree on {len(both) - len(differ)}, disagree on {len(differ)}")
    for key, lo, ro in differ:
        why = _first_line(lo) or _first_line(ro)
        step = next((f.step for f in lo.failures), "") or next((f.step for f in ro.failures), "")
        print(f"  DIFFER {key}: local {lo.status}, ranks {ro.status}" + (f" (step {step}: {why})" if why else ""))
    uncovered = sorted(k for k in local if k not in ranks)
    if uncovered:
        print(f"  {len(uncovered)} case(s) ran only in the local lane (no real-lane result here): "
              + ", ".join(k.split("::", 1)[1] for k in uncovered[:10]) + (" ..." if len(uncovered) > 10 else ""))
    limits = declared_limits([o.file for o in list(local.values()) + list(ranks.values())])
    for f, case, reason in limits:
        print(f"  real ranks only: {f}::{case}: {reason}")
    if not both:
        print("nothing to compare: run both lanes first, e.g. ./pants --tag=cpu_level0 test cases:: and "
              "./pants --tag=cpu_local test cases::")
        return 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
