"""Static HTML run report for CI artifact browsing: ``report.html`` in the artifacts directory.

Case files → cases → a ranks matrix. Each case row shows its status, world size, launch group
and slowest-rank time; each rank cell its status and the step it failed in, and links to that
rank's log and JSONL (relative links, so the report reads from a CI artifact store or a local
``dist/`` without a server). Failing cases also show each rank's error. Rendered with Jinja2
(autoescaped); no scripts, no external assets.
"""
from __future__ import annotations

import os
from typing import Dict, List, NamedTuple, Sequence

from jinja2 import Environment

from ..contract import CaseOutcome
from ..status import Status
from .curves import HEIGHT, WIDTH, charts, read_curves
from .reporter import counts, spec_table

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>meshtest report</title>
<style>
body{font-family:sans-serif;margin:1.5em} table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #bbb;padding:3px 6px;vertical-align:top;font-size:13px}
.pass{background:#d9f2d9} .xfail{background:#d8e4f8} .fail,.error,.crash,.timeout,.missing,.xpass{background:#f8d0d0}
.not_run{background:#eee} .unsupported{background:#fff3c4} .waited{background:#fde2c8}
pre{margin:2px 0;white-space:pre-wrap;max-width:70em;font-size:12px}
figure.curve{margin:4px 0} figcaption{font-size:11px}
</style></head><body>
<h1>meshtest report</h1>
<p id="totals">{% for status, n in totals %}<span class="{{ status }}">{{ status }}: {{ n }}</span> {% endfor %}</p>
{% for note in notes %}<div class="note">{{ note }}</div>{% endfor %}
{% if spec_lines %}<h2>spec IDs</h2><pre id="spec-table">{{ spec_lines|join("\n") }}</pre>{% endif %}
{% for file, rows in files %}
<h2>{{ file }}</h2>
<table><tr><th>status</th><th>case</th><th>ranks</th><th>launch</th><th>slowest rank s</th>
{% for r in range(max_ranks) %}<th>rank {{ r }}</th>{% endfor %}</tr>
{% for row in rows %}
<tr class="case {{ row.status }}" id="{{ row.case }}"><td>{{ row.status }}</td><td>{{ row.case }}
{% if row.spec_id %} <small>[{{ row.spec_id }}]</small>{% endif %}
{% if row.known_failure %}<br><small>known failure: {{ row.known_failure }}</small>{% endif %}
{% if row.divergence %}<br><small class="divergence">divergence from spec: {{ row.divergence }}</small>{% endif %}
{% if row.detail %}<pre class="detail">{{ row.detail }}</pre>{% endif %}
{% if row.diagnosis %}<pre class="diagnosis">diagnosis: {{ row.diagnosis }}</pre>{% endif %}
{% for chart in row.charts %}<figure class="curve"><svg width="{{ size[0] }}" height="{{ size[1] }}"
 viewBox="0 0 {{ size[0] }} {{ size[1] }}" role="img" aria-label="{{ chart.title }}">
<rect width="100%" height="100%" fill="#fafafa" stroke="#bbb"/>
{% for rank, points in chart.lines %}<polyline class="rank{{ rank }}" fill="none" stroke="{{ colors[rank % 4] }}"
 stroke-width="1.2" points="{{ points }}"><title>rank {{ rank }}</title></polyline>{% endfor %}</svg>
<figcaption>{{ chart.title }}: {{ "%.4g"|format(chart.low) }} to {{ "%.4g"|format(chart.high) }};
ranks {% for rank, _ in chart.lines %}<span style="color:{{ colors[rank % 4] }}">{{ rank }}</span> {% endfor %}
</figcaption></figure>{% endfor %}</td>
<td>{{ row.world_size }}</td><td>{{ row.launch }}</td><td>{{ "%.3f"|format(row.slowest_s) }}</td>
{% for cell in row.cells %}<td class="rank {{ cell.status }}">{{ cell.status }}
{%- if cell.step %} @ {{ cell.step }}{% endif %}
{% if cell.log %}<br><a href="{{ cell.log }}">log</a> <a href="{{ cell.jsonl }}">jsonl</a>{% endif %}
{% if cell.error %}<pre>{{ cell.error }}</pre>{% endif %}</td>{% endfor %}</tr>
{% endfor %}</table>
{% endfor %}
</body></html>
"""


#: Statuses a rank cell shows for every rank of the case, whatever its failures say.
_WHOLE_CASE = (Status.XFAIL, Status.NOT_RUN, Status.UNSUPPORTED)


class _Cell(NamedTuple):
    """One rank's cell: its status and step, the head of its error, links to its files."""

    status: str = ""
    step: str = ""
    error: str = ""
    log: str = ""
    jsonl: str = ""


def _row(o: CaseOutcome, max_ranks: int, artifacts_dir: str = "") -> dict:
    failed = {f.rank: f for f in o.failures}
    cells = []
    for rank in range(max_ranks):
        if rank >= o.world_size:
            cells.append(_Cell())
            continue
        f = failed.get(rank)
        base = f"ranks/{o.launch_dir}/rank{rank}" if o.launch_dir else ""
        cells.append(_Cell(
            status=(f.status if f else o.status if o.status in _WHOLE_CASE else Status.PASS).value,
            step=f.step if f else "",
            error="\n".join(f.error.strip().splitlines()[:12]) if f else "",
            log=f"{base}.log" if base else "",
            jsonl=f"{base}.jsonl" if base else "",
        ))
    return {**o.to_json(), "launch": o.launch_dir or o.group, "cells": cells,
            "charts": charts(read_curves(artifacts_dir, o.case)) if artifacts_dir else []}


def write_html_report(path: str, outcomes: Sequence[CaseOutcome], notes: Sequence[str] = ()) -> None:
    """Render ``outcomes`` to ``path`` (links are relative to the file's directory; a long run's
    curves are read from ``cases/<case>/curve_rank<r>.json`` beside it, :mod:`.curves`)."""
    max_ranks = max((o.world_size for o in outcomes), default=0)
    files: Dict[str, List[dict]] = {}
    here = os.path.dirname(os.path.abspath(path))
    for o in outcomes:
        files.setdefault(o.file, []).append(_row(o, max_ranks, here))
    html = Environment(autoescape=True).from_string(_TEMPLATE).render(
        totals=sorted((s.value, n) for s, n in counts(outcomes).items()), notes=notes, files=sorted(files.items()),
        max_ranks=max_ranks, size=(WIDTH, HEIGHT), colors=("#1f77b4", "#d62728", "#2ca02c", "#9467bd"),
        spec_lines=spec_table(outcomes))
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
