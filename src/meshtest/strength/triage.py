"""Triage of generated cases: failures grouped by signature, and the table of known failures
the generator writes into the manifests.

A **signature** is what a failure has in common with the failures of the same bug: the OpInfo,
the placement kind of the case (``S``, ``S~`` uneven, ``P(max)``, ``2d:S+P(sum)``…), the step and
the kind of error (``mismatch`` for a comparison, else the exception's type). ``python -m
meshtest triage RESULTS...`` prints the groups of a run's ``results.jsonl``, largest first, each
with one example case and its message.

``cases/torch/opinfo/known_failures.json`` holds what is known of a group::

    [{"op": "nn.functional.foo", "kind": "P(*", "name": "*.bwd",
      "known_failure": {"kind": "raises", "step": "run", "match": "...", "reason": "...",
                        "upstream": "pytorch/pytorch#123"}}]

``op``, ``kind`` and ``name`` are fnmatch patterns (``name`` optional); the first rule matching
an entry gives it its ``known_failure`` (:func:`apply`), so the manifest — and with it the
static scan — carries the mark like a hand-written case. Every mark is then judged strictly
(:mod:`meshtest.model.known`): a rule that matches a case that passes is an ``xpass``.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from ..model.known import KnownFailure

_RULE_KEYS = ("op", "kind", "name", "known_failure")


def load_known(path: str) -> List[Dict[str, Any]]:
    """The triage table at ``path`` (``[]`` when there is none).

    :raises ValueError: not a list of rules with ``op``, ``kind`` and a valid ``known_failure``,
        naming the rule's index.
    """
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    if not isinstance(table, list):
        raise ValueError(f"{path}: must be a JSON list of rules")
    for i, rule in enumerate(table):
        keys = set(rule) if isinstance(rule, dict) else set()
        if not {"op", "kind", "known_failure"} <= keys or keys - set(_RULE_KEYS):
            raise ValueError(f"{path}: rule {i} must have op, kind, known_failure (and optionally name); got {rule!r}")
        KnownFailure(**rule["known_failure"]).validated(path, f"rule {i}")
    return table


def apply(table: Sequence[Dict[str, Any]], entries: Iterable[Dict[str, Any]]) -> int:
    """Give each entry the ``known_failure`` of the first rule matching it; returns how many got one."""
    marked = 0
    for e in entries:
        for rule in table:
            if (fnmatch.fnmatchcase(e["op"], rule["op"]) and fnmatch.fnmatchcase(e["kind"], rule["kind"])
                    and fnmatch.fnmatchcase(e["name"], rule.get("name", "*"))):
                e["known_failure"] = dict(rule["known_failure"])
                marked += 1
                break
    return marked


def error_kind(status: str, error: str) -> str:
    """``mismatch`` for a failed comparison, else the exception's type named in the message."""
    if status == "fail":
        return "mismatch"
    m = re.search(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Warning|Interrupt))\b", error, re.M)
    return m.group(1) if m else status


def signature(outcome: Dict[str, Any], kinds: Dict[str, Tuple[str, str]]) -> Tuple[str, str, str, str]:
    """(OpInfo, placement kind, step, error kind) of a failing outcome; ``kinds``: case name →
    (OpInfo, kind), from the manifests."""
    first = outcome["failures"][0] if outcome["failures"] else {"step": "", "error": ""}
    op, kind = kinds.get(outcome["case"], ("?", "?"))
    return op, kind, first["step"], error_kind(outcome["status"], first["error"])


def groups(outcomes: Sequence[Dict[str, Any]], kinds: Dict[str, Tuple[str, str]]
           ) -> "OrderedDict[Tuple[str, str, str, str], List[Dict[str, Any]]]":
    """Failing outcomes (fail, error, crash, timeout, xpass) by signature, largest group first."""
    found: Dict[Tuple[str, str, str, str], List[Dict[str, Any]]] = {}
    for o in outcomes:
        if o["status"] in ("pass", "xfail", "unsupported", "not_run"):
            continue
        found.setdefault(signature(o, kinds), []).append(o)
    return OrderedDict(sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0])))
