"""Curves of long training runs for the HTML report: each rank's ``curve_rank<r>.json``
(written by :func:`meshtest.rank.train.run_stability` in ``<artifacts>/cases/<case>/``) drawn as
inline SVG polylines — loss per step and peak RSS per step, one line per rank — so a user looks
at the run instead of reading 300 numbers. Stdlib only; the report template embeds the result.
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
