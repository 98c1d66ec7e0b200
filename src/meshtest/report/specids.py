"""Coverage of a test plan's IDs: the IDs a manifest lists versus the ``spec_id`` of scanned cases.

A manifest is a text file with one ``ID<TAB>feature`` line per test-plan item (``#`` starts a
comment), e.g. ``cases/torch/tp/seed003_ids.txt`` for the TP test plan. Read statically (no case
file is imported), so the check runs anywhere the scan runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from ..model.scan import FileScan


@dataclass(frozen=True)
class IdCoverage:
    """:ivar cases: manifest ID → case names with that ``spec_id`` (empty list: missing).
    :ivar unknown: case name → a ``spec_id`` the manifest does not list."""

    features: Dict[str, str]
    cases: Dict[str, List[str]]
    unknown: Dict[str, str]

    @property
    def missing(self) -> List[str]:
        return [i for i, names in self.cases.items() if not names]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unknown


def read_tab_manifest(path: str, key: str = "ID", value: str = "feature") -> Dict[str, str]:
    """``{key: value}`` in file order from ``key<TAB>value`` lines (blank lines and ``#``
    comments skipped); ``key`` and ``value`` name the columns in errors. Also read by
    :func:`meshtest.report.coverage.read_domains`.

    :raises ValueError: a line is not ``key<TAB>value`` or a key repeats (naming file and line).
    """
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            k, sep, v = line.partition("\t")
            if not sep or not k.strip():
                raise ValueError(f"{path}:{n}: expected '{key}<TAB>{value}', got {line!r}")
            if k in out:
                raise ValueError(f"{path}:{n}: {key} {k!r} listed twice")
            out[k] = v.strip()
    return out


def read_manifest(path: str) -> Dict[str, str]:
    """A test plan's ``{ID: feature}`` in file order (:func:`read_tab_manifest`).

    :raises ValueError: a line is not ``ID<TAB>feature`` or an ID repeats (naming file and line).
    """
    return read_tab_manifest(path, "ID", "feature")


def coverage(manifest: Dict[str, str], scans: Sequence[FileScan]) -> IdCoverage:
    """Match the manifest's IDs with the scanned cases' ``spec_id``."""
    cases: Dict[str, List[str]] = {i: [] for i in manifest}
    unknown: Dict[str, str] = {}
    for scan in scans:
        for c in scan.cases:
            if c.spec_id is None:
                continue
            if c.spec_id in cases:
                cases[c.spec_id].append(c.name)
            else:
                unknown[c.name] = c.spec_id
    return IdCoverage(dict(manifest), cases, unknown)


def format_coverage(cov: IdCoverage) -> Tuple[str, ...]:
    """Report lines: one per ID (feature and cases), then missing and unknown IDs."""
    lines = [f"{i:<5} {len(names):2d} case(s)  {cov.features[i]}" + ("" if names else "   <- MISSING")
             for i, names in cov.cases.items()]
    lines.extend(f"case {name}: spec_id {sid!r} is not in the manifest" for name, sid in cov.unknown.items())
    lines.append(f"{len(cov.cases) - len(cov.missing)}/{len(cov.cases)} IDs have cases"
                 + (f"; missing: {', '.join(cov.missing)}" if cov.missing else "")
                 + (f"; {len(cov.unknown)} case(s) name unknown IDs" if cov.unknown else ""))
    return tuple(lines)
