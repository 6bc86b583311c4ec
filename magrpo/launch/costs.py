"""What each cell of a table costs, and the order that ends a sweep soonest (`magrpo-paper`).

A table's jobs run `--jobs` at a time; the sweep ends when its last job does. Started in an
arbitrary order, a long job that starts last keeps one worker busy while the others idle. Started
longest first (Graham's LPT rule: "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math.
17(2), 1969), the sweep takes at most 4/3 - 1/(3m) of the best possible time on m workers, and
in practice close to sum(costs)/m.

A cell's cost is, in order of preference:

  recorded   the median `wall_seconds` of the finished runs of that (task, label) in earlier table
             runs (their summary.json; read with the one bounded reader, so a damaged or hostile
             file is skipped, never trusted for more than a number);
  estimated  its tokens x updates, `max_steps x batch_size x num_generations x num_agents x
             num_turns x max_new_tokens`, times the seconds one such token cost the same row
             (method) on the games it was recorded on (their median), or SECONDS_PER_TOKEN when
             the row has no record: methods differ more than games (MAPPO's per-agent critics cost
             several times MAGRPO's token).

The estimate of the wall time is the LPT schedule of those costs on `--jobs` workers.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from magrpo.config.schemas import CONF_DIR
from magrpo.core import records
from magrpo.core.schema import ConfigError
from magrpo.validation.store import register_schemas

# Seconds per generated token-update (the unit `token_updates` counts), the fallback when no earlier
# run of any cell is recorded: the coordination table's seed 0 on a 2-core CPU, two jobs at a time,
# took 169.5 min of job time for 6.10 M token-updates. The games differ by up to 8x around it
# (crowd's 8 agents 1.2e-3, invest's two turns 3.0e-3, agree 0.4e-3): it sets the scale of a first
# estimate, and recorded costs replace it cell by cell.
SECONDS_PER_TOKEN = 1.7e-3

# The keys of a run's flat config (summary.json's "config") whose product counts its token-updates.
UNIT_KEYS = ("max_steps", "batch_size", "num_generations", "num_agents", "num_turns", "max_new_tokens")

# How deep below a --costs directory a summary.json may sit (<dir>/<table run>/train/<job>/).
_DEPTHS = ("*/summary.json", "*/*/summary.json", "*/*/*/summary.json")


def token_updates(flat: Mapping[str, Any]) -> float | None:
    """Tokens generated over a run, `max_steps x batch_size x num_generations x num_agents x
    num_turns x max_new_tokens`, from a flat config; None when a key is missing or not a positive
    number."""
    product = 1.0
    for key in UNIT_KEYS:
        value = flat.get(key, 1 if key == "num_turns" else None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            return None
        product *= value
    return product


@dataclass
class Recorded:
    """One finished run of a cell: its wall time and its token-updates (None if unknown)."""
    seconds: float
    tokens: float | None


def recorded_costs(dirs: Iterable[Path], limit: int = 20000) -> dict[tuple[str, str], list[Recorded]]:
    """(task, label) -> the finished runs under `dirs` (summary.json up to three folders down), at
    most `limit` files read. A file that is not a finished run's summary with a positive finite
    wall time is skipped."""
    out: dict[tuple[str, str], list[Recorded]] = {}
    seen: set[Path] = set()
    for root in dirs:
        if not root.is_dir():
            continue
        for pattern in _DEPTHS:
            for path in root.glob(pattern):
                if len(seen) >= limit:
                    return out
                key = path.resolve()
                if key in seen:
                    continue
                seen.add(key)
                run = _finished_run(path)
                if run is not None:
                    out.setdefault(run[0], []).append(run[1])
    return out


def _finished_run(path: Path) -> tuple[tuple[str, str], Recorded] | None:
    try:
        summary = records.load_json(path)
    except ConfigError:
        return None
    if not isinstance(summary, dict) or summary.get("status") != "finished":
        return None
    cfg, seconds = summary.get("config"), summary.get("wall_seconds")
    if not isinstance(cfg, dict) or isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    task, label = cfg.get("task"), cfg.get("label")
    if not isinstance(task, str) or not isinstance(label, str) or not math.isfinite(seconds) or seconds <= 0:
        return None
    return (task, label), Recorded(float(seconds), token_updates(cfg))


@dataclass
class Cost:
    """A cell's cost per job in seconds, and where it came from ("recorded" or "estimated")."""
    seconds: float
    source: str


def cell_costs(cells: Iterable[tuple[str, str]], recorded: Mapping[tuple[str, str], list[Recorded]],
               tokens: Mapping[tuple[str, str], float | None]) -> dict[tuple[str, str], Cost]:
    """Each cell's cost: its recorded median wall time, else its token-updates x the seconds per
    token its row took where it was recorded (their median), else x SECONDS_PER_TOKEN. A cell with neither record nor token count costs the median of the others
    (or one second)."""
    by_row: dict[str, list[float]] = {}
    for (_, row), runs in recorded.items():
        by_row.setdefault(row, []).extend(r.seconds / r.tokens for r in runs if r.tokens)
    out: dict[tuple[str, str], Cost] = {}
    unknown = []
    for cell in cells:
        if cell in recorded and recorded[cell]:
            out[cell] = Cost(statistics.median(r.seconds for r in recorded[cell]), "recorded")
        elif count := tokens.get(cell):
            rates = by_row.get(cell[1])
            out[cell] = Cost(count * (statistics.median(rates) if rates else SECONDS_PER_TOKEN), "estimated")
        else:
            unknown.append(cell)
    fill = statistics.median(c.seconds for c in out.values()) if out else 1.0
    for cell in unknown:
        out[cell] = Cost(fill, "estimated")
    return out


def longest_first(costs: Mapping[tuple[str, str], Cost]) -> list[tuple[str, str]]:
    """The cells by cost, longest first (ties by name, so the order is the same on every call)."""
    return sorted(costs, key=lambda cell: (-costs[cell].seconds, cell))


def makespan(durations: Iterable[float], workers: int) -> float:
    """When the last job ends if the jobs start in the given order, each on the first free worker
    (list scheduling; longest first, LPT)."""
    free = [0.0] * max(1, workers)
    for d in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + d)
    return max(free)


def composed_tokens(cells: Iterable[tuple[str, str]], overrides: list[str]) -> dict[tuple[str, str], float | None]:
    """Each cell's token-updates from its task's composed config (`recipe=<task> method=<row>` of the
    task's first cell here, with the table's `overrides`): a table's rows run its task's default
    budget (the coordination suite's matched budgets), so one composition a task serves every row
    (about 0.3 s each; only cells no earlier run recorded ask). None where the config does not
    compose: its job will say why."""
    cells = list(cells)
    first: dict[str, str] = {}
    for task, row in cells:
        first.setdefault(task, row)
    if not first:
        return {}
    register_schemas(cached=True)
    per_task: dict[str, float | None] = {}
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            for task, row in first.items():
                try:
                    cfg = compose(config_name="train", overrides=[f"recipe={task}", f"method={row}", *overrides])
                    algo = cfg.algo
                    per_task[task] = token_updates({
                        "max_steps": cfg.max_steps, "num_agents": cfg.agents.num_agents,
                        **{k: algo.get(k) for k in ("batch_size", "num_generations", "max_new_tokens")},
                        "num_turns": algo.get("num_turns", 1)})
                except Exception:  # noqa: BLE001  any failure to compose: no estimate; the job itself says why
                    per_task[task] = None
    finally:
        GlobalHydra.instance().clear()
    return {(task, row): per_task[task] for task, row in cells}
