"""Generated cases: a committed manifest (data) of op cases that a generator wrote, registered by
one statement of a case file.

A case file of generated cases holds one registration, read by the static scan like every other::

    from meshtest import register_generated
    register_generated(manifest="manifest_pointwise.json")

The manifest (JSON, next to the case file) names its generator and lists its cases, one object
per case (:data:`ENTRY_FIELDS`), every field the scan needs written out: the build target's
tags, the launch plan and the known-failure verdicts come from it without importing torch. On
the ranks, :func:`meshtest.model.registry.register_generated` hands each entry to the
generator's platform module (:data:`GENERATORS`), which builds the :class:`OpShardCase`; what
registers is checked against this scan as for hand-written cases, so the two cannot drift.

Manifest layout (``format`` 1)::

    {"format": 1, "generator": "torch-opinfo", "family": "pointwise", "written_by": "...",
     "platform_version": "2.13.0+cpu", "produced_by": {"torch": "2.13.0+cpu", "generator": "...",
     "samples": "...", "entries": "..."}, "cases": [
      {"name": "...", "mesh_shape": [2], "tags": ["cpu_level1"], "known_failure": null, ...},
      ...]}

Stdlib only and CPython 3.9-compatible (the scan imports it inside Pants).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Optional

from ..errors import CaseDeclarationError

#: The manifest format this code reads and writes.
FORMAT = 1
#: Generator name → the platform module that materialises its entries (``materialize(entry,
#: manifest)`` → an ``OpShardCase``). Imported on the ranks only.
GENERATORS = {"torch-opinfo": "meshtest.platforms.torch.opinfo"}
#: Fields every manifest entry has. ``name``, ``mesh_shape``, ``tags`` and ``known_failure`` are
#: the scanned ones; the others are the generator's own description of the case.
ENTRY_FIELDS = ("name", "mesh_shape", "tags", "known_failure")
#: Scanned fields an entry may have: ``simulation_limit``, why the one-process lane cannot run
#: the case (written only where the triage table gives one; ``OpShardCase(simulation_limit=)``).
OPTIONAL_ENTRY_FIELDS = ("simulation_limit",)
#: Top-level keys of a manifest.
#: ``produced_by``: what wrote the manifest (:func:`meshtest.strength.generate.produced_by`).
HEADER_FIELDS = ("format", "generator", "family", "written_by", "platform_version", "produced_by", "cases")
#: Where ``python -m meshtest generate opinfo`` writes the OpInfo manifests.
OPINFO_DIR = os.path.join("cases", "torch", "opinfo")
#: The registration call the scan reads.
REGISTER_CALL = "register_generated"


def manifest_path(case_file: str, manifest: str) -> str:
    """Where ``manifest`` (as written in ``case_file``, relative to its directory) lies."""
    return os.path.join(os.path.dirname(case_file), manifest)


def read_manifest(case_file: str, manifest: Any, read: Optional[Callable[[str], str]] = None) -> Dict[str, Any]:
    """Read and check the manifest a case file's ``register_generated(manifest=...)`` names.

    :param case_file: the case file's path (messages name it; the manifest is relative to it).
    :param manifest: the ``manifest=`` value.
    :param read: ``read(path) -> text``; default: the file system (Pants passes file contents).
    :returns: the manifest as a dict.
    :raises CaseDeclarationError: rule ``manifest``: the value is not a relative ``.json`` path,
        the file cannot be read or parsed, its format or generator is unknown, a field is
        missing or a name repeats.
    """
    def bad(why: str, case: Optional[str] = None) -> CaseDeclarationError:
        return CaseDeclarationError(case_file, case, "manifest", why)

    if not isinstance(manifest, str) or not manifest.endswith(".json") or os.path.basename(manifest) != manifest:
        raise bad(f"manifest= must be the name of a .json file beside the case file (no directory: the build "
                  f"target reads the JSON files of its own directory); got {manifest!r}")
    path = manifest_path(case_file, manifest)
    try:
        text = read(path) if read is not None else _read_file(path)
    except (OSError, KeyError) as e:
        raise bad(f"cannot read {path}: {e}; a generated case file's manifest must be next to it and a "
                  "dependency of its target (meshtest_cases(dependencies=[...]))") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise bad(f"{path} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad(f"{path}: format must be {FORMAT}; got {doc.get('format') if isinstance(doc, dict) else doc!r}")
    missing = [k for k in HEADER_FIELDS if k not in doc]
    if missing:
        raise bad(f"{path}: missing key(s) {', '.join(missing)}")
    if doc["generator"] not in GENERATORS:
        raise bad(f"{path}: generator {doc['generator']!r} unknown; known: {', '.join(sorted(GENERATORS))}")
    seen = set()
    for i, entry in enumerate(doc["cases"]):
        if not isinstance(entry, dict) or any(k not in entry for k in ENTRY_FIELDS):
            raise bad(f"{path}: cases[{i}] must be an object with {', '.join(ENTRY_FIELDS)}")
        if entry["name"] in seen:
            raise bad(f"{path}: case name {entry['name']!r} appears twice", entry["name"])
        seen.add(entry["name"])
    return doc


def _read_file(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def manifest_text(doc: Dict[str, Any]) -> str:
    """``doc`` as a manifest file's text: the header on one line, then one case per line (sorted
    keys), so a regenerated manifest diffs case by case."""
    head = {k: doc[k] for k in HEADER_FIELDS if k != "cases"}
    lines = [json.dumps(head, sort_keys=False)[:-1] + ', "cases": [']
    cases = [json.dumps(c, sort_keys=True, separators=(",", ":")) for c in doc["cases"]]
    lines += [c + ("," if i < len(cases) - 1 else "") for i, c in enumerate(cases)]
    lines.append("]}")
    return "\n".join(lines) + "\n"


def write_manifest(path: str, doc: Dict[str, Any]) -> None:
    """Write ``doc`` (:func:`manifest_text`) to ``path``, through a temporary file renamed into
    place. :raises OSError: the directory is not writable."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(manifest_text(doc))
    os.replace(tmp, path)
