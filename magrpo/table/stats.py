"""The statistics of `magrpo-table`: mean ± sample std over seeds, the 95% confidence interval
of the mean, per-step curve aggregates, smoothing, which rows of a column are best, ranks, the area
under a curve, how well seeds agree on a ranking (Kendall's W), and the aggregates over tasks of
Agarwal et al. 2021 (interquartile mean, optimality gap, probability of improvement, performance
profiles) with their stratified-bootstrap intervals."""

from __future__ import annotations

import functools
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Cell:
    mean: float | None
    std: float | None      # None with fewer than two values
    count: int
    ci95: float | None = None   # half-width of the 95% confidence interval of the mean; None with one value
    na: str | None = None       # why the spread cannot be estimated (shown "± n/a"); None where it can


@functools.cache
def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: the two-sided 95% quantile of Student's t with `df` degrees of freedom
    (scipy.stats.t.ppf)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    from scipy import stats  # noqa: PLC0415  start-up: scipy loads only when a table computes an interval

    return float(stats.t.ppf(0.975, df))


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


# -- aggregates over tasks (Agarwal et al. 2021, the rliable library) ------------------------------
#
# "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (Agarwal, Schwarzer, Castro,
# Courville, Bellemare; NeurIPS 2021, arXiv:2108.13264) reports a method over a suite of tasks by
# aggregates of its runs' normalized scores, each with a stratified-bootstrap interval, as BenchMARL
# reports its benchmarks. The aggregates are rliable's own (rliable.metrics); the bootstrap is written
# here, the scheme of rliable's StratifiedBootstrap (each task's runs drawn with replacement, as many
# as it has, task by task; the 2.5 and 97.5 percentiles of the resampled statistic), because
# rliable.library's goes through `arch`, whose releases rliable 1.2 accepts (< 8) no longer import
# under pandas 3 and whose 8.0 refuses the random_state rliable hands it; and because it draws from
# numpy's global generator, where this one is seeded (`SEED`), so a table's intervals are the same on
# every run. A task may hold a different number of runs for each method.
#
# rliable (and scipy, for the t quantile) load only when a table computes: `magrpo-table --help`
# starts without them.

AGGREGATES = ("iqm", "mean", "optimality_gap")      # what `aggregate_intervals` returns, in this order
REPS = 2000          # bootstrap resamples: intervals steady to about 0.01, the section in about a second
SEED = 0             # the bootstrap's seed

Scores = Mapping[str, Sequence[float]]          # task -> the scores of a method's runs on it (one per seed)


def _rliable_metrics() -> Any:
    """rliable's estimators (rliable.metrics: numpy and scipy only, never rliable.library's arch)."""
    from rliable import metrics  # noqa: PLC0415  start-up: rliable loads only when a table aggregates

    return metrics


def _trimmed_rows(boot: Any) -> Any:
    """[reps] the interquartile mean of each row of [reps, n]: a quarter (int(n / 4)) cut at each end,
    as scipy.stats.trim_mean(row, 0.25) (what rliable's aggregate_iqm calls) cuts, for every row at once."""
    n = boot.shape[1]
    cut = int(0.25 * n)
    return np.sort(boot, axis=1)[:, cut:n - cut].mean(axis=1)


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95% stratified-bootstrap interval."""
    point: float
    low: float
    high: float


def _tasks(scores: Scores) -> list[tuple[str, Any]]:
    """(task, its finite scores as an array) for each task with one, in sorted order (the order the
    bootstrap draws in)."""
    out = [(task, np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float))
           for task, values in sorted(scores.items())]
    return [(task, a) for task, a in out if len(a)]


def _resample(rng: Any, values: Any, reps: int) -> Any:
    """[reps, n]: `reps` draws of n of the n `values` with replacement."""
    return values[rng.integers(0, len(values), size=(reps, len(values)))]


def _interval(point: float, boot: Any) -> Interval:
    low, high = np.percentile(boot, [2.5, 97.5], axis=0)
    return Interval(float(point), float(low), float(high))


def aggregate_intervals(scores: Scores, reps: int = REPS, seed: int = SEED) -> dict[str, Interval]:
    """The interquartile mean (the mean of the middle 50% of the runs' scores pooled over the tasks:
    rliable.metrics.aggregate_iqm, scipy's trim_mean cutting a quarter at each end), the mean, and the
    optimality gap (how far the runs fall short of 1 on average, 1 - mean(min(score, 1)): lower is
    better) of a method's runs, each with its 95% stratified-bootstrap interval from `reps`
    resamples seeded by `seed`. Empty without a score."""
    metrics = _rliable_metrics()
    tasks = _tasks(scores)
    if not tasks:
        return {}
    pooled = np.concatenate([a for _, a in tasks])[:, None]
    # rliable's aggregates over a [runs, tasks] matrix, here of one column: the runs pooled (the same
    # as rliable's mean when every task has as many runs; else each run weighs the same, not each task)
    points = (metrics.aggregate_iqm(pooled), metrics.aggregate_mean(pooled), metrics.aggregate_optimality_gap(pooled))
    rng = np.random.default_rng(seed)
    boot = np.concatenate([_resample(rng, a, reps) for _, a in tasks], axis=1)        # [reps, runs]
    # the same three of every resample at once
    resampled = (_trimmed_rows(boot), boot.mean(axis=1), 1.0 - np.minimum(boot, 1.0).mean(axis=1))
    return {name: _interval(p, b) for name, p, b in zip(AGGREGATES, points, resampled)}


def _improvement(xs: list[Any], ys: list[Any]) -> Any:
    """[reps]: the mean over the tasks of the share of (x, y) pairs that x wins, a tie one half,
    from each task's [reps, n] draws of X and [reps, m] of Y."""
    per_task = [(a[:, :, None] > b[:, None, :]).mean(axis=(1, 2)) + 0.5 * (a[:, :, None] == b[:, None, :]).mean(axis=(1, 2))
                for a, b in zip(xs, ys)]
    return np.mean(per_task, axis=0)


def probability_of_improvement(x: Scores, y: Scores, reps: int = REPS, seed: int = SEED) -> Interval | None:
    """P(X > Y): the chance that a run of method X scores more than a run of method Y on the same
    task, averaged over the tasks both ran (rliable.metrics.probability_of_improvement: on each task
    the Mann-Whitney U over n_x n_y, a tie counting one half). 0.5: neither is better; it says how
    often, not by how much. Its interval draws each task's runs of X and of Y with replacement, task
    by task (sorted), X's before Y's (the resampled U counted here, as scipy counts it: the
    bootstrap would call scipy 2000 times per task and pair). None when the two share no task."""
    metrics = _rliable_metrics()
    ys = dict(_tasks(y))
    both = [(a, ys[task]) for task, a in _tasks(x) if task in ys]
    if not both:
        return None
    point = float(np.mean([metrics.probability_of_improvement(a[:, None], b[:, None]) for a, b in both]))
    rng = np.random.default_rng(seed)
    xs, bs = [], []
    for a, b in both:
        xs.append(_resample(rng, a, reps))
        bs.append(_resample(rng, b, reps))
    return _interval(point, _improvement(xs, bs))


def performance_profile(scores: Scores, taus: Sequence[float], reps: int = REPS,
                        seed: int = SEED) -> tuple[list[float], list[float], list[float]] | None:
    """The score distribution of a method's runs (rliable's run-score performance profile): at each
    threshold tau, the fraction of its runs, pooled over the tasks, that score above tau, and the
    pointwise 95% band of that fraction (the stratified bootstrap of `aggregate_intervals`). A curve
    above another everywhere is better whatever aggregate one picks. (fraction, low, high) at each
    of `taus`; None without a score."""
    tasks = _tasks(scores)
    if not tasks:
        return None
    grid = np.asarray(taus, dtype=float)
    pooled = np.concatenate([a for _, a in tasks])
    point = (pooled[:, None] > grid[None, :]).mean(axis=0)
    rng = np.random.default_rng(seed)
    boot = np.concatenate([_resample(rng, a, reps) for _, a in tasks], axis=1)
    low, high = np.percentile((boot[:, :, None] > grid[None, None, :]).mean(axis=1), [2.5, 97.5], axis=0)
    return [float(v) for v in point], [float(v) for v in low], [float(v) for v in high]
