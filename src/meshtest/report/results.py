"""``results.jsonl``: one :class:`meshtest.contract.CaseOutcome` per line.

Written by the runner for each run (and per case file under ``targets/``); read back by
``tools/results_summary.py`` and ``tools/report_index.py`` over every test run that
``./pants test`` left under ``dist/test/``. Stdlib only (the tools run with the system
``python3``).
"""
from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Sequence

from ..contract import CaseOutcome

_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|NotMet))\b")


def error_kind(status: str, first_line: str) -> str:
    """The kind of a failure, what two lanes (``tools/lane_diff.py``) and a triage signature
    (:mod:`meshtest.strength.triage`) compare: ``mismatch`` for a failed comparison or assertion
    (status ``fail``), the exception's type for an error or a known failure (the first
    ``...Error``/``...Exception`` of the message's first line), else the status (``pass``,
    ``crash``, ``timeout`` ...)."""
    if status == "fail":
        return "mismatch"
    if status in ("error", "xfail"):
        m = _EXCEPTION.search(first_line)
        return m.group(1) if m else status
    return status


def write_results(path: str, outcomes: Sequence[CaseOutcome]) -> None:
    """Write ``outcomes`` as JSONL, one line per case."""
    with open(path, "w", encoding="utf-8") as f:
        for o in outcomes:
            f.write(json.dumps(o.to_json()) + "\n")


def read_results(path: str) -> List[CaseOutcome]:
    """Read a ``results.jsonl``.

    :raises meshtest.contract.ContractError: a line is not a case outcome (the message names
        ``path`` and the line number).
    """
    with open(path, encoding="utf-8") as f:
        return [CaseOutcome.from_json(json.loads(line), f"{path}:{n}") for n, line in enumerate(f, 1) if line.strip()]


def results_files(paths: Sequence[str]) -> List[str]:
    """The ``results.jsonl`` files ``paths`` name, oldest first: each path is such a file, or a
    directory holding one directly or one level down (a ``dist/test`` tree)."""
    import glob

    files = set()
    for p in paths:
        if os.path.isfile(p):
            files.add(p)
        elif os.path.isdir(p):
            for pattern in ("results.jsonl", os.path.join("*", "results.jsonl")):
                files.update(glob.glob(os.path.join(p, pattern)))
    return sorted(files, key=os.path.getmtime)


def recorded_durations(paths: Sequence[str]) -> Dict[str, float]:
    """Case name → seconds (its slowest rank's, ``slowest_s``) on real ranks, from ``results.jsonl``
    files: each path is such a file, or a directory holding one directly or one level down (a
    ``dist/test`` tree). The newest file wins; the one-process lane's results (launch group
    ``local``) are left out: they cost something else.

    :raises meshtest.contract.ContractError: a line is not a case outcome.
    """
    out: Dict[str, float] = {}
    for path in results_files(paths):
        for o in read_results(path):
            if o.group != "local" and o.slowest_s > 0:  # the one-process lane's launch group
                out[o.case] = o.slowest_s
    return out


def collect(root: str) -> Dict[str, List[CaseOutcome]]:
    """``{test run dir: [outcome, ...]}`` from ``<root>/<dir>/results.jsonl``, one level deep
    (the per-file copies under ``<dir>/targets/`` are not read twice); ``{}`` when ``root`` is
    not a directory."""
    found: Dict[str, List[CaseOutcome]] = {}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, name, "results.jsonl")
        if os.path.isfile(path):
            found[name] = read_results(path)
    return found
