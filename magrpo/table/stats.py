"""The statistics of `magrpo-table`: mean ± sample std over seeds, the 95% confidence interval
of the mean, per-step curve aggregates, smoothing, which rows of a column are best, and ranks."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Cell:
    mean: float | None
    std: float | None      # None with fewer than two values
    count: int
    ci95: float | None = None   # half-width of the 95% confidence interval of the mean; None with one value


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: the two-sided 95% quantile of Student's t with `df` degrees of freedom.

    Exact for integer df (no scipy: it is not a dependency): P(|T| <= t) in closed form
    (Abramowitz & Stegun 26.7.3-4, with theta = atan(t / sqrt(df))) solved for 0.95 by bisection."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")

    def central(t: float) -> float:       # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        c2 = math.cos(theta) ** 2
        if df % 2:                       # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 ...))
            term, total = 1.0, 1.0 if df > 1 else 0.0
            for k in range(1, (df - 1) // 2):
                term *= 2 * k / (2 * k + 1) * c2
                total += term
            return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
        term, total = 1.0, 1.0           # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 ...)
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * c2
            total += term
        return math.sin(theta) * total

    lo, hi = 0.0, 1.0
    while central(hi) < 0.95:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if central(mid) < 0.95 else (lo, mid)
    return (lo + hi) / 2


def mean_std(values: Sequence[float]) -> Cell:
    """Mean, sample standard deviation s = sqrt(sum (x - mean)^2 / (n - 1)) and the 95% confidence
    interval's half-width t_{0.975, n-1} * s / sqrt(n) (Student's t: a handful of seeds)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return Cell(None, None, 0)
    if len(vals) == 1:
        return Cell(vals[0], None, 1)
    std = statistics.stdev(vals)
    return Cell(statistics.fmean(vals), std, len(vals), t_quantile_975(len(vals) - 1) * std / math.sqrt(len(vals)))


def best_rows(means: Sequence[float | None], higher_is_better: bool = True) -> set[int]:
    """Indices of the rows whose mean is the best of the column (ties share it). Empty when no row
    stands out: a column where every row with a value ties, one row alone included, has no best."""
    have = [(i, m) for i, m in enumerate(means) if m is not None]
    if not have:
        return set()
    top = (max if higher_is_better else min)(m for _, m in have)
    winners = {i for i, m in have if abs(m - top) <= 1e-12 * max(1.0, abs(top))}
    return winners if len(winners) < len(have) else set()


def smooth(series: dict[int, float], window: int) -> dict[int, float]:
    """Trailing moving average over the last `window` logged points (window 1 = as logged)."""
    steps = sorted(series)
    if window <= 1:
        return {s: series[s] for s in steps}
    vals = [series[s] for s in steps]
    return {s: statistics.fmean(vals[max(0, i - window + 1):i + 1]) for i, s in enumerate(steps)}


def aggregate(series: list[dict[int, float]]) -> tuple[list[int], list[float], list[float], list[int]]:
    """Per step over the seeds that logged it: mean, sample std (0 with one seed), count."""
    steps = sorted(set().union(*series)) if series else []
    means, stds, counts = [], [], []
    for s in steps:
        cell = mean_std([run[s] for run in series if s in run])
        means.append(cell.mean)
        stds.append(cell.std or 0.0)
        counts.append(cell.count)
    return steps, means, stds, counts


def ranks(means: Sequence[float | None], higher_is_better: bool = True) -> list[float | None]:
    """Each value's place among the others (1 = best); ties share the mean of the places they
    span (two rows tied for first are both 1.5); None stays None and takes no place."""
    have = sorted(((m, i) for i, m in enumerate(means) if m is not None), key=lambda p: -p[0] if higher_is_better else p[0])
    out: list[float | None] = [None] * len(means)
    j = 0
    while j < len(have):
        k = j
        while k + 1 < len(have) and abs(have[k + 1][0] - have[j][0]) <= 1e-12 * max(1.0, abs(have[j][0])):
            k += 1
        for _, i in have[j:k + 1]:
            out[i] = (j + k) / 2 + 1
        j = k + 1
    return out
