"""Suite-strength figures as artifacts, and the pages that quote them.

``python -m meshtest mutate`` and ``python -m meshtest coverage-ops`` write their figures to
``figures.json`` in their artifacts directory (:func:`mutation_figures`,
:func:`coverage_figures`): the command that made them, the date, the platform build, the case
counts they ran on, and the counts themselves. A page quotes a figures file only between
markers naming it::

    <!-- figures: mutation_cpu_local -->
    ...the text :func:`render` makes of docs/figures/mutation_cpu_local.json...
    <!-- /figures -->

``python -m meshtest figures --add DIR/figures.json NAME`` copies an artifact to
``docs/figures/NAME.json`` and rewrites every block of the pages; ``--check`` exits 1 naming each
block whose text differs from its file's rendering (``src/tests/test_strength_figures.py`` runs
it on every landing, so a figure edited by hand fails). Reads and writes files only; stdlib only.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

#: Where the committed figures files live, and the pages whose blocks quote them.
FIGURES_DIR = os.path.join("docs", "figures")
PAGES = (os.path.join("docs", "strength.md"),)
#: The artifact each command writes into its artifacts directory.
ARTIFACT = "figures.json"
#: A block: its opening marker, a body holding no other marker, its closing marker.
BLOCK = re.compile(r"(<!-- figures: (?P<name>[\w.-]+) -->\n)(?P<body>(?:(?!<!-- /?figures).)*?)(\n<!-- /figures -->)",
                   re.S)
OPENING = re.compile(r"<!-- figures: ([\w.-]+) -->\n")
#: A figures file's NAME (``docs/figures/NAME.json``, quoted as ``<!-- figures: NAME -->``).
NAME = re.compile(r"[\w.-]+\Z")

#: An unproven mutant's reason, from the witness's words (meshtest.platforms.torch.witness and
#: meshtest.strength.mutate): (phrase in its evidence, the class it is counted under). The first
#: call's reason counts (a mutant's evidence lists every tried call's, ``;``-separated).
UNPROVEN_REASONS: Tuple[Tuple[str, str], ...] = (
    ("equal to the reference with the mutant on", "equivalent on the tried inputs"),
    ("the mutant changed no propagated call", "changed no propagated call"),
    ("the reference raises on drawn inputs", "the reference rejects the drawn inputs"),
    ("does not replay without the mutant", "the call does not replay without the mutant"),
    ("not replayable", "the call does not replay"),
    ("has this fault's site", "no recorded call has the fault's site"),
    ("the proof itself", "the proof timed out or crashed"),
    ("could not be read", "its results could not be read"),
)


def unproven_reason(evidence: str) -> str:
    """The class of an unproven mutant's ``evidence`` (:data:`UNPROVEN_REASONS`; ``other``
    when none matches)."""
    first = evidence.split("; ")[0]
    for phrase, reason in UNPROVEN_REASONS:
        if phrase in first:
            return reason
    return "other"


def _today() -> str:
    return datetime.date.today().isoformat()


def mutation_figures(results: Sequence[Any], gate_scores: Mapping[str, Tuple[int, int]],
                     by_fault: Mapping[str, Mapping[str, Tuple[int, int]]], *, how: str, wall_s: float,
                     build: Mapping[str, str], selected: int, run_under: int, left_out: int,
                     date: Optional[str] = None) -> Dict[str, Any]:
    """The figures of a ``mutate`` run.

    :param results: its :class:`meshtest.strength.mutate.MutantResult` s (``state``, ``op``,
        ``fault``, ``evidence``, ``mutant``).
    :param gate_scores: gate → (killed, proven); ``by_fault``: fault → origin → (killed, proven).
    :param how: the command line that made the run (``made_by``).
    :param wall_s: the run's wall time in seconds (stored rounded to whole seconds).
    :param build: the platform's build (``ShardBackend.build_info``: torch's version, CPU path).
    :param selected: cases the recorded run ran; ``run_under``: passing cases run under some
        mutant; ``left_out``: selected cases that need real ranks (not run).
    :param date: ISO date of the run (default: today, local time).
    :returns: a JSON-able dict (``kind`` ``mutation``)."""
    states: Dict[str, int] = {}
    unproven: Dict[str, int] = {}
    for m in results:
        states[m.state] = states.get(m.state, 0) + 1
        if m.state == "unproven":
            why = unproven_reason(m.evidence)
            unproven[why] = unproven.get(why, 0) + 1
    return {"kind": "mutation", "made_by": how, "date": date or _today(), "build": dict(build),
            "wall_s": round(wall_s), "cases": {"selected": selected, "run_under_mutants": run_under,
                                               "left_out_need_real_ranks": left_out},
            "mutants": len(results), "operators": len({m.op for m in results}),
            "faults": sorted({m.fault for m in results}), "states": dict(sorted(states.items())),
            "unproven_by_reason": dict(sorted(unproven.items(), key=lambda kv: (-kv[1], kv[0]))),
            "scores": {g: {"killed": k, "proven": p} for g, (k, p) in sorted(gate_scores.items())},
            "by_fault": {f: {o: {"killed": k, "proven": p} for o, (k, p) in sorted(per.items())}
                         for f, per in sorted(by_fault.items())},
            "survivors": sorted(m.mutant for m in results if m.state in ("survived", "no_cases"))}


def coverage_figures(families: Sequence[Any], failing: Mapping[str, Any], reasons: Mapping[str, int], *,
                     how: str, build: Mapping[str, str], cases: int, exercising: int, dispatched: int,
                     date: Optional[str] = None) -> Dict[str, Any]:
    """The figures of a ``coverage-ops`` run.

    :param families: :class:`meshtest.strength.coverage.FamilyCoverage` s (``family``,
        ``registered``, ``covered``); the ``(no rule)`` family is not counted as registered.
    :param failing: operators not exercised because every case that reaches them fails.
    :param reasons: reason → operators not exercised for it (the others).
    :param cases: cases recorded; ``exercising``: of them, passed or reproduced pinned values;
        ``dispatched``: operators the exercising cases dispatched.
    :param how: the command line (``made_by``); ``build``: as :func:`mutation_figures`;
        ``date``: ISO date (default: today, local time).
    :returns: a JSON-able dict (``kind`` ``coverage``)."""
    fams = {f.family: {"registered": len(f.registered), "exercised": len(f.covered)}
            for f in families if f.family != "(no rule)"}
    not_exercised = {"every case that reaches it fails": len(failing), **dict(reasons)}
    return {"kind": "coverage", "made_by": how, "date": date or _today(), "build": dict(build),
            "cases": {"recorded": cases, "exercising": exercising}, "dispatched": dispatched,
            "registered": sum(v["registered"] for v in fams.values()),
            "exercised": sum(v["exercised"] for v in fams.values()), "families": fams,
            "not_exercised": {k: v for k, v in sorted(not_exercised.items(), key=lambda kv: (-kv[1], kv[0])) if v}}


def _pct(k: int, p: int) -> str:
    return f"{k}/{p} = {100.0 * k / p:.1f} %" if p else "no proven mutant"


def _origin_order(origins: Iterable[str]) -> List[str]:
    return sorted(origins, key=lambda o: (o != "generated", o))


def render(fig: Mapping[str, Any]) -> str:
    """The Markdown a page quotes for one figures file (the same file, the same text).

    :raises ValueError: an unknown ``kind``, or a field its kind needs is missing."""
    try:
        return _render(fig)
    except (KeyError, TypeError) as e:
        raise ValueError(f"a {fig.get('kind')!r} figures file without the field {e} (written by an older "
                         "meshtest, or by hand?)") from e


def _render(fig: Mapping[str, Any]) -> str:
    head = (f"Made by `{fig['made_by']}` on {fig['date']} "
            f"({', '.join(f'{k} {v}' for k, v in sorted(fig['build'].items()))})")
    if fig["kind"] == "mutation":
        c, s = fig["cases"], fig["states"]
        proven = s.get("killed", 0) + s.get("survived", 0) + s.get("no_cases", 0)
        lines = [head + f", {fig['wall_s']:,} s: {c['selected']:,} cases run in the one-process lane"
                 + (f" ({c['left_out_need_real_ranks']:,} selected cases need real ranks and were left out)"
                    if c["left_out_need_real_ranks"] else "")
                 + f", {c['run_under_mutants']:,} passing cases run under mutants. "
                 f"{fig['mutants']:,} mutants over {fig['operators']:,} operators and {len(fig['faults'])} faults: "
                 f"{proven:,} proven, {s.get('killed', 0):,} of them killed, {s.get('survived', 0):,} survived, "
                 f"{s.get('no_cases', 0):,} with no passing case; {s.get('unproven', 0):,} unproven ("
                 + "; ".join(f"{why} {n:,}" for why, n in fig["unproven_by_reason"].items()) + ").", ""]
        lines += ["| gate | killed / proven |", "|---|---|"]
        lines += [f"| `{g}` | {_pct(v['killed'], v['proven'])} |" for g, v in fig["scores"].items()]
        origins = _origin_order({o for per in fig["by_fault"].values() for o in per})
        lines += ["", "| fault | " + " | ".join(origins) + " |", "|---|" + "---|" * len(origins)]
        for fault, per in fig["by_fault"].items():
            cells = [f"{per[o]['killed']}/{per[o]['proven']}" if o in per and per[o]["proven"] else "–"
                     for o in origins]
            lines.append(f"| `{fault}` | " + " | ".join(cells) + " |")
        surv = fig["survivors"]
        lines += ["", f"Survivors ({len(surv)}): " + (", ".join(f"`{m}`" for m in surv) if surv else "none") + "."]
        return "\n".join(lines)
    if fig["kind"] == "coverage":
        c = fig["cases"]
        lines = [head + f": {c['recorded']:,} cases recorded, {c['exercising']:,} of them passed or reproduced "
                 f"pinned values; **{fig['exercised']:,} of {fig['registered']:,} registered operators exercised** "
                 f"({100.0 * fig['exercised'] / max(fig['registered'], 1):.1f} %), {fig['dispatched']:,} operators "
                 "dispatched.", "", "| family | registered | exercised |", "|---|---|---|"]
        lines += [f"| {f} | {v['registered']:,} | {v['exercised']:,} |" for f, v in fig["families"].items()]
        lines += ["", "Not exercised, by reason: "
                  + "; ".join(f"{why} {n:,}" for why, n in fig["not_exercised"].items()) + "."]
        return "\n".join(lines)
    raise ValueError(f"figures file of unknown kind {fig.get('kind')!r}")


def read(path: str) -> Dict[str, Any]:
    """A figures file, checked by rendering it.

    :raises ValueError: not readable JSON, not a dict with ``kind`` and ``made_by``, or a file
        :func:`render` cannot render (each message names ``path``)."""
    try:
        with open(path, encoding="utf-8") as f:
            fig = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable figures file: {e}") from e
    if not isinstance(fig, dict) or "kind" not in fig or "made_by" not in fig:
        raise ValueError(f"{path}: a figures file has 'kind' and 'made_by' (written by mutate or coverage-ops)")
    try:
        render(fig)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    return fig


def write(path: str, fig: Mapping[str, Any]) -> None:
    """Write ``fig`` as a figures file (JSON, indented one space, keys in the order given).

    :raises OSError: ``path`` cannot be written."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fig, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _closed(page: str) -> None:
    """:raises ValueError: an opening marker of ``page`` has no closing one (see :func:`rewrite`)."""
    closed = {m.start() for m in BLOCK.finditer(page)}
    unclosed = [m.group(1) for m in OPENING.finditer(page) if m.start() not in closed]
    if unclosed:
        raise ValueError(f"the block(s) {', '.join(unclosed)} have no <!-- /figures --> line after their text "
                         "(or hold another block's marker)")


def rewrite(page: str, figures_dir: str) -> Tuple[str, List[str]]:
    """``page`` with every figures block's body replaced by its file's rendering, and the blocks
    that changed (by name).

    :raises ValueError: an opening marker without its closing one (nothing is rewritten then),
        or a block naming a file that is missing or unreadable."""
    _closed(page)
    changed: List[str] = []

    def fill(m: "re.Match[str]") -> str:
        name = m.group("name")
        body = render(read(os.path.join(figures_dir, name + ".json")))
        if body != m.group("body"):
            changed.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(fill, page), changed


def _page(root: str, rel: str) -> str:
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{rel}: cannot read the page that quotes the figures (run from the repository root): "
                         f"{e.strerror}") from e


def check(root: str = ".") -> List[str]:
    """Every page's blocks against their files: one message per block that differs, per block
    without its closing marker or its file, per figures file no page quotes. Empty: all agree.

    :raises ValueError: a page cannot be read."""
    problems: List[str] = []
    quoted = set()
    for rel in PAGES:
        page = _page(root, rel)
        quoted |= set(OPENING.findall(page))
        try:
            _, changed = rewrite(page, os.path.join(root, FIGURES_DIR))
        except ValueError as e:
            problems.append(f"{rel}: {e}")
            continue
        problems += [f"{rel}: the block 'figures: {n}' differs from {FIGURES_DIR}/{n}.json "
                     "(run python -m meshtest figures; never edit a figure by hand)" for n in changed]
    here = os.path.join(root, FIGURES_DIR)
    files = {n[:-5] for n in os.listdir(here) if n.endswith(".json")} if os.path.isdir(here) else set()
    problems += [f"{FIGURES_DIR}/{n}.json: no page quotes it (add a <!-- figures: {n} --> block, or remove the file)"
                 for n in sorted(files - quoted)]
    return problems


def cmd_figures(add: Sequence[Tuple[str, str]] = (), only_check: bool = False, root: str = ".") -> int:
    """``python -m meshtest figures [--add ARTIFACT NAME]... | --check``: copy each artifact to
    ``docs/figures/NAME.json`` (each checked first: nothing is copied when one is bad), then rewrite
    the pages' blocks (nothing is written when a page has a block without its closing marker).
    ``only_check``: compare only (not with ``add``).

    :returns: 0 done (a figures file no page quotes is a note on stderr); 1 ``only_check`` found
        a difference (each named on stderr); 2 bad input: an unreadable artifact or page, a NAME
        that is not a file name, a block without its end or its file, ``add`` with ``only_check``."""
    try:
        if add and only_check:
            raise ValueError("--check only compares; run --add without it, then --check")
        for rel in PAGES:
            _closed(_page(root, rel))
        for src, name in add:
            if not NAME.match(name):
                raise ValueError(f"NAME {name!r}: letters, digits, '_', '.', '-' only "
                                 f"(it becomes {FIGURES_DIR}/NAME.json and the marker <!-- figures: NAME -->)")
            read(src)
        if only_check:
            problems = check(root)
            for p in problems:
                print(f"meshtest: {p}", file=sys.stderr)
            if not problems:
                print(f"meshtest: every figures block of {', '.join(PAGES)} is its file's rendering")
            return 1 if problems else 0
        for src, name in add:
            os.makedirs(os.path.join(root, FIGURES_DIR), exist_ok=True)
            shutil.copyfile(src, os.path.join(root, FIGURES_DIR, name + ".json"))
        for rel in PAGES:
            new, changed = rewrite(_page(root, rel), os.path.join(root, FIGURES_DIR))
            if changed:
                with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                    f.write(new)
                print(f"meshtest: {rel}: rewrote {', '.join(changed)}")
        for p in check(root):
            print(f"meshtest: note: {p}", file=sys.stderr)
    except ValueError as e:
        print(f"meshtest: {e}", file=sys.stderr)
        return 2
    return 0
