"""Sharding-rule coverage: which operators the corpus dispatches, with which input placements.

The ranks of a run with ``--record-ops`` write each case's calls to ``ops<k>.jsonl``
(:attr:`meshtest.contract.LaunchPlan.record_ops`; one record per distinct call:
operator, mesh shape, each tensor input's shape and placements, the placements the rule
redistributes them to, the output placements). This module merges the records of a run (or of
several, e.g. every target of ``./pants test`` under ``dist/test``) and sets them against the
operators the platform registers rules for (``ShardBackend.sharding_rules``), by family.

Placement kinds, per tensor input and mesh dimension (what the summary counts):

- ``R``, ``S(d)``, ``SS(d,k)``, ``P(sum)`` / ``P(avg)`` / ``P(max)`` / ``P(min)``: the input's placement;
- ``S(d)~``: an uneven shard (``shape[d]`` not divisible by the mesh dimension's size);
- ``X→Y``: the rule redistributes the input from ``X`` to ``Y`` first (``S(1)→R``: the op
  gathers, reduces or scans along a sharded dim; ``P(sum)→R``: it needs the reduced value;
  ``R→MP``: the embedding's masked partial).

An operator counts as *exercised* only through a case whose verdict says something about its
rule (:func:`exercising`): one that passed, or one that reproduced a known failure pinned by its
value signature (:mod:`meshtest.model.known`, "Value signatures"). A case that failed, errored,
was unsupported, or showed a known failure with no pinned values (a raise, a refusal) dispatched
the operator without checking its answer; an operator only such cases reached is listed as "not
exercised: every case fails", with those cases' classes (:func:`verdict_class`). A generated case
whose reference is degenerate (``weak``: an empty output, an all-zero or non-finite reference,
:func:`weak_cases`) exercises nothing either, whatever its verdict.

No torch import: the platform is reached through the port only.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from ..contract import CaseOutcome
from ..model.known import pins_values

#: Name of the per-rank call files (:attr:`meshtest.contract.LaunchPlan.record_ops`).
OPS_FILE_PREFIX = "ops"


@dataclass
class OpCoverage:
    """What the corpus exercises of one operator.

    :ivar cases: ``file::case`` of every case that dispatched it.
    :ivar kinds: placement kinds of its inputs (module doc).
    :ivar meshes: mesh dimensions it ran on (1, 2, ...).
    :ivar calls: distinct recorded calls.
    :ivar rule: whether a sharding rule answered (``False``: no rule; torch decomposed it).
    :ivar by_input: per tensor-input position, the placements it arrived with (``R``, ``S(d)``,
        ``P(op)``, ...; no uneven mark or redistribution).
    :ivar ndims: per tensor-input position, the largest tensor rank seen there.
    """

    op: str
    cases: Set[str] = field(default_factory=set)
    kinds: Set[str] = field(default_factory=set)
    meshes: Set[int] = field(default_factory=set)
    calls: List[Dict[str, Any]] = field(default_factory=list)
    rule: bool = True
    by_input: Dict[int, Set[str]] = field(default_factory=dict)
    ndims: Dict[int, int] = field(default_factory=dict)

    def uncovered_kinds(self) -> List[str]:
        """Placement kinds no case gave this operator, per tensor input ``in<i>``: of ``R``,
        ``S(d)`` for each dim the input has, ``P(sum)``; and ``uneven`` when no input was ever
        an uneven shard. A universe without operator knowledge: some of these are kinds the
        operator's rule can only redistribute (still worth a case: the redistribution is the rule)."""
        out = []
        for i in sorted(self.ndims):
            universe = ["R"] + [f"S({d})" for d in range(self.ndims[i])] + ["P(sum)"]
            missing = [k for k in universe if k not in self.by_input.get(i, set())]
            if missing:
                out.append(f"in{i}: {' '.join(missing)}")
        if self.ndims and not any(k.split("→")[0].endswith("~") for k in self.kinds):
            out.append("uneven")
        return out


def case_key(file: str, case: str) -> str:
    """``file::case``, how coverage and mutation mode name a case."""
    return f"{file}::{case}"


def ops_files(root: str) -> List[str]:
    """Every ``ops<k>.jsonl`` under ``root`` (recursively), sorted."""
    found = []
    for d, _, names in os.walk(root):
        found += [os.path.join(d, n) for n in names
                  if n.startswith(OPS_FILE_PREFIX) and n.endswith(".jsonl") and n[len(OPS_FILE_PREFIX):-6].isdigit()]
    return sorted(found)


def read_calls(paths: Iterable[str]) -> Dict[str, List[Dict[str, Any]]]:
    """``file::case`` → its recorded calls, merged over ``paths`` (``ops<k>.jsonl`` files).

    :raises ValueError: a line that is not a JSON object with ``case``, ``file`` and ``calls``
        (the message names the file and line).
    """
    out: Dict[str, List[Dict[str, Any]]] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                    key = case_key(doc["file"], doc["case"])
                    calls = list(doc["calls"])
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{n}: not a call record ({type(e).__name__}: {e})") from None
                seen = {json.dumps(c, sort_keys=True) for c in out.get(key, [])}
                out.setdefault(key, []).extend(c for c in calls if json.dumps(c, sort_keys=True) not in seen)
    return out


def _tensor_args(call: Mapping[str, Any]) -> Iterator[Dict[str, Any]]:
    def walk(a: Any) -> Iterator[Dict[str, Any]]:
        if isinstance(a, dict) and "t" in a:
            yield a
        elif isinstance(a, dict) and "l" in a:
            for x in a["l"]:
                yield from walk(x)

    for a in call.get("args", []):
        yield from walk(a)
    for a in call.get("kwargs", {}).values():
        yield from walk(a)


def placement_kinds(call: Mapping[str, Any]) -> Set[str]:
    """The placement kinds (module doc) of one recorded call's tensor inputs."""
    kinds: Set[str] = set()
    mesh = call.get("mesh") or []
    targets = call.get("to") or []
    for i, a in enumerate(_tensor_args(call)):
        shape = a.get("t") or []
        dst = targets[i] if i < len(targets) else a.get("p", [])
        for j, p in enumerate(a.get("p", [])):
            kind = p
            if p.startswith("S(") and j < len(mesh):
                d = int(p[2:-1])
                if 0 <= d < len(shape) and shape[d] % mesh[j]:
                    kind = p + "~"
            if j < len(dst) and dst[j] != p:
                kind = f"{kind}→{dst[j]}"
            kinds.add(kind)
    return kinds


def exercising(outcome: CaseOutcome) -> bool:
    """Whether a case's verdict checks the operators it dispatched: it passed, or it is ``xfail``
    with a known failure that pins its values (the mark's text carries a signature,
    :func:`meshtest.model.known.pins_values`) — a wrong value that reproduced exactly."""
    status = outcome.status.value
    return status == "pass" or (status == "xfail" and pins_values(outcome.known_failure))


def verdict_class(outcome: CaseOutcome) -> str:
    """A non-exercising case's class, as the "every case fails" list prints it: its status, the
    step its first failing rank stopped at, and for a known failure the mark's reason (the text
    after the expectation, up to its reference), e.g. ``xfail at run: a view of an unevenly
    sharded dim ...``; otherwise the first line of the first rank's error (``unsupported at run:
    a random op ...``); 70 characters of either."""
    step = next((f.step for f in outcome.failures if f.step), "")
    head = f"{outcome.status.value} at {step}" if step else outcome.status.value
    if ": " in outcome.known_failure:
        reason = outcome.known_failure.split(": ", 1)[1].rsplit(" (", 1)[0]
    else:  # no mark: the first line of the first error, without the platform prefix an unsupported case has
        first = next((f.error for f in outcome.failures if f.error), "").split("\n", 1)[0]
        reason = first.split(": ", 1)[1] if first.startswith("unsupported on platform") else first
    return f"{head}: {reason[:70]}" if reason else head


def weak_cases(manifest_paths: Iterable[str]) -> Dict[str, str]:
    """Generated case name → why its reference cannot tell a wrong answer from a right one (the
    manifests' ``weak`` fields, :func:`meshtest.platforms.torch.opinfo.manifest.weak_reference`: an empty
    output, an all-zero or non-finite reference), for the cases that have one."""
    found: Dict[str, str] = {}
    for path in manifest_paths:
        with open(path, encoding="utf-8") as f:
            found.update((e["name"], e["weak"]) for e in json.load(f)["cases"] if e.get("weak"))
    return found


def split_by_verdict(calls: Mapping[str, Sequence[Mapping[str, Any]]], outcomes: Iterable[CaseOutcome],
                     weak: Optional[Mapping[str, str]] = None
                     ) -> Tuple[Dict[str, List[Dict[str, Any]]], Dict[str, Dict[str, int]]]:
    """The recorded calls (:func:`read_calls`) of the cases that exercise their operators
    (:func:`exercising`, and not ``weak``: case name → why its reference is degenerate,
    :func:`weak_cases`), and for every other operator dispatched only by other cases, its cases
    counted by class (:func:`verdict_class`; ``weak: <why>`` for a weak case). A case with calls
    but no outcome (the run did not finish it) exercises nothing.

    :returns: (calls of exercising cases, operator → class → cases)."""
    weak = weak or {}
    verdicts = {case_key(o.file, o.case): o for o in outcomes}
    kept = {k: [dict(c) for c in v] for k, v in calls.items()
            if k in verdicts and exercising(verdicts[k]) and verdicts[k].case not in weak}
    reached = {c["op"] for v in kept.values() for c in v if "op" in c}
    failing: Dict[str, Dict[str, int]] = {}
    for key, records in sorted(calls.items()):
        if key in kept:
            continue
        o = verdicts.get(key)
        why = ("no verdict (the run did not finish it)" if o is None
               else f"weak: {weak[o.case]}" if o.case in weak else verdict_class(o))
        for op in sorted({c["op"] for c in records if "op" in c} - reached):
            failing.setdefault(op, {}).setdefault(why, 0)
            failing[op][why] += 1
    return kept, failing


def by_operator(calls: Mapping[str, Sequence[Mapping[str, Any]]]) -> Dict[str, OpCoverage]:
    """Recorded calls per case (:func:`read_calls`; of the exercising cases,
    :func:`split_by_verdict`) → per operator."""
    ops: Dict[str, OpCoverage] = {}
    for key, records in sorted(calls.items()):
        for call in records:
            if "op" not in call:
                continue
            cov = ops.setdefault(call["op"], OpCoverage(call["op"]))
            cov.cases.add(key)
            cov.calls.append(dict(call))
            if "error" in call:
                continue
            cov.rule = cov.rule and bool(call.get("rule", True))
            cov.kinds |= placement_kinds(call)
            for i, a in enumerate(_tensor_args(call)):
                cov.by_input.setdefault(i, set()).update(a.get("p", []))
                cov.ndims[i] = max(cov.ndims.get(i, 0), len(a.get("t") or []))
            if call.get("mesh"):
                cov.meshes.add(len(call["mesh"]))
    return ops


@dataclass
class FamilyCoverage:
    """One family of registered rules: how many operators, which are exercised."""

    family: str
    registered: List[str]
    covered: List[str]

    @property
    def uncovered(self) -> List[str]:
        """Registered operators of the family no case dispatched, sorted."""
        done = set(self.covered)
        return [op for op in self.registered if op not in done]


#: The family of the list operators (``aten._foreach_*``, ``aten._fused_*``: what an optimizer's
#: ``foreach``/``fused`` step dispatches), counted in a row of their own whatever module registers them.
LIST_OPS = "list ops (foreach, fused)"


def family_of(op: str, registered_family: str) -> str:
    """``op``'s family in the coverage table: :data:`LIST_OPS` for a list operator, else the
    family its rule's module gives (``registered_family``)."""
    name = op.split(".", 1)[-1]
    return LIST_OPS if name.startswith(("_foreach_", "_fused_")) else registered_family


def by_family(ops: Mapping[str, OpCoverage], rules: Mapping[str, str]) -> List[FamilyCoverage]:
    """Registered operators (``rules``: op → family) grouped by family (:func:`family_of`), with
    the exercised ones; a family ``(no rule)`` lists operators the corpus dispatched that have no
    registered rule."""
    fams: Dict[str, FamilyCoverage] = {}
    for op, registered in sorted(rules.items()):
        fam = family_of(op, registered)
        f = fams.setdefault(fam, FamilyCoverage(fam, [], []))
        f.registered.append(op)
        if op in ops:
            f.covered.append(op)
    extra = sorted(op for op in ops if op not in rules)
    if extra:
        fams["(no rule)"] = FamilyCoverage("(no rule)", extra, extra)
    return sorted(fams.values(), key=lambda f: (-len(f.covered), f.family))


def dispatched_by_opinfo(manifest_paths: Iterable[str]) -> Dict[str, Set[str]]:
    """Operator → the OpInfos whose samples dispatch it on plain tensors (the manifests'
    ``aten`` fields, :mod:`meshtest.platforms.torch.opinfo`)."""
    found: Dict[str, Set[str]] = {}
    for path in manifest_paths:
        with open(path, encoding="utf-8") as f:
            for e in json.load(f)["cases"]:
                for op in e.get("aten", ()):
                    found.setdefault(op, set()).add(e["op"])
    return found


def unexercised_reason(op: str, by_opinfo: Mapping[str, Set[str]]) -> str:
    """Why no case exercised ``op`` (an ``aten.name.overload`` with a registered rule), from its
    name and the OpInfos that dispatch it on plain tensors (:func:`dispatched_by_opinfo`).

    In order: an OpInfo dispatches it but no case of this run reached its rule on DTensors
    (DTensor decomposed or rewrote the call, the cases stopped before it, or they were not
    selected); a ``_foreach_`` list op (torch's ``foreach_op_db``, which the generator does not
    read); an ``out=`` or in-place overload that no case reached (the generator calls them only
    where the OpInfo has the variant and it gives the functional result on one device); a
    backward op (reached only from a backward case over that forward); else no OpInfo's CPU
    samples dispatch it."""
    name = op.split(".")[1] if op.count(".") >= 2 else op
    overload = op.rsplit(".", 1)[-1]
    if op in by_opinfo:
        return f"dispatched on plain tensors by OpInfo {', '.join(sorted(by_opinfo[op])[:3])}, not reached on DTensors"
    if name.startswith("_foreach_"):
        return "a _foreach_ list op: torch's foreach_op_db, which the generator does not read"
    if overload == "out" or overload.endswith("_out") or overload.startswith("out"):
        return "an out= overload no case reached"
    if name.endswith("_") and not name.endswith("__"):
        return "an in-place overload no case reached"
    if "backward" in name:
        return "a backward op no backward case reached"
    return "no OpInfo's CPU samples dispatch it"


def baseline_of(ops: Mapping[str, OpCoverage]) -> Dict[str, List[str]]:
    """The stored form of coverage: operator → sorted placement kinds (plus ``"{n}d mesh"``)."""
    return {op: sorted(c.kinds | {f"{n}d mesh" for n in c.meshes}) for op, c in sorted(ops.items())}


def diff_baseline(old: Mapping[str, Sequence[str]], new: Mapping[str, Sequence[str]]) -> Tuple[List[str], List[str]]:
    """(lost, gained): ``op`` or ``op kind`` lines present in only one of two baselines."""
    lost: List[str] = []
    gained: List[str] = []
    for op in sorted(set(old) | set(new)):
        if op not in new:
            lost.append(f"{op} (operator no longer dispatched)")
        elif op not in old:
            gained.append(f"{op} (operator newly dispatched)")
        else:
            lost += [f"{op} {k}" for k in sorted(set(old[op]) - set(new[op]))]
            gained += [f"{op} {k}" for k in sorted(set(new[op]) - set(old[op]))]
    return lost, gained


def not_exercised_by_reason(families: Sequence[FamilyCoverage], by_opinfo: Mapping[str, Set[str]],
                            failing: Mapping[str, Any]) -> Dict[str, List[str]]:
    """Reason → the registered operators no exercising case reached for it (each counted once,
    :func:`unexercised_reason`; an operator an OpInfo dispatches on plain tensors only is counted
    under that), leaving out those in ``failing`` (every case that reaches them fails)."""
    reasons: Dict[str, List[str]] = {}
    for f in families:
        for op in f.uncovered:
            if op in failing:
                continue
            why = unexercised_reason(op, by_opinfo)
            group = "dispatched on plain tensors by an OpInfo, not reached on DTensors" if op in by_opinfo else why
            reasons.setdefault(group, []).append(op)
    return reasons


def format_table(families: Sequence[FamilyCoverage], ops: Mapping[str, OpCoverage], show: int = 8,
                 full: bool = False, by_opinfo: Optional[Mapping[str, Set[str]]] = None,
                 failing: Optional[Mapping[str, Mapping[str, int]]] = None) -> List[str]:
    """Text report: per family, covered/registered and the exercised operators with their kinds
    and case counts; then the uncovered operators (``show`` per family unless ``full``); with
    ``by_opinfo`` (:func:`dispatched_by_opinfo`), every uncovered operator counted under its
    reason (:func:`unexercised_reason`), each reason with examples (``full``: all). An uncovered
    operator in ``failing`` (:func:`split_by_verdict`) is listed under "not exercised: every case
    fails", with its cases' classes, before any other reason."""
    failing = failing or {}
    reg = sum(len(f.registered) for f in families if f.family != "(no rule)")
    cov = sum(len(f.covered) for f in families if f.family != "(no rule)")
    lines = [f"sharding-rule coverage: {cov} of {reg} registered operators exercised "
             f"({100.0 * cov / max(reg, 1):.1f} %), {len(ops)} operators dispatched"]
    lines.append(f"{'family':14} {'covered':>9}  operators exercised (cases; placement kinds)")
    for f in families:
        lines.append(f"{f.family:14} {len(f.covered):4d}/{len(f.registered):<4d}")
        for op in f.covered:
            c = ops[op]
            mesh = "/".join(f"{n}d" for n in sorted(c.meshes))
            lines.append(f"    {op}  ({len(c.cases)} case(s); {mesh or '-'}; {' '.join(sorted(c.kinds)) or '-'})")
            if c.uncovered_kinds():
                lines.append(f"        uncovered kinds: {'; '.join(c.uncovered_kinds())}")
    lines.append("uncovered operators by family:")
    for f in families:
        missing = f.uncovered
        if not missing:
            continue
        head = missing if full else missing[:show]
        more = "" if len(head) == len(missing) else f" … and {len(missing) - len(head)} more (--all)"
        lines.append(f"  {f.family} ({len(missing)}): {', '.join(head)}{more}")
    dead = sorted(failing)  # registered or not: no exercising case reached any of them
    if dead:
        lines.append(f"not exercised: every case fails ({len(dead)} operators; cases by class):")
        for op in dead if full else dead[:4 * show]:
            classes = "; ".join(f"{n} {why}" for why, n in sorted(failing[op].items(), key=lambda kv: -kv[1]))
            lines.append(f"  {op}: {classes}")
        if not full and len(dead) > 4 * show:
            lines.append(f"  … and {len(dead) - 4 * show} more (--all)")
    if by_opinfo is not None:
        reasons = not_exercised_by_reason(families, by_opinfo, failing)
        lines.append(f"not exercised, by reason ({sum(map(len, reasons.values()))} operators, each with one):")
        for why, members in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            head = members if full else members[:show]
            more = "" if len(head) == len(members) else f" … and {len(members) - len(head)} more (--all)"
            lines.append(f"  {len(members):4d}  {why}: {', '.join(head)}{more}")
    return lines


_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>meshtest sharding-rule coverage</title>
<style>
body{font-family:sans-serif;margin:1.5em} table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #bbb;padding:3px 6px;vertical-align:top;font-size:13px}
.none{background:#f8d0d0} .some{background:#fff3c4} .all{background:#d9f2d9} code{font-size:12px}
</style></head><body>
<h1>sharding-rule coverage</h1>
<p id="total">{{ covered }} of {{ registered }} registered operators exercised
({{ "%.1f"|format(percent) }} %); {{ dispatched }} operators dispatched.</p>
<table id="families"><tr><th>family</th><th>exercised</th><th>registered</th></tr>
{% for f in families %}<tr class="{{ 'none' if not f.covered else 'all' if not f.uncovered else 'some' }}">
<td><a href="#{{ f.family }}">{{ f.family }}</a></td><td>{{ f.covered|length }}</td>
<td>{{ f.registered|length }}</td></tr>
{% endfor %}</table>
{% for f in families %}<h2 id="{{ f.family }}">{{ f.family }}</h2>
{% if f.covered %}<table class="ops"><tr><th>operator</th><th>cases</th><th>meshes</th><th>placement kinds</th>
<th>uncovered kinds</th></tr>
{% for op in f.covered %}<tr><td><code>{{ op }}</code></td><td>{{ ops[op].cases|length }}</td>
<td>{{ ops[op].meshes|sort|join(", ") }}</td><td><code>{{ ops[op].kinds|sort|join("  ") }}</code></td>
<td><code>{{ ops[op].uncovered_kinds()|join("; ") }}</code></td></tr>{% endfor %}
</table>{% endif %}
{% if f.uncovered %}<p class="uncovered">uncovered ({{ f.uncovered|length }}):
<code>{{ f.uncovered|join(", ") }}</code></p>{% endif %}
{% endfor %}
</body></html>
"""


def write_html(path: str, families: Sequence[FamilyCoverage], ops: Mapping[str, OpCoverage]) -> None:
    """The coverage table as a page (Jinja2, autoescaped, no scripts): one row per family, then
    per family its exercised operators (cases, mesh dims, placement kinds) and the uncovered ones."""
    from jinja2 import Environment

    reg = sum(len(f.registered) for f in families if f.family != "(no rule)")
    cov = sum(len(f.covered) for f in families if f.family != "(no rule)")
    html = Environment(autoescape=True).from_string(_HTML).render(
        families=families, ops=ops, registered=reg, covered=cov, percent=100.0 * cov / max(reg, 1),
        dispatched=len(ops))
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)


def read_baseline(path: str) -> Optional[Dict[str, List[str]]]:
    """A stored baseline (:func:`baseline_of`), or ``None`` when the file does not exist.

    :raises ValueError: the file is not a JSON object of operator → list of kinds."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), dict) \
            or not all(isinstance(v, list) for v in doc["ops"].values()):
        raise ValueError(f"{path}: not a coverage baseline ({{'ops': {{operator: [kinds]}}}})")
    return doc["ops"]


def write_baseline(path: str, baseline: Mapping[str, Sequence[str]], how: str) -> None:
    """Store ``baseline`` with the command that made it (``how``)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"made_by": how, "ops": dict(baseline)}, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
