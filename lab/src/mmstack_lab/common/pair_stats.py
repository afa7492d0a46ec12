"""Paired timings' statistics, one method for every A/B of the lab (the detector's ABBA process pairs,
bench_ops' --paired rows, patch_ab's candidate patches): each pair's ratio, their median and range,
and a distribution-free 95% interval for the median."""

from __future__ import annotations

import math
import statistics


def ratio_summary(ratios: list[float]) -> dict:
    """Pair ratios' median, range and the median's 95% interval (None below 6 pairs)."""
    ci = median_ci(ratios)
    return {"ratio_median_of_pairs": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratio_median_ci95": list(ci) if ci else None}


def median_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median: order statistics x_(k) and x_(n+1-k), k the
    largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2. None where n is too small
    (n < 6 at 95%)."""
    xs, n = sorted(values), len(values)
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    while k < n // 2 and below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    return (xs[k - 1], xs[n - k]) if k >= 1 else None
