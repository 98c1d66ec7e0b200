"""Capability coverage of training cases: the domain × layer matrix of seed 001.

Read statically from the case files (their ``capabilities`` and ``layer``), against a manifest
of the domains (``cases/torch/training/seed001_domains.txt``, one ``domain<TAB>description``
line each, ``#`` comments). Seed 001 §4: every domain needs mechanism guards (layer 1) and
single-capability training checks (layer 2); a case that needs a platform feature is counted
with the feature named (on a platform without it the case reports ``unsupported`` with that
reason: declared, never silently absent). Stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from ..model.rules import CAPABILITIES, LAYERS
from ..model.scan import FileScan
from .specids import read_tab_manifest

#: The layers every domain must have a case in (seed 001 §3.4: mechanisms first, then single
#: capabilities).
REQUIRED_LAYERS = (1, 2)


@dataclass(frozen=True)
class Coverage:
    """:ivar cells: (domain, layer) → case names. :ivar requires: (domain, layer) → features
    those cases require. :ivar unknown: domains in the manifest that meshtest does not know."""

    domains: Dict[str, str]
    cells: Dict[Tuple[str, int], List[str]]
    requires: Dict[Tuple[str, int], List[str]]
    unknown: List[str]

    @property
    def gaps(self) -> List[Tuple[str, int]]:
        """(domain, layer) of :data:`REQUIRED_LAYERS` with no case."""
        return [(d, n) for d in self.domains for n in REQUIRED_LAYERS if not self.cells.get((d, n))]

    @property
    def ok(self) -> bool:
        return not self.gaps and not self.unknown


def read_domains(path: str) -> Dict[str, str]:
    """The manifest's ``domain → description`` (:func:`meshtest.report.specids.read_tab_manifest`).

    :raises ValueError: a line without a tab, or a domain listed twice (naming the line)."""
    return read_tab_manifest(path, "domain", "description")


def coverage(domains: Dict[str, str], scans: Sequence[FileScan]) -> Coverage:
    cells: Dict[Tuple[str, int], List[str]] = {}
    needs: Dict[Tuple[str, int], List[str]] = {}
    for scan in scans:
        for c in scan.cases:
            if c.layer is None:
                continue
            for d in c.capabilities:
                cells.setdefault((d, c.layer), []).append(c.name)
                needs.setdefault((d, c.layer), []).extend(f for f in c.requires if f not in needs.get((d, c.layer), []))
    return Coverage(domains, cells, needs, [d for d in domains if d not in CAPABILITIES])


def format_coverage(cov: Coverage) -> List[str]:
    """The matrix (a count per cell, ``-`` for none, ``*`` where the cases need a platform
    feature), the features per starred cell, then the gaps and the verdict."""
    head = f"{'domain':16}" + "".join(f"{'layer ' + str(n):>9}" for n in LAYERS)
    lines = [head]
    for d in cov.domains:
        row = f"{d:16}"
        for n in LAYERS:
            k = len(cov.cells.get((d, n), []))
            row += f"{(str(k) + ('*' if cov.requires.get((d, n)) else '')) if k else '-':>9}"
        lines.append(row)
    starred = [(d, n, f) for (d, n), f in sorted(cov.requires.items()) if f and d in cov.domains]
    if starred:
        lines.append("* needs platform feature(s) (reported unsupported where missing):")
        lines.extend(f"  {d} layer {n}: {', '.join(f)}" for d, n, f in starred)
    for d in cov.unknown:
        lines.append(f"unknown domain {d!r} in the manifest; meshtest knows {', '.join(CAPABILITIES)}")
    for d, n in cov.gaps:
        lines.append(f"MISSING: domain {d} has no layer-{n} case")
    total = sum(len(v) for (d, _), v in cov.cells.items() if d in cov.domains)
    lines.append(f"coverage: {len(cov.domains)} domains, {total} case entries, "
                 + ("every domain has layer 1 and 2" if cov.ok else f"{len(cov.gaps)} gap(s)"))
    return lines
