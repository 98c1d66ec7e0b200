"""The two suite-strength commands: ``python -m meshtest coverage-ops`` and ``python -m meshtest mutate``.

Both start with the same recorded run: the selected cases that the one-process lane can run
(op cases and layer-0 scenarios; the others need real ranks and are left out, counted), run
with ``record_ops`` (:mod:`meshtest.strength.coverage`). Platform facts (registered rules,
faults, fault sites, the mutant's process) come through the ``ShardBackend`` port.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..model.generated import OPINFO_DIR
from ..model.scan import generated_manifest
from ..parent.options import RunOptions
from ..parent.planner import select_cases
from ..parent.runner import RunResult, run, scan_files
from ..report.results import read_results, results_files
from . import coverage, figures, mutate

#: The baseline the project test compares the cpu_level0 coverage with.
BASELINE = os.path.join("cases", "torch", "strength", "cpu_level0_ops.json")


#: How mutation scores name the two origins of a case: generated from a manifest, or written by hand.
ORIGINS = {False: "generated", True: "hand-written"}
#: The one origin of a ``--first-kill`` run's scores (which case kills first depends on the order)
ANY_ORIGIN = "any case (--first-kill: origins apart need a full run)"


def default_files(platform: str = "torch") -> List[str]:
    """Every ``case_*.py`` under ``cases/<platform>/`` (from the current directory), sorted."""
    return sorted(glob.glob(os.path.join("cases", platform, "**", "case_*.py"), recursive=True))


def recorded_run(files: Sequence[str], tags: Sequence[str], artifacts_dir: str, platform: str = "torch",
                 processes: int = 0, stream=sys.stdout, patterns: Sequence[str] = (), slot_dir: str = ""
                 ) -> Tuple[RunResult, Dict[str, List[Dict[str, Any]]], list, int, list]:
    """Run the selected cases that the one-process lane can run, recording their calls.

    :returns: (the run's result, calls by ``file::case``, the cases run, how many selected
        cases were left out because they need real ranks, every scanned case of ``files``).
    :raises meshtest.errors.SelectionError: see :func:`meshtest.parent.runner.run`.
    """
    cases, _, _ = scan_files(files)
    selected = select_cases(cases, "cpu", tags, patterns)
    local = [c for c in selected if c.runs_locally]
    opts = RunOptions(artifacts_dir=artifacts_dir, platform=platform, tag_filters=tuple(tags),
                      name_patterns=tuple(patterns), lane="local",
                      record_ops=True, only_cases=tuple(c.name for c in local) or ("(none)",),
                      local_processes=processes, slot_dir=slot_dir)
    result = run(files, opts, stream)
    calls = coverage.read_calls(coverage.ops_files(artifacts_dir))
    return result, calls, local, len(selected) - len(local), cases


def cmd_coverage(files: Sequence[str], tags: Sequence[str], artifacts_dir: str, from_dirs: Sequence[str],
                 platform: str, baseline: str, write: bool, full: bool, patterns: Sequence[str] = (),
                 slot_dir: str = "") -> int:
    """``coverage-ops``: print the table, write ``ops-coverage.html`` and ``ops-coverage.json``
    into ``artifacts_dir``; with ``baseline``, diff against it (exit 1 on any change); ``write``
    stores the result as the baseline (``baseline``, default :data:`BASELINE`) instead. Exit 2:
    nothing recorded, or no baseline file to compare with.

    :raises ValueError: an unreadable ops file or baseline.
    :raises meshtest.errors.SelectionError: see :func:`meshtest.parent.runner.run`."""
    from ..platforms.registry import load_backend

    t0 = time.monotonic()
    if from_dirs:
        calls = coverage.read_calls(p for d in from_dirs for p in coverage.ops_files(d))
        found = results_files(from_dirs)
        verdicts = [o for path in found for o in read_results(path)]
        note = f"merged {len(calls)} case(s) recorded under {', '.join(from_dirs)}"
        if calls and not found:
            print(f"meshtest: no results.jsonl under {', '.join(from_dirs)}: an operator counts as exercised only "
                  "by a case that passed or reproduced its pinned values, which only the results say", file=sys.stderr)
            return 2
    else:
        result, calls, local, left, _ = recorded_run(files, tags, artifacts_dir, platform, patterns=patterns,
                                                  slot_dir=slot_dir)
        verdicts = result.outcomes
        note = (f"recorded {len(calls)} of {len(local)} case(s) in the one-process lane"
                + (f"; {left} selected case(s) need real ranks and were left out" if left else ""))
    if not calls:
        print("meshtest: no recorded calls (run with --record-ops, or select op cases)", file=sys.stderr)
        return 2
    manifests = sorted(glob.glob(os.path.join(OPINFO_DIR, "manifest_*.json"))) if platform == "torch" else []
    weak = coverage.weak_cases(manifests)
    kept, failing = coverage.split_by_verdict(calls, verdicts, weak)
    weak_passed = sum(1 for o in verdicts if o.case in weak and coverage.exercising(o))
    if weak_passed:
        note += f"; {weak_passed} weak (a degenerate reference: passed, exercising nothing)"
    note += f"; {len(kept)} of them passed or reproduced pinned values (the others exercise nothing)"
    ops = coverage.by_operator(kept)
    backend = load_backend(platform)
    families = coverage.by_family(ops, backend.sharding_rules())
    # the reasons for what is not exercised come from torch's OpInfo manifests: torch only
    by_opinfo = coverage.dispatched_by_opinfo(manifests) if platform == "torch" else None
    print("\n".join(coverage.format_table(families, ops, full=full, by_opinfo=by_opinfo, failing=failing)))
    os.makedirs(artifacts_dir, exist_ok=True)
    coverage.write_html(os.path.join(artifacts_dir, "ops-coverage.html"), families, ops)
    current = coverage.baseline_of(ops)
    how = "python -m meshtest coverage-ops " + (f"--from {' --from '.join(from_dirs)}" if from_dirs
                                                  else f"--tag {' --tag '.join(tags) or '(none)'}")
    coverage.write_baseline(os.path.join(artifacts_dir, "ops-coverage.json"), current, how)
    reasons = coverage.not_exercised_by_reason(families, by_opinfo, failing) if by_opinfo is not None else {}
    figures.write(os.path.join(artifacts_dir, figures.ARTIFACT), figures.coverage_figures(
        families, failing, {why: len(ops_) for why, ops_ in reasons.items()}, how=how, build=backend.build_info(),
        cases=len(calls), exercising=len(kept), dispatched=len(ops)))
    print(f"meshtest: {note}; {time.monotonic() - t0:.1f}s; table in {artifacts_dir}/ops-coverage.html, "
          f"figures in {artifacts_dir}/{figures.ARTIFACT}")
    if write:
        coverage.write_baseline(baseline or BASELINE, current, how)
        print(f"meshtest: baseline written to {baseline or BASELINE}")
        return 0
    if not baseline:
        return 0
    old = coverage.read_baseline(baseline)
    if old is None:
        print(f"meshtest: no baseline at {baseline} (store one with --write-baseline)", file=sys.stderr)
        return 2
    lost, gained = coverage.diff_baseline(old, current)
    for line in lost:
        print(f"coverage lost: {line}")
    for line in gained:
        print(f"coverage gained: {line}")
    if lost or gained:
        print(f"meshtest: coverage differs from {baseline}: {len(lost)} lost, {len(gained)} gained; "
              f"if intended, rerun with --write-baseline and commit it", file=sys.stderr)
        return 1
    print(f"meshtest: coverage equals the baseline {baseline}")
    return 0


def complete_gates(cases: Sequence[Any], local: Sequence[Any]) -> set:
    """The cpu gates whose every case (of the scanned ``cases``) the one-process lane can run is
    among ``local`` (the cases run): only those get a score (``--tag cpu_level0`` says nothing of
    ``cpu_level1``, whose other cases did not run)."""
    ran = {(c.file, c.name) for c in local}
    gates = {g for c in local for g in c.tags if g.startswith("cpu_")}
    return {g for g in gates if all((c.file, c.name) in ran for c in cases if g in c.tags and c.runs_locally)}


def cmd_mutate(files: Sequence[str], tags: Sequence[str], artifacts_dir: str, platform: str, op_patterns: Sequence[str],
               faults: Sequence[str], jobs: int, case_timeout_s: float, patterns: Sequence[str] = (),
               slot_dir: str = "", first_kill: bool = False) -> int:
    """``mutate``: see :mod:`meshtest.strength.mutate`. Exit 0 (the matrix is the result), 2 when
    nothing could be mutated or a fault is unknown. ``jobs`` is capped at the slot pool's size
    (``$MESHTEST_SLOTS``, default 8): the mutants' processes hold that many slots.

    :raises meshtest.errors.SelectionError: see :func:`meshtest.parent.runner.run`.
    :raises meshtest.parent.slots.SlotRequestError: ``jobs`` slots cannot be had."""
    from ..platforms.registry import load_backend
    from ..rank.entry import load_cases

    t0 = time.monotonic()
    backend = load_backend(platform, lane="local")
    known = backend.faults()
    chosen = [f for f in known if not faults or f in faults]
    unknown = sorted(set(faults) - set(known))
    if unknown:  # before the recorded run, which takes a while
        print(f"meshtest: unknown fault(s) {', '.join(unknown)}; platform {platform} has: {', '.join(known)}",
              file=sys.stderr)
        return 2
    result, calls, local, left, scanned = recorded_run(files, tags, os.path.join(artifacts_dir, "coverage"), platform,
                                              patterns=patterns, slot_dir=slot_dir)
    passing = {coverage.case_key(o.file, o.case) for o in result.outcomes if o.status.value == "pass"}
    by_key = {coverage.case_key(c.file, c.name): c for c in local}
    ops = coverage.by_operator(calls)
    pairs = [(op, f) for op, f in mutate.mutants_of(ops, chosen, backend.fault_sites)
             if not op_patterns or any(fnmatch.fnmatchcase(op, p) for p in op_patterns)]
    if not pairs:
        print("meshtest: no mutant: no selected case dispatches an operator with a fault site", file=sys.stderr)
        return 2
    cases_of = {op: [by_key[k] for k in sorted(ops[op].cases) if k in passing and k in by_key] for op, _ in pairs}
    calls_of = {op: ops[op].calls for op, _ in pairs}
    needed = {c.name: c for cs in cases_of.values() for c in cs}
    loaded = load_cases(tuple(needed.values()))
    todo = [mutate.MutantResult(f"{op}:{f}", op, f) for op, f in pairs]
    print(f"meshtest: {len(todo)} mutant(s) over {len({op for op, _ in pairs})} operator(s), "
          f"{len(needed)} passing case(s) to run under them, {jobs} at once"
          + (f"; {left} selected case(s) need real ranks and were left out" if left else ""), flush=True)
    # the mutants' processes run on device slots of the shared pool like any launch (they inherit the lease's locks)
    from ..parent.slots import DEFAULT_SLOTS, SlotPool, default_slot_dir

    size = int(os.environ.get("MESHTEST_SLOTS", DEFAULT_SLOTS))
    jobs = max(1, min(jobs, size))
    with SlotPool(slot_dir or default_slot_dir(), size).acquire(jobs, "meshtest mutate"):
        mutate.run_mutants(todo, calls_of, cases_of, loaded, platform, os.path.join(artifacts_dir, "mutants"), jobs,
                           case_timeout_s, first_kill=first_kill)
    gates: Dict[str, Tuple[str, ...]] = {k: c.tags for k, c in by_key.items()}
    whole = complete_gates(scanned, local)
    ops_of_gate: Dict[str, set] = {}
    for op, cov in ops.items():
        for k in cov.cases:
            for g in gates.get(k, ()):
                if g in whole:
                    ops_of_gate.setdefault(g, set()).add(op)
    origins = {k: (ORIGINS[generated_manifest(c.file) is None],) for k, c in by_key.items()}
    if first_kill:
        # the first killing case depends on the run's order: a score per narrower gate or per origin would
        # count only where that case comes from, so only the gates the run selected, and one origin, are scored
        named = {t for t in tags if t in ops_of_gate} or set(ops_of_gate)
        ops_of_gate = {g: o for g, o in ops_of_gate.items() if g in named}
        origins = {k: (ANY_ORIGIN,) for k in origins}
    gate_scores = mutate.scores(todo, gates, ops_of_gate)
    ops_of_origin: Dict[str, set] = {}
    for op, cov in ops.items():
        for k in cov.cases:
            if k in origins:
                ops_of_origin.setdefault(origins[k][0], set()).add(op)
    by_fault = {f: mutate.scores([m for m in todo if m.fault == f], origins, ops_of_origin) for f in chosen}
    wall = time.monotonic() - t0
    print("\n".join(mutate.format_matrix(todo, gate_scores, wall)))
    print("\n".join(mutate.format_grid(todo, chosen)))
    print("\n".join(mutate.format_by_origin(by_fault, known)))
    how = (f"python -m meshtest mutate --tag {' --tag '.join(tags) or '(none)'}"
           + (" --first-kill" if first_kill else "") + "".join(f" --fault {f}" for f in faults)
           + "".join(f" --op '{p}'" for p in op_patterns))
    mutate.write_json(os.path.join(artifacts_dir, "mutation.json"), todo, gate_scores, wall, how)
    figures.write(os.path.join(artifacts_dir, figures.ARTIFACT), figures.mutation_figures(
        todo, gate_scores, by_fault, how=how, wall_s=wall, build=backend.build_info(), selected=len(local),
        run_under=len(needed), left_out=left))
    print(f"meshtest: kill matrix in {artifacts_dir}/mutation.json, figures in {artifacts_dir}/{figures.ARTIFACT}")
    return 0


def baseline_path(value: Optional[str]) -> str:
    """``--baseline`` as a path: ``default`` → :data:`BASELINE`; empty stays empty."""
    return BASELINE if value == "default" else (value or "")
