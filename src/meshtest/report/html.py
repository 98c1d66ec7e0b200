"""Static HTML run report for CI artifact browsing: ``report.html`` in the artifacts directory.

It leads with what matters: the counts by verdict with a legend (each verdict its own colour),
then a list of the failing cases, each linking to its row, then the files, those with a
failure first, each a table of cases (failing ones first) → a ranks matrix. A case row shows
its status, world size, launch group and slowest-rank time, and one error block per distinct
error (the ranks that agree on it named together, a rank that differs in a block of its own);
each rank cell its status, the step it failed in, and links to that rank's log and JSONL
(relative links, so the report reads from a CI artifact store or a local ``dist/`` without a
server). A training case's row draws its loss (and grad norm, when it clips) per step, the
parallel run against the single-device baseline and its golden curve where one is committed;
a long run's, each rank's loss and peak RSS (:mod:`.curves`). Paths under the artifacts
directory or the working directory (a Pants sandbox) are written relative. Rendered with Jinja2
(autoescaped); no scripts, no external assets.
"""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence

from jinja2 import Environment

from ..contract import CaseOutcome
from ..status import Status
from .curves import HEIGHT, WIDTH, charts, read_curves, read_losses, training_charts
from .reporter import closing_line, counts, ranks_text, same_on_every_rank, spec_table

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>meshtest report</title>
<style>
body{font-family:sans-serif;margin:1.5em;max-width:1340px} table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #bbb;padding:3px 6px;vertical-align:top;font-size:13px}
.pass{background:#d9f2d9} .xfail{background:#d8e4f8} .xpass{background:#e4d2f4}
.fail,.error{background:#f8d0d0} .crash,.timeout,.missing{background:#f2b8a8}
.not_run{background:#eee} .unsupported{background:#fff3c4} .waited{background:#fde2c8}
.badge{padding:2px 8px;margin-right:6px;border:1px solid #999;border-radius:3px}
#failures li{margin:2px 0;font-size:13px} #legend td{font-size:12px}
pre{margin:2px 0;white-space:pre-wrap;max-width:70em;font-size:12px}
.error-block{border-left:4px solid #c33;padding-left:6px;margin:4px 0}
figure.curve{margin:4px 0} figcaption{font-size:11px}
</style></head><body>
<h1>meshtest report</h1>
<section id="summary">
<p id="totals">{% for status, n in totals %}<span class="badge {{ status }}">{{ status }}: {{ n }}</span>{% endfor %}
<span id="verdict">{{ verdict }}</span></p>
{% if failing %}<h2>failing cases ({{ failing|length }})</h2>
<ol id="failures">{% for f in failing %}
<li class="{{ f.status }}"><a href="#{{ f.case }}">{{ f.file }}::{{ f.case }}</a>
{{ f.status }}{% if f.step %} at step {{ f.step }}{% endif %}{% if f.first %}: {{ f.first }}{% endif %}
</li>{% endfor %}</ol>
{% endif %}
<details><summary>what each verdict means</summary><table id="legend"><tr><th>verdict</th><th>meaning</th></tr>
{% for status, meaning in legend %}<tr><td class="{{ status }}">{{ status }}</td><td>{{ meaning }}</td></tr>{% endfor %}
</table></details>
</section>
{% for note in notes %}<div class="note">{{ note }}</div>{% endfor %}
{% if spec_lines %}<h2>spec IDs</h2><pre id="spec-table">{{ spec_lines|join("\n") }}</pre>{% endif %}
{% for file, rows in files %}
<h2>{{ file }}</h2>
<table><tr><th>status</th><th>case</th><th>ranks</th><th>launch</th><th>slowest rank s</th>
{% for r in range(max_ranks) %}<th>rank {{ r }}</th>{% endfor %}</tr>
{% for row in rows %}
<tr class="case {{ row.status }}" id="{{ row.case }}"><td>{{ row.status }}</td><td>{{ row.case }}
{% if row.spec_id %} <small>[{{ row.spec_id }}]</small>{% endif %}
{% if row.known_failure %}<br><small>known failure: {{ row.known_failure }}</small>
{% if row.repro %}<br><small>reproduce it without meshtest: <code>{{ row.repro }}</code></small>{% endif %}{% endif %}
{% if row.divergence %}<br><small class="divergence">divergence from spec: {{ row.divergence }}</small>{% endif %}
{% for block in row.errors %}<div class="error-block"><b>rank(s) {{ block.ranks }}: {{ block.status }} at step
 {{ block.step }}</b><pre>{{ block.error }}</pre></div>{% endfor %}
{% for phase, launch, logs in row.phase_logs %}<br><small class="phase-logs">phase {{ phase }} ({{ launch }}):
{% for rank, log in logs %}<a href="{{ log }}">rank {{ rank }} log</a> {% endfor %}</small>{% endfor %}
{% if row.detail %}<pre class="detail">{{ row.detail }}</pre>{% endif %}
{% if row.diagnosis %}<pre class="diagnosis">diagnosis: {{ row.diagnosis }}</pre>{% endif %}
{% for chart in row.charts %}<figure class="curve"><svg width="{{ size[0] }}" height="{{ size[1] }}"
 viewBox="0 0 {{ size[0] }} {{ size[1] }}" role="img" aria-label="{{ chart.title }}">
<rect width="100%" height="100%" fill="#fafafa" stroke="#bbb"/>
{% for rank, points in chart.lines %}<polyline class="rank{{ rank }}" fill="none" stroke="{{ colors[rank % 4] }}"
 stroke-width="1.2" points="{{ points }}"><title>rank {{ rank }}</title></polyline>{% endfor %}</svg>
<figcaption>{{ chart.title }}: {{ "%.4g"|format(chart.low) }} to {{ "%.4g"|format(chart.high) }};
ranks {% for rank, _ in chart.lines %}<span style="color:{{ colors[rank % 4] }}">{{ rank }}</span> {% endfor %}
</figcaption></figure>{% endfor %}
{% for chart in row.train_charts %}<figure class="curve train"><svg width="{{ size[0] }}" height="{{ size[1] }}"
 viewBox="0 0 {{ size[0] }} {{ size[1] }}" role="img" aria-label="{{ chart.title }}">
<rect width="100%" height="100%" fill="#fafafa" stroke="#bbb"/>
{% for label, color, points in chart.lines %}<polyline class="series" data-series="{{ label }}" fill="none"
 stroke="{{ color }}" stroke-width="1.5" points="{{ points }}"><title>{{ label }}</title></polyline>{% endfor %}</svg>
<figcaption>{{ chart.title }}: {{ "%.6g"|format(chart.low) }} to {{ "%.6g"|format(chart.high) }};
{% for label, color, _ in chart.lines %}<span style="color:{{ color }}">{{ label }}</span> {% endfor %}
</figcaption></figure>{% endfor %}</td>
<td>{{ row.world_size }}</td><td>{{ row.launch }}</td><td>{{ "%.3f"|format(row.slowest_s) }}</td>
{% for cell in row.cells %}<td class="rank {{ cell.status }}">{{ cell.status }}
{%- if cell.step %} @ {{ cell.step }}{% endif %}
{%- if cell.node %}<br><span class="node">node {{ cell.node }}</span>{% endif %}
{% if cell.log %}<br><a href="{{ cell.log }}">log</a> <a href="{{ cell.jsonl }}">jsonl</a>{% endif %}</td>
{%- endfor %}</tr>
{% endfor %}</table>
{% endfor %}
</body></html>
"""

#: Each verdict the report colours, and what it means (the legend under the counts).
LEGEND = (
    (Status.PASS, "every rank passed"),
    (Status.FAIL, "a comparison or assertion failed"),
    (Status.ERROR, "an exception other than a failed comparison"),
    (Status.CRASH, "a rank died inside the case"),
    (Status.TIMEOUT, "the launch was killed at the case's deadline"),
    (Status.MISSING, "a rank recorded nothing for the case"),
    (Status.XFAIL, "a known failure of the platform, reproduced as declared (counted apart, never a pass)"),
    (Status.XPASS, "a case marked as a known failure passed: the mark must go (fails the run)"),
    (Status.UNSUPPORTED, "the platform lacks a feature the case requires: not run"),
    (Status.NOT_RUN, "a fail-fast (level0) gate stopped before the case"),
)


#: Statuses a rank cell shows for every rank of the case, whatever its failures say.
_WHOLE_CASE = (Status.XFAIL, Status.NOT_RUN, Status.UNSUPPORTED)


class _Cell(NamedTuple):
    """One rank's cell: its status and step, links to its files (errors are the row's blocks)."""

    status: str = ""
    step: str = ""
    log: str = ""
    jsonl: str = ""
    #: the node the rank ran on (a launch placed across a cluster), else ""
    node: str = ""


def _relative(text: str, roots: Sequence[str]) -> str:
    """``text`` with each absolute ``root`` prefix (``/…/extra-output/``, the sandbox) removed."""
    for root in roots:
        text = text.replace(root.rstrip("/") + "/", "")
    return text


def _error_blocks(o: CaseOutcome, roots: Sequence[str]) -> List[dict]:
    """One block per distinct (status, step, error) among the case's failing ranks, the ranks that
    agree on it named together (an error that differs only in its own rank number agrees,
    :func:`meshtest.report.reporter.same_on_every_rank`); an ``xfail``'s blocks are the declared
    failure as its ranks had it."""
    blocks: Dict[tuple, dict] = {}
    for f in o.failures:
        error = _relative("\n".join(f.error.strip().splitlines()[:12]), roots)
        key = (f.status.value, f.step, same_on_every_rank(error, f.rank_label))
        block = blocks.setdefault(key, {"status": key[0], "step": f.step, "error": error, "ranks": []})
        block["ranks"].append(f)
    return [{**b, "ranks": ranks_text(b["ranks"])} for b in blocks.values()]


def _row(o: CaseOutcome, max_ranks: int, artifacts_dir: str = "", roots: Sequence[str] = ()) -> dict:
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
            log=f"{base}.log" if base else "",
            jsonl=f"{base}.jsonl" if base else "",
            node=o.nodes[rank] if rank < len(o.nodes) else "",
        ))
    doc = o.to_json()
    long_run = charts(read_curves(artifacts_dir, o.case)) if artifacts_dir else []
    train = [] if long_run or not artifacts_dir else training_charts(read_losses(artifacts_dir, o.case), _golden(o))
    return {**doc, "launch": o.launch_dir or o.group, "cells": cells, "errors": _error_blocks(o, roots),
            "phase_logs": _phase_logs(o, artifacts_dir),
            "detail": _relative(o.detail, roots), "diagnosis": _relative(o.diagnosis, roots),
            "known_failure": _relative(o.known_failure, roots),
            # an op or training case's standalone script (meshtest.repro); scenario cases have none
            "repro": f"python -m meshtest repro {o.file}::{o.case}"
            if o.known_failure and o.kind in ("op", "train") and not _PHASE_DONE.search(o.detail) else "",
            "charts": long_run, "train_charts": train}


#: How the runner tells a phased case's earlier phases in its detail (meshtest.parent.outcomes.phase_chain)
_PHASE_DONE = re.compile(r"phase (\d+)/\d+ \w+ in ([^;\s]+)")


def _phase_logs(o: CaseOutcome, artifacts_dir: str) -> List[tuple]:
    """``(phase, launch, [(rank, log link)])`` for each earlier phase of a phased case (the row's
    rank cells link the last phase's), from the launches its detail names, as they lie on disk."""
    out = []
    for phase, launch in _PHASE_DONE.findall(o.detail):
        if launch == o.launch_dir or not artifacts_dir:
            continue
        logs = sorted(glob.glob(os.path.join(artifacts_dir, "ranks", glob.escape(launch), "rank[0-9]*.log")),
                      key=lambda p: int(re.search(r"rank(\d+)\.log$", p).group(1)))
        if logs:
            out.append((int(phase), launch, [(int(re.search(r"rank(\d+)\.log$", p).group(1)),
                                              os.path.relpath(p, artifacts_dir)) for p in logs]))
    return out


def _golden(o: CaseOutcome) -> Optional[List[Optional[float]]]:
    """The case's committed golden losses (``<case file's dir>/golden/<case>.json``, from the
    working directory: the repository, or the Pants sandbox when the target depends on it)."""
    path = os.path.join(os.path.dirname(o.file), "golden", f"{o.case}.json")
    try:
        with open(path, encoding="utf-8") as f:
            return list(json.load(f).get("losses", []))
    except (OSError, ValueError, AttributeError):
        return None


def _failing_first(o: CaseOutcome) -> int:
    return 0 if o.status.failing else 1


def write_html_report(path: str, outcomes: Sequence[CaseOutcome], notes: Sequence[str] = ()) -> None:
    """Render ``outcomes`` to ``path`` (links are relative to the file's directory; a long run's
    curves are read from ``cases/<case>/curve_rank<r>.json`` beside it, :mod:`.curves`). Files with
    a failing case come first, and in each file its failing cases, then the others in run order."""
    max_ranks = max((o.world_size for o in outcomes), default=0)
    here = os.path.dirname(os.path.abspath(path))
    roots = sorted({here, os.getcwd()}, key=len, reverse=True)  # the longer first: extra-output/ in a sandbox
    files: Dict[str, List[dict]] = {}
    for o in sorted(outcomes, key=_failing_first):  # stable: run order within each kind
        files.setdefault(o.file, []).append(_row(o, max_ranks, here, roots))
    failing = [o for o in outcomes if o.status.failing]
    failing_files = {o.file for o in failing}
    c = counts(outcomes)
    html = Environment(autoescape=True).from_string(_TEMPLATE).render(
        totals=[(s.value, c[s]) for s, _ in LEGEND if c.get(s)], verdict=closing_line(c),
        legend=[(s.value, meaning) for s, meaning in LEGEND],
        failing=[{"file": o.file, "case": o.case, "status": o.status.value,
                  "step": o.failures[0].step if o.failures else "",
                  "first": _relative(o.failures[0].error.strip().splitlines()[0], roots)
                  if o.failures and o.failures[0].error.strip() else ""} for o in failing],
        notes=[_relative(n, roots) for n in notes],
        files=sorted(files.items(), key=lambda kv: (kv[0] not in failing_files, kv[0])),
        max_ranks=max_ranks, size=(WIDTH, HEIGHT), colors=("#1f77b4", "#d62728", "#2ca02c", "#9467bd"),
        spec_lines=spec_table(outcomes))
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
