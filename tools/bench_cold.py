#!/usr/bin/env python3
"""Benchmark (prints figures; asserts nothing): the README's two commands as a newcomer meets
them, on a fresh clone with an empty ``HOME`` (no Pants install, no Pants cache, no slot pool).

Usage: ``python3 tools/bench_cold.py [--ref HEAD] [--skip-project-tests] [--warm-clone]``

1. ``./pants --version``: the bootstrap (a CPython 3.9 venv with Pants, the pex tool built).
2. ``./pants --tag=cpu_level0 test cases::`` (the main job), cut into its phases from Pants' own
   log lines: Pants' start and the test environments (from the command's start to the last
   ``Completed: Building``/``Installing`` before the first test result), then the test phase; and
   the slot pool's figures for the run (launches, slot-time in launches, held by test processes:
   :func:`meshtest.report.timeline.summary`, the line ``index.html`` prints).
3. ``./pants test src:: tools::`` (the project tests) after it, as the README orders them: its
   wall, and each test target's seconds against its timeout (``tools/pants_results.py``).
4. ``--warm-clone``: the project tests again in a second fresh clone with the same (now warm)
   ``HOME``.

Each command runs with pantsd as a newcomer has it (on); the daemons are stopped at the end.
The torch wheel is found as ``./pants`` finds it (``MESHTEST_WHEELS_DIR`` or ``PIP_FIND_LINKS``).
Run it on a quiet machine: it is the only heavy process it expects (~20 min on 2 cores).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))
from meshtest.report import timeline  # noqa: E402  (stdlib only)

_LOG_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d(?:\.\d+)?) \[\w+\] (.*)$")
_ENV_BUILT = re.compile(r"^Completed: (Building|Installing) ")
_FIRST_RESULT = re.compile(r"^Completed: Run ")


def _pants_results():
    spec = importlib.util.spec_from_file_location("pants_results", os.path.join(REPO, "tools", "pants_results.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _seconds_of_day(t: float) -> float:
    d = datetime.datetime.fromtimestamp(t)
    return d.hour * 3600 + d.minute * 60 + d.second + d.microsecond / 1e6


def phases(log: str, started: float, ended: float) -> Tuple[float, float]:
    """(environments built, test phase) in seconds, from a ``./pants test`` output whose command
    started at ``started`` and ended at ``ended`` (Unix seconds): the environments are built at the
    last ``Completed: Building/Installing`` line before the first ``Completed: Run`` line."""
    start_of_day = _seconds_of_day(started)
    built = None
    for line in log.splitlines():
        m = _LOG_TIME.match(line)
        if not m:
            continue
        at = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        at += 86400 if at < start_of_day - 60 else 0  # past midnight
        if _FIRST_RESULT.match(m.group(4)):
            break
        if _ENV_BUILT.match(m.group(4)):
            built = at - start_of_day
    built = built if built is not None else 0.0
    return built, (ended - started) - built


def run(cmd: List[str], cwd: str, env: Dict[str, str]) -> Tuple[int, str, float, float]:
    started = time.time()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout, started, time.time()


def clone(ref: str, dest: str) -> None:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", REPO, dest], check=True)
    subprocess.run(["git", "checkout", "-q", ref], cwd=dest, check=True)


def slot_figures(home: str) -> str:
    audit = os.path.join(home, ".cache", "pants", "named_caches", "meshtest_slots", "audit.jsonl")
    if not os.path.exists(audit):
        return f"no slot audit log at {audit}"
    with open(audit, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    runs = timeline.sessions(records)
    return timeline.summary(timeline.build(runs[-1])) if runs else "no run in the slot audit log"


def budget(log: str, cwd: str, env: Dict[str, str]) -> str:
    pr = _pants_results()
    code, peek, _, _ = run(["./pants", "peek", "src::", "tools::"], cwd, env)
    if code:
        return "./pants peek failed:\n" + peek[-2000:]
    timeouts = {t["address"]: t.get("timeout") for t in json.loads(peek[peek.index("["):])}
    rows, over = pr.over_share(pr.durations(log), timeouts, 600, 0.5)
    lines = [f"{'seconds':>8} {'timeout':>8} {'share':>6}  target"]
    lines += [f"{s:8.1f} {t:8d} {s / t:6.0%}  {a}" for a, s, t in rows]
    lines.append(f"{len(over)} target(s) over half their timeout" + (": " + ", ".join(a for a, _, _ in over)
                                                                      if over else ""))
    return "\n".join(lines)


def stop_pantsd(clone_dir: str) -> None:
    subprocess.run(["pkill", "-f", f"pantsd \\[{re.escape(clone_dir)}\\]"], check=False)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="HEAD", help="the commit to clone (default HEAD)")
    ap.add_argument("--skip-project-tests", action="store_true", help="the main job only")
    ap.add_argument("--warm-clone", action="store_true", help="the project tests again in a second clone")
    args = ap.parse_args(argv)
    ref = subprocess.run(["git", "rev-parse", "--short", args.ref], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    root = tempfile.mkdtemp(prefix="meshtest-cold-")
    home = os.path.join(root, "home")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CACHE_HOME", "MESHTEST_CACHE_DIR", "CI") and not k.startswith("PANTS_")}
    env["HOME"] = home
    first = os.path.join(root, "clone")
    clone(ref, first)
    figures: List[Tuple[str, str]] = [("commit", ref), ("cores", str(os.cpu_count()))]
    try:
        code, out, t0, t1 = run(["./pants", "--version"], first, env)
        figures.append(("bootstrap (./pants --version)", f"{t1 - t0:.1f} s, rc {code}"))
        code, out, t0, t1 = run(["./pants", "--tag=cpu_level0", "test", "cases::"], first, env)
        built, tests = phases(out, t0, t1)
        summary = [line for line in out.splitlines() if line.startswith(("✓", "✕"))]
        figures += [("main job cold (./pants --tag=cpu_level0 test cases::)", f"{t1 - t0:.1f} s, rc {code}"),
                    ("  Pants start + test environments", f"{built:.1f} s"), ("  test phase", f"{tests:.1f} s"),
                    ("  results", f"{len(summary)} result line(s)"), ("  slot pool", slot_figures(home))]
        if not args.skip_project_tests:
            code, out, t0, t1 = run(["./pants", "test", "src::", "tools::"], first, env)
            figures.append(("project tests after it (./pants test src:: tools::)", f"{t1 - t0:.1f} s, rc {code}"))
            figures.append(("  per target", "\n" + budget(out, first, env)))
        if args.warm_clone:
            second = os.path.join(root, "clone2")
            clone(ref, second)
            code, out, t0, t1 = run(["./pants", "test", "src::", "tools::"], second, env)
            figures.append(("project tests, second clone, warm HOME", f"{t1 - t0:.1f} s, rc {code}"))
            figures.append(("  per target", "\n" + budget(out, second, env)))
            stop_pantsd(second)
    finally:
        stop_pantsd(first)
    for name, value in figures:
        print(f"{name}: {value}")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
