"""Ready-made properties for :meth:`meshtest.model.compare_spec.CompareSpec.check`: what a random op's
distributed output must satisfy when its values cannot equal the reference's.

Each function returns a check ``fn(expected, actual)`` on NumPy arrays (the reference and the
gathered output) that returns ``None`` when the property holds and a string saying why not
otherwise. Platform-free: they see only NumPy arrays.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

Check = Callable[[np.ndarray, np.ndarray], Optional[str]]


def chunks_differ(dim: int, parts: int) -> Check:
    """The gathered output, cut into ``parts`` equal chunks along ``dim`` (one per rank of a
    ``Shard(dim)`` output), has no two equal chunks: each rank drew its own random numbers
    rather than repeating one stream.

    :raises ValueError: (when checked) ``dim`` of the output is not divisible by ``parts``.
    """
    def check(expected: np.ndarray, actual: np.ndarray) -> Optional[str]:
        if actual.shape[dim] % parts:
            raise ValueError(f"dim {dim} of size {actual.shape[dim]} does not split into {parts} equal chunks")
        chunks = np.split(actual, parts, axis=dim)
        same = [(i, j) for i in range(parts) for j in range(i + 1, parts) if np.array_equal(chunks[i], chunks[j])]
        return f"chunks {same} along dim {dim} are equal: the ranks repeated one random stream" if same else None

    check.__name__ = f"chunks_differ(dim={dim}, parts={parts})"
    return check


def same_statistics(k: float = 5.0) -> Check:
    """Mean and standard deviation of the output agree with the reference's within ``k``
    standard errors: ``|mean_a - mean_e| <= k * sigma_e / sqrt(n)`` and ``|std_a - std_e| <= k *
    sigma_e / sqrt(2 (n - 1))`` (the standard error of a normal sample's mean and standard
    deviation). For a random op whose reference used other random numbers.
    """
    def check(expected: np.ndarray, actual: np.ndarray) -> Optional[str]:
        e, a = expected.astype(np.float64).ravel(), actual.astype(np.float64).ravel()
        n = e.size
        if n < 2:
            return f"{n} element(s): too few for statistics"
        sigma = float(e.std())
        se_mean, se_std = sigma / math.sqrt(n), sigma / math.sqrt(2 * (n - 1))
        d_mean, d_std = abs(float(a.mean() - e.mean())), abs(float(a.std() - e.std()))
        bad = []
        if d_mean > k * se_mean:
            bad.append(f"mean {float(a.mean()):.6g} vs {float(e.mean()):.6g} "
                       f"(|diff| {d_mean:.3g} > {k:g} x {se_mean:.3g})")
        if d_std > k * se_std:
            bad.append(f"std {float(a.std()):.6g} vs {sigma:.6g} (|diff| {d_std:.3g} > {k:g} x {se_std:.3g})")
        return "; ".join(bad) or None

    check.__name__ = f"same_statistics(k={k:g})"
    return check


#: The significance level of :func:`random_draw`'s distribution test: a right draw fails it with
#: probability at most this (about once in a million cases).
RANDOM_DRAW_ALPHA = 1e-6


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov–Smirnov statistic ``D = sup_x |F_a(x) - F_b(x)|`` of the
    empirical distribution functions of ``a`` and ``b`` (flattened; NaNs dropped): a float in
    ``[0, 1]``. Ties are handled by evaluating both functions at every distinct value, as the
    exact definition requires (Smirnov 1939; e.g. NIST/SEMATECH e-Handbook 1.3.5.16)."""
    a = np.sort(a[~np.isnan(a)].ravel())
    b = np.sort(b[~np.isnan(b)].ravel())
    if not a.size or not b.size:
        return 0.0 if a.size == b.size else 1.0
    at = np.concatenate([a, b])
    fa = np.searchsorted(a, at, side="right") / a.size
    fb = np.searchsorted(b, at, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def ks_critical(n: int, m: int, alpha: float = RANDOM_DRAW_ALPHA) -> float:
    """The two-sample KS statistic's critical value at level ``alpha`` for samples of ``n`` and
    ``m`` values: ``c(alpha) * sqrt((n + m) / (n * m))`` with ``c(alpha) = sqrt(-ln(alpha / 2) / 2)``
    (the asymptotic Kolmogorov bound; conservative for discrete distributions, whose ties only
    lower ``D``). :raises ValueError: ``n`` or ``m`` < 1, or ``alpha`` outside ``(0, 1)``."""
    if n < 1 or m < 1 or not 0 < alpha < 1:
        raise ValueError(f"ks_critical(n={n}, m={m}, alpha={alpha}): n, m >= 1 and 0 < alpha < 1")
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def random_draw(shards: Sequence[Tuple[int, int, Tuple[int, ...]]] = (), alpha: float = RANDOM_DRAW_ALPHA,
                min_chunk: int = 16) -> Check:
    """What a random op's distributed output must satisfy against a single-device draw with other
    random numbers (the reference), shapes and dtypes being already equal:

    - **the same distribution**: the two-sample Kolmogorov–Smirnov statistic of the output's and
      the reference's values (:func:`ks_statistic`) is at most :func:`ks_critical` at level
      ``alpha`` — a right draw fails with probability at most ``alpha``;
    - **shards that differ where the reference's do**: for each ``(dim, parts, shape)`` of
      ``shards`` (an input placed ``Shard(dim)`` on a mesh dim of ``parts`` ranks, of
      ``shape``) whose shape the output has, the output's ``torch.chunk`` pieces along ``dim``
      are not all equal when the reference's are not and each holds ``min_chunk`` or more
      values: ranks that repeated one random stream wrote the same numbers into every shard.
    """
    from .model.layout import chunk

    def check(expected: np.ndarray, actual: np.ndarray) -> Optional[str]:
        e, a = expected.astype(np.float64), actual.astype(np.float64)
        d, bound = ks_statistic(a, e), ks_critical(max(a.size, 1), max(e.size, 1), alpha)
        if d > bound:
            return (f"the values are not drawn from the reference's distribution: Kolmogorov-Smirnov D = {d:.3g} "
                    f"> {bound:.3g} (alpha {alpha:g}, {a.size} and {e.size} values)")
        for dim, parts, shape in shards:
            if tuple(expected.shape) != tuple(shape):
                continue
            pieces = [idx for idx in chunk(list(range(shape[dim])), parts) if idx]
            n = min((len(p) for p in pieces), default=0)  # uneven pieces: their common first rows
            if len(pieces) < 2 or n * (a.size // max(shape[dim], 1)) < min_chunk:
                continue
            if _pieces_equal(a, pieces, n, dim) and not _pieces_equal(e, pieces, n, dim):
                return (f"the {len(pieces)} shards along dim {dim} hold the same values: the ranks repeated one "
                        "random stream where the single-device draw differs between them")
        return None

    check.__name__ = f"random_draw(alpha={alpha:g}, shards={list(shards)})"
    return check


def _pieces_equal(x: np.ndarray, pieces: Sequence[Sequence[int]], n: int, dim: int) -> bool:
    """Whether the first ``n`` rows (along ``dim``) of every piece of ``x`` are equal."""
    first = np.take(x, list(pieces[0][:n]), axis=dim)
    return all(np.array_equal(first, np.take(x, list(p[:n]), axis=dim), equal_nan=True) for p in pieces[1:])
