"""Capability coverage of training cases: the domain × layer matrix of the training quality net.

Read statically from the case files (their ``capabilities``, ``layer`` and ``requires``), against
a manifest of the domains (``cases/torch/training/seed001_domains.txt``, one
``domain<TAB>description`` line each, ``#`` comments). The training net's layer rules: every domain needs mechanism
guards (layer 1) and single-capability training checks (layer 2).

A cell counts as covered only by what runs on the platform at hand, never by a case that
exists: with the platform's probed features (``python -m meshtest coverage --platform torch``), a
cell is *covered* when one of its cases requires only features the platform has, *unsupported*
when every case needs a feature it lacks (listed with the features); with a run's results
(``--results dist/test``), covered by a case that passed or reproduced its known failure
(``xfail``), *unsupported* when its cases only reported ``unsupported``, *failing* when they
failed, *not run* when the results hold none of them. Without either, the matrix is only what
the files declare (*declared*). Stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple

from ..model.rules import CAPABILITIES, LAYERS
from ..model.scan import FileScan, ScannedCase
from ..status import Status
from .specids import read_tab_manifest

#: The layers every domain must have a case in (the training net's priorities: mechanisms first, then single
#: capabilities).
REQUIRED_LAYERS = (1, 2)

#: Cell states, best first (a cell takes the best state among its cases).
COVERED, UNSUPPORTED, FAILING, NOT_RUN, DECLARED, MISSING = (
    "covered", "unsupported", "failing", "not run", "declared", "missing")
_SYMBOL = {COVERED: "", UNSUPPORTED: "u", FAILING: "F", NOT_RUN: "?", DECLARED: "d"}
_ORDER = (COVERED, FAILING, UNSUPPORTED, NOT_RUN, DECLARED)


@dataclass(frozen=True)
class Coverage:
    """The matrix.

    :ivar cells: (domain, layer) → case names.
    :ivar requires: (domain, layer) → features those cases require.
    :ivar states: (domain, layer) → the cell's state (:data:`COVERED`, :data:`UNSUPPORTED`, ...).
    :ivar missing_features: (domain, layer) of an unsupported cell → the features the platform lacks.
    :ivar basis: what the states were judged from: ``declared``, ``platform <name>``, ``results``.
    :ivar unknown: domains in the manifest that meshtest does not know.
    """

    domains: Dict[str, str]
    cells: Dict[Tuple[str, int], List[str]]
    requires: Dict[Tuple[str, int], List[str]]
    unknown: List[str]
    states: Dict[Tuple[str, int], str]
    missing_features: Dict[Tuple[str, int], List[str]]
    basis: str = DECLARED

    def state(self, domain: str, layer: int) -> str:
        return self.states.get((domain, layer), MISSING)

    @property
    def gaps(self) -> List[Tuple[str, int]]:
        """(domain, layer) of :data:`REQUIRED_LAYERS` with no case at all, or whose cases failed."""
        return [(d, n) for d in self.domains for n in REQUIRED_LAYERS if self.state(d, n) in (MISSING, FAILING)]

    def cells_in(self, state: str) -> List[Tuple[str, int]]:
        """Required cells in ``state``, in manifest order."""
        return [(d, n) for d in self.domains for n in REQUIRED_LAYERS if self.state(d, n) == state]

    @property
    def ok(self) -> bool:
        """No gap (a cell unsupported on the platform is listed, not a gap) and no unknown domain."""
        return not self.gaps and not self.unknown


def read_domains(path: str) -> Dict[str, str]:
    """The manifest's ``domain → description`` (:func:`meshtest.report.specids.read_tab_manifest`).

    :raises ValueError: a line without a tab, or a domain listed twice (naming the line)."""
    return read_tab_manifest(path, "domain", "description")


def _case_state(c: ScannedCase, features: Optional[AbstractSet[str]],
                results: Optional[Mapping[str, Status]]) -> Tuple[str, List[str]]:
    """One case's state and the features it lacks."""
    if results is not None:
        status = results.get(f"{c.file}::{c.name}")
        if status is None:
            return NOT_RUN, []
        if status in (Status.PASS, Status.XFAIL):
            return COVERED, []
        return (UNSUPPORTED, []) if status is Status.UNSUPPORTED else (FAILING, [])
    if features is not None:
        lacking = [f for f in c.requires if f not in features]
        return (UNSUPPORTED, lacking) if lacking else (COVERED, [])
    return DECLARED, []


def coverage(domains: Dict[str, str], scans: Sequence[FileScan], features: Optional[AbstractSet[str]] = None,
             results: Optional[Mapping[str, Status]] = None, platform: str = "") -> Coverage:
    """The matrix of ``scans`` against ``domains``.

    :param features: the platform's probed features (``ShardBackend.features()``): a cell is
        covered by a case that needs none it lacks.
    :param results: ``file::case`` → status of a run (takes precedence over ``features``).
    :param platform: the platform's name, for the basis line.
    """
    cells: Dict[Tuple[str, int], List[str]] = {}
    needs: Dict[Tuple[str, int], List[str]] = {}
    states: Dict[Tuple[str, int], str] = {}
    lacking: Dict[Tuple[str, int], List[str]] = {}
    for scan in scans:
        for c in scan.cases:
            if c.layer is None:
                continue
            state, lacks = _case_state(c, features, results)
            for d in c.capabilities:
                key = (d, c.layer)
                cells.setdefault(key, []).append(c.name)
                needs.setdefault(key, []).extend(f for f in c.requires if f not in needs.get(key, []))
                if key not in states or _ORDER.index(state) < _ORDER.index(states[key]):
                    states[key] = state
                lacking.setdefault(key, []).extend(f for f in lacks if f not in lacking.get(key, []))
    basis = "results" if results is not None else f"platform {platform}" if features is not None else DECLARED
    return Coverage(domains, cells, needs, [d for d in domains if d not in CAPABILITIES], states,
                    {k: v for k, v in lacking.items() if states.get(k) == UNSUPPORTED}, basis)


def format_coverage(cov: Coverage) -> List[str]:
    """The matrix (a count of cases per cell, ``-`` for none; a suffix for a cell not covered:
    ``u`` unsupported on the platform, ``F`` failing, ``?`` not run, ``d`` only declared), the
    unsupported cells with the features the platform lacks, then the gaps and the verdict."""
    head = f"{'domain':16}" + "".join(f"{'layer ' + str(n):>9}" for n in LAYERS)
    lines = [f"coverage judged from: {cov.basis}", head]
    for d in cov.domains:
        row = f"{d:16}"
        for n in LAYERS:
            k = len(cov.cells.get((d, n), []))
            row += f"{(str(k) + _SYMBOL[cov.state(d, n)]) if k else '-':>9}"
        lines.append(row)
    lines.append("cells: <n> cases covering it on this platform; u unsupported here (every case needs a missing "
                 "feature); F failing; ? not run in these results; d declared only (no platform or results given)")
    for d, n in sorted(cov.missing_features):
        if d in cov.domains:
            lines.append(f"  unsupported: {d} layer {n}: missing {', '.join(cov.missing_features[(d, n)])}")
    for d in cov.unknown:
        lines.append(f"unknown domain {d!r} in the manifest; meshtest knows {', '.join(CAPABILITIES)}")
    for d, n in cov.gaps:
        what = "has no" if cov.state(d, n) == MISSING else "fails its"
        lines.append(f"MISSING: domain {d} {what} layer-{n} case")
    required = len(cov.domains) * len(REQUIRED_LAYERS)
    covered = len(cov.cells_in(COVERED))
    unsupported = cov.cells_in(UNSUPPORTED)
    lines.append(f"coverage: {len(cov.domains)} domains; layers {'+'.join(map(str, REQUIRED_LAYERS))}: {covered} of "
                 f"{required} cells covered ({cov.basis})"
                 + (f", {len(unsupported)} unsupported here ({', '.join(f'{d} {n}' for d, n in unsupported)})"
                    if unsupported else "")
                 + (f", {len(cov.gaps)} gap(s)" if cov.gaps else ""))
    return lines
