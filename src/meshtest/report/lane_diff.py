"""Compare the verdicts of the one-process lane (``--tag=cpu_local``: every rank simulated in one
process) with the real lane (one process per rank, gloo) case by case, from the runs' results.

Usage::

    python3 tools/lane_diff.py [ROOT ...]      # default: dist/test

Every ``results.jsonl`` one level under each ROOT is read (``./pants test`` leaves one per test
run in ``dist/test/<target>/``; ``python -m meshtest run --artifacts-dir D`` leaves ``D/results.jsonl``,
so pass ``D``'s parent, or ``D`` itself). An outcome belongs to the local lane when its launch
group is the local one (``local``), else to the real lane; the newest result per case
and lane is kept. Two lanes agree on a case when its verdict is the same: its status, the step
it failed at and the kind of error (``mismatch`` for a comparison, the exception's type for an
error, the status otherwise) — an ``error`` at ``run`` with a ``NotImplementedError`` in one lane
and a ``TypeError`` in the other disagree. Printed: how many cases both lanes ran and agree on;
each disagreement (case, both verdicts with step and kind, the first line); the cases only one
lane ran; the eligible cases the local lane skipped (a real-lane case whose static scan says the
lane runs it — ``cpu_level0``, no ``simulation_limit`` — with no local result); and the cases
that declare a ``simulation_limit`` (they run on real ranks only), with their reasons.

A disagreement is a bug to fix — in meshtest's simulation backend
(``src/meshtest/platforms/torch/local_lane.py``) or in torch's simulator — or a known limit of the
simulation, which the case then declares (``OpShardCase(simulation_limit="...")``) so that the
local lane no longer runs it. Exit code 1 when there is a disagreement, when the local lane
skipped an eligible case, or when there is nothing to compare. Reads files only; stdlib only.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

from meshtest.contract import CaseOutcome
from meshtest.model.scan import scan_case_file
from meshtest.report.results import error_kind as results_error_kind
from meshtest.report.results import read_results, results_files

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


def error_kind(o: CaseOutcome) -> str:
    """The kind of a verdict's failure (:func:`meshtest.report.results.error_kind` of its first line)."""
    return results_error_kind(o.status.value, _first_line(o))


def verdict(o: CaseOutcome) -> Tuple[str, str, str]:
    """(status, failing step, error kind): what two lanes must agree on."""
    return o.status.value, next((f.step for f in o.failures), ""), error_kind(o)


def disagreements(local: Dict[str, CaseOutcome], ranks: Dict[str, CaseOutcome]) -> List[Tuple[str, CaseOutcome,
                                                                                                CaseOutcome]]:
    """The cases both lanes ran whose verdicts (:func:`verdict`) differ: (key, local outcome, real outcome)."""
    return [(k, local[k], ranks[k]) for k in sorted(local) if k in ranks and verdict(local[k]) != verdict(ranks[k])]


def skipped_eligible(local: Dict[str, CaseOutcome], ranks: Dict[str, CaseOutcome]) -> Tuple[List[str], int]:
    """(keys of the real-lane cases the local lane should have run and did not, eligible count):
    a case is eligible when it ran on real ranks and its file's static scan says the one-process
    lane runs it (``ScannedCase.local_lane``)."""
    lane: Dict[str, Optional[bool]] = {}
    for f in sorted({o.file for o in ranks.values()}):
        if os.path.isfile(f):
            scan = scan_case_file(f)
            lane.update((f"{f}::{c.name}", c.local_lane) for c in scan.cases)
    eligible = [k for k, o in ranks.items() if o.status.counts_as_run and lane.get(k)]
    return sorted(k for k in eligible if k not in local), len(eligible)


def declared_limits(files: List[str]) -> List[Tuple[str, str, str]]:
    """(file, case, reason) of every case in ``files`` that declares a ``simulation_limit``."""
    out = []
    for f in sorted(set(files)):
        if os.path.isfile(f):
            out += [(f, c.name, c.simulation_limit) for c in scan_case_file(f).cases if c.simulation_limit]
    return out


def _show(o: CaseOutcome) -> str:
    status, step, kind = verdict(o)
    return status + (f" at {step}" if step else "") + (f" ({kind})" if kind != status else "")


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
        print(f"  DIFFER {key}: local {_show(lo)}, ranks {_show(ro)}" + (f" ({why})" if why else ""))
    for lane, mine, other in (("the local lane", local, ranks), ("the real lane", ranks, local)):
        only = sorted(k for k in mine if k not in other)
        if only:
            print(f"  {len(only)} case(s) ran only in {lane}: "
                  + ", ".join(k.split("::", 1)[1] for k in only[:10]) + (" ..." if len(only) > 10 else ""))
    skipped, eligible = skipped_eligible(local, ranks)
    print(f"  the local lane ran {eligible - len(skipped)} of the {eligible} eligible case(s) the real lane ran")
    if skipped:
        print(f"  SKIPPED by the local lane ({len(skipped)} eligible): "
              + ", ".join(skipped[:10]) + (" ..." if len(skipped) > 10 else ""))
    limits = declared_limits([o.file for o in list(local.values()) + list(ranks.values())])
    for f, case, reason in limits:
        print(f"  real ranks only: {f}::{case}: {reason}")
    if not both:
        print("nothing to compare: run both lanes first, e.g. ./pants --tag=cpu_level0 test cases:: and "
              "./pants --tag=cpu_local test cases::")
        return 1
    return 1 if differ or skipped else 0

