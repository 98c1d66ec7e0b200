"""The slot pool's timeline: which launch held which device slot when, from the pool's audit log.

The audit log (:mod:`meshtest.parent.slots`, ``audit.jsonl``) is appended to by every run that
shares the pool, run after run. :func:`latest_session` keeps the newest run: the last cluster of
leases that overlap or follow each other within :data:`SESSION_GAP_S`. :func:`build` pairs each
``launch`` with its ``launch_end`` (same process, target and launch directory) into one bar per
slot it held, split into start-up (until its first case started) and case time; a launch whose
end was never written (its runner was killed) ends with its lease. :func:`render_svg` draws one
row per slot, idle time left blank, with the utilization figures above.

Stdlib only: the run index (``tools/report_index.py``) runs with the system ``python3``.
"""
from __future__ import annotations

import html
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

#: Leases that start within this many seconds of the previous ones' end belong to one run
#: (Pants starts the next test process a moment after one ends).
SESSION_GAP_S = 30.0


@dataclass(frozen=True)
class Bar:
    """One launch on one slot: ``start`` → ``end`` (Unix seconds); ``first_case`` is when its
    first case started (``None``: never)."""

    slot: int
    start: float
    end: float
    first_case: Optional[float]
    target: str
    group: str
    cases: int


@dataclass
class Timeline:
    """Bars of the newest run, the pool size and the figures.

    :ivar utilization: slot-seconds inside launches / (size × span), in [0, 1].
    :ivar held: slot-seconds held by leases / (size × span) (a lease may hold slots no launch uses).
    :ivar startup_share: the part of launch slot-time spent before the first case started.
    """

    size: int
    start: float
    end: float
    bars: List[Bar] = field(default_factory=list)
    utilization: float = 0.0
    held: float = 0.0
    startup_share: float = 0.0
    launches: int = 0

    @property
    def span_s(self) -> float:
        return max(0.0, self.end - self.start)


def _leases(records: Sequence[dict]) -> List[Tuple[float, float, Tuple[int, ...], str]]:
    """(acquire t, release t, slots, target) of each lease. A lease without a release (its holder
    was killed: the kernel freed the locks, nobody wrote the record) ends at its holder's last
    record, or when another lease takes one of its slots, whichever comes first."""
    open_: Dict[tuple, Tuple[float, Tuple[int, ...], float]] = {}
    out = []
    for r in sorted(records, key=lambda r: r["t"]):
        key = (r.get("pid"), r.get("target"))
        if r["event"] == "acquire":
            slots = tuple(r.get("slots", ()))
            for other, (t0, held, seen) in list(open_.items()):
                if set(held) & set(slots):  # its holder is gone: the slots were free again
                    out.append((t0, min(seen, r["t"]), held, str(other[1])))
                    del open_[other]
            open_[key] = (r["t"], slots, r["t"])
        elif r["event"] == "release" and key in open_:
            t0, slots, _ = open_.pop(key)
            out.append((t0, r["t"], slots, str(r.get("target"))))
        elif key in open_:
            t0, slots, _ = open_[key]
            open_[key] = (t0, slots, r["t"])  # a sign of life of the holder
    out += [(t0, seen, slots, str(key[1])) for key, (t0, slots, seen) in open_.items()]
    return sorted(out)


def sessions(records: Sequence[dict], gap_s: float = SESSION_GAP_S) -> List[List[dict]]:
    """The records of each run in an audit log, oldest first: clusters of leases that overlap or
    follow each other within ``gap_s`` seconds (see the module docstring)."""
    spans: List[List[float]] = []
    for t0, t1, _, _ in _leases(records):
        if spans and t0 <= spans[-1][1] + gap_s:
            spans[-1][1] = max(spans[-1][1], t1)
        else:
            spans.append([t0, t1])
    return [[r for r in records if lo - 1e-6 <= r["t"] <= hi + 1e-6] for lo, hi in spans]


def latest_session(records: Sequence[dict], gap_s: float = SESSION_GAP_S) -> List[dict]:
    """The records of the newest run in an audit log; ``[]`` if none."""
    found = sessions(records, gap_s)
    return found[-1] if found else []


def build(records: Sequence[dict], size: Optional[int] = None) -> Timeline:
    """The timeline of the newest run in ``records`` (audit log dicts; pass one of
    :func:`sessions` for another run)."""
    session = sorted(latest_session(records), key=lambda r: r["t"])
    size = size or max((r.get("size", 0) for r in session), default=0) or 8
    leases = _leases(session)
    if not leases:
        return Timeline(size, 0.0, 0.0)
    t0, t1 = min(lo for lo, _, _, _ in leases), max(hi for _, hi, _, _ in leases)
    lease_end = {(str(r.get("pid")), str(r.get("target"))): r["t"] for r in session if r["event"] == "release"}
    ends: Dict[tuple, List[dict]] = {}
    for r in session:
        if r["event"] == "launch_end":
            ends.setdefault((r.get("pid"), r.get("target"), r.get("group")), []).append(r)
    bars: List[Bar] = []
    launches = 0
    for r in session:
        if r["event"] != "launch":
            continue
        launches += 1
        key = (r.get("pid"), r.get("target"), r.get("group"))
        done = next((e for e in ends.get(key, []) if e["t"] >= r["t"]), None)
        if done is not None:
            ends[key].remove(done)
            end = done["t"]
            first = None if done.get("startup_s") is None else r["t"] + float(done["startup_s"])
        else:
            end, first = lease_end.get((str(r.get("pid")), str(r.get("target"))), t1), None
        bars += [Bar(int(s), r["t"], end, first, str(r.get("target")), str(r.get("group", "?")), int(r.get("cases", 0)))
                 for s in r.get("slots", ())]
    span = t1 - t0
    busy = sum(b.end - b.start for b in bars)
    startup = sum((min(b.first_case, b.end) if b.first_case is not None else b.end) - b.start for b in bars)
    held = sum(hi - lo for lo, hi, slots, _ in leases for _ in slots)
    denom = size * span if span > 0 else 0.0
    return Timeline(size, t0, t1, bars, busy / denom if denom else 0.0, held / denom if denom else 0.0,
                    startup / busy if busy else 0.0, launches)


def _colour(target: str) -> str:
    hue = zlib.crc32(target.encode()) % 360
    return f"hsl({hue},55%,55%)"


def render_svg(tl: Timeline, width: int = 960) -> str:
    """Inline SVG: one row per slot (``slot 0`` … ``slot N-1``), one bar per launch on each slot it
    held — the start-up part pale, the case part in the target's colour — and a ``<title>`` on
    each bar (target, launch, cases, seconds)."""
    row, label_w, top = 22, 60, 18
    scale = (width - label_w - 10) / tl.span_s if tl.span_s > 0 else 0.0
    targets = list(dict.fromkeys(b.target for b in tl.bars))
    axis = top + row * tl.size + 14
    height = axis + 10 + 16 * len(targets)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="slot-timeline" width="{width}" height="{height}" '
             f'role="img" aria-label="device slots over time">']
    for s in range(tl.size):
        y = top + s * row
        parts.append(f'<g class="slot-row" data-slot="{s}"><text x="4" y="{y + 15}" font-size="12">slot {s}</text>'
                     f'<rect x="{label_w}" y="{y + 2}" width="{width - label_w - 10}" height="{row - 4}" '
                     'fill="#f4f4f4"/></g>')
    for b in tl.bars:
        x0 = label_w + (b.start - tl.start) * scale
        x1 = label_w + (b.end - tl.start) * scale
        xf = x1 if b.first_case is None else label_w + (min(b.first_case, b.end) - tl.start) * scale
        y = top + b.slot * row + 2
        tip = html.escape(f"{b.target} · {b.group}: {b.cases} case(s), {b.end - b.start:.1f} s"
                          + ("" if b.first_case is None else f" (start-up {b.first_case - b.start:.1f} s)"))
        parts.append(f'<g class="launch" data-slot="{b.slot}" data-group="{html.escape(b.group)}"><title>{tip}</title>'
                     f'<rect class="startup" x="{x0:.1f}" y="{y}" width="{max(xf - x0, 0.5):.1f}" height="{row - 4}" '
                     f'fill="{_colour(b.target)}" fill-opacity="0.35"/>'
                     f'<rect class="cases" x="{xf:.1f}" y="{y}" width="{max(x1 - xf, 0):.1f}" height="{row - 4}" '
                     f'fill="{_colour(b.target)}"/></g>')
    ticks = max(1, int(tl.span_s // 8) or 1)
    for k in range(0, int(tl.span_s) + 1, ticks):
        x = label_w + k * scale
        parts.append(f'<text x="{x:.1f}" y="{axis}" font-size="10" fill="#555">{k}s</text>')
    for i, target in enumerate(targets):  # the legend: a target's colour (start-up is its pale shade)
        y = axis + 8 + 16 * i
        parts.append(f'<g class="legend"><rect x="{label_w}" y="{y}" width="12" height="12" fill="{_colour(target)}"/>'
                     f'<text x="{label_w + 18}" y="{y + 10}" font-size="11">{html.escape(target)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def summary(tl: Timeline, pool: str = "") -> str:
    """One line of figures: launches, span, utilization, held, start-up share (and the pool's
    location, when given)."""
    return ((f"device slot pool {pool}: " if pool else "")
            + f"{tl.size} slots, {tl.launches} launch(es) over {tl.span_s:.1f} s; "
            f"slot-time in launches {tl.utilization:.1%} (start-up {tl.startup_share:.0%} of it), "
            f"held by test processes {tl.held:.1%}")
