"""Triage of generated cases: failures grouped by signature, and the table of known failures
the generator writes into the manifests.

A **signature** is what a failure has in common with the failures of the same bug: the OpInfo,
the placement kind of the case (``S``, ``S~`` uneven, ``P(max)``, ``2d:S+P(sum)``…), the step and
the kind of error (``mismatch`` for a comparison, else the exception's type). ``python -m
meshtest triage RESULTS...`` prints the groups of a run's ``results.jsonl``, largest first, each
with one example case and its message.

``cases/torch/opinfo/known_failures.json`` holds what is known of a group, one rule per bug::

    [{"names": ["argmax.float32.s0.m2x2.S0Pmax", "argmin.float32.*"],
      "known_failure": {"kind": "raises", "step": "run", "match": "...", "reason": "...",
                        "upstream": "pytorch/pytorch#123"}}]

``names`` are fnmatch patterns on case names; the first rule naming an entry gives it its
``known_failure`` (:func:`apply`), so the manifest — and with it the static scan — carries the
mark like a hand-written case's. Every mark is then judged strictly (:mod:`meshtest.model.known`):
a case that fails another way is ``fail``, one that passes ``xpass``; a pattern that gives no
entry its mark (it names no case, or only cases an earlier rule already marked) is an error of
:func:`apply` (a rule outliving its cases).

A rule may give a ``simulation_limit`` (a text) instead of a ``known_failure``: the cases it names
behave differently under torch's rank simulator (``LocalTensorMode``) than on real ranks, where
they pass or fail as their ``known_failure`` says. The one-process lane then leaves them out,
saying why; the real-rank gates run them. Only level-1 entries may have one: level 0 is the
one-process lane's own sample.

A rule may instead give ``in_float64`` (a text): the float32 cases it names differ from the
single-device result by rounding only — sums re-associated by the sharding, a few ulps a function
amplifies — which the float32 comparison cannot tell from a wrong rule. Such a case runs in
float64 instead: the same sample (its float32 values, widened exactly), the same placements and
rule, compared with float64's tolerances; a wrong rule fails it as before, rounding no longer
does. Its name takes the suffix ``.in_float64`` and the entry keeps the reason.
"""
from __future__ import annotations

import fnmatch
import json
import os
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from ..errors import CaseDeclarationError
from ..model.known import KnownFailure

_RULE_KEYS = ("names", "known_failure")
#: What a rule gives the entries it names: one of these, with ``names``.
_RULE_VERDICTS = ("known_failure", "simulation_limit", "in_float64")
#: The suffix of a case that a rule moves to float64 (``in_float64``).
FLOAT64_SUFFIX = ".in_float64"


def load_known(path: str) -> List[Dict[str, Any]]:
    """The triage table at ``path`` (``[]`` when there is none).

    :raises ValueError: not a list of rules with ``names`` (a non-empty list of patterns) and
        either a valid ``known_failure`` or a non-empty ``simulation_limit`` text, naming the rule's
        index.
    """
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    if not isinstance(table, list):
        raise ValueError(f"{path}: must be a JSON list of rules")
    for i, rule in enumerate(table):
        keys = set(rule) if isinstance(rule, dict) else set()
        if (len(keys) != 2 or "names" not in keys or not keys & set(_RULE_VERDICTS)
                or not isinstance(rule["names"], list) or not rule["names"]):
            raise ValueError(f"{path}: rule {i} must have exactly names (a non-empty list) and one of "
                             f"known_failure, simulation_limit, in_float64; got {rule!r}")
        text = next((k for k in ("simulation_limit", "in_float64") if k in rule), None)
        if text is not None:
            if not isinstance(rule[text], str) or not rule[text].strip():
                raise ValueError(f"{path}: rule {i}: {text} must be a non-empty text (the reason); got {rule[text]!r}")
            continue
        try:
            KnownFailure.from_json(rule["known_failure"]).validated(path, f"rule {i}")
        except (TypeError, CaseDeclarationError) as e:
            raise ValueError(f"{path}: rule {i}: {e}") from None
    return table


def apply(table: Sequence[Dict[str, Any]], entries: Iterable[Dict[str, Any]], whole: bool = True) -> int:
    """Give each entry the ``known_failure`` of the first ``known_failure`` rule naming it, and the
    ``simulation_limit`` of the first ``simulation_limit`` rule naming it (the key is written only
    then); returns how many got a ``known_failure``.

    An ``in_float64`` rule gives the entry its reason under ``in_float64`` and the name suffix
    :data:`FLOAT64_SUFFIX`, after every rule has been matched against the float32 name.

    :param whole: ``entries`` are every generated entry, so a pattern that names none is stale
        (``False`` for a subset: a regenerated family).
    :raises ValueError: a pattern of a rule names no entry (say which, to be removed); a
        ``simulation_limit`` rule names a level-0 entry (tagged ``cpu_local``: the one-process
        lane's own sample); an ``in_float64`` rule names an entry whose inputs are not all
        float32 or integer, or one with a ``known_failure``.
    """
    entries = list(entries)
    first = _first_rules(table, [e["name"] for e in entries])
    used = set()
    for e in entries:
        for verdict in _RULE_VERDICTS:
            found = first[verdict].get(e["name"])
            if found is not None:
                i, hit = found
                rule = table[i]
                if verdict == "known_failure":
                    e["known_failure"] = dict(rule["known_failure"])
                elif verdict == "in_float64":
                    floats = [d for d in e.get("dtypes", []) if not d.startswith(("int", "uint", "bool"))]
                    if not floats or set(floats) != {"float32"} or e.get("known_failure"):
                        raise ValueError(f"known_failures.json rule {i}: in_float64 names {e['name']}, which is not a "
                                         "float32 case without a known failure")
                    e["in_float64"] = rule["in_float64"]
                elif "cpu_local" in e["tags"]:
                    raise ValueError(f"known_failures.json rule {i}: simulation_limit names {e['name']}, a level-0 "
                                     "case (tagged cpu_local): the one-process lane must run it")
                else:
                    e["simulation_limit"] = rule["simulation_limit"]
                used.add((i, hit))
        if e.get("in_float64"):
            e["name"] += FLOAT64_SUFFIX
    unused = [f"rule {i}: {p}" for i, rule in enumerate(table) for p in rule["names"] if (i, p) not in used]
    if unused and whole:
        raise ValueError("known_failures.json names cases the generator no longer writes (remove them): "
                         + ", ".join(unused))
    return len([e for e in entries if e.get("known_failure")])


def _first_rules(table: Sequence[Dict[str, Any]], names: Sequence[str]) -> Dict[str, Dict[str, Tuple[int, str]]]:
    """Verdict → entry name → (index of the first rule of that verdict that names the entry, the
    first of that rule's patterns that matches it): what a scan of the table in order finds for
    each entry, computed once per pattern (a pattern without ``*?[`` names one entry, by equality)."""
    first: Dict[str, Dict[str, Tuple[int, str]]] = {v: {} for v in _RULE_VERDICTS}
    known = set(names)
    for i, rule in enumerate(table):
        by_name = first[next(v for v in _RULE_VERDICTS if v in rule)]
        for p in rule["names"]:
            for name in fnmatch.filter(names, p) if any(c in p for c in "*?[") else [p] * (p in known):
                by_name.setdefault(name, (i, p))  # table order, then pattern order: the first wins
    return first


def unapply(entry: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of a manifest entry as the generator wrote it before :func:`apply`: no
    ``known_failure``, ``simulation_limit`` or ``in_float64``, the name without
    :data:`FLOAT64_SUFFIX` (apply's exact inverse on the fields it writes)."""
    e = {k: v for k, v in entry.items() if k not in ("simulation_limit", "in_float64")}
    e["known_failure"] = None
    if entry.get("in_float64") and e["name"].endswith(FLOAT64_SUFFIX):
        e["name"] = e["name"][:-len(FLOAT64_SUFFIX)]
    return e


def error_kind(status: str, error: str) -> str:
    """``mismatch`` for a failed comparison, else the exception's type named in the message's
    first line, else the status (:func:`meshtest.report.results.error_kind`)."""
    from ..report.results import error_kind as kind

    return kind(status, error.splitlines()[0] if error else "")


def signature(outcome: Dict[str, Any], kinds: Dict[str, Tuple[str, str]]) -> Tuple[str, str, str, str]:
    """(OpInfo, placement kind, step, error kind) of a failing outcome; ``kinds``: case name →
    (OpInfo, kind), from the manifests."""
    first = outcome["failures"][0] if outcome["failures"] else {"step": "", "error": ""}
    op, kind = kinds.get(outcome["case"], ("?", "?"))
    return op, kind, first["step"], error_kind(outcome["status"], first["error"])


def groups(outcomes: Sequence[Dict[str, Any]], kinds: Dict[str, Tuple[str, str]]
           ) -> "OrderedDict[Tuple[str, str, str, str], List[Dict[str, Any]]]":
    """Failing outcomes (every status but pass, xfail, unsupported and not run: fail, error,
    crash, timeout, xpass, missing ...) by signature, largest group first."""
    found: Dict[Tuple[str, str, str, str], List[Dict[str, Any]]] = {}
    for o in outcomes:
        if o["status"] in ("pass", "xfail", "unsupported", "not_run"):
            continue
        found.setdefault(signature(o, kinds), []).append(o)
    return OrderedDict(sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def kinds_from_manifests(paths: Iterable[str]) -> Dict[str, Tuple[str, str]]:
    """Case name → (OpInfo, placement kind) from manifest files."""
    out: Dict[str, Tuple[str, str]] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for e in json.load(f)["cases"]:
                out[e["name"]] = (e["op"], e["kind"])
    return out


def cmd_triage(results: Sequence[str], manifest_dir: str, stream: Any, shrink: bool = False) -> int:
    """Print the failure groups of the generated cases in the runs ``results`` names
    (``results.jsonl`` files, or directories holding them as ``dist/test`` does), largest first,
    each with one example (``shrink``: shrunk to a minimal failing case,
    :mod:`meshtest.strength.shrink`); exit 1 when there is any."""
    import glob

    from ..report.results import read_results, results_files

    files = results_files(results)
    outcomes = [o.to_json() for f in files for o in read_results(f)]
    kinds = kinds_from_manifests(sorted(glob.glob(os.path.join(manifest_dir, "manifest_*.json"))))
    found = groups([o for o in outcomes if o["case"] in kinds], kinds)
    print(f"meshtest triage: {sum(len(v) for v in found.values())} failing generated case(s) in {len(found)} "
          f"signature(s), from {len(files)} result file(s)", file=stream)
    for (op, kind, step, err), members in found.items():
        first = members[0]["failures"][0]["error"] if members[0]["failures"] else ""
        print(f"{len(members):5d}  {op}  [{kind}]  {step}  {err}", file=stream)
        print(f"       e.g. {members[0]['case']}: {first.splitlines()[0][:240] if first else ''}", file=stream)
        if shrink:
            from .shrink import find_entry, report  # pants: no-infer-dep (torch's)
            from .shrink import shrink as shrink_entry  # pants: no-infer-dep (torch's)

            try:
                report(shrink_entry(*find_entry(f"{members[0]['file']}::{members[0]['case']}")), _Indented(stream))
            except Exception as e:  # noqa: BLE001 — one group's shrink failing says so; the others go on
                print(f"       not shrunk: {type(e).__name__}: {e}", file=stream)
    return 1 if found else 0


class _Indented:
    """A stream that indents what is written to it (the shrunk case under its group)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        self.stream.write("".join("       " + ln if ln.strip() else ln for ln in text.splitlines(True)))
