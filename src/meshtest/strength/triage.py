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
                        "upstream": "pytorch/pytorch#123"},
      "requires": {"ops": ["argmax", "argmin"], "any": ["in\\\\d+:S\\\\(\\\\d+\\\\)"]}}]

``requires`` states the case property the rule's reason stands for (placement kinds, sharded
dims, dtypes, ops: :mod:`meshtest.strength.predicate`); a rule that names a case without it is an
error of :func:`apply`, so a reason cannot silently cover a second cause.

``names`` are fnmatch patterns on case names; the first rule naming an entry gives it its
``known_failure`` (:func:`apply`), so the manifest — and with it the static scan — carries the
mark like a hand-written case's. Every mark is then judged strictly (:mod:`meshtest.model.known`):
a case that fails another way is ``fail``, one that passes ``xpass``; a pattern that gives no
entry its mark (it names no case, or only cases an earlier rule already marked) is an error of
:func:`apply` (a rule outliving its cases).

A ``known_failure`` rule of kind ``mismatch`` at a value step (``compare``, ``backward``,
``output-metadata``: :data:`meshtest.model.known.SIGNED_STEPS`) names cases that each failed
with their own wrong values, so each case's mark also carries its **value signature**
(:mod:`meshtest.model.known`, "Value signatures") from ``signatures.json`` beside the table,
written by ``python -m meshtest triage --write-signatures RESULTS`` from a run's results
(:func:`write_signatures`): a run then reproduces the mark only with the same wrong values. A
case such a rule names without a signature is an error of :func:`apply` naming the rule.

A rule may give a ``simulation_limit`` (a text) instead of a ``known_failure``: the cases it names
behave differently under torch's rank simulator (``LocalTensorMode``) than on real ranks, where
they pass or fail as their ``known_failure`` says. The one-process lane then leaves them out,
saying why; the real-rank gates run them. Only level-1 entries may have one: level 0 is the
one-process lane's own sample.

A rule may instead give ``in_float64`` (a text, with its ``requires`` as a ``known_failure``
has): the float32 cases it names differ from the
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
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..errors import CaseDeclarationError
from ..model.known import PASSED, SIGNED_STEPS, KnownFailure, rank_groups, signature_of
from . import predicate

_RULE_KEYS = ("names", "known_failure")
#: What a rule gives the entries it names: one of these, with ``names``.
_RULE_VERDICTS = ("known_failure", "simulation_limit", "in_float64")
#: The suffix of a case that a rule moves to float64 (``in_float64``).
FLOAT64_SUFFIX = ".in_float64"
#: The file of value signatures beside ``known_failures.json`` (:func:`write_signatures`).
SIGNATURES_FILE = "signatures.json"
SIGNATURES_COMMAND = "python -m meshtest triage --write-signatures RESULTS"


def signed(known: Dict[str, Any]) -> bool:
    """Whether a rule's ``known_failure`` pins value signatures (a ``mismatch`` at a value step)."""
    return known.get("kind") == "mismatch" and known.get("step") in SIGNED_STEPS


def load_signatures(path: str) -> Dict[str, str]:
    """Case name → value signature from ``signatures.json`` at ``path`` (``{}`` when there is none).

    :raises ValueError: not ``{"written_by": ..., "signatures": {name: text}}``.
    """
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    sigs = doc.get("signatures") if isinstance(doc, dict) else None
    if not isinstance(sigs, dict) or not all(isinstance(v, str) and v for v in sigs.values()):
        raise ValueError(f"{path}: must be {{\"written_by\": ..., \"signatures\": {{case name: signature}}}} as "
                         f"{SIGNATURES_COMMAND} writes it")
    return sigs


def load_known(path: str) -> List[Dict[str, Any]]:
    """The triage table at ``path`` (``[]`` when there is none).

    :raises ValueError: not a list of rules with ``names`` (a non-empty list of patterns) and
        either a valid ``known_failure`` with its ``requires`` (:func:`meshtest.strength.predicate.validate`)
        or a non-empty ``simulation_limit`` / ``in_float64`` text, naming the rule's index.
    """
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    if not isinstance(table, list):
        raise ValueError(f"{path}: must be a JSON list of rules")
    for i, rule in enumerate(table):
        keys = set(rule) if isinstance(rule, dict) else set()
        verdicts = keys & set(_RULE_VERDICTS)
        if (len(verdicts) != 1 or keys - verdicts - {"names", "requires"} or "names" not in keys
                or ("requires" in keys and "simulation_limit" in keys)
                or not isinstance(rule["names"], list) or not rule["names"]):
            raise ValueError(f"{path}: rule {i} must have exactly names (a non-empty list) and one of "
                             f"known_failure, simulation_limit, in_float64 (known_failure and in_float64 with their "
                             f"requires); "
                             f"got {rule!r}")
        text = next((k for k in ("simulation_limit", "in_float64") if k in rule), None)
        if text is not None:
            if not isinstance(rule[text], str) or not rule[text].strip():
                raise ValueError(f"{path}: rule {i}: {text} must be a non-empty text (the reason); got {rule[text]!r}")
            if text == "in_float64":
                if "requires" not in rule:
                    raise ValueError(f"{path}: rule {i}: an in_float64 rule states the case property its reason "
                                     "stands for in requires (meshtest.strength.predicate): every case it names "
                                     "must have it")
                predicate.validate(rule["requires"], f"{path}: rule {i}")
            continue
        if "requires" not in rule:
            raise ValueError(f"{path}: rule {i}: a known_failure rule states the case property its reason stands "
                             "for in requires (meshtest.strength.predicate): every case it names must have it")
        predicate.validate(rule["requires"], f"{path}: rule {i}")
        if isinstance(rule["known_failure"], dict) and "signature" in rule["known_failure"]:
            raise ValueError(f"{path}: rule {i}: a rule's cases each have their own signature: they go in "
                             f"{SIGNATURES_FILE} ({SIGNATURES_COMMAND}), not in the rule")
        try:
            doc = dict(rule["known_failure"])
            if signed(doc):  # each case's own, from signatures.json (apply)
                doc["signature"] = "per case"
            KnownFailure.from_json(doc).validated(path, f"rule {i}")
        except (TypeError, CaseDeclarationError) as e:
            raise ValueError(f"{path}: rule {i}: {e}") from None
    return table


def apply(table: Sequence[Dict[str, Any]], entries: Iterable[Dict[str, Any]], whole: bool = True,
          signatures: Optional[Mapping[str, str]] = None) -> int:
    """Give each entry the ``known_failure`` of the first ``known_failure`` rule naming it, and the
    ``simulation_limit`` of the first ``simulation_limit`` rule naming it (the key is written only
    then); returns how many got a ``known_failure``.

    A ``known_failure`` that pins values (:func:`signed`) gets the entry's ``signature`` from
    ``signatures`` (case name → text, :func:`load_signatures`).

    An ``in_float64`` rule gives the entry its reason under ``in_float64`` and the name suffix
    :data:`FLOAT64_SUFFIX`, after every rule has been matched against the float32 name.

    :param whole: ``entries`` are every generated entry, so a pattern that names none is stale
        (``False`` for a subset: a regenerated family).
    :raises ValueError: a ``known_failure`` rule names an entry its ``requires`` does not hold
        for (:func:`meshtest.strength.predicate.unmet`; naming the rule, the case, the unmet keys);
        a rule that pins values names a random entry, or an entry without a signature (naming the
        rule, the case and :data:`SIGNATURES_COMMAND`); with ``whole``, a signature of a case no
        such rule names (stale); a pattern of a rule names no entry (say which, to be removed); a
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
                    unmet = predicate.unmet(rule.get("requires") or {}, e)
                    if unmet:
                        raise ValueError(
                            f"known_failures.json rule {i} marks {e['name']}, which does not have the property the "
                            f"rule's reason stands for (requires: {'; '.join(unmet)}); the reason is "
                            f"\"{rule['known_failure']['reason']}\": move the case to a rule whose reason describes it")
                    e["known_failure"] = dict(rule["known_failure"])
                    if signed(rule["known_failure"]) and (e.get("random") or e.get("uninitialised")):
                        raise ValueError(
                            f"known_failures.json rule {i} marks {e['name']}, a random case, with a value mismatch: a "
                            "random op's values are judged as random (unsupported where DTensor has no RNG, "
                            "meshtest.platforms.torch.opinfo.cases.OpCall), never against one single-device draw")
                    if signed(rule["known_failure"]):
                        sig = (signatures or {}).get(e["name"])
                        if sig is None:
                            raise ValueError(
                                f"known_failures.json rule {i} ({rule['known_failure']['kind']} at step "
                                f"{rule['known_failure']['step']}) marks {e['name']} without a value signature: run "
                                f"the case and write it with {SIGNATURES_COMMAND} (any wrong value would reproduce "
                                "the mark otherwise)")
                        e["known_failure"]["signature"] = sig
                elif verdict == "in_float64":
                    unmet = predicate.unmet(rule.get("requires") or {}, e)
                    if unmet:
                        raise ValueError(f"known_failures.json rule {i}: in_float64 names {e['name']}, which does not "
                                         f"have the property the rule's reason stands for (requires: "
                                         f"{'; '.join(unmet)}); the reason is \"{rule['in_float64']}\"")
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
    pinned = {e["name"] for e in entries if (e.get("known_failure") or {}).get("signature")}
    stale_sigs = sorted(set(signatures or {}) - pinned)
    if stale_sigs and whole:
        more = f" and {len(stale_sigs) - 20} more" if len(stale_sigs) > 20 else ""
        raise ValueError(f"{SIGNATURES_FILE} holds signatures of cases no rule pins now (remove them): "
                         + ", ".join(stale_sigs[:20]) + more)
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


def outcome_signature(outcome: Dict[str, Any]) -> Optional[str]:
    """The value signature of a run's outcome (a ``results.jsonl`` record), or ``None`` when a
    failing rank recorded none. A rank process records its own: ranks that agree give that one
    text, else one group per signature, ranks that passed as ``pass``
    (:func:`meshtest.model.known.rank_groups`); the one-process lane's record is the same text on
    every simulated rank."""
    failures = {f["rank"]: f for f in outcome["failures"] if f.get("rank") is not None}
    per_rank: Dict[str, List[int]] = {}
    for r in range(outcome["world_size"]):
        f = failures.get(r)
        sig = PASSED if f is None or f["status"] in ("pass", "xpass") else signature_of(f["error"])
        if sig is None:
            return None
        per_rank.setdefault(sig, []).append(r)
    if not per_rank or set(per_rank) == {PASSED}:
        return None
    return next(iter(per_rank)) if len(per_rank) == 1 else rank_groups(per_rank, outcome["world_size"])


def write_signatures(results: Sequence[str], manifest_dir: str, stream: Any) -> int:
    """``triage --write-signatures``: record in ``signatures.json`` the value signature of every
    generated case in ``results`` that a value-pinning rule (:func:`signed`) marks and that
    failed at the rule's step (``fail`` or ``xfail``); the other signatures in the file stay.
    Prints what it wrote and which marked cases it could not sign (another step, no signature);
    returns 1 when there are such, else 0. The manifests are then rewritten by ``python -m
    meshtest generate opinfo``."""
    from ..report.results import read_results, results_files

    table = load_known(os.path.join(manifest_dir, "known_failures.json"))
    path = os.path.join(manifest_dir, SIGNATURES_FILE)
    sigs = dict(load_signatures(path))
    outcomes = {o.case: o.to_json() for f in results_files(results) for o in read_results(f)}
    first = _first_rules(table, list(outcomes))["known_failure"]
    wrote, unsigned = 0, []
    for name, (i, _) in sorted(first.items()):
        known = table[i]["known_failure"]
        if not signed(known):
            continue
        o = outcomes[name]
        steps = {f["step"] for f in o["failures"] if f["status"] not in ("pass", "xpass")}
        sig = outcome_signature(o) if o["status"] in ("fail", "xfail") and steps == {known["step"]} else None
        if sig is None:
            unsigned.append(f"{name}: {o['status']} at step(s) {', '.join(sorted(steps)) or '-'} (rule {i}: "
                            f"{known['step']})")
            continue
        wrote += sigs.get(name) != sig
        sigs[name] = sig
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"written_by": SIGNATURES_COMMAND, "signatures": dict(sorted(sigs.items()))}, f, indent=1)
        f.write("\n")
    print(f"meshtest triage: {wrote} signature(s) written or changed in {path} ({len(sigs)} in all); "
          f"{len(unsigned)} marked case(s) not signed", file=stream)
    for line in unsigned:
        print(f"  not signed: {line}", file=stream)
    return 1 if unsigned else 0


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
