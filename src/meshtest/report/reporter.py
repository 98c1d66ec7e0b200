"""The report a person reads: one line per case, failures per group of ranks, the closing
summary, and the spec-ID table (the Reporter).

Statuses are :class:`meshtest.status.Status`; what fails a run is its predicates. Aggregation
over ranks is the parent's (:func:`meshtest.parent.outcomes.aggregate`).

When cases carry a test-plan ID (``ScenarioCase.spec_id``), the closing lines include a
table ID → outcomes (pass / divergence from spec / unsupported on platform / expected
failure / failing), see :func:`spec_table`.
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence, TextIO

from ..contract import CaseOutcome, RankFailure
from ..model.rules import NEAR_DEADLINE_NOTE, NO_GOLDEN_NOTE
from ..status import FAILING, Status


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def same_on_every_rank(text: str, rank: str) -> str:
    """``text`` with its own rank number masked (``out (rank 1)`` → ``out (rank *)``), so that the
    same failure on several ranks groups into one line."""
    return re.sub(rf"\b(rank\s?=?\s?){re.escape(rank)}\b", r"\1*", text) if rank != "-" else text


def format_outcome(o: CaseOutcome, verbosity: int = 0) -> str:
    """One report line; for failures, further indented lines per distinct (status, step, error),
    each naming its ranks (the same error on several ranks, up to the rank's own number, prints
    once). ``verbosity`` 1 (``-v``): the line also names the case file and the launch directory
    holding its rank logs (``ranks/<launch>``)."""
    head = f"{o.status.value.upper():<7} {o.case}  [w{o.world_size} {o.group}]  {o.slowest_s:.3f}s"
    if o.slowest_rank is not None:
        head += f" (slowest rank {o.slowest_rank})"
    if verbosity > 0:
        head += f"  {o.file}" + (f"  ranks/{o.launch_dir}" if o.launch_dir else "")
    if o.status is Status.UNSUPPORTED:
        return head + "  " + _first_line(o.failures[0].error if o.failures else Status.UNSUPPORTED.value)
    if not o.failures or o.status is Status.XFAIL:
        if o.status is Status.XFAIL and o.failures:  # the declared failure, as its leading rank(s) had it
            lead = next((f for f in o.failures if f.status is Status.XFAIL), o.failures[0])
            ranks = [f.rank_label for f in o.failures if (f.status, f.step) == (lead.status, lead.step)]
            head += f"  known failure reproduced: rank(s) {','.join(ranks)} {lead.status} at step {lead.step}"
        if o.divergence and o.status is Status.PASS:
            head += "  (divergence from spec)"
        return head + "".join(f"\n          note: {ln}" for ln in o.detail.splitlines()
                              if not ln.startswith(NO_GOLDEN_NOTE))
    lines = [head if verbosity > 0 else head + f"  {o.file}"]
    seen: Dict[tuple, List[RankFailure]] = {}
    for f in o.failures:
        key = (f.status, f.step, same_on_every_rank(_first_line(f.error), f.rank_label))
        seen.setdefault(key, []).append(f)
    for (status, step, err), ranks in seen.items():
        lines.append(f"        rank(s) {ranks_text(ranks)}: {status} at step {step}: {err}")
    if o.diagnosis:
        lines.append(f"        diagnosis: {o.diagnosis}")
    detail = next((f.error for f in o.failures if "\n" in f.error.strip()), "")
    if detail:
        lines.extend("          | " + ln for ln in detail.strip().splitlines()[-8:])
    return "\n".join(lines)


def ranks_text(failures: Sequence[RankFailure]) -> str:
    """``4,5`` — or, for ranks of a launch placed across a cluster, with their nodes:
    ``4,5 on node 1:4d22d395``, ``0,1 on node 0:6b9a4b82; 4 on node 1:4d22d395``."""
    by_node: Dict[str, List[str]] = {}
    for f in failures:
        by_node.setdefault(f.node, []).append(f.rank_label)
    return "; ".join(",".join(ranks) + (f" on node {node}" if node else "") for node, ranks in by_node.items())


def slowest_lines(outcomes: Sequence[CaseOutcome], n: int) -> List[str]:
    """pytest's ``--durations=N``: the ``n`` slowest cases that ran (``0``: every one), slowest
    first, each with its slowest rank's seconds, its launch and its ID (``file::case``)."""
    ran = sorted((o for o in outcomes if o.status.counts_as_run and o.world_size),
                 key=lambda o: -o.slowest_s)
    shown = ran if n == 0 else ran[:n]
    head = f"slowest {len(shown)} case durations" if n else "case durations"
    return [f"===== {head} (slowest rank, seconds) ====="] + [
        f"{o.slowest_s:8.3f}s  {o.status.value:<7} [w{o.world_size} {o.group}]  {o.file}::{o.case}" for o in shown]


def counts(outcomes: Sequence[CaseOutcome]) -> Dict[Status, int]:
    """Number of outcomes per status."""
    c: Dict[Status, int] = {}
    for o in outcomes:
        c[o.status] = c.get(o.status, 0) + 1
    return c


def closing_line(c: Dict[Status, int]) -> str:
    """``meshtest: 480 passed, 12 xfailed, 3 unsupported, 0 failed`` (pytest's words): ``xfailed``
    (known failures reproduced as declared), ``unsupported`` and ``not run`` only when there are
    some; ``failed`` counts every failing outcome (xpass included)."""
    parts = [f"{c.get(Status.PASS, 0)} passed"]
    parts += [f"{c[s]} {word}" for s, word in ((Status.XFAIL, "xfailed"), (Status.UNSUPPORTED, "unsupported"),
                                                (Status.NOT_RUN, "not run")) if c.get(s)]
    parts.append(f"{sum(c.get(s, 0) for s in FAILING)} failed")
    return "meshtest: " + ", ".join(parts)


def summary_lines(outcomes: Sequence[CaseOutcome], notes: Iterable[str] = ()) -> List[str]:
    """Closing lines: notes (launches, teardown warnings), the known failures, unsupported cases
    and divergences each listed apart, counts by status, and the closing line
    (:func:`closing_line`: xfail counted apart from pass, every failing outcome as failed)."""
    c = counts(outcomes)
    lines = list(notes)
    expected = [o for o in outcomes if o.status in (Status.XFAIL, Status.XPASS)]
    if expected:
        lines.append("known failures (the platform is wrong; reported, never hidden):")
        lines.extend(f"  {o.status.value.upper():6} {o.case}: {o.known_failure}"
                     + ("  <- passes now: remove known_failure" if o.status is Status.XPASS else "") for o in expected)
    unsupported = [o for o in outcomes if o.status is Status.UNSUPPORTED]
    if unsupported:
        lines.append(f"unsupported on platform ({len(unsupported)}; not run, never counted as passed):")
        lines.extend(f"  {o.case}: {_first_line(o.failures[0].error) if o.failures else ''}" for o in unsupported)
    near = [(o, ln) for o in outcomes for ln in o.detail.splitlines() if ln.startswith(NEAR_DEADLINE_NOTE)]
    if near:
        lines.append(f"{len(near)} case(s) came near their deadline (a timeout waiting to happen; raise timeout_s= "
                     "or make the case cheaper):")
        lines.extend(f"  {o.case} [{o.file}]: {ln[len(NEAR_DEADLINE_NOTE):].strip()}" for o, ln in near)
    new = [o.case for o in outcomes if NO_GOLDEN_NOTE in o.detail]
    if new:
        lines.append(f"{len(new)} training case(s) have no golden curve yet (python3 tools/golden_curves.py --write "
                     f"FILE records them): {', '.join(new)}")
    divergent = [o for o in outcomes if o.divergence and o.status is Status.PASS]
    if divergent:
        lines.append(f"divergences from spec ({len(divergent)}; each case asserts the platform's actual behaviour):")
        lines.extend(f"  {o.case}: {o.divergence}" for o in divergent)
    lines.extend(spec_table(outcomes))
    lines.append("meshtest outcomes: " + (", ".join(f"{k.value}={v}" for k, v in sorted(c.items())) or "no cases"))
    if c.get(Status.NOT_RUN):
        lines.append(f"meshtest: {c[Status.NOT_RUN]} case(s) not run: the fail-fast (level0) gate stopped at the first "
                     "failure")
    if c.get(Status.UNSUPPORTED):
        lines.append(f"meshtest: {c[Status.UNSUPPORTED]} case(s) unsupported on platform (listed above)")
    lines.append(closing_line(c))
    return lines


def spec_label(o: CaseOutcome) -> str:
    """An outcome as the spec table names it: ``pass``, ``divergence``, ``unsupported-on-platform``,
    ``expected-failure``, or the failing status in capitals."""
    if o.status is Status.PASS:
        return "divergence" if o.divergence else Status.PASS.value
    if o.status is Status.UNSUPPORTED:
        return "unsupported-on-platform"
    if o.status is Status.XFAIL:
        return "expected-failure"
    return o.status.value.upper()


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
    order = (Status.PASS.value, "divergence", "expected-failure", "unsupported-on-platform")
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
            elif label != Status.PASS.value:
                reasons.append(f"{o.case}: {_first_line(o.failures[0].error) if o.failures else label}")
        ranked = sorted(labels.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else -1)
        text = ", ".join(f"{k} x{v}" for k, v in ranked)
        lines.append(f"  {spec_id:<5} {text}")
        lines.extend(f"        {r}" for r in dict.fromkeys(reasons))
        bad = sorted(labels, key=lambda k: order.index(k) if k in order else 99)[-1]
        worst[bad] = worst.get(bad, 0) + 1
    lines.append("spec IDs by outcome: " + ", ".join(f"{k}={v}" for k, v in sorted(worst.items())))
    return lines


def emit(lines: Iterable[str], *streams: TextIO) -> None:
    """Write each line to every stream, flushing (the report goes to stdout and summary.txt)."""
    for line in lines:
        for s in streams:
            s.write(line + "\n")
            s.flush()
