#!/usr/bin/env python3
"""Write ``<root>/index.html``: the targets level above each test run's ``report.html``.

``./pants test`` leaves one directory per test run under ``dist/test/`` (a case file, or a
batch named after its first file) holding ``results.jsonl`` and ``report.html`` (that run's
case files → cases → ranks matrix). The index has one row per such directory: the target,
its counts by status, its slowest case, its failing cases, and relative links to its
``report.html`` (failing cases link to their row there) and its other result files.
Failing targets come first. Static HTML, no scripts, no server needed: it reads from a CI
artifact store or a local ``dist/``.

Above the table: the device slot pool's timeline of the newest run (one row per slot, one bar per
launch, start-up pale, idle time blank, utilization printed; :mod:`meshtest.report.timeline`),
from the pool's audit log at its stable location (``--slot-dir=DIR``, else ``$MESHTEST_SLOT_DIR``,
else the Pants named cache ``~/.cache/pants/named_caches/meshtest_slots``).

Usage: ``python3 tools/report_index.py [dist/test] [--slot-dir=DIR]``; prints where the index is. Exit code 0
(the pass/fail verdict is ``tools/results_summary.py``'s). Stdlib only (CI runs it with the
system ``python3``): it reads the runs with meshtest's own ``meshtest.report.results.collect``
and judges them with ``meshtest.status``; templating: :class:`string.Template`, every value
through :func:`html.escape`.
"""
from __future__ import annotations

import html
import os
import sys
import time
from string import Template
from typing import Dict, List, Optional, Sequence
from urllib.parse import quote

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from meshtest.contract import CaseOutcome  # noqa: E402
from meshtest.parent.slots import read_audit  # noqa: E402
from meshtest.report import timeline  # noqa: E402
from meshtest.report.results import collect  # noqa: E402
from meshtest.status import REPORT_ORDER, Status  # noqa: E402

#: Result files a target row links to when present, besides report.html.
OTHER_FILES = ("summary.txt", "results.jsonl", "junit.xml")

_PAGE = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>meshtest results: $title</title>
<style>
body{font-family:sans-serif;margin:1.5em} table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #bbb;padding:3px 6px;vertical-align:top;font-size:13px}
tr.failing{background:#f8d0d0} tr.passing{background:#d9f2d9} td.zero{color:#aaa} td.num{text-align:right}
#targets{max-width:100%} #targets td{overflow-wrap:anywhere}
</style></head><body>
<h1>meshtest results</h1>
<p id="overall">$overall</p>
<section id="slots"><h2>device slots</h2><p id="pool">$pool</p>
$timeline</section>
<table id="targets"><tr><th>target</th><th>verdict</th>$status_headers<th>cases</th><th>slowest case</th>\
<th>failing cases</th><th>files</th></tr>
$rows
</table>
</body></html>
""")
_STATUS_HEADER = Template("<th>$status</th>")
_ROW = Template("""<tr class="target $verdict" id="$target_id"><td class="name"><a href="$report_href">$target</a></td>\
<td class="verdict">$verdict</td>$counts<td class="num total">$total</td><td class="slowest">$slowest</td>\
<td class="failing-cases">$failing_cases</td><td class="files">$files</td></tr>""")
_ROW_NO_REPORT = Template("""<tr class="target $verdict" id="$target_id">\
<td class="name">$target <small>(no report.html)</small></td>\
<td class="verdict">$verdict</td>$counts<td class="num total">$total</td><td class="slowest">$slowest</td>\
<td class="failing-cases">$failing_cases</td><td class="files">$files</td></tr>""")
_COUNT = Template('<td class="num count $status$zero">$n</td>')
_LINK = Template('<a href="$href">$text</a>')
_CASE_LINK = Template('<a href="$href">$case</a> <small>($status)</small>')
_CASE_TEXT = Template("$case <small>($status)</small>")
_SLOWEST = Template("$case_html <small>$seconds s$rank</small>")
_NO_TARGETS = Template('<tr><td colspan="$span">no results.jsonl under $root</td></tr>')


def _fill(template: Template, raw: Sequence[str] = (), **values: object) -> str:
    """``template`` with every value HTML-escaped, except the names in ``raw`` (fragments
    this module rendered itself)."""
    return template.substitute({k: (v if k in raw else html.escape(str(v), quote=True)) for k, v in values.items()})


def is_failing(outcomes: Sequence[CaseOutcome]) -> bool:
    """Whether a test run fails: some case has a failing status (``meshtest.status.FAILING``)."""
    return any(o.status.failing for o in outcomes)


def _counts(outcomes: Sequence[CaseOutcome]) -> Dict[Status, int]:
    c: Dict[Status, int] = {}
    for o in outcomes:
        c[o.status] = c.get(o.status, 0) + 1
    return c


def _slowest(outcomes: Sequence[CaseOutcome]) -> Optional[CaseOutcome]:
    return max(outcomes, key=lambda o: o.slowest_s, default=None)


def _q(name: str) -> str:
    """``name`` as a relative URL path segment (``+`` of batch names kept as is)."""
    return quote(name, safe="+")


def _case_html(target: str, case: str, status: Status, has_report: bool) -> str:
    if has_report:
        return _fill(_CASE_LINK, href=f"{_q(target)}/report.html#{quote(case)}", case=case, status=status)
    return _fill(_CASE_TEXT, case=case, status=status)


def _row(root: str, target: str, outcomes: Sequence[CaseOutcome], statuses: Sequence[Status]) -> str:
    counts = _counts(outcomes)
    has_report = os.path.isfile(os.path.join(root, target, "report.html"))
    slow = _slowest(outcomes)
    slowest = ""
    if slow is not None:
        rank = slow.slowest_rank
        slowest = _fill(_SLOWEST, raw=("case_html",),
                        case_html=_case_html(target, slow.case, slow.status, has_report),
                        seconds=f"{slow.slowest_s:.3f}", rank="" if rank is None else f", rank {rank}")
    failing = [o for o in outcomes if o.status.failing]
    files = [_fill(_LINK, href=f"{_q(target)}/{name}", text=name)
             for name in OTHER_FILES if os.path.isfile(os.path.join(root, target, name))]
    return _fill(
        _ROW if has_report else _ROW_NO_REPORT, raw=("counts", "slowest", "failing_cases", "files"),
        verdict="failing" if failing else "passing" if outcomes else "no-cases", target=target,
        target_id=f"target-{target}",
        report_href=f"{_q(target)}/report.html", total=len(outcomes), slowest=slowest,
        counts="".join(_fill(_COUNT, status=s, n=counts.get(s, 0),
        zero="" if counts.get(s) else " zero") for s in statuses),
        failing_cases="<br>".join(_case_html(target, o.case, o.status, has_report) for o in failing),
        files=" ".join(files))


def default_pool() -> str:
    """Where the slot pool's audit log is: ``$MESHTEST_SLOT_DIR``, else the Pants named cache
    ``~/.cache/pants/named_caches/meshtest_slots`` that every ``./pants test`` process shares."""
    return os.environ.get("MESHTEST_SLOT_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "pants", "named_caches", "meshtest_slots")


#: How many of the pool's newest runs the index draws, newest first (in CI: the TP level1 run,
#: check-incremental's, the one-process lane, the main job).
RUNS_DRAWN = 5


def slots_section(pool: str) -> tuple:
    """(summary line, HTML) for ``pool``'s audit log: the newest run's figures, and a timeline of
    each of the :data:`RUNS_DRAWN` newest runs (:mod:`meshtest.report.timeline`)."""
    records = read_audit(pool)
    where = os.path.realpath(pool)
    runs = timeline.sessions(records)[-RUNS_DRAWN:][::-1]
    if not runs:
        return f"no slot audit log at {where}/audit.jsonl", ""
    drawn = []
    for i, run in enumerate(runs):
        tl = timeline.build(run)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(tl.start))
        drawn.append(f'<div class="slot-run" data-run="{i}"><p>{"newest run" if i == 0 else "earlier run"}, '
                     f"started {html.escape(when)}: {html.escape(timeline.summary(tl))}</p>"
                     + timeline.render_svg(tl) + "</div>")
    return timeline.summary(timeline.build(runs[0]), where), "\n".join(drawn)


def render(root: str, found: Dict[str, List[CaseOutcome]], pool: Optional[str] = None) -> str:
    """The index page for ``found`` (``collect(root)``); links are relative to ``root``; the
    slot timeline from ``pool``'s audit log (default :func:`default_pool`)."""
    statuses = list(REPORT_ORDER)
    order = sorted(found, key=lambda t: (not is_failing(found[t]), t))
    rows = [_row(root, t, found[t], statuses) for t in order]
    if not rows:
        rows.append(_fill(_NO_TARGETS, span=len(statuses) + 6, root=root))
    total = _counts([o for outcomes in found.values() for o in outcomes])
    failing = sum(is_failing(found[t]) for t in found)
    overall = (f"{len(found)} test runs, {failing} failing; cases: "
               + (", ".join(f"{s}={total[s]}" for s in statuses if total.get(s)) or "none"))
    pool_line, svg = slots_section(pool or default_pool())
    return _fill(_PAGE, raw=("status_headers", "rows", "timeline"), title=root, overall=overall, pool=pool_line,
                 timeline=svg,
                 status_headers="".join(_fill(_STATUS_HEADER, status=s) for s in statuses), rows="\n".join(rows))


def write_index(root: str, pool: Optional[str] = None) -> str:
    """Write ``<root>/index.html`` over the test runs under ``root``; return its path."""
    path = os.path.join(root, "index.html")
    page = render(root, collect(root), pool)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    pools = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--slot-dir=")]
    args = [a for a in argv[1:] if not a.startswith("--slot-dir=")]
    root = args[0] if args else os.path.join("dist", "test")
    if not os.path.isdir(root):
        print(f"report index: no {root}/ (no test results); nothing written")
        return 0
    path = write_index(root, pools[-1] if pools else None)
    print(f"report index: {os.path.abspath(path)} (targets → cases → ranks; open it in a browser, no server needed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
