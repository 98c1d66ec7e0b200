"""Performance guard of the training capabilities (the training net's layer 4: long runs, resume, regressions):
throughput and peak RSS per
capability toggle — plain, TP, FSDP2, PP, AC, swap, TP+FSDP — against a stored baseline,
flagging a regression past the stated thresholds. A benchmark, not a test: it prints figures
and an exit code, and never runs inside ``.ci/run``.

It runs the long-run cases (``cases/torch/training/case_train_l4_stability.py``, gate
``cpu_nightly``: 300 steps each) through ``python -m meshtest run`` — or reads a finished run's
artifacts with ``--from DIR`` (e.g. a nightly job's ``dist/test/<target>/``) — and reads each
rank's ``cases/<case>/curve_rank<r>.json``:

- throughput: steps per second after warm-up, ``1 / median(wall_s[warmup:])`` (the median: a
  step slowed by another process on a 2-core machine must not move the figure), of the slowest
  rank (a launch is as fast as its slowest rank);
- peak RSS: the largest ``ru_maxrss`` over the ranks at the last step, MiB.

Baseline: ``tools/perf_baseline.json`` (``--write-baseline`` stores this run's figures with the
build they came from). Thresholds (stored with the baseline, defaults below): a case regresses
when its throughput falls below ``(1 - throughput_drop)`` × baseline or its peak RSS exceeds
``(1 + rss_growth)`` × baseline. Measured on this 2-core machine, single runs of the 1-rank cases
(3-7 ms steps) spread by up to ×1.9 in steps/s between consecutive runs (multi-rank: ×1.2;
peak RSS: under 1 %), so the guard takes each case's best of ``--repeat`` runs (3 for the stored
baseline) and flags a throughput drop of more than 30 % or a peak RSS rise of more than 15 %. A
baseline from another build or CPU is compared but says so.

Usage: ``python3 tools/perf_guard.py [--python PY] [--repeat N] [--from DIR] [--write-baseline]``.
Exit code 1 on a regression or a case without a curve, else 0. About 3 minutes per run (16 long runs).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

CASES = os.path.join("cases", "torch", "training", "case_train_l4_stability.py")
#: Where the baseline lives, relative to the repository root.
BASELINE = os.path.join("tools", "perf_baseline.json")
DEFAULT_THRESHOLDS = {"throughput_drop": 0.30, "rss_growth": 0.15}


def figures(artifacts: str) -> Dict[str, dict]:
    """Case → {"steps_per_s", "peak_rss_mib", "ranks", "build"} from the curves under
    ``<artifacts>/cases/``."""
    out: Dict[str, dict] = {}
    for case_dir in sorted(glob.glob(os.path.join(artifacts, "cases", "*"))):
        curves = []
        for path in sorted(glob.glob(os.path.join(case_dir, "curve_rank*.json"))):
            with open(path, encoding="utf-8") as f:
                curves.append(json.load(f))
        if not curves:
            continue
        rates = [1.0 / max(statistics.median(c["wall_s"][c["warmup"]:]), 1e-9) for c in curves]
        out[os.path.basename(case_dir)] = {
            "steps_per_s": round(min(rates), 2),
            "peak_rss_mib": round(max(c["rss_kb"][-1] for c in curves) / 1024, 1),
            "ranks": len(curves), "build": curves[0].get("build", {})}
    return out


def best_of(runs: List[Dict[str, dict]]) -> Dict[str, dict]:
    """Per case, the best throughput and the largest peak RSS over repeated runs."""
    out: Dict[str, dict] = {}
    for run in runs:
        for name, fig in run.items():
            old = out.get(name)
            out[name] = fig if old is None else {**old, "steps_per_s": max(old["steps_per_s"], fig["steps_per_s"]),
                                                 "peak_rss_mib": max(old["peak_rss_mib"], fig["peak_rss_mib"])}
    return out


def compare(now: Dict[str, dict], base: Optional[dict]) -> List[str]:
    """The table's lines; a regressed case's line starts with ``REGRESSION``."""
    thresholds = {**DEFAULT_THRESHOLDS, **((base or {}).get("thresholds", {}))}
    cases = (base or {}).get("cases", {})
    w = max([len(n) for n in now] + [24])
    lines = [f"{'case':{w}} {'ranks':>5} {'steps/s':>9} {'baseline':>9} {'ratio':>6} {'RSS MiB':>8} {'baseline':>9}"]
    for name, fig in sorted(now.items()):
        ref = cases.get(name)
        if ref is None:
            lines.append(f"{name:{w}} {fig['ranks']:>5} {fig['steps_per_s']:>9.1f} {'-':>9} {'-':>6} "
                         f"{fig['peak_rss_mib']:>8.1f} {'-':>9}  (no baseline)")
            continue
        ratio = fig["steps_per_s"] / ref["steps_per_s"]
        slow = ratio < 1 - thresholds["throughput_drop"]
        fat = fig["peak_rss_mib"] > ref["peak_rss_mib"] * (1 + thresholds["rss_growth"])
        flag = "REGRESSION " if slow or fat else ""
        why = ", ".join(w for w, bad in (("throughput", slow), ("peak RSS", fat)) if bad)
        lines.append(f"{flag}{name:{w}} {fig['ranks']:>5} {fig['steps_per_s']:>9.1f} {ref['steps_per_s']:>9.1f} "
                     f"{ratio:>6.2f} {fig['peak_rss_mib']:>8.1f} {ref['peak_rss_mib']:>9.1f}"
                     + (f"  ({why})" if why else ""))
    missing = sorted(set(cases) - set(now))
    lines += [f"REGRESSION {name}: no curve in this run" for name in missing]
    lines.append(f"thresholds: throughput -{thresholds['throughput_drop']:.0%}, "
                 f"peak RSS +{thresholds['rss_growth']:.0%}")
    return lines


def main(argv: Optional[List[str]] = None, root: str = "") -> int:
    """The command (module docstring); ``root``: the repository root (default: the current
    directory), where the case files, ``src`` and the files it writes are."""
    root = root or os.getcwd()
    baseline_path = os.path.join(root, BASELINE)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="an interpreter with torch")
    ap.add_argument("--from", dest="source", help="read a finished run's artifacts instead of running")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs; each case's best throughput and largest peak RSS over them are compared")
    ap.add_argument("--write-baseline", action="store_true")
    args = ap.parse_args(argv)
    if args.source:
        now = figures(args.source)
    else:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(root, "src"), root])}
        runs = []
        for _ in range(max(args.repeat, 1)):
            with tempfile.TemporaryDirectory(prefix="meshtest-perf-") as artifacts:
                subprocess.run([args.python, "-m", "meshtest", "run", CASES, "--tag", "cpu_nightly", "--artifacts-dir",
                                artifacts], cwd=root, env=env, stdout=subprocess.DEVNULL)
                runs.append(figures(artifacts))
        now = best_of(runs)
    if not now:
        print("perf guard: no curves found", file=sys.stderr)
        return 1
    base = None
    if os.path.exists(baseline_path):
        with open(baseline_path, encoding="utf-8") as f:
            base = json.load(f)
    builds = {json.dumps(f["build"], sort_keys=True) for f in now.values()}
    print(f"build: {', '.join(sorted(builds))}")
    if base and json.dumps(base.get("build"), sort_keys=True) not in builds:
        print(f"note: the baseline was recorded with {base.get('build')}")
    lines = compare(now, base)
    print("\n".join(lines))
    if args.write_baseline:
        doc = {"build": next(iter(now.values()))["build"],
               "thresholds": (base or {}).get("thresholds", DEFAULT_THRESHOLDS),
               "cases": {k: {"steps_per_s": v["steps_per_s"], "peak_rss_mib": v["peak_rss_mib"]}
                         for k, v in now.items()}}
        with open(baseline_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"baseline written: {baseline_path}")
        return 0
    return 1 if any(line.startswith("REGRESSION") for line in lines) else 0

