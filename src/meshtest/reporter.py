"""Aggregation of per-rank results into per-case outcomes, and the human report.

A case's outcome over its ranks: ``pass`` when every rank passed; ``fail``/``error`` when any
rank failed or errored (the report lists those ranks, their step and error); ``timeout`` /
``crash`` when the launch was killed at the case's deadline or died inside it (the ranks that
did not finish are named with their step and log tail); ``missing`` when a rank recorded
nothing; ``xfail`` / ``xpass`` for ``known_failure`` cases.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, TextIO

#: Outcomes that make the run fail.
FAILING = ("fail", "error", "crash", "missing", "timeout", "xpass")
_PRECEDENCE = ("crash", "error", "timeout", "missing", "fail", "not_run", "xpass", "xfail", "pass")


@dataclass
class CaseOutcome:
    """One case aggregated over its ranks.

    :ivar slowest_s: the slowest rank's wall-clock seconds for the case.
    :ivar failures: per failing rank: ``{"rank", "status", "step", "error"}``.
    """

    case: str
    file: str
    group: str
    world_size: int
    status: str
    slowest_s: float = 0.0
    slowest_rank: Optional[int] = None
    failures: List[dict] = field(default_factory=list)
    known_failure: str = ""
    #: directory under ``ranks/`` of the launch that ran the case (``<group>`` or ``<group>.relaunch<k>``)
    launch_dir: str = ""

    def to_json(self) -> dict:
        return dict(self.__dict__)


def aggregate(case: str, file: str, group: str, world_size: int, by_rank: Dict[int, dict], missing_reason: str) -> CaseOutcome:
    """Aggregate one case's rank records (``by_rank``: rank → JSONL record).

    :param missing_reason: error text for ranks that recorded nothing (names the launch fault).
    """
    failures = []
    statuses = set()
    slowest, slowest_rank = 0.0, None
    known = next((r.get("known_failure", "") for r in by_rank.values() if r.get("known_failure")), "")
    for rank in range(world_size):
        rec = by_rank.get(rank)
        if rec is None:
            statuses.add("missing")
            failures.append({"rank": rank, "status": "missing", "step": "?", "error": missing_reason})
            continue
        statuses.add(rec["status"])
        if rec["duration_s"] >= slowest:
            slowest, slowest_rank = rec["duration_s"], rank
        if rec["status"] != "pass":
            failures.append({"rank": rank, "status": rec["status"], "step": rec["step"], "error": rec["error"]})
    status = next(s for s in _PRECEDENCE if s in statuses)
    if status == "xpass" and statuses - {"xpass"}:
        status = "xfail"
    return CaseOutcome(case, file, group, world_size, status, slowest, slowest_rank,
                       failures if status != "pass" else [], known)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def format_outcome(o: CaseOutcome) -> str:
    """One report line; for failures, further indented lines per distinct (step, error)."""
    head = f"{o.status.upper():<8}{o.case}  [w{o.world_size} {o.group}]  {o.slowest_s:.3f}s"
    if o.slowest_rank is not None:
        head += f" (slowest rank {o.slowest_rank})"
    if not o.failures or o.status == "xfail":
        xfail_ranks = [str(f["rank"]) for f in o.failures if f["status"] == "xfail"]
        return head + (f"  known failure on rank(s) {','.join(xfail_ranks)}" if o.status == "xfail" else "")
    lines = [head + f"  {o.file}"]
    seen: Dict[tuple, List[int]] = {}
    for f in o.failures:
        seen.setdefault((f["status"], f["step"], _first_line(f["error"])), []).append(f["rank"])
    for (status, step, err), ranks in seen.items():
        lines.append(f"        rank(s) {','.join(map(str, ranks))}: {status} at step {step}: {err}")
    detail = next((f["error"] for f in o.failures if "\n" in f["error"].strip()), "")
    if detail:
        lines.extend("          | " + ln for ln in detail.strip().splitlines()[-8:])
    return "\n".join(lines)


def counts(outcomes: Sequence[CaseOutcome]) -> Dict[str, int]:
    c: Dict[str, int] = {}
    for o in outcomes:
        c[o.status] = c.get(o.status, 0) + 1
    return c


def summary_lines(outcomes: Sequence[CaseOutcome], notes: Iterable[str] = ()) -> List[str]:
    """Closing lines: notes (launches, teardown warnings), counts by status, and the plain
    ``meshtest: N passed, M failed`` line (xfail counts as passed; every failing outcome as failed)."""
    c = counts(outcomes)
    lines = list(notes)
    expected = [o for o in outcomes if o.status in ("xfail", "xpass")]
    if expected:
        lines.append("known failures (the platform is wrong; reported, never hidden):")
        lines.extend(f"  {o.status.upper():6} {o.case}: {o.known_failure}"
                     + ("  <- passes now: remove known_failure" if o.status == "xpass" else "") for o in expected)
    lines.append("meshtest outcomes: " + (", ".join(f"{k}={v}" for k, v in sorted(c.items())) or "no cases"))
    passed = c.get("pass", 0) + c.get("xfail", 0)
    failed = sum(c.get(s, 0) for s in FAILING)
    if c.get("not_run"):
        lines.append(f"meshtest: {c['not_run']} case(s) not run: the fail-fast (level0) gate stopped at the first failure")
    lines.append(f"meshtest: {passed} passed, {failed} failed")
    return lines


def write_results(path: str, outcomes: Sequence[CaseOutcome]) -> None:
    """Aggregated outcomes as JSONL, one line per case."""
    with open(path, "w", encoding="utf-8") as f:
        for o in outcomes:
            f.write(json.dumps(o.to_json()) + "\n")


def emit(lines: Iterable[str], *streams: TextIO) -> None:
    for line in lines:
        for s in streams:
            s.write(line + "\n")
            s.flush()
