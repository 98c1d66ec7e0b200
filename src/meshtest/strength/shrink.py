"""Shrinking a failing generated case to a minimal one that fails the same way.

``python -m meshtest shrink FILE::CASE`` (and ``triage --shrink``, for one example per group)
runs the case in this process with every rank simulated (the one-process lane's backend), then
walks its one-step simplifications (:func:`meshtest.platforms.torch.opinfo.simpler`: fewer mesh
dims, fewer ranks, a placement made ``Replicate()``, no backward, a smaller sample), keeping the
first that still fails with the same signature (step and error kind, a mismatch of shape told
apart from one of values: :func:`failure_kind`), until none does: a 1-minimal case, what a
report or an upstream issue should show. A simpler case may fail for a simpler reason with the
same signature (a wrong global shape of an uneven batch shard, found while shrinking a wrong
value of a Partial input, is a ``mismatch:shape`` and stops there): the steps taken are printed.

Why not Hypothesis' shrinker: the failing example is given, not searched for — Hypothesis
shrinks what its own generation produced, and explicit ``@example`` inputs are not shrunk — the
space is a handful of ordered, discrete axes, and each try is a DTensor run of 0.1–1 s, so a
greedy pass (at most one run per simplification, repeated until a fixpoint) is both cheaper and
deterministic: the same failure shrinks to the same case on every machine.
"""
from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from ..model.generated import GENERATORS, read_manifest
from ..model.rules import normalised_dim_names, world_size
from ..model.scan import generated_manifest
from ..platforms.registry import load_backend
from ..rank import dispatch
from ..rank.entry import case_seed
from ..report.results import error_kind

#: The most simplification runs one shrink makes.
MAX_RUNS = 200


@dataclass
class Shrunk:
    """The result of :func:`shrink`: the original entry, the minimal one, the signature they
    share, the steps taken (what changed at each) and how many runs it took."""

    original: Dict[str, Any]
    minimal: Dict[str, Any]
    signature: Tuple[str, str]
    steps: List[str] = field(default_factory=list)
    runs: int = 0
    message: str = ""
    #: the search stopped at :data:`MAX_RUNS` runs: ``minimal`` may not be 1-minimal
    capped: bool = False


def failure_kind(status: str, error: str) -> str:
    """The error kind of the message's first line (:func:`meshtest.report.results.error_kind`, as
    :func:`meshtest.strength.triage.error_kind` names it), a mismatch told apart by what
    differs (``mismatch:shape`` or ``mismatch:values``): shrinking keeps that too, so that a wrong
    value does not shrink into a different bug that happens to fail at the same step."""
    kind = error_kind(status, error.splitlines()[0] if error else "")
    if kind == "mismatch":
        return "mismatch:shape" if "!= reference shape" in error else "mismatch:values"
    return kind


class _Runner:
    """Runs entries in this process, every rank simulated, and returns (step, error kind, message)."""

    def __init__(self, generator: Any, doc: Dict[str, Any], platform: str = "torch") -> None:
        self.generator, self.doc = generator, doc
        self.backend = load_backend(platform, lane="local")
        self.backend.init("cpu", timeout_s=60.0)
        self.runs = 0

    def signature(self, entry: Dict[str, Any]) -> Tuple[str, str, str]:
        self.runs += 1
        case = self.generator.materialize({**entry, "known_failure": None}, self.doc).validated("<shrink>")
        shape = tuple(entry["mesh_shape"])
        world = world_size(shape)
        if self.backend.world_size() != world:
            self.backend.set_world(world)
        mesh = self.backend.make_mesh(shape, normalised_dim_names(len(shape)))
        self.backend.seed(case_seed(case.name))
        result = dispatch.run(case, self.backend, mesh)
        if result.status.value == "pass":
            return ("", "pass", "")
        return (result.step, failure_kind(result.status.value, result.error), result.error)

    def close(self) -> None:
        self.backend.shutdown()


def shrink(entry: Dict[str, Any], doc: Dict[str, Any], runner: Optional[_Runner] = None) -> Shrunk:
    """Shrink a failing entry (see the module docstring).

    :raises ValueError: the entry passes here (nothing to shrink).
    """
    gen = importlib.import_module(GENERATORS[doc["generator"]])
    own = runner is None
    runner = runner or _Runner(gen, doc)
    try:
        step, kind, message = runner.signature(entry)
        if kind == "pass":
            raise ValueError(f"{entry['name']} passes with its ranks simulated in one process: nothing to shrink")
        found = Shrunk(entry, entry, (step, kind), message=message)
        changed = True
        while changed and runner.runs < MAX_RUNS:
            changed = False
            for what, candidate in gen.simpler(found.minimal):
                got = runner.signature(candidate)
                if got[:2] == found.signature:
                    found.minimal, found.message = candidate, got[2]
                    found.steps.append(what)
                    changed = True
                    break
                if runner.runs >= MAX_RUNS:
                    break
        found.runs = runner.runs
        found.capped = runner.runs >= MAX_RUNS
        return found
    finally:
        if own:
            runner.close()


def find_entry(spec: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``FILE::CASE`` of a generated case file → (its manifest entry, the manifest).

    :raises ValueError: not a generated case file, or no such case in it.
    """
    path, _, name = spec.partition("::")
    manifest = generated_manifest(path)
    if manifest is None:
        raise ValueError(f"{path} is not a case file of generated cases (register_generated(manifest=...))")
    doc = read_manifest(path, manifest)
    entry = next((e for e in doc["cases"] if e["name"] == name), None)
    if entry is None:
        raise ValueError(f"{path} has no case {name!r}")
    return entry, doc


def report(found: Shrunk, stream: TextIO) -> None:
    """Print the minimal case, how it was reached and its failure's first line."""
    first = found.message.splitlines()[0] if found.message else ""
    cap = f"; stopped at {MAX_RUNS} runs, may shrink further" if found.capped else ""
    print(f"minimal: {found.minimal['name']}  (from {found.original['name']}; {found.runs} run(s){cap})", file=stream)
    print(f"  fails: {found.signature[1]} at step {found.signature[0]}: {first[:240]}", file=stream)
    if found.steps:
        print(f"  steps: {'; '.join(found.steps)}", file=stream)
    m = found.minimal
    print(f"  op {m['op']} ({m['dtype']}), sample {m['sample']} shapes {m['shapes']}, mesh {tuple(m['mesh_shape'])}, "
          f"placements {m['placements']}{', backward' if m['grad_inputs'] else ''}", file=stream)


def cmd_shrink(specs: Sequence[str], out: str, stream: TextIO = sys.stdout) -> int:
    """Shrink each ``FILE::CASE``; write ``out`` (JSON: original and minimal entries) when given.
    Returns 0.

    :raises ValueError: see :func:`find_entry` and :func:`shrink`.
    :raises meshtest.errors.CaseDeclarationError: an unreadable manifest."""
    done = []
    for spec in specs:
        entry, doc = find_entry(spec)
        found = shrink(entry, doc)
        report(found, stream)
        done.append({"original": found.original, "minimal": found.minimal, "signature": list(found.signature),
                     "steps": found.steps, "runs": found.runs})
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(done, f, indent=1)
    return 0
