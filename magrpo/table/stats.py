"""The statistics of `magrpo-table`: mean ± sample std over seeds, per-step curve aggregates,
smoothing, and which rows of a column are best."""

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


def mean_std(values: Sequence[float]) -> Cell:
    """Mean and sample standard deviation: sqrt(sum (x - mean)^2 / (n - 1))."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return Cell(None, None, 0)
    return Cell(statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None, len(vals))


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
