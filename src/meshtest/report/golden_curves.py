"""Golden loss curves of the layer-2/3 training cases (the training net's layer 4: long runs, resume, regressions:
regressions pinned to the
platform's release): record them, compare them, print the difference.

Each layer-2/3 training case has ``<case file dir>/golden/<case>.json``: the parallel run's
loss per step (every phase's steps in order, for a case with phases) (float32 values written
so that they read back exactly), and the build they were recorded with (``torch`` version, CPU
kernel path). Every run of the case compares its curve with the file
(:func:`meshtest.rank.train.check_golden`): exactly for the same build, so a torch upgrade that
changes a curve fails naming the case.

This tool runs the cases (``python -m meshtest run FILES --tag cpu_level1``, every case of the
files whatever their current golden state), reads the losses each rank wrote to
``<artifacts>/cases/<case>/losses_rank<r>.json`` (``losses_rank<r>.phase<i>.json`` per phase), and
prints, per case, ``new``, ``same`` or the
first steps that changed (old → new). ``--write`` stores the new curves; a case the platform
reports unsupported, or a known failure that stops before a curve, is stored as
``{"no_curve": "<status>: <reason>"}``.

Usage: ``python3 tools/golden_curves.py [--write] [--python PY] [FILE ...]`` (default: every
``cases/torch/training/case_*.py``; ``PY``: an interpreter with torch, default this one).
Exit code: 0 when nothing differs (or ``--write``), 1 when a curve differs or is missing, 2 when
the run recorded no result. Wall on this machine: about 3 minutes for the training suite.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

from meshtest.model.scan import scan_case_file
from meshtest.report.results import read_results

GOLDEN_LAYERS = (2, 3)


def golden_cases(files: List[str]) -> Dict[str, str]:
    """Case name → its golden path, for every layer-2/3 training case (a long run is layer 4)."""
    out = {}
    for path in files:
        scan = scan_case_file(path)
        if scan.error:
            raise SystemExit(f"{path}: {scan.error}")
        for c in scan.cases:
            if c.kind == "train" and c.layer in GOLDEN_LAYERS:
                out[c.name] = os.path.join(os.path.dirname(path), "golden", f"{c.name}.json")
    return out


def _first_with_loss(paths: List[str]) -> Optional[dict]:
    """The first file (by rank) whose losses are not all ``None`` (a pipeline's last stage)."""
    for path in sorted(paths, key=lambda p: int(p.rsplit("rank", 1)[1].split(".")[0])):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if any(v is not None for v in doc["losses"]):
            return doc
    return None


def recorded(artifacts: str, case: str) -> Optional[dict]:
    """The case's curve from the run: per phase (or for the one launch), the first rank that
    computed a loss; the phases' steps concatenated in order. ``None`` if a phase is missing."""
    where = os.path.join(artifacts, "cases", glob.escape(case))
    phase_files = glob.glob(os.path.join(where, "losses_rank*.phase*.json"))
    phases = sorted({int(p.rsplit("phase", 1)[1].split(".")[0]) for p in phase_files})
    groups = ([glob.glob(os.path.join(where, f"losses_rank*.phase{i}.json")) for i in phases] if phases
              else [glob.glob(os.path.join(where, "losses_rank[0-9]*.json"))])
    docs = [_first_with_loss(paths) for paths in groups]
    if not docs or any(d is None for d in docs) or (phases and phases != list(range(1, len(phases) + 1))):
        return None
    return {"case": case, "build": docs[0]["build"], "losses": [v for d in docs for v in d["losses"]]}


def difference(old: Optional[dict], new: dict) -> str:
    """``new`` (no stored curve), ``same``, or the changed steps, ``step 3: 0.51 -> 0.52``."""
    if old is None:
        return "new"
    if old == new:
        return "same"
    if "losses" not in old or "losses" not in new:
        return f"{old.get('no_curve') or 'curve'} -> {new.get('no_curve') or 'curve'}"
    lines = [f"step {i}: {a!r} -> {b!r}" for i, (a, b) in enumerate(zip(old["losses"], new["losses"])) if a != b]
    if len(old["losses"]) != len(new["losses"]):
        lines.append(f"{len(old['losses'])} steps -> {len(new['losses'])}")
    if old.get("build") != new.get("build"):
        lines.append(f"build {old.get('build')} -> {new.get('build')}")
    return "; ".join(lines) or "same"


def main(argv: Optional[List[str]] = None, root: str = "") -> int:
    """The command (module docstring); ``root``: the repository root (default: the current
    directory), where the case files, ``src`` and the files it writes are."""
    root = root or os.getcwd()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--write", action="store_true", help="store the new curves")
    ap.add_argument("--python", default=sys.executable, help="an interpreter with torch")
    args = ap.parse_args(argv)
    # the run happens in the repository root: name the files relative to it, wherever this runs
    files = [os.path.relpath(os.path.abspath(f), root) for f in args.files] or sorted(
        os.path.relpath(f, root) for f in glob.glob(os.path.join(root, "cases", "torch", "training", "case_*.py")))
    cases = golden_cases([os.path.join(root, f) for f in files])
    if not cases:
        print(f"golden: no layer-2/3 training case in {', '.join(files) or 'no file'}")
        return 0
    with tempfile.TemporaryDirectory(prefix="meshtest-golden-") as artifacts:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(root, "src"), root])}
        subprocess.run([args.python, "-m", "meshtest", "run", *files, "--tag", "cpu_level1", "--no-fail-fast",
                        "--artifacts-dir", artifacts, *[a for c in sorted(cases) for a in ("--case", c)]],
                       cwd=root, env=env, stdout=subprocess.DEVNULL)
        results_path = os.path.join(artifacts, "results.jsonl")
        if not os.path.exists(results_path):
            print("golden: the run recorded no result", file=sys.stderr)
            return 2
        statuses = {o.case: o for o in read_results(results_path)}
        changed = 0
        for case, path in sorted(cases.items()):
            new = recorded(artifacts, case)
            outcome = statuses.get(case)
            if new is None and outcome is not None and outcome.status.value in ("unsupported", "xfail"):
                why = outcome.failures[0].error.strip().splitlines()[0] if outcome.failures else ""
                new = {"case": case, "no_curve": f"{outcome.status.value}: {why or outcome.known_failure}"}
            if new is None:
                print(f"{case}: no curve recorded ({outcome.status.value if outcome else 'not run'})")
                changed += 1
                continue
            old = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    old = json.load(f)
            diff = difference(old, new)
            print(f"{case}: {diff}")
            changed += diff != "same"
            if args.write and diff != "same":
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(new, f, indent=1)
                    f.write("\n")
    print(f"golden: {len(cases)} case(s), {changed} new or changed" + (" (written)" if args.write else ""))
    return 0 if args.write or not changed else 1

