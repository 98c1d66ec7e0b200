"""Aggregation of per-rank results into per-case outcomes, and the human report.

A case's outcome over its ranks: ``pass`` when every rank passed; ``fail``/``error`` when any
rank failed or errored (the report lists those ranks, their step and error); ``timeout`` /
``crash`` when the launch was killed at the case's deadline or died inside it (the ranks that
did not finish are named with their step and log tail); ``missing`` when a rank recorded
nothing; ``xfail`` / ``xpass`` for ``known_failure`` cases; ``unsupported`` when a scenario
needs a platform feature the platform lacks (listed separately; neither passed nor failed).

When cases carry a test-plan ID (``ScenarioCase.spec_id``), the closing lines include a
table ID → outcomes (pass / divergence from spec / unsupported on platform / expected
failure / failing), see :func:`spec_table`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, TextIO

#: Outcomes that make the run fail.
FAILING = ("fail", "error", "crash", "missing", "timeout", "xpass")
_PRECEDENCE = ("crash", "error", "timeout", "missing", "fail", "not_run", "xpass", "xfail", "unsupported", "pass")


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
    #: test-plan ID (scenario cases), e.g. ``"A6"``
    spec_id: str = ""
    #: the case's stated divergence from the spec (it asserts the platform's behaviour)
    divergence: str = ""
    #: notes the case attached (``ctx.note``), from the first rank that wrote any
    detail: str = ""

    def to_json(self) -> dict:
        return dict(self.__dict__)


def aggregate(case: str, file: str, group: str, world_size: int, by_rank: Dict[int, dict], missing_reason: str) -> CaseOutcome:
    """Aggregate one case's rank records (``by_rank``: rank → JSONL record).

    :param missing_reason: error text for ranks that recorded nothing (names the launch fault).
    """
    failures = []
    statuses = set()
    slowest, slowest_rank = 0.0, None
    def first(key: str) -> str:
        return next((r[key] for _, r in sorted(by_rank.items()) if r.get(key)), "")

    known = first("known_failure")
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
                       failures if status != "pass" else [], known, divergence=first("divergence"),
                       detail=first("detail"))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def format_outcome(o: CaseOutcome) -> str:
    """One report line; for failures, further indented lines per distinct (step, error)."""
    head = f"{o.status.upper():<7} {o.case}  [w{o.world_size} {o.group}]  {o.slowest_s:.3f}s"
    if o.slowest_rank is not None:
        head += f" (slowest rank {o.slowest_rank})"
    if o.status == "unsupported":
        return head + "  " + _first_line(o.failures[0]["error"] if o.failures else "unsupported")
    if not o.failures or o.status == "xfail":
        xfail_ranks = [str(f["rank"]) for f in o.failures if f["status"] == "xfail"]
        head += f"  known failure on rank(s) {','.join(xfail_ranks)}" if o.status == "xfail" else ""
        if o.divergence and o.status == "pass":
            head += "  (divergence from spec)"
        return head + "".join(f"\n          note: {ln}" for ln in o.detail.splitlines())
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
    unsupported = [o for o in outcomes if o.status == "unsupported"]
    if unsupported:
        lines.append(f"unsupported on platform ({len(unsupported)}; not run, never counted as passed):")
        lines.extend(f"  {o.case}: {_first_line(o.failures[0]['error']) if o.failures else ''}" for o in unsupported)
    divergent = [o for o in outcomes if o.divergence and o.status == "pass"]
    if divergent:
        lines.append(f"divergences from spec ({len(divergent)}; each case asserts the platform's actual behaviour):")
        lines.extend(f"  {o.case}: {o.divergence}" for o in divergent)
    lines.extend(spec_table(outcomes))
    lines.append("meshtest outcomes: " + (", ".join(f"{k}={v}" for k, v in sorted(c.items())) or "no cases"))
    passed = c.get("pass", 0) + c.get("xfail", 0)
    failed = sum(c.get(s, 0) for s in FAILING)
    if c.get("not_run"):
        lines.append(f"meshtest: {c['not_run']} case(s) not run: the fail-fast (level0) gate stopped at the first failure")
    if c.get("unsupported"):
        lines.append(f"meshtest: {c['unsupported']} case(s) unsupported on platform (listed above)")
    lines.append(f"meshtest: {passed} passed, {failed} failed")
    return lines


def spec_label(o: CaseOutcome) -> str:
    """An outcome as the spec table names it: ``pass``, ``divergence``, ``unsupported-on-platform``,
    ``expected-failure``, or the failing status in capitals."""
    if o.status == "pass":
        return "divergence" if o.divergence else "pass"
    if o.status == "unsupported":
        return "unsupported-on-platform"
    if o.status == "xfail":
        return "expected-failure"
    return o.status.upper()


def _id_key(spec_id: str) -> tuple:
    head = spec_id.rstrip("0123456789")
    tail = spec_id[len(head):]
    return (head, int(tail) if tail else -1, spec_id)


def spec_table(outcomes: Sequence[CaseOutcome]) -> List[str]:
    """Lines of the table test-plan ID → outcomes of its cases (empty when no case has an ID).

    One line per ID, in ID order (``A2`` before ``A10``): each distinct label of
    :func:`spec_label` with its count, then the reason for labels that have one (missing
    feature, divergence, known failure). Closed by a count per label over IDs, where an ID
    counts under its worst label (failing > unsupported > expected failure > divergence > pass).
    """
    by_id: Dict[str, List[CaseOutcome]] = {}
    for o in outcomes:
        if o.spec_id:
            by_id.setdefault(o.spec_id, []).append(o)
    if not by_id:
        return []
    lines = [f"spec ID table ({len(by_id)} IDs):"]
    order = ("pass", "divergence", "expected-failure", "unsupported-on-platform")
    worst: Dict[str, int] = {}
    for spec_id in sorted(by_id, key=_id_key):
        items = by_id[spec_id]
        labels: Dict[str, int] = {}
        reasons: List[str] = []
        for o in items:
            label = spec_label(o)
            labels[label] = labels.get(label, 0) + 1
            if label == "divergence":
                reasons.append(f"{o.case}: {o.divergence}")
            elif label == "expected-failure":
                reasons.append(f"{o.case}: {o.known_failure}")
            elif label != "pass":
                reasons.append(f"{o.case}: {_first_line(o.failures[0]['error']) if o.failures else label}")
        text = ", ".join(f"{k} x{v}" for k, v in sorted(labels.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else -1))
        lines.append(f"  {spec_id:<5} {text}")
        lines.extend(f"        {r}" for r in dict.fromkeys(reasons))
        bad = sorted(labels, key=lambda k: order.index(k) if k in order else 99)[-1]
        worst[bad] = worst.get(bad, 0) + 1
    lines.append("spec IDs by outcome: " + ", ".join(f"{k}={v}" for k, v in sorted(worst.items())))
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
