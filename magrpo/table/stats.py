"""The statistics of `magrpo-table`: mean ± sample std over seeds, the 95% confidence interval
of the mean, per-step curve aggregates, smoothing, which rows of a column are best, ranks, the area
under a curve, and how well seeds agree on a ranking (Kendall's W)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Cell:
    mean: float | None
    std: float | None      # None with fewer than two values
    count: int
    ci95: float | None = None   # half-width of the 95% confidence interval of the mean; None with one value
    na: str | None = None       # why the spread cannot be estimated (shown "± n/a"); None where it can


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


ONE_VALUE = "one value has no spread"      # why a cell of one seed shows "± n/a"


def mean_std(values: Sequence[float]) -> Cell:
    """Mean, sample standard deviation s = sqrt(sum (x - mean)^2 / (n - 1)) and the 95% confidence
    interval's half-width t_{0.975, n-1} * s / sqrt(n) (Student's t: a handful of seeds). One value
    has neither (`na` says so)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return Cell(None, None, 0)
    if len(vals) == 1:
        return Cell(vals[0], None, 1, None, ONE_VALUE)
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
    """Per step over the seeds that logged it: mean (nan where no seed logged a finite value: a gap
    in the plotted line), sample std (0 with one seed), count."""
    steps = sorted(set().union(*series)) if series else []
    means: list[float] = []
    stds: list[float] = []
    counts: list[int] = []
    for s in steps:
        cell = mean_std([run[s] for run in series if s in run])
        means.append(cell.mean if cell.mean is not None else math.nan)
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


def kendall_w(scores: Sequence[Sequence[float]], higher_is_better: bool = True) -> float | None:
    """Kendall's coefficient of concordance W of m raters (here: seeds) ranking n objects (methods).

    `scores[j][i]` is rater j's score of object i. Each rater's scores become ranks (ties share the
    mean of their places, as `ranks`); with R_i the sum of object i's ranks and S = sum_i (R_i - m(n+1)/2)^2,

        W = 12 S / (m^2 (n^3 - n) - m sum_j T_j),   T_j = sum over rater j's tie groups of (t^3 - t)

    (Kendall & Babington Smith 1939, with the tie correction). 1: every seed orders the methods the
    same way; 0: no agreement. None with fewer than two raters or objects, or when every rater ties
    every object (W is undefined)."""
    m = len(scores)
    n = len(scores[0]) if m else 0
    if m < 2 or n < 2:
        return None
    if any(len(row) != n for row in scores):
        raise ValueError("every rater must score every object")
    # every score is a number, so every one takes a place: the rows hold no None
    rank_rows = [[r for r in ranks(list(row), higher_is_better) if r is not None] for row in scores]
    totals = [sum(r[i] for r in rank_rows) for i in range(n)]
    s = sum((t - m * (n + 1) / 2) ** 2 for t in totals)
    ties = sum(t ** 3 - t for r in rank_rows for t in Counter(r).values())
    denominator = m * m * (n ** 3 - n) - m * ties
    return None if denominator <= 0 else 12 * s / denominator


def intervals_overlap(a: Cell, b: Cell) -> bool:
    """Whether two cells' 95% intervals, mean ± ci95, share a point (a cell without an interval
    overlaps everything: one seed says nothing about separation)."""
    if a.mean is None or b.mean is None or a.ci95 is None or b.ci95 is None:
        return True
    return a.mean - a.ci95 <= b.mean + b.ci95 and b.mean - b.ci95 <= a.mean + a.ci95


def area_under(points: Sequence[tuple[float, float]], budget: float) -> float | None:
    """The mean height of a curve over x in [0, budget]: (1 / budget) * integral_0^budget y dx, with y
    linear between the points (trapezoids), the first point's y held back to x = 0 and the last one's
    held on to `budget`. For a return in [0, 1] it is in [0, 1]. None without points or budget."""
    if not points or budget <= 0:
        return None
    pts = sorted(points)
    if pts[0][0] > 0:
        pts.insert(0, (0.0, pts[0][1]))
    if pts[-1][0] < budget:
        pts.append((budget, pts[-1][1]))
    area = 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 >= budget:
            break
        if x1 > budget:                       # cut the last trapezoid at the budget
            y1 = y0 + (y1 - y0) * (budget - x0) / (x1 - x0)
            x1 = budget
        area += (x1 - x0) * (y0 + y1) / 2
    return area / budget


def first_reach(points: Sequence[tuple[float, float]], level: float) -> float | None:
    """The x at which a curve first reaches `level`: linear between the last point below it and the
    first at or above it (the first point itself when it is already there); None if it never does."""
    pts = sorted(points)
    for k, (x, y) in enumerate(pts):
        if y >= level:
            if k == 0:
                return x
            x0, y0 = pts[k - 1]
            return x0 + (x - x0) * (level - y0) / (y - y0)
    return None
