"""Curves of training cases for the HTML report, drawn as inline SVG polylines so a user looks
at the run instead of reading numbers. Stdlib only; the report template embeds the result.

- Long runs: each rank's ``curve_rank<r>.json`` (written by
  :func:`meshtest.rank.train.run_stability` in ``<artifacts>/cases/<case>/``): loss per step and
  peak RSS per step, one line per rank (:func:`charts`).
- Every other training case: ``losses_rank<r>.json`` (:func:`meshtest.rank.train.run_train`):
  the parallel run's loss and grad norm per step against the single-device baseline's, and the
  committed golden curve where the case has one (:func:`training_charts`).
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

#: Chart size in SVG user units (pixels at 100 % zoom).
WIDTH, HEIGHT, PAD = 320, 110, 4


@dataclass(frozen=True)
class Chart:
    """One chart: a title, its value range, one polyline (``points``: ``"x,y x,y ..."``) per
    rank."""

    title: str
    low: float
    high: float
    lines: Tuple[Tuple[int, str], ...]


def read_curves(artifacts_dir: str, case: str) -> List[dict]:
    """Every rank's curve of ``case`` under ``<artifacts_dir>/cases/<case>/``, by rank; ``[]``
    when the case wrote none. Unreadable files are skipped (the report must still render)."""
    curves = []
    for path in glob.glob(os.path.join(artifacts_dir, "cases", glob.escape(case), "curve_rank*.json")):
        match = re.search(r"curve_rank(\d+)\.json$", path)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        curves.append({**doc, "rank": int(match.group(1))})
    return sorted(curves, key=lambda c: c["rank"])


def _points(values: Sequence[Optional[float]], low: float, high: float) -> str:
    """Polyline points of ``values`` (``None`` and non-finite values left out) scaled into the
    chart: step ``i`` at x = PAD + i * (WIDTH - 2 PAD) / (n - 1); ``high`` at the top."""
    n = max(len(values) - 1, 1)
    span = (high - low) or 1.0
    out = []
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v):
            continue
        x = PAD + i * (WIDTH - 2 * PAD) / n
        y = PAD + (high - v) * (HEIGHT - 2 * PAD) / span
        out.append(f"{x:.1f},{y:.1f}")
    return " ".join(out)


def _chart(title: str, series: Sequence[Tuple[int, Sequence[Optional[float]]]]) -> Optional[Chart]:
    finite = [v for _, values in series for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    return Chart(title, low, high, tuple((rank, _points(values, low, high)) for rank, values in series))


def charts(curves: Sequence[dict]) -> List[Chart]:
    """The loss chart (ranks that computed a loss) and the peak-RSS chart (MiB, every rank)."""
    out = [
        _chart("loss per step", [(c["rank"], c.get("loss", [])) for c in curves if any(c.get("loss", []))]),
        _chart("peak RSS per step, MiB", [(c["rank"], [kb / 1024 for kb in c.get("rss_kb", [])]) for c in curves]),
    ]
    return [c for c in out if c is not None]


#: Colours of the labelled series of :func:`training_charts`, in order.
SERIES_COLORS = {"parallel": "#d62728", "single device": "#1f77b4", "golden": "#2ca02c"}


@dataclass(frozen=True)
class LabelledChart:
    """A chart of named series (``lines``: ``(label, colour, points)``)."""

    title: str
    low: float
    high: float
    lines: Tuple[Tuple[str, str, str], ...]


def _labelled(title: str, series: Sequence[Tuple[str, Sequence[Optional[float]]]]) -> Optional[LabelledChart]:
    series = [(label, values) for label, values in series if any(v is not None for v in values)]
    finite = [v for _, values in series for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    return LabelledChart(title, low, high, tuple((label, SERIES_COLORS[label], _points(values, low, high))
                                                 for label, values in series))


def read_losses(artifacts_dir: str, case: str) -> Optional[dict]:
    """The first rank's ``losses_rank<r>.json`` of ``case`` that holds a loss (a pipeline's last
    stage), or ``None``; unreadable files are skipped."""
    ranked = []  # losses_rank<r>.json, not a phase's losses_rank<r>.phase<k>.json
    for path in glob.glob(os.path.join(artifacts_dir, "cases", glob.escape(case), "losses_rank*.json")):
        match = re.search(r"losses_rank(\d+)\.json$", path)
        if match:
            ranked.append((int(match.group(1)), path))
    for _, path in sorted(ranked):
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if any(v is not None for v in doc.get("losses", [])):
            return doc
    return None


def training_charts(losses: Optional[dict], golden: Optional[Sequence[Optional[float]]] = None) -> List[LabelledChart]:
    """Loss per step (parallel, single device, and ``golden`` when given) and grad norm per step
    (parallel vs single device, when the case clips) of one training case's ``losses`` document."""
    if losses is None:
        return []
    out = [
        _labelled("loss per step", [("parallel", losses.get("losses", [])),
                                    ("single device", losses.get("baseline", [])),
                                    ("golden", list(golden or []))]),
        _labelled("grad norm per step", [("parallel", losses.get("grad_norm", [])),
                                         ("single device", losses.get("baseline_grad_norm", []))]),
    ]
    return [c for c in out if c is not None]
