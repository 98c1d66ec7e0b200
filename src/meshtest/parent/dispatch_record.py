"""``python -m meshtest dispatch-map DIR``: record the dispatch map of a case directory.

Runs every CPU case of ``DIR/case_*.py`` (every gate; the map's own check off while it is
recorded) with :attr:`meshtest.contract.LaunchPlan.record_dispatch`, merges the ranks'
``dispatch<k>.jsonl`` and writes ``DIR/dispatch_map.json``
(:mod:`meshtest.model.dispatch_map`). With ``check``, writes nothing and exits 1 when the
committed map differs from the recording (naming the cases), which is how CI finds a stale map
before a case does.
"""
from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
from typing import IO, Any, Dict, List, Optional, Sequence

from ..model import dispatch_map
from .options import RunOptions
from .runner import run


def _records(root: str) -> List[Dict[str, Any]]:
    out = []
    for path in sorted(glob.glob(os.path.join(root, "**", "dispatch*.jsonl"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def differences(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """One line per case whose entry differs between two maps (added, gone, or changed)."""
    lines = []
    for key in sorted(set(old["cases"]) | set(new["cases"])):
        a, b = old["cases"].get(key), new["cases"].get(key)
        if a != b:
            lines.append(f"{key}: {'not in the map' if a is None else a} -> {'not run' if b is None else b}")
    if old["libraries"] != new["libraries"]:
        lines.append(f"libraries: {old['libraries']} -> {new['libraries']}")
    return lines


def record(directory: str, libraries: Sequence[str] = (), lane: str = "local", check: bool = False,
           stream: IO[str] = sys.stdout, slot_dir: str = "") -> int:
    """Record (or ``check``) the map of ``directory``; exit 0, 1 (``check``: it differs; or a
    case recorded nothing), 2 (no case file, or no library namespace named or in the map).

    :param libraries: the operator namespaces the map tracks; default: the committed map's."""
    path = os.path.join(directory, dispatch_map.FILE)
    old: Optional[Dict[str, Any]] = dispatch_map.read(path) if os.path.isfile(path) else None
    libs = sorted(set(libraries) or set(old["libraries"] if old else ()))
    files = sorted(glob.glob(os.path.join(directory, "case_*.py")))
    if not files or not libs:
        why = f"no case_*.py in {directory}" if not files else "name the library (--library NAME)"
        print(f"meshtest dispatch-map: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="meshtest-dispatch-") as tmp:
        result = run(files, RunOptions(artifacts_dir=tmp, lane=lane, record_dispatch=True, verbosity=-1,
                                       slot_dir=slot_dir), stream)
        records = _records(tmp)
    new = dispatch_map.build(records, libs, directory)
    ran = {dispatch_map.case_key(o.file, o.case) for o in result.outcomes}
    missing = sorted(ran - set(new["cases"]))
    if missing:
        print(f"meshtest dispatch-map: no dispatch recorded for {', '.join(missing)}", file=sys.stderr)
        return 1
    if check:
        diff = differences(old or {"cases": {}, "libraries": []}, new)
        for line in diff:
            print(f"  {line}", file=stream)
        verdict = f"differs from a fresh recording; run {new['written_by']}" if diff else "is current"
        print(f"meshtest dispatch-map: {path} {verdict} ({len(new['cases'])} case(s))", file=stream)
        return 1 if diff else 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(dispatch_map.text(new))
    modules = sorted({m for served in new["cases"].values() for m in served.values()} - {dispatch_map.TORCH})
    print(f"meshtest dispatch-map: wrote {path}: {len(new['cases'])} case(s), rule modules "
          f"{', '.join(modules) or 'none'}", file=stream)
    return 0
