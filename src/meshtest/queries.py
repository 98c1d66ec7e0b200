"""The subcommands that read and print, running no case: ``scan``, ``count``, ``list``, ``ids``,
``coverage``, ``progress`` (``python -m meshtest <command>``; :mod:`meshtest.cli` parses their
arguments). Each returns its exit status: 0 done, 1 a file failed its scan or a gap was found,
2 bad input (a missing file, a bad selection, an unreadable manifest).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import SelectionError
from .model.scan import scan_case_file


def split_specs(specs: Sequence[str]) -> Tuple[List[str], Dict[str, List[str]]]:
    """``A.py B.py::case`` → (files, {file: its case names}); a file named without ``::`` as well
    runs whole."""
    files: List[str] = []
    names: Dict[str, List[str]] = {}
    whole = set()
    for spec in specs:
        path, sep, case = spec.partition("::")
        if path not in files:
            files.append(path)
        if sep:
            names.setdefault(path, []).append(case)
        else:
            whole.add(path)
    return files, {f: n for f, n in names.items() if f not in whole}


def coverage(manifest: str, files: Sequence[str], platform: str, results: Sequence[str]) -> int:
    """The capability matrix, judged from ``results`` (newest outcome per ``file::case``), else from
    ``platform``'s probed features (its backend is loaded for that), else only declared."""
    from functools import partial

    from .report import coverage
    from .report.results import read_results, results_files

    statuses = None
    if results:
        statuses = {f"{o.file}::{o.case}": o.status for path in results_files(results) for o in read_results(path)}
    features = None
    if platform and statuses is None:
        from .platforms.registry import load_backend

        features = load_backend(platform).features()
    match = partial(coverage.coverage, features=features, results=statuses, platform=platform)
    return _manifest_report(manifest, files, coverage.read_domains, match, coverage.format_coverage)


def _manifest_report(manifest: str, files: Sequence[str], read, match, fmt) -> int:
    """Scan ``files``, match them against the manifest (``match(read(manifest), scans)``) and
    print ``fmt`` of the result: exit 0 when complete, 1 on a gap or a scan failure, 2 when the
    manifest cannot be read."""
    scans = [scan_case_file(f) for f in files]
    broken = [s for s in scans if s.error]
    for s in broken:
        print(f"{s.path}: scan failed:\n{s.error}", file=sys.stderr)
    try:
        cov = match(read(manifest), scans)
    except (OSError, ValueError) as e:
        print(f"meshtest: {e}", file=sys.stderr)
        return 2
    print("\n".join(fmt(cov)))
    return 0 if cov.ok and not broken else 1


def progress(slot_dir: str, watch: float) -> int:
    """Print the progress board of the runs using the slot pool at ``slot_dir`` (cases done /
    total per running target); with ``watch`` > 0, again every ``watch`` seconds until killed."""
    import time

    from .parent.progress import format_board, read_board
    from .parent.slots import default_slot_dir

    directory = os.path.join(slot_dir or default_slot_dir(), "progress")
    while True:
        print("\n".join(format_board(read_board(directory))), flush=True)
        if watch <= 0:
            return 0
        time.sleep(watch)
        print("--", flush=True)


def ids(manifest: str, files: Sequence[str]) -> int:
    """Print which test-plan IDs of ``manifest`` the cases of ``files`` cover (exit 1 on a gap)."""
    from .report import specids

    return _manifest_report(manifest, files, specids.read_manifest, specids.coverage, specids.format_coverage)


def scan(files: Sequence[str]) -> int:
    """Print each file's static scan as one JSON line (its cases, tags, device need, error)."""
    bad = 0
    for path in files:
        scan = scan_case_file(path)
        bad += scan.error is not None
        print(json.dumps(dict(file=path, error=scan.error, device_need=scan.device_need,
                              tags=list(scan.target_tags()), cases=[c.to_json() for c in scan.cases])))
    return 1 if bad else 0


def _family(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    return stem[len("case_"):] if stem.startswith("case_") else stem


def count(files: Sequence[str]) -> int:
    """Print case counts by family (``case_<family>.py``), by mesh and by gate, from the static
    scan, each split by expected verdict: ``cases``, of which ``xfail`` (marked ``known_failure``:
    expected to fail the declared way) and ``requires`` (needing a platform feature, so
    ``unsupported`` where the platform lacks it)."""
    from collections import Counter

    tables = {title: (Counter(), Counter(), Counter()) for title in ("family", "mesh", "gate")}
    total = bad = xfail = 0
    for path in files:
        scan = scan_case_file(path)
        if scan.error:
            print(f"{path}: scan failed:\n{scan.error}", file=sys.stderr)
            bad += 1
            continue
        for c in scan.cases:
            total += 1
            xfail += c.known_failure is not None
            names = f" {','.join(c.mesh_dim_names)}" if c.mesh_dim_names else ""
            keys = {"family": [_family(path)], "mesh": ["x".join(map(str, c.mesh_shape)) + names],
                    "gate": list(c.tags or ("(no gate)",))}
            for title, (cases, known, needs) in tables.items():
                cases.update(keys[title])
                if c.known_failure is not None:
                    known.update(keys[title])
                if c.requires:
                    needs.update(keys[title])
    for title, (cases, known, needs) in tables.items():
        print(f"{'by ' + title + ':':34} {'cases':>5} {'xfail':>6} {'requires':>9}")
        for key, n in sorted(cases.items()):
            print(f"  {key:32} {n:5d} {known[key]:6d} {needs[key]:9d}")
    print(f"total: {total} case(s) in {len(files) - bad} file(s), {xfail} marked known_failure (expected xfail)"
          + (f"; {bad} file(s) failed the scan" if bad else ""))
    return 1 if bad else 0


def _expected(c, features: Optional[Sequence[str]]) -> Tuple[str, str]:
    """A case's expected verdict and its reason, from the static scan: ``unsupported`` (the
    platform's probed ``features`` lack one the case requires; ``requires`` when they could not
    be probed), ``xfail`` (a known failure: its kind, step and reason), else ``pass``."""
    if c.requires:
        if features is None:
            return "requires", "unsupported where the platform lacks: " + ", ".join(c.requires)
        lacking = [f for f in c.requires if f not in features]
        if lacking:
            return "unsupported", "missing feature(s) " + ", ".join(lacking)
    if c.known_failure is not None:
        return "xfail", c.known_failure.describe()
    return "pass", ""


def _probed_features(platform: str) -> Optional[Sequence[str]]:
    """The platform's features (its backend probes them), or ``None`` where it cannot load here."""
    from .platforms.registry import load_backend

    try:
        return tuple(load_backend(platform).features())
    except Exception:  # noqa: BLE001 — no torch (or mindspore) here: say what the cases require instead
        return None


def list_cases(args: argparse.Namespace) -> int:
    """Print the cases ``run`` would select with the same arguments (nothing runs): exit 0, 1
    when a file fails its scan (its error is printed), 2 on a bad selection."""
    import glob

    from .parent.planner import select_cases
    from .parent.selection import narrow

    default = sorted(glob.glob(os.path.join("cases", args.platform, "**", "case_*.py"), recursive=True))
    files, names = split_specs(args.files or default)
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        print(f"meshtest: no such case file: {', '.join(missing)}", file=sys.stderr)
        return 2
    scans = [scan_case_file(f) for f in files]  # static: no platform is imported for this
    cases = [c for s in scans if not s.error for c in s.cases]
    errors = [(s.path, s.error) for s in scans if s.error] + [
        (s.path, b.error) for s in scans if not s.error for b in s.broken]
    try:
        chosen, lines, _ = narrow(select_cases(cases, args.device_kind, args.tags, args.case, names), args.keyword)
    except SelectionError as e:
        print(f"meshtest: {e}", file=sys.stderr)
        return 2
    for path, error in errors:
        print(f"{path}: scan failed: {error}", file=sys.stderr)
    rows = []
    features = _probed_features(args.platform) if any(c.requires for c in chosen) else ()
    for c in chosen:
        verdict, why = _expected(c, features)
        mesh = "x".join(map(str, c.mesh_shape)) + (f" ({','.join(c.mesh_dim_names)})" if c.mesh_dim_names else "")
        rows.append(dict(id=c.id, kind=c.kind, gates=list(c.tags), mesh=mesh, expected=verdict, reason=why))
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        cols = [("ID", "id"), ("kind", "kind"), ("mesh", "mesh"), ("expected", "expected"), ("gates", "gates")]
        text = [{k: ",".join(r[k]) if k == "gates" else r[k] for _, k in cols} for r in rows]
        widths = {k: max([len(title)] + [len(t[k]) for t in text]) for title, k in cols}
        print("  ".join(f"{title:{widths[k]}}" for title, k in cols) + "  reason")
        for t, r in zip(text, rows):
            print(("  ".join(f"{t[k]:{widths[k]}}" for _, k in cols) + "  " + r["reason"]).rstrip())
        counts = {v: sum(r["expected"] == v for r in rows) for v in ("pass", "xfail", "unsupported", "requires")}
        counts = {v: n for v, n in counts.items() if n or v in ("pass", "xfail")}
        print(f"{len(rows)} case(s) selected of {len(cases)} in {len(files)} file(s): "
              + ", ".join(f"{n} {v}" for v, n in counts.items())
              + "".join(f"; {ln}" for ln in lines) + (f"; {len(errors)} file(s) failed the scan" if errors else ""))
    return 1 if errors else 0
