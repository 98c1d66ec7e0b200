"""Mutation mode: would the suite catch a bug in the sharding rules?

A **mutant** is one operator's sharding rule carrying one fault (``operator:fault``; the faults
are the platform's, ``ShardBackend.faults``). The run:

1. a coverage run of the selected cases (one-process lane, ``--record-ops``): which cases
   dispatch which operator, with which placements (:mod:`meshtest.strength.coverage`), and
   which cases pass unmutated (only those can kill);
2. the mutants: every exercised operator × every fault whose site one of its recorded calls has
   (``ShardBackend.fault_sites``) — systematic, no hand-picked list;
3. per mutant, in a process forked from one that imported the platform and the case files once:
   prove it real (``ShardBackend.prove_mutant``: a witness input that differs from the reference
   with the mutant on and matches with it off; unproven mutants are dropped, with the reason),
   then run every passing case that dispatches its operator with the mutant active
   (``LaunchPlan.mutant``, activated before the first case). A case that does not pass under the
   mutant kills it; so does a hang (the process is killed at its deadline) or a crash.
   ``jobs`` mutants run at once; each process dies with this one (``PR_SET_PDEATHSIG``).

The **score** of a gate is killed / proven mutants over the operators the gate's cases
dispatch, a mutant counting as killed for the gate when one of the gate's cases killed it.
Wall and results: ``mutation.json`` in the artifacts directory; :func:`format_matrix` prints the
kill matrix (mutants × killing cases) and the survivors.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..contract import CaseStarted, ContractError, LaunchPlan, RankRecord, event_from_json
from ..model.scan import ScannedCase
from ..status import Status
from .coverage import OpCoverage, case_key

#: Seconds a mutant's proof may take (replaying a few calls on a simulated mesh takes < 2 s).
PROOF_S = 30.0
#: Seconds past a case's own deadline before its mutant's process is killed (the case hung).
DEADLINE_MARGIN_S = 2.0
#: Seconds between two reads of a running mutant's event stream.
WATCH_EVERY_S = 0.5
#: A mutant's process is killed after PROOF_S + this many seconds per case it runs, whatever it
#: is doing (a hang between cases: switching the simulated world, making a mesh).
TOTAL_PER_CASE_S = 120.0


@dataclass
class MutantResult:
    """One mutant's fate.

    :ivar state: ``killed``, ``survived``, ``unproven`` (no witness: dropped, ``evidence`` says
        why) or ``no_cases`` (proven, but no passing case dispatches the operator).
    :ivar killers: ``file::case`` → how it killed (``fail``, ``error``, ``crash``, ``timeout``).
    :ivar cases: cases run under the mutant.
    :ivar wall_s: seconds of its process.
    """

    mutant: str
    op: str
    fault: str
    state: str = ""
    evidence: str = ""
    killers: Dict[str, str] = field(default_factory=dict)
    cases: List[str] = field(default_factory=list)
    wall_s: float = 0.0


def mutants_of(ops: Mapping[str, OpCoverage], faults: Sequence[str], sites) -> List[Tuple[str, str]]:
    """(operator, fault) for every exercised operator with a sharding rule and every fault that
    has a site in one of its recorded calls (``sites(call)`` lists those faults)."""
    out = []
    for op, cov in sorted(ops.items()):
        if not cov.rule:
            continue
        found = {f for call in cov.calls for f in sites(call)}
        out += [(op, f) for f in faults if f in found]
    return out


def _child(m: MutantResult, calls: Sequence[Dict[str, Any]], cases: Sequence[ScannedCase],
           loaded: Tuple[Dict[str, Any], Dict[str, str]], platform: str, out_dir: str, case_timeout_s: float,
           first_kill: bool = False) -> None:
    """Body of a mutant's process (never returns): prove, then run ``cases`` under the mutant
    (with ``first_kill``, only until a case fails: the plan's fail-fast stop)."""
    from ..platforms.registry import load_backend
    from ..proctree import die_with_parent
    from ..rank import entry

    code = 0
    try:
        die_with_parent()
        entry._redirect_output(out_dir, 0)
        backend = load_backend(platform, lane="local")
        proven, evidence = backend.prove_mutant(m.mutant, calls)
        backend.shutdown()
        tmp = os.path.join(out_dir, "proof.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"proven": proven, "evidence": evidence}, f)
        os.replace(tmp, os.path.join(out_dir, "proof.json"))  # the parent never reads half a file
        if proven and cases:
            plan = LaunchPlan(group_id=f"mutant-{m.fault}", platform=platform, device_kind="cpu", mesh_shape=(1,),
                              mesh_dim_names=("d0",), out_dir=out_dir, case_timeout_s=case_timeout_s,
                              cases=tuple(cases), cases_dir=os.path.join(out_dir, "cases"), lane="local",
                              mutant=m.mutant, fail_fast=first_kill)
            out = entry.RankStream(os.path.join(out_dir, "rank0.jsonl"))
            entry.run_local_plan(plan, out, loaded[0], loaded[1], entry.CaseQueue(len(cases)))
            out.close()
    except BaseException:  # noqa: BLE001 - report it in the log; the parent counts a crash
        import traceback

        traceback.print_exc()
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _read_outcome(m: MutantResult, out_dir: str, cases: Sequence[ScannedCase], rc: Optional[int],
                  killed_at_deadline: bool) -> None:
    """Fill ``m`` from its process's ``proof.json`` and ``rank0.jsonl`` and how it ended."""
    proof_path = os.path.join(out_dir, "proof.json")
    if not os.path.exists(proof_path):
        how = "hung" if killed_at_deadline else f"ended with {rc}"
        m.state, m.evidence = "unproven", f"the proof itself {how} (see {out_dir}/rank0.log)"
        return
    with open(proof_path, encoding="utf-8") as f:
        proof = json.load(f)
    m.evidence = proof["evidence"]
    if not proof["proven"]:
        m.state = "unproven"
        return
    if not cases:
        m.state = "no_cases"
        return
    by_id = {c.id: c for c in cases}  # rank events name a case by its ID, file::name
    started: List[str] = []
    recorded: Dict[str, str] = {}
    stream = os.path.join(out_dir, "rank0.jsonl")
    if os.path.exists(stream):
        with open(stream, encoding="utf-8") as f:
            for line in f:
                try:
                    ev = event_from_json(json.loads(line))
                except (ValueError, ContractError):
                    continue  # a line cut by the kill
                if isinstance(ev, CaseStarted):
                    started.append(ev.case)
                elif isinstance(ev, RankRecord) and ev.status is not Status.PASS:
                    recorded.setdefault(ev.case, ev.status.value)
                elif isinstance(ev, RankRecord):
                    recorded.setdefault(ev.case, "")
    m.cases = [case_key(by_id[c].file, by_id[c].name) for c in started if c in by_id]
    for c in started:
        status = recorded.get(c)
        if status is None:  # started, never recorded: the process hung or died inside it
            status = "timeout" if killed_at_deadline else "crash"
        if status and c in by_id:
            m.killers[case_key(by_id[c].file, by_id[c].name)] = status
    if rc not in (0, None) and not m.killers:
        m.killers["(process)"] = f"crash (exit {rc})"
    m.state = "killed" if m.killers else "survived"


class _Watch:
    """A running mutant's process: when it started, and whether it is past a deadline — the
    proof's (:data:`PROOF_S`, until ``proof.json`` exists) or the deadline of the case it is in
    (from ``CaseStarted`` in its ``rank0.jsonl``, plus :data:`DEADLINE_MARGIN_S`)."""

    def __init__(self, m: MutantResult, out_dir: str, cases: int = 0) -> None:
        self.m, self.out_dir = m, out_dir
        self.t0 = time.monotonic()
        self.limit_s = PROOF_S + TOTAL_PER_CASE_S * max(cases, 1)
        self._offset = 0
        self._current: Optional[Tuple[float, float]] = None  # (Unix start, deadline s) of the open case
        self._checked = 0.0

    def overdue(self, now: float) -> bool:
        if now - self._checked < WATCH_EVERY_S:
            return False
        self._checked = now
        if now - self.t0 > self.limit_s:
            return True
        if not os.path.exists(os.path.join(self.out_dir, "proof.json")):
            return now - self.t0 > PROOF_S
        stream = os.path.join(self.out_dir, "rank0.jsonl")
        if os.path.exists(stream):
            with open(stream, encoding="utf-8") as f:
                f.seek(self._offset)
                for line in f:
                    if not line.endswith("\n"):
                        break
                    self._offset += len(line.encode("utf-8"))
                    try:
                        ev = event_from_json(json.loads(line))
                    except (ValueError, ContractError):
                        continue
                    if isinstance(ev, CaseStarted):
                        self._current = (ev.t, ev.timeout_s)
                    elif isinstance(ev, RankRecord):
                        self._current = None
        return self._current is not None and time.time() > self._current[0] + self._current[1] + DEADLINE_MARGIN_S


def run_mutants(todo: Sequence[MutantResult], calls_of: Mapping[str, List[Dict[str, Any]]],
                cases_of: Mapping[str, List[ScannedCase]], loaded: Tuple[Dict[str, Any], Dict[str, str]],
                platform: str, out_dir: str, jobs: int, case_timeout_s: float, emit=print,
                first_kill: bool = False) -> None:
    """Run each mutant of ``todo`` in its own forked process, ``jobs`` at once, filling each
    :class:`MutantResult` in place (see module doc) and appending it to ``out_dir/mutants.jsonl``
    as it ends; a process past its deadline (:class:`_Watch`) is killed and its open case
    counted as a ``timeout`` kill. Any process still running when this returns or raises is
    killed. ``first_kill``: a mutant's cases stop at the first that kills it (the score is the
    same; the kill matrix then names one killing case, not every one)."""
    pending = list(todo)
    running: Dict[int, _Watch] = {}
    done = 0
    try:
        while pending or running:
            while pending and len(running) < max(1, jobs):
                m = pending.pop(0)
                mdir = os.path.join(out_dir, m.mutant.replace(":", "__").replace("/", "_"))
                if os.path.isdir(mdir):  # a reused artifacts dir: an earlier run's events must not count here
                    shutil.rmtree(mdir)
                os.makedirs(mdir)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(m, calls_of.get(m.op, []), cases_of.get(m.op, []), loaded, platform, mdir, case_timeout_s,
                           first_kill)
                running[pid] = _Watch(m, mdir, len(cases_of.get(m.op, [])))
            pid, status = os.waitpid(-1, os.WNOHANG)
            now = time.monotonic()
            ended: List[Tuple[int, Optional[int], bool]] = []
            if pid:
                ended.append((pid, os.waitstatus_to_exitcode(status), False))
            for p, watch in list(running.items()):
                if p != pid and watch.overdue(now):
                    os.kill(p, signal.SIGKILL)
                    os.waitpid(p, 0)
                    ended.append((p, None, True))
            for p, rc, hung in ended:
                watch = running.pop(p)
                m = watch.m
                m.wall_s = time.monotonic() - watch.t0
                try:
                    _read_outcome(m, watch.out_dir, cases_of.get(m.op, []), rc, hung)
                except (OSError, ValueError, KeyError) as e:  # one unreadable mutant must not end the run
                    m.state, m.evidence = "unproven", f"its results could not be read: {type(e).__name__}: {e}"
                done += 1
                with open(os.path.join(out_dir, "mutants.jsonl"), "a", encoding="utf-8") as f:
                    f.write(json.dumps(asdict(m)) + "\n")  # kept even if the run is cut short
                emit(f"[{done}/{len(todo)}] {m.mutant}: {m.state}"
                     + (f" by {len(m.killers)} of {len(m.cases)} case(s)" if m.state in ("killed", "survived") else "")
                     + f" ({m.wall_s:.1f}s)")
            if not ended:
                time.sleep(0.05)
    finally:
        for p in running:
            try:
                os.kill(p, signal.SIGKILL)
                os.waitpid(p, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def scores(results: Sequence[MutantResult], gates_of_case: Mapping[str, Sequence[str]],
           ops_of_gate: Mapping[str, set]) -> Dict[str, Tuple[int, int]]:
    """Gate → (killed, proven) over the mutants of the operators the gate's cases dispatch
    (module doc)."""
    out: Dict[str, Tuple[int, int]] = {}
    for gate, ops in sorted(ops_of_gate.items()):
        proven = [m for m in results if m.op in ops and m.state in ("killed", "survived", "no_cases")]
        killed = [m for m in proven if any(gate in gates_of_case.get(k, ()) for k in m.killers)
                  or (m.killers.get("(process)") and m.state == "killed")]
        out[gate] = (len(killed), len(proven))
    return out


#: One letter per mutant state in :func:`format_grid`.
GRID_MARKS = {"killed": "K", "survived": "S", "no_cases": "S", "unproven": "u"}


def format_grid(results: Sequence[MutantResult], faults: Sequence[str]) -> List[str]:
    """The kill matrix at a glance: one row per operator, one column per fault (numbered, the
    legend first): ``K`` killed, ``S`` survived, ``u`` unproven (dropped), ``.`` no site."""
    cols = [f for f in faults if any(m.fault == f for m in results)]
    lines = ["kill grid: " + ", ".join(f"{i + 1}={f}" for i, f in enumerate(cols))
             + "; K killed, S survived, u unproven, . no site"]
    by_op: Dict[str, Dict[str, str]] = {}
    for m in results:
        by_op.setdefault(m.op, {})[m.fault] = GRID_MARKS.get(m.state, "?")
    width = max((len(op) for op in by_op), default=0)
    lines.append(f"  {'':{width}}  " + " ".join(str(i + 1) for i in range(len(cols))))
    for op, marks in sorted(by_op.items()):
        lines.append(f"  {op:{width}}  " + " ".join(marks.get(f, ".") for f in cols))
    return lines


def format_matrix(results: Sequence[MutantResult], gate_scores: Mapping[str, Tuple[int, int]],
                  wall_s: float, show: int = 3) -> List[str]:
    """The kill matrix (one line per proven mutant: the cases that killed it, ``show`` named),
    the survivors with their witness, the unproven mutants with the reason, and the scores."""
    lines = ["kill matrix (mutant: killing cases / cases run):"]
    for m in results:
        if m.state == "killed":
            named = ", ".join(f"{k.split('::')[-1]}({v})" for k, v in list(m.killers.items())[:show])
            more = f" +{len(m.killers) - show}" if len(m.killers) > show else ""
            lines.append(f"  KILLED   {m.mutant}: {len(m.killers)}/{len(m.cases)}  {named}{more}")
    survivors = [m for m in results if m.state in ("survived", "no_cases")]
    lines.append(f"surviving mutants ({len(survivors)}):")
    for m in survivors:
        lines.append(f"  SURVIVED {m.mutant}: {len(m.cases)} case(s) run, none failed; witness: {m.evidence}")
    unproven = [m for m in results if m.state == "unproven"]
    lines.append(f"unproven mutants, dropped ({len(unproven)}):")
    for m in unproven:
        lines.append(f"  unproven {m.mutant}: {m.evidence}")
    counts: Dict[str, int] = {}
    for m in results:
        counts[m.state] = counts.get(m.state, 0) + 1
    lines.append("mutants: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; wall {wall_s:.1f}s")
    for gate, (k, p) in gate_scores.items():
        lines.append(f"mutation score {gate}: {k}/{p} = {100.0 * k / p:.1f} %" if p
                     else f"mutation score {gate}: no proven mutant of its operators in this run")
    return lines


def format_by_origin(by_fault: Mapping[str, Mapping[str, Tuple[int, int]]], what: Mapping[str, str]) -> List[str]:
    """Report lines: the score of each fault for the generated and the hand-written cases apart.
    ``by_fault`` is fault → origin → (killed, proven) (:func:`scores` over that fault's mutants,
    the origins as gates); ``what`` fault → its description (the layer it lives in)."""
    origins = sorted({o for scores_ in by_fault.values() for o in scores_})
    lines = ["mutation score by fault and origin (killed/proven over the operators each origin's cases dispatch):"]
    width = max((len(f) for f in by_fault), default=0)
    for fault, per in by_fault.items():
        cells = []
        for o in origins:
            k, p = per.get(o, (0, 0))
            cells.append(f"{o} {k}/{p}" + (f" = {100.0 * k / p:.0f} %" if p else ""))
        lines.append(f"  {fault:{width}}  " + "; ".join(cells) + f"   ({what.get(fault, '')})")
    return lines


def write_json(path: str, results: Sequence[MutantResult], gate_scores: Mapping[str, Tuple[int, int]],
               wall_s: float, how: str) -> None:
    """``mutation.json``: the command, wall seconds, scores per gate, every mutant.

    :raises OSError: ``path`` cannot be written."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"made_by": how, "wall_s": round(wall_s, 1),
                   "scores": {g: {"killed": k, "proven": p} for g, (k, p) in gate_scores.items()},
                   "mutants": [asdict(m) for m in results]}, f, indent=1)
        f.write("\n")
