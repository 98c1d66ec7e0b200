"""Ready-made properties for :meth:`meshtest.model.compare_spec.CompareSpec.check`: what a random op's
distributed output must satisfy when its values cannot equal the reference's.

Each function returns a check ``fn(expected, actual)`` on NumPy arrays (the reference and the
gathered output) that returns ``None`` when the property holds and a string saying why not
otherwise. Platform-free: they see only NumPy arrays.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

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
