"""``python -m meshtest generate opinfo``: write (or check) the manifests of the op cases
generated from torch's OpInfo database (:mod:`meshtest.platforms.torch.opinfo`).

Per rule family, ``cases/torch/opinfo/manifest_<family>.json`` holds its level-0 cases and
``manifest_<family>_level1_<k>.json`` the level-1-only ones in parts of about
:data:`PART_CASES`; each manifest is registered by a three-line case file
``case_opinfo_<stem>.py``, so each is one build target: caching, packing and Pants' sharding work
as for hand-written files. ``skipped.json`` lists the OpInfos that gave no case, each with its
reason; ``known_failures.json`` (written by hand, :mod:`meshtest.strength.triage`) marks the
known failures.

Each manifest's header records what produced it (``produced_by``, :func:`produced_by`): the torch
version, a digest of the generator's source (:func:`generator_digest`), a digest of the samples
of the family's OpInfos (:func:`meshtest.platforms.torch.opinfo.sample_digest`) and a digest of
its entries as generated, before the triage table marked them. ``skipped.json`` records the same
for the OpInfos that gave no case.

- ``--check`` (every landing, seconds: :func:`check_incremental`) reads those digests, draws
  every OpInfo's samples and regenerates only the families whose samples changed; it fails
  (exit 1) naming each file that would change and the command that regenerates. A manifest
  written by another torch or another generator source fails at once, naming the command.
- ``--check --full`` (nightly, minutes) regenerates everything in memory and compares.
"""
from __future__ import annotations

import ast
import hashlib
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


#: The modules whose source decides what ``generate opinfo`` writes; with every meshtest module
#: they import at module level, they are the generator's source (:func:`generator_digest`).
GENERATOR_ROOTS = ("meshtest.strength.generate", "meshtest.platforms.torch.opinfo",
                   "meshtest.platforms.torch.rules", "meshtest.strength.triage")
#: The command that checks every manifest by regenerating it whole (the nightly job).
FULL_CHECK = COMMAND + " --check --full"
#: The directory holding the ``meshtest`` package.
_SRC_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _module_file(src_root: str, module: str) -> Optional[str]:
    base = os.path.join(src_root, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _top_level_imports(module: str, path: str) -> List[str]:
    """The meshtest modules ``module`` (at ``path``) imports when it is imported: the import
    statements of its body (and of top-level ``try``/``if`` blocks), relative ones resolved."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out: List[str] = []
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Try, ast.If)):
            stack += node.body + node.orelse + getattr(node, "finalbody", []) + [
                n for h in getattr(node, "handlers", []) for n in h.body]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            out.append(base)
            out += [f"{base}.{a.name}" for a in node.names]  # ``from . import x``: x may be a module
    return [m for m in out if m == "meshtest" or m.startswith("meshtest.")]


def generator_sources(src_root: Optional[str] = None) -> List[str]:
    """The files of the generator's source: the :data:`GENERATOR_ROOTS` and every meshtest module
    they import at module level, transitively, with the packages' ``__init__.py`` files (paths
    relative to ``src_root``, the directory holding the ``meshtest`` package; sorted)."""
    src_root = src_root or _SRC_ROOT
    seen: Dict[str, str] = {}
    todo = list(GENERATOR_ROOTS)
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__
            name = ".".join(parts[:i])
            path = _module_file(src_root, name)
            if path is None or name in seen:
                continue
            seen[name] = path
            todo += _top_level_imports(name, path)
    return sorted(os.path.relpath(p, src_root) for p in seen.values())


def generator_digest(src_root: Optional[str] = None) -> str:
    """16 hex digits of a SHA-256 over :func:`generator_sources` (each file's path and text)."""
    src_root = src_root or _SRC_ROOT
    h = hashlib.sha256()
    for rel in generator_sources(src_root):
        with open(os.path.join(src_root, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()[:16]


def _digest(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def samples_digest(keys: Sequence[str], digests: Dict[str, str]) -> str:
    """One digest of the OpInfos ``keys`` from their sample digests (``digests``: key → hex)."""
    return _digest([f"{k} {digests[k]}" for k in sorted(keys)])


def entries_digest(entries: Sequence[Dict[str, Any]]) -> str:
    """The digest of manifest entries as the generator wrote them, before the triage table
    (:func:`meshtest.strength.triage.unapply`): a hand edit of an entry changes it."""
    from .triage import unapply

    return _digest([json.dumps(unapply(e), sort_keys=True) for e in entries])


def produced_by(torch_version: str, generator: str, samples: str, entries: Sequence[Dict[str, Any]]
                ) -> Dict[str, str]:
    """A manifest's ``produced_by`` header: what wrote it (see the module docstring)."""
    return {"torch": torch_version, "generator": generator, "samples": samples, "entries": entries_digest(entries)}


def manifests(only: Optional[Sequence[str]] = None, nightly: bool = False, known: Optional[Sequence[Any]] = None,
              order: Optional[Sequence[str]] = None, signatures: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """File name → text of every file ``generate opinfo`` writes: per rule family, the level-0
    manifest and case file (``manifest_<family>.json``, ``case_opinfo_<family>.py``) and the
    level-1-only cases in parts of about :data:`PART_CASES` (``..._level1_<k>``, an OpInfo's
    cases never split), and ``skipped.json``. ``nightly``: every case, in parts ``..._nightly_<k>``.

    :param only: OpInfo keys to generate (default: all).
    :param known: triage table (:func:`meshtest.strength.triage.load_known`) applied to the entries.
    :param signatures: the value signatures of its marks (:func:`meshtest.strength.triage.load_signatures`).
    :param order: every usable OpInfo key of the whole generation, when ``only`` regenerates some
        families of it (:func:`meshtest.platforms.torch.opinfo.generate`).
    :raises ValueError: a rule of ``known`` names a case no longer generated (a whole generation).
    """
    import torch

    from ..platforms.torch.rules import registered_rules  # the generator is torch's (GENERATORS)
    from .triage import apply

    mod = _torch_module()
    by_family, found = mod.generate(registered_rules(), only, nightly=nightly, order=order)
    if known and not nightly:  # the table names level-0/1 cases of every OpInfo
        apply(known, [e for entries in by_family.values() for e in entries], whole=not only, signatures=signatures)
    generator = generator_digest()
    digests = {k: mod.sample_digest(k) for k in list(found.family) + list(found.skipped)}
    out: Dict[str, str] = {}
    for family, entries in sorted(by_family.items()):
        sampled = samples_digest([k for k, f in found.family.items() if f == family], digests)
        level0 = [e for e in entries if "cpu_local" in e["tags"]]
        parts: List[Tuple[str, List[Dict[str, Any]]]] = [(family, level0)] if level0 else []
        rest = [e for e in entries if "cpu_local" not in e["tags"]]
        suffix = "nightly" if nightly else "level1"
        parts += [(f"{family}_{suffix}_{k}", part) for k, part in enumerate(_parts(rest))]
        for stem, cases in parts:
            doc = {"format": FORMAT, "generator": mod.GENERATOR, "family": family, "written_by": COMMAND,
                   "platform_version": torch.__version__,
                   "produced_by": produced_by(torch.__version__, generator, sampled, cases),
                   "cases": cases}
            out[f"manifest_{stem}.json"] = manifest_text(doc)
            out[f"case_opinfo_{stem}.py"] = _CASE_FILE.format(family=family, stem=stem, command=COMMAND)
    if not nightly:
        skipped = {"produced_by": {"torch": torch.__version__, "generator": generator,
                                   "samples": samples_digest(list(found.skipped), digests)},
                   "skipped": dict(sorted(found.skipped.items()))}
        out["skipped.json"] = json.dumps(skipped, indent=1) + "\n"
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


def _committed(out_dir: str) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, Any]]:
    """(manifest file name → document, ``skipped.json``'s document) of the committed set."""
    docs = {}
    for name in sorted(os.listdir(out_dir)):
        if name.startswith("manifest_") and name.endswith(".json") and "_nightly" not in name:
            with open(os.path.join(out_dir, name), encoding="utf-8") as f:
                docs[name] = json.load(f)
    with open(os.path.join(out_dir, "skipped.json"), encoding="utf-8") as f:
        return docs, json.load(f)


def check_incremental(out_dir: str, stream: TextIO = sys.stdout) -> int:
    """``generate opinfo --check``: prove the committed files are what :func:`manifests` writes,
    regenerating only the families whose samples changed. Returns the exit code (1: a file would
    change, each named with the command that regenerates).

    In order, each step on every committed file:

    1. ``produced_by`` names this torch and this generator source (:func:`generator_digest`);
       otherwise nothing is regenerated here: the message names :data:`COMMAND`;
    2. the entries' digest matches the entries (no hand edit);
    3. the triage table, applied again to the entries as generated, gives the committed entries
       (a ``known_failures.json`` edited since the last generation);
    4. every OpInfo's :func:`~meshtest.platforms.torch.opinfo.sample_digest` is drawn; the
       families (and ``skipped.json``) whose samples' digest changed are regenerated in memory and
       compared file by file; an OpInfo no file names, or one that moved between families, makes
       a whole regeneration necessary.
    """
    import torch

    from .triage import SIGNATURES_FILE, apply, load_known, load_signatures, unapply

    docs, skipped_doc = _committed(out_dir)
    generator, version = generator_digest(), torch.__version__
    bad: List[Tuple[str, str]] = []

    def fail() -> int:
        for name, why in bad:
            print(f"  would change: {os.path.join(out_dir, name)}: {why}", file=stream)
        print(f"meshtest: the committed manifests differ from what {COMMAND} writes for torch {version}; "
              f"run it and commit the result", file=stream)
        return 1

    for name, doc in [*docs.items(), ("skipped.json", skipped_doc)]:
        got = doc.get("produced_by") if isinstance(doc, dict) else None
        if not isinstance(got, dict):
            bad.append((name, "no produced_by header (written before digests were recorded)"))
        elif got.get("torch") != version:
            bad.append((name, f"written for torch {got.get('torch')}, this is {version}"))
        elif got.get("generator") != generator:
            bad.append((name, f"written by another generator source (digest {got.get('generator')}, now {generator}: "
                              f"{len(generator_sources())} files, meshtest.strength.generate.generator_sources)"))
    if bad:
        return fail()
    for name, doc in docs.items():
        if entries_digest(doc["cases"]) != doc["produced_by"]["entries"]:
            bad.append((name, "its entries are not the ones the generator wrote (edited by hand?)"))
    entries = [e for doc in docs.values() for e in doc["cases"]]
    fresh = [unapply(e) for e in entries]
    try:
        apply(load_known(os.path.join(out_dir, "known_failures.json")), fresh,
              signatures=load_signatures(os.path.join(out_dir, SIGNATURES_FILE)))
    except ValueError as e:
        bad.append(("known_failures.json", str(e)))
    else:
        at = 0
        for name, doc in docs.items():
            n = len(doc["cases"])
            if fresh[at:at + n] != doc["cases"]:
                bad.append((name, f"known_failures.json or {SIGNATURES_FILE} marks its entries otherwise now"))
            at += n
    if bad:
        return fail()

    mod = _torch_module()
    family_of = {e["op"]: doc["family"] for doc in docs.values() for e in doc["cases"]}
    skipped = set(skipped_doc["skipped"])
    digests = {k: mod.sample_digest(k) for k in mod.opinfos()}
    unknown = sorted(set(digests) - set(family_of) - skipped)
    if unknown or set(family_of) | skipped != set(digests):
        gone = sorted((set(family_of) | skipped) - set(digests))
        bad.append(("skipped.json", f"OpInfos new to torch's op_db: {unknown}; gone from it: {gone} "
                                    "(a whole regeneration)"))
        return fail()
    changed = sorted({f for f in family_of.values()
                      if samples_digest([k for k, g in family_of.items() if g == f], digests)
                      != next(d["produced_by"]["samples"] for d in docs.values() if d["family"] == f)})
    redo = [k for k, f in family_of.items() if f in changed]
    skipped_changed = samples_digest(sorted(skipped), digests) != skipped_doc["produced_by"]["samples"]
    redo += sorted(skipped) if skipped_changed else []
    print(f"meshtest: {len(entries)} generated case(s) in {len(docs)} manifest(s), {len(digests)} OpInfos' samples "
          f"drawn; changed: {', '.join(changed + ['skipped'] * skipped_changed) or 'none'}", file=stream)
    if redo:
        try:
            files = manifests(redo, known=load_known(os.path.join(out_dir, "known_failures.json")),
                              order=sorted(family_of),
                              signatures=load_signatures(os.path.join(out_dir, SIGNATURES_FILE)))
        except KeyError as e:  # an OpInfo that gave no case gives cases now: every level-0 case turns
            bad.append(("skipped.json", f"OpInfo {e} gives cases now (a whole regeneration)"))
            return fail()
        for name in sorted(files):
            if name == "skipped.json":
                continue
            family = json.loads(files[name])["family"] if name.startswith("manifest_") else None
            if family is not None and family not in changed:
                bad.append((name, f"an OpInfo of family {changed} now gives cases of family {family} "
                                  "(a whole regeneration)"))
            elif differences(out_dir, {name: files[name]}, partial=True)[0]:
                bad.append((name, "its family's samples changed"))
        stale = [n for n, d in docs.items() if d["family"] in changed and n not in files]
        bad += [(n, "no longer written (its family's samples changed)") for n in stale]
        now = json.loads(files["skipped.json"])["skipped"]
        if any(skipped_doc["skipped"].get(k) != now.get(k) for k in set(now) | (skipped & set(redo))):
            bad.append(("skipped.json", "the OpInfos that give no case changed"))
    return fail() if bad else 0


def cmd_generate(out_dir: str, only: Sequence[str], nightly: bool, check: bool, stream: TextIO = sys.stdout,
                 default_dir: bool = False, full: bool = False) -> int:
    """Write the files into ``out_dir`` (``check``: compare instead; exit 1 on a difference).
    Returns the exit code.

    :raises ValueError: ``only`` or ``nightly`` into the committed directory (``default_dir``:
        ``--out`` not given, not ``check``) — a subset there would replace the committed
        manifests —, or a bad ``known_failures.json`` (:func:`meshtest.strength.triage.load_known`)."""
    from .triage import SIGNATURES_FILE, load_known, load_signatures

    if (only or nightly) and default_dir and not check:
        raise ValueError("--op and --nightly write a subset or an uncommitted set: give --out DIR (the committed "
                         f"manifests in {out_dir} are written only whole)")
    if check and not full and not only and not nightly:
        return check_incremental(out_dir, stream)

    files = manifests(only or None, nightly, load_known(os.path.join(out_dir, "known_failures.json")),
                      signatures=load_signatures(os.path.join(out_dir, SIGNATURES_FILE)))
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
