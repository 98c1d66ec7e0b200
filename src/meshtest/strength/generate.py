"""``python -m meshtest generate opinfo``: write (or check) the manifests of the op cases
generated from torch's OpInfo database (:mod:`meshtest.platforms.torch_opinfo`).

Per rule family, ``cases/torch/opinfo/manifest_<family>.json`` holds its level-0 cases and
``manifest_<family>_level1_<k>.json`` the level-1-only ones in parts of about
:data:`PART_CASES`; each manifest is registered by a three-line case file
``case_opinfo_<stem>.py``, so each is one build target: caching, packing and Pants' sharding work
as for hand-written files. ``skipped.json`` lists the OpInfos that gave no case, each with its
reason; ``known_failures.json`` (written by hand, :mod:`meshtest.strength.triage`) marks the
known failures. ``--check`` regenerates in memory and fails (exit 1) naming each file that
would change: a project test runs it for the locked torch.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from ..model.generated import FORMAT, GENERATORS, manifest_text

#: The command that writes them (recorded in each manifest).
COMMAND = "python -m meshtest generate opinfo"

_CASE_FILE = '''"""Op cases generated from torch's OpInfo database, rule family `{family}`: see
docs/strength.md, "Generated cases". Written by `{command}`;
edit the generator, not this file."""
from meshtest import register_generated

register_generated(manifest="manifest_{stem}.json")
'''


def _torch_module() -> Any:
    return importlib.import_module(GENERATORS["torch-opinfo"])


def manifests(only: Optional[Sequence[str]] = None, nightly: bool = False, known: Optional[Sequence[Any]] = None
              ) -> Dict[str, str]:
    """File name → text of every file ``generate opinfo`` writes: per rule family, the level-0
    manifest and case file (``manifest_<family>.json``, ``case_opinfo_<family>.py``) and the
    level-1-only cases in parts of about :data:`PART_CASES` (``..._level1_<k>``, an OpInfo's
    cases never split), and ``skipped.json``. ``nightly``: every case, in parts ``..._nightly_<k>``.

    :param only: OpInfo keys to generate (default: all).
    :param known: triage table (:func:`meshtest.strength.triage.load_known`) applied to the entries.
    :raises ValueError: a rule of ``known`` names a case no longer generated.
    """
    import torch

    from ..platforms.torch_rules import registered_rules  # the generator is torch's (GENERATORS)

    mod = _torch_module()
    by_family, found = mod.generate(registered_rules(), only, nightly=nightly)
    if known and not only and not nightly:  # the table names level-0/1 cases of every OpInfo
        from .triage import apply

        apply(known, [e for entries in by_family.values() for e in entries])
    out: Dict[str, str] = {}
    for family, entries in sorted(by_family.items()):
        level0 = [e for e in entries if "cpu_local" in e["tags"]]
        parts: List[Tuple[str, List[Dict[str, Any]]]] = [(family, level0)] if level0 else []
        rest = [e for e in entries if "cpu_local" not in e["tags"]]
        suffix = "nightly" if nightly else "level1"
        parts += [(f"{family}_{suffix}_{k}", part) for k, part in enumerate(_parts(rest))]
        for stem, cases in parts:
            doc = {"format": FORMAT, "generator": mod.GENERATOR, "family": family, "written_by": COMMAND,
                   "platform_version": torch.__version__, "cases": cases}
            out[f"manifest_{stem}.json"] = manifest_text(doc)
            out[f"case_opinfo_{stem}.py"] = _CASE_FILE.format(family=family, stem=stem, command=COMMAND)
    if not nightly:
        out["skipped.json"] = json.dumps(dict(sorted(found.skipped.items())), indent=1) + "\n"
    return out


#: About how many cases one level-1 part (one build target) holds.
PART_CASES = 2000


def _parts(entries: List[Dict[str, Any]]) -> List[List[Dict[str, Any]]]:
    """``entries`` (in OpInfo order) cut into parts of about :data:`PART_CASES`, at OpInfo boundaries."""
    parts: List[List[Dict[str, Any]]] = []
    current: List[Dict[str, Any]] = []
    for e in entries:
        if len(current) >= PART_CASES and e["op"] != current[-1]["op"]:
            parts.append(current)
            current = []
        current.append(e)
    return parts + ([current] if current else [])


def differences(out_dir: str, files: Dict[str, str], partial: bool = False) -> Tuple[List[str], List[str]]:
    """(files whose text on disk differs from ``files`` or is missing, generated files on disk
    that ``files`` no longer has); ``partial``: ``files`` is a subset (``--op``, nightly), so
    nothing is stale."""
    changed = []
    for name, text in files.items():
        path = os.path.join(out_dir, name)
        if not os.path.exists(path):
            changed.append(name)
            continue
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                changed.append(name)
    stale = [] if partial or not os.path.isdir(out_dir) else sorted(
        n for n in os.listdir(out_dir) if n not in files and "_nightly" not in n
        and (n.startswith("manifest_") or n.startswith("case_opinfo_")))
    return changed, stale


def cmd_generate(out_dir: str, only: Sequence[str], nightly: bool, check: bool, stream: TextIO = sys.stdout,
                 default_dir: bool = False) -> int:
    """Write the files into ``out_dir`` (``check``: compare instead; exit 1 on a difference).
    Returns the exit code.

    :raises ValueError: ``only`` or ``nightly`` into the committed directory (``default_dir``:
        ``--out`` not given, not ``check``) — a subset there would replace the committed
        manifests —, or a bad ``known_failures.json`` (:func:`meshtest.strength.triage.load_known`)."""
    from .triage import load_known

    if (only or nightly) and default_dir and not check:
        raise ValueError("--op and --nightly write a subset or an uncommitted set: give --out DIR (the committed "
                         f"manifests in {out_dir} are written only whole)")

    files = manifests(only or None, nightly, load_known(os.path.join(out_dir, "known_failures.json")))
    changed, stale = differences(out_dir, files, partial=bool(only) or nightly)
    cases = sum(len(json.loads(t)["cases"]) for n, t in files.items() if n.startswith("manifest_"))
    print(f"meshtest: {cases} generated case(s) in {sum(n.startswith('manifest_') for n in files)} manifest(s)",
          file=stream)
    if check:
        for name in changed + stale:
            print(f"  would change: {os.path.join(out_dir, name)}", file=stream)
        if changed or stale:
            print(f"meshtest: the committed manifests differ from what {COMMAND} writes for torch "
                  f"{_torch_version()}; run it and commit the result", file=stream)
            return 1
        return 0
    os.makedirs(out_dir, exist_ok=True)
    for name in changed:
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(files[name])
    for name in stale:
        os.remove(os.path.join(out_dir, name))
    for name in changed + stale:
        print(f"  {'removed' if name in stale else 'wrote'} {os.path.join(out_dir, name)}", file=stream)
    return 0


def _torch_version() -> str:
    import torch

    return torch.__version__
