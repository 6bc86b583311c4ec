"""`magrpo-paper TABLE`: regenerate one table of the paper with one command (`make paper TABLE=...`).

    magrpo-paper writing                       # tldr + arxiv, every row, seeds 0,1,2, the paper's scale
    magrpo-paper writing --scale tiny          # the same recipes with the tiny offline agents (CPU)
    magrpo-paper coding --seeds 0,1 logger=wandb logger.mode=online

A table is a set of tasks times a set of rows (magrpo.launch.paper_grid, the one list of them). Each row
is one run config, `recipe=<task> method=<row>` (conf/recipe/<task>.yaml, conf/method/<row>.yaml),
holding the paper's settings (`scale=tiny` shrinks it).
Untrained prompting rows are evaluations and go through `magrpo-eval`; trained rows go through
`magrpo-train`. Both run as Hydra multiruns (rows x seeds) into one sweep directory, and every
job there leaves the same run-directory layout (summary.json, metrics.jsonl, .hydra/):

    multirun/paper/<table>-<scale>-<date>/
        eval/<n>_<task>_<row>_s<seed>/       prompting rows
        cells/conf/experiment/cell/<task>/<row>.yaml   each trained cell as one experiment
        train/<n>_<task>_<row>_s<seed>/      trained rows, in one sweep, longest first
        table/                               magrpo-table --layout paper: table.md/.csv/.tex, curves

Every job joins one W&B group named after the sweep directory (with `logger=wandb`), so
`magrpo-dashboard --group <that name>` compares them. The trained cells run longest first, each
cell's cost per job taken from earlier runs (`--costs DIRS`; by default the folder that holds
`--out`) or estimated from its tokens x updates, and the command says its estimate of the sweep's
wall time before it starts (magrpo.launch.costs). A failed job never stops the others:
both sweeps run to the end, the table is built from what finished and names what did not, and
the command exits non-zero.

Every command is printed before it runs, and `--dry-run` prints them only, as a shell script:
`#` comment lines say what each step is, the commands carry the interpreter and every argument
shell-quoted (Hydra's `${...}` interpolations stay literal), so the output can be pasted into a
shell or piped to `sh` as it is.

`--crossplay` adds zero-shot coordination (docs/zsc.md): once the trained rows have run, each
(task, row) with two or more finished seeds goes through `magrpo-crossplay` (its seeds' agents
paired with one another; with `--crossplay-partners ROWS`, also with those rows' runs of the task as
held-out partners), and the table gets its self-play, cross-play, ZSC gap and held-out columns:

    crossplay/<task>_<row>/              crossplay.{md,csv,png,json} (done again only when its seeds changed)

`--tune-trials K` gives every trained row the same tuning budget before its seeds run: per (task,
row), K trials of Hydra's Optuna sweeper (TPE, sampler seed 0) on seed 0 over the search space in
the row's config (`tune:`, its learning rate and one more key), maximizing the final evaluation's
normalized return; then the seeds run at each row's best values:

    tuning/<task>_<row>/                 the Optuna sweep: trial runs, optimization_results.yaml
    tuning/<task>_<row>.json             its record: space, trials, best (magrpo-table --tuning reads it)
    tuning/conf/experiment/tuned/<task>/<row>.yaml   the row at its best values (what the seeds run)
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from magrpo import table as table_cli
from magrpo.cli import crossplay as crossplay_cli
from magrpo.core import records
from magrpo.core.schema import ConfigError
from magrpo.launch import CONF_DIR, group_options, stopped, term_as_interrupt
from magrpo.launch.costs import Cost, cell_costs, composed_tokens, longest_first, makespan, recorded_costs
from magrpo.launch.paper_grid import METHODS, TABLES
from magrpo.table import natural_key

PROG = "magrpo-paper"

# The scales a table runs at (conf/scale/<name>.yaml): the paper's, or the tiny offline agents.
PAPER_SCALES = ("paper", "tiny")
# Launchers with a parallel-jobs knob; `basic` runs the jobs one after another in one process.
JOBS_KEY = {"joblib": "hydra.launcher.n_jobs"}


# What every tuning maximizes: the final evaluation's normalized return (the tables' first column).
OBJECTIVE = "normalized_return"


def cells(table: str, entry: str, tasks: list[str] | None = None, rows: list[str] | None = None) -> list[tuple[str, str]]:
    """(task, row) of one table's rows that run through `entry` (eval or train), optionally only
    those of `tasks` and `rows`."""
    return [(task, row) for task, row in TABLES[table].cells()
            if METHODS[row].entry == entry and (tasks is None or task in tasks) and (rows is None or row in rows)]


def choices(found: list[tuple[str, str]]) -> list[list[str]]:
    """The `recipe=... method=...` overrides that sweep exactly the cells `found`: Hydra sweeps the
    product of the two lists, so the cells go in blocks of tasks that share their rows (one block
    for a full table; the coordination table's signal, which lacks two rows, is a block of its own)."""
    rows_of: dict[str, list[str]] = {}
    for task, row in found:
        rows_of.setdefault(task, []).append(row)
    blocks: dict[tuple[str, ...], list[str]] = {}
    for task, rows in rows_of.items():
        blocks.setdefault(tuple(rows), []).append(task)
    return [[f"recipe={','.join(tasks)}", f"method={','.join(rows)}"] for rows, tasks in blocks.items()]


def _yaml(path: Path) -> dict[str, Any]:

    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


@functools.cache
def row_files(task: str, row: str) -> tuple[Path, ...]:
    """The files that hold a row's own keys on a task: conf/method/<row>.yaml, and the parts of it
    that the task's recipe takes up for that method (`- optional /method/<group>@_here_:
    <folder>/${method}`: conf/method/<group>/<folder>/<row>.yaml), in the order they compose."""

    conf = Path(CONF_DIR)
    parts = []
    for entry in _yaml(conf / "recipe" / f"{task}.yaml").get("defaults") or []:
        if not isinstance(entry, dict):
            continue
        ((key, value),) = entry.items()
        group = str(key).removeprefix("optional ").split("@")[0].strip("/")
        if group.startswith("method/") and isinstance(value, str) and "${method}" in value:
            part = conf / group / f"{value.replace('${method}', row)}.yaml"
            if part.is_file():
                parts.append(part)
    return (*parts, conf / "method" / f"{row}.yaml")


def row_algo(row: str) -> str:
    """The algorithm a trained row runs: its method's `override /algo:` (train.yaml's default otherwise)."""

    for entry in _yaml(Path(CONF_DIR) / "method" / f"{row}.yaml").get("defaults") or []:
        if isinstance(entry, dict) and "override /algo" in entry:
            return str(entry["override /algo"])
    return "magrpo"


def tune_space(task: str, row: str) -> dict[str, str]:
    """A row's search space on a task (`tune:` in its config, from the files that hold the row's
    keys there): override key -> Optuna sweeper spec."""
    space: dict[str, str] = {}
    for path in row_files(task, row):
        space.update({str(k): str(v) for k, v in (_yaml(path).get("tune") or {}).items()})
    return space


def runnable(table: str, entry: str, args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (task, row) cells of `entry` that this call runs (--tasks, --rows)."""
    return cells(table, entry, args.tasks, args.rows)


def for_every_job(overrides: list[str]) -> list[str]:
    """The overrides with each plain key forced (`++key=value`): a key that only the swept
    rows define (a recipe's `max_steps` under magrpo-eval, whose own config has none) is
    refused by Hydra when it composes the sweep, before any row is chosen. Config groups
    (`logger=wandb`), `hydra.*` keys and overrides that already carry a +/~ stay as they are."""

    out = []
    for o in overrides:
        key, eq, _ = o.partition("=")
        plain = eq and not key.startswith(("+", "~", "hydra.")) and not group_options(key)
        out.append(f"++{o}" if plain else o)
    return out


def sweep_command(entry: str, rows: list[str], seeds: str, scale: str, group: str, sweep_dir: Path,
                  launcher: str, jobs: int, overrides: list[str], extra: list[str] | None = None) -> list[str]:
    """One Hydra multirun: the rows that `rows` chooses (`recipe=A,B method=x,y`, one block of
    choices(); or `experiment=tuned/...`) x `seeds` through magrpo-eval or magrpo-train. `extra`:
    Hydra overrides of the driver's own (the tuned configs' search path), before the user's."""
    module = {"eval": "magrpo.cli.evaluate", "train": "magrpo.cli.train"}[entry]
    cmd = [sys.executable, "-m", module, "-m", *rows, f"seed={seeds}",
           f"scale={scale}", f"logger.group={group}", f"hydra.sweep.dir={sweep_dir}",
           # name job directories by what they hold (not by the overrides: `experiment=tuned/x/y` holds slashes)
           "hydra.sweep.subdir=${hydra.job.num}_${task.name}_${label}_s${seed}",
           f"hydra/launcher={launcher}"]
    if launcher in JOBS_KEY:
        cmd.append(f"{JOBS_KEY[launcher]}={jobs}")
    return cmd + list(extra or []) + for_every_job(overrides)


def tuning_dir(root: Path) -> Path:
    return root / "tuning"


def best_runs_dir(root: Path) -> Path:
    """Each tuned row's seed-0 run (its best tuning candidate, copied): beside train/, which holds
    the other seeds' sweep (a sweep never writes where another run is)."""
    return root / "train-seed0"


def tuned_conf_dir(root: Path) -> Path:
    """A config search path holding experiment/tuned/<task>/<row>.yaml: each row at its best values."""
    return tuning_dir(root) / "conf"


def tune_command(task: str, row: str, trials: int, scale: str, group: str, sweep_dir: Path, launcher: str,
                 jobs: int, overrides: list[str]) -> list[str]:
    """K trials of Hydra's Optuna sweeper on seed 0 over the row's `tune:` space. The sweeper reads
    a sweep override (`key=interval(...)`, `key=choice(...)`, `tag(log, ...)`) as a distribution; the
    value each trial returns is optimized_metric of its final evaluation (magrpo.cli.train.sweep_value)."""
    parallel = jobs if launcher in JOBS_KEY else 1     # trials asked per batch = trials run at once
    cmd = [sys.executable, "-m", "magrpo.cli.train", "-m", f"recipe={task}", f"method={row}", "seed=0",
           f"scale={scale}", f"logger.group={group}", f"hydra.sweep.dir={sweep_dir}",
           "hydra.sweep.subdir=${hydra.job.num}", f"hydra/launcher={launcher}"]
    if launcher in JOBS_KEY:
        cmd.append(f"{JOBS_KEY[launcher]}={jobs}")
    cmd += ["hydra/sweeper=optuna", f"hydra.sweeper.n_trials={trials}", f"hydra.sweeper.n_jobs={parallel}",
            "hydra.sweeper.direction=maximize", f"hydra.sweeper.study_name={task}_{row}",
            "hydra.sweeper.sampler.seed=0", f"optimized_metric={OBJECTIVE}",
            "save_final=false"]      # a trial's weights are not kept: its seed-0 score is all it gives
    return cmd + for_every_job(overrides) + [f"{k}={v}" for k, v in tune_space(task, row).items()]


def record_command(args: argparse.Namespace, root: Path) -> list[str]:
    """The step between the tuning sweeps and the seeds (run in this process; a command in --dry-run)."""
    cmd = [sys.executable, "-m", "magrpo.cli.paper", args.table, "--out", str(root), "--tune-trials", str(args.tune_trials)]
    if args.tasks:
        cmd += ["--tasks", ",".join(args.tasks)]
    if args.rows:
        cmd += ["--rows", ",".join(args.rows)]
    return cmd + ["--record-tuning"]


def crossplay_command(args: argparse.Namespace, root: Path) -> list[str]:
    """The step between the trained rows and the table (run in this process; a command in --dry-run)."""
    cmd = [sys.executable, "-m", "magrpo.cli.paper", args.table, "--out", str(root)]
    for option, values in (("--tasks", args.tasks), ("--rows", args.rows),
                           ("--crossplay-partners", args.crossplay_partners)):
        if values:
            cmd += [option, ",".join(values)]
    return cmd + ["--record-crossplay"]


def crossplay_dir(root: Path) -> Path:
    return root / "crossplay"


def finished_runs(sweep_dir: Path) -> dict[tuple[str, str], list[Path]]:
    """(task, row) -> its finished runs in a sweep directory, one per seed (the last job of a seed
    run again), ordered by seed."""
    out: dict[tuple[str, str], list[tuple[str, Path]]] = {}
    for (task, row, seed), jobs in cell_jobs(sweep_dir).items():
        done = [job for job, status in jobs if status == "finished"]
        if done:
            out.setdefault((task, row), []).append((seed, done[-1]))
    return {cell: [job for _, job in sorted(runs, key=lambda x: (len(x[0]), x[0]))] for cell, runs in out.items()}


def record_crossplay(args: argparse.Namespace, root: Path) -> list[str]:
    """magrpo-crossplay over each trained (task, row)'s seeds into crossplay/<task>_<row>/ (with
    --crossplay-partners, those rows' runs of the task as held-out partners); a row whose
    crossplay.json already covers the same runs is not paired again. The problems, one line each."""
    finished = finished_runs(root / "train")
    problems = []
    for task, row in runnable(args.table, "train", args):
        runs = finished.get((task, row), [])
        if len(runs) < 2:
            problems.append(f"crossplay {task}/{row}: {len(runs)} finished seed(s) in {root / 'train'}; "
                            "cross-play pairs two or more")
            continue
        partners = [run for other in args.crossplay_partners or [] if other != row
                    for run in finished.get((task, other), [])]
        out = crossplay_dir(root) / f"{task}_{row}"
        wanted = {"sources": [str(r) for r in runs], "partners": [str(r) for r in partners]}
        before = read_summary(out / "crossplay.json") or {}
        if all(before.get(key) == value for key, value in wanted.items()):
            print(f"{PROG}: crossplay {task}/{row}: already done in {out}, not run again", flush=True)
            continue
        argv = [*wanted["sources"], "--out", str(out), "--force"]
        argv += ["--partners", *wanted["partners"]] if partners else []
        print(f"{PROG}: crossplay {task}/{row}: {len(runs)} seed(s)"
              + (f", {len(partners)} held-out partner run(s)" if partners else "") + f" -> {out}", flush=True)
        rc = crossplay_cli.main(argv)
        if rc != 0:
            problems.append(f"crossplay {task}/{row}: magrpo-crossplay exited with {rc}")
    return problems


def table_command(root: Path, tuning: Path | None = None) -> list[str]:
    """magrpo-table over the whole sweep directory, in the paper layout (run in this process); with
    `tuning`, its records become tuning.md and its trials stay out of the table."""
    cmd = [sys.executable, "-m", "magrpo.table", str(root), "--layout", "paper", "--out", str(root / "table"),
           "--force"]       # the sweep's own table: made again when the sweep runs again (--only eval, then train)
    return cmd + (["--tuning", str(tuning)] if tuning is not None else [])


def hydra_quoted(text: str) -> str:
    """`text` as one quoted value of Hydra's override grammar (a path with spaces or commas): a
    quote is escaped, and so is each backslash of a run that precedes a quote or the closing one."""
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text) + "'"


def plan(args: argparse.Namespace, root: Path) -> list[tuple[str, str, list[str]]]:
    """(step, what it does, argv) of every command the table needs, in order: with --tune-trials,
    the tuning sweeps and their record; the sweeps; then the table."""
    steps = []
    scale = args.scale if TABLES[args.table].scaled else "paper"     # "paper" changes nothing
    trained = runnable(args.table, "train", args)
    tune = args.tune_trials > 0 and args.only != "eval" and bool(trained)
    if tune:
        for task, row in trained:
            sweep_dir = tuning_dir(root) / f"{task}_{row}"
            keys = ", ".join(tune_space(task, row))
            steps.append(("tune", f"tune: {task}/{row}: {args.tune_trials} Optuna trial(s) on seed 0 over {keys} "
                                  f"-> {sweep_dir}",
                          tune_command(task, row, args.tune_trials, scale, f"{root.name}-tuning", sweep_dir,
                                       args.launcher, args.jobs, args.overrides)))
        # The row's own values are a candidate too: a trial that draws a worse learning rate than
        # the recipe's never leaves a method below its untuned self.
        for rows in choices(trained):
            steps.append(("tune", f"tune: every row at its own values on seed 0 (a candidate of each tuning): "
                                  f"{' '.join(rows)} -> {tuning_dir(root) / 'defaults'}",
                          sweep_command("train", rows, "0", scale, f"{root.name}-tuning", tuning_dir(root) / "defaults",
                                        args.launcher, args.jobs, args.overrides, ["save_final=false"])))
        steps.append(("record", f"record: each tuning's best values (its optimization_results.yaml) -> "
                                f"{tuning_dir(root)}/<task>_<row>.json and the rows at those values, "
                                f"{tuned_conf_dir(root)}/experiment/tuned/<task>/<row>.yaml",
                      record_command(args, root)))
    for entry in ("eval", "train"):
        found = runnable(args.table, entry, args)
        if not found or args.only not in (None, entry):
            continue
        extra, seeds = [], args.seeds
        if entry == "train":
            # One sweep, its cells longest first (magrpo.launch.costs): each cell is one experiment
            # config, the row at its tuned values or at its own
            found = longest_first(costs_of(args, root, found))
            kind, conf = ("tuned", tuned_conf_dir(root)) if tune else ("cell", cells_conf_dir(root))
            if not tune:
                steps.append(("cells", f"cells: each trained (task, row) as one experiment config, "
                                       f"{conf}/experiment/cell/<task>/<row>.yaml, so that one sweep runs them "
                                       f"longest first", cells_command(args, root)))
            blocks = [[f"experiment={','.join(f'{kind}/{task}/{row}' for task, row in found)}"]]
            extra = [f"hydra.searchpath=[{hydra_quoted('file://' + str(conf.resolve()))}]"]
            if tune:
                # seed 0 at the best values already ran as the tuning's best candidate: the record
                # step copied it into train/, so only the other seeds run
                seeds = ",".join(x for x in args.seeds.split(",") if x.strip() != "0")
                if not seeds:
                    continue
        else:
            blocks = choices(found)
        for rows in blocks:
            cmd = sweep_command(entry, rows, seeds, scale, root.name, root / entry, args.launcher, args.jobs,
                                args.overrides, extra)
            what = (f"{entry}: {len(sweep_rows(cmd))} row(s) x seeds {seeds}"
                    + (" at their tuned values" if tune and entry == "train" else "")
                    + (", longest first" if entry == "train" else f": {' '.join(rows)}"))
            steps.append((entry, f"{what} -> {root / entry}", cmd))
    if args.crossplay and args.only != "eval" and runnable(args.table, "train", args):
        partners = f"; held-out partners: the runs of {', '.join(args.crossplay_partners)}" \
            if args.crossplay_partners else ""
        steps.append(("crossplay", f"crossplay: each trained row's seeds paired with one another (magrpo-crossplay)"
                                   f"{partners} -> {crossplay_dir(root)}/<task>_<row>",
                      crossplay_command(args, root)))
    steps.append(("table", f"table: magrpo-table --layout paper -> {root / 'table'}",
                  table_command(root, tuning_dir(root) if tune else None)))
    return steps


# -- tuning: from the sweeper's output to the configs the seeds run ----------------------------------


def _scalar(text: Any) -> Any:
    """An override's value as the trial ran it: int, float, or the text (a choice's string)."""
    if not isinstance(text, str):
        return text
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def read_trials(sweep_dir: Path, space: dict[str, str]) -> list[dict[str, Any]]:
    """The trials of one tuning sweep, from its job directories (<n>/): the values the sweeper gave
    each (`.hydra/overrides.yaml`) and the objective its final evaluation reached (summary.json)."""


    trials = []
    jobs = [d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()] if sweep_dir.is_dir() else []
    for d in sorted(jobs, key=lambda p: natural_key(p.name)):
        overrides = d / ".hydra" / "overrides.yaml"
        try:
            given = yaml.safe_load(overrides.read_text()) if overrides.exists() else []
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            given = []
        params = {}
        for o in given if isinstance(given, list) else []:
            key, _, value = str(o).partition("=")
            if key.lstrip("+") in space:
                params[key.lstrip("+")] = _scalar(value)
        summary = read_summary(d / "summary.json") or {}
        final = summary.get("final_eval")
        reached = final.get(OBJECTIVE) if isinstance(final, dict) else None
        trials.append({"number": int(d.name), "params": params, "value": reached,
                       "status": summary.get("status", "missing"), "dir": d.name})
    return trials


def cells_conf_dir(root: Path) -> Path:
    """A config search path holding experiment/cell/<task>/<row>.yaml: each trained row as it is."""
    return root / "cells" / "conf"


def cells_command(args: argparse.Namespace, root: Path) -> list[str]:
    """The step that writes the cell configs (`--write-cells`): in this process, or from --dry-run's script."""
    picked = [*(["--tasks", ",".join(args.tasks)] if args.tasks else []),
              *(["--rows", ",".join(args.rows)] if args.rows else [])]
    return [sys.executable, "-m", "magrpo.cli.paper", args.table, "--out", str(root), "--write-cells", *picked]


def write_cells(found: list[tuple[str, str]], root: Path) -> None:
    """experiment/cell/<task>/<row>.yaml for every trained cell `found`: `recipe=<task> method=<row>` as
    one experiment, which a single sweep can list in any order (a sweep of recipe x method runs their
    product in its own order)."""
    for task, row in found:
        write_tuned_config(cells_conf_dir(root) / "experiment" / "cell" / task / f"{row}.yaml", task, row, None)


def costs_of(args: argparse.Namespace, root: Path, found: list[tuple[str, str]]) -> dict[tuple[str, str], Cost]:
    """Each trained cell's cost per job: recorded by earlier runs under --costs (default: the folder
    that holds --out, where earlier table runs are) and --out itself, else estimated from its tokens
    x updates (magrpo.launch.costs)."""
    dirs = (root, *(args.costs if args.costs is not None else [root.parent]))
    scale = args.scale if TABLES[args.table].scaled else "paper"
    plain = tuple(o for o in args.overrides if not o.partition("=")[0].lstrip("+~").startswith("hydra"))
    return dict(_costs(tuple(sorted(found)), dirs, (f"scale={scale}", *plain)))     # one key for any order


@functools.lru_cache(maxsize=8)
def _costs(found: tuple[tuple[str, str], ...], dirs: tuple[Path, ...],
           overrides: tuple[str, ...]) -> tuple[tuple[tuple[str, str], Cost], ...]:
    """costs_of, read and composed once per call of the command (the plan and its estimate ask twice)."""
    recorded = recorded_costs(dirs)
    missing = [cell for cell in found if cell not in recorded]
    return tuple(cell_costs(found, recorded, composed_tokens(missing, list(overrides))).items())


def estimate_line(steps: list[tuple[str, str, list[str]]], args: argparse.Namespace, root: Path) -> str | None:
    """What the train sweep will take, its jobs longest first on --jobs workers (None: no train sweep)."""
    cmd = next((c for step, _, c in steps if step == "train"), None)
    if cmd is None:
        return None
    found, seeds = sweep_rows(cmd), _values(cmd, "seed")
    costs = costs_of(args, root, found)
    parallel = args.jobs if args.launcher in JOBS_KEY else 1
    total = makespan([costs[cell].seconds for cell in found for _ in seeds], parallel)
    recorded = sum(costs[cell].source == "recorded" for cell in found)
    return (f"estimated wall time of the train sweep: {_clock(total)} for {len(found) * len(seeds)} job(s), "
            f"{parallel} at a time, longest first (cost per job: {recorded} of {len(found)} cell(s) from earlier "
            f"runs, {len(found) - recorded} from tokens x updates)")


def write_tuned_config(path: Path, task: str, row: str, best: dict[str, Any] | None) -> None:
    """experiment/tuned/<task>/<row>.yaml: the row's own config with its best values on top (best
    None: experiment/cell/<task>/<row>.yaml, the row as it is)."""

    values: dict[str, Any] = {}
    for key, value in (best or {}).items():
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    what = ("as its recipe and method say (one cell of the table as one experiment)" if best is None else
            f"at the best values of its tuning (tuning/{task}_{row}.json)" if best else
            f"at its own values (the best candidate, or no tuning finished: tuning/{task}_{row}.json)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# @package _global_\n# {task}/{row} {what}, written by {PROG}:\n"
                    f"# the configuration every seed of this row runs.\n"
                    + yaml.safe_dump({"defaults": [{"override /recipe": task}, {"override /method": row}, "_self_"],
                                      **values}, sort_keys=False))


def _values(cmd: list[str], key: str) -> list[str]:
    return next((c.split("=", 1)[1].split(",") for c in cmd if c.startswith(f"{key}=")), [])


def sweep_rows(cmd: list[str]) -> list[tuple[str, str]]:
    """The (task, row) cells a sweep command runs: its recipe x method, or its experiments
    (cell/<task>/<row> or tuned/<task>/<row>), in the order it runs them."""
    tuned = [(parts[1], parts[2]) for parts in (e.split("/") for e in _values(cmd, "experiment"))]
    return tuned or [(task, row) for task in _values(cmd, "recipe") for row in _values(cmd, "method")]


def _sweep_dir(cmd: list[str]) -> Path:
    return Path(next(c for c in cmd if c.startswith("hydra.sweep.dir=")).split("=", 1)[1])


def wanted_cells(cmd: list[str]) -> set[tuple[str, str, str]]:
    """(task, row, seed) of every job a sweep command runs."""
    return {(task, row, seed.strip()) for task, row in sweep_rows(cmd) for seed in _values(cmd, "seed")}


# A job directory set aside when its cell runs again (an interrupted or failed job): kept, never read
# by magrpo-table (magrpo.table.runs prunes it).
SUPERSEDED = ".superseded"


def read_summary(path: Path) -> dict[str, Any] | None:
    """A run's summary.json as a dict; None when it is missing, unreadable or not a JSON object
    (a run directory is someone else's file: it may be cut short or edited)."""
    try:
        data = records.load_json(path)     # a FIFO under the name, a huge or deep file: refused, not read
    except ConfigError:
        return None
    return data if isinstance(data, dict) else None


def _cell_of(job: Path, summary: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """(task, label, seed) of a job directory: from its summary's config, else from the config
    Hydra wrote into it before the run started (a job killed before its first summary, or one
    whose summary was damaged); None when neither says."""
    cfg = summary.get("config") if summary else None
    if isinstance(cfg, dict) and cfg.get("task") is not None:
        return (str(cfg.get("task")), str(cfg.get("label")), str(cfg.get("seed")))     # an edited [1] stays a key

    try:
        hydra_cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        task = hydra_cfg["task"]["name"]
        return (str(task), str(hydra_cfg["label"]), str(hydra_cfg["seed"]))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None


def cell_jobs(sweep_dir: Path) -> dict[tuple[str, str, str], list[tuple[Path, str]]]:
    """(task, label, seed) -> [(job directory, its status)] of the jobs a sweep directory holds. A
    job without a readable summary counts as "unreadable" (or "missing"), so continuing runs its cell
    again; one that says nothing of its cell is left alone."""
    out: dict[tuple[str, str, str], list[tuple[Path, str]]] = {}
    jobs = sorted(d for d in sweep_dir.iterdir() if d.is_dir() and not d.name.startswith(".")) \
        if sweep_dir.is_dir() else []
    for job in jobs:
        summary = read_summary(job / "summary.json")
        cell = _cell_of(job, summary)
        if cell is None:
            continue
        status = str(summary.get("status")) if summary else \
            "unreadable" if (job / "summary.json").exists() else "missing"
        out.setdefault(cell, []).append((job, status))
    return out


def finished_cells(sweep_dir: Path) -> set[tuple[str, str, str]]:
    return {cell for cell, jobs in cell_jobs(sweep_dir).items() if any(s == "finished" for _, s in jobs)}


def sweep_done(cmd: list[str]) -> bool:
    """Whether a step's sweep finished in an earlier call with the same --out: an Optuna sweep left
    optimization_results.yaml; any other sweep, a finished summary for each of its jobs (rows x
    seeds; a sweep directory may hold another block's jobs too)."""
    if "hydra/sweeper=optuna" in cmd:
        return (_sweep_dir(cmd) / "optimization_results.yaml").exists()
    return wanted_cells(cmd) <= finished_cells(_sweep_dir(cmd))


def cell_command(cmd: list[str], task: str, row: str, seed: str, run_dir: Path) -> list[str]:
    """One job of a sweep command as a single run into `run_dir`: the same module and overrides,
    the one (task, row, seed), no launcher."""
    experiment = _values(cmd, "experiment")
    drop = ("recipe=", "method=", "experiment=", "seed=", "hydra.sweep.", "hydra/launcher=",
            *(f"{k}=" for k in JOBS_KEY.values()))
    head, rest = cmd[:3], cmd[3:]               # python -m magrpo.<entry>, then the sweep's arguments
    rest = [c for c in rest if c != "-m" and not c.startswith(drop)]
    kind = experiment[0].split("/")[0] if experiment else None       # cell/ or tuned/
    cell = [f"experiment={kind}/{task}/{row}"] if kind else [f"recipe={task}", f"method={row}"]
    return head + cell + [f"seed={seed}", f"hydra.run.dir={run_dir}"] + rest


def continue_sweep(cmd: list[str]) -> tuple[list[list[str]], list[str]]:
    """The single-run commands that complete a sweep an earlier call left part done (Ctrl-C, a
    crash): every cell without a finished job runs again into a directory of its own; a job
    directory of such a cell (interrupted, failed) is moved into `.superseded/`, kept but no longer
    read. Also the lines saying what moved."""
    sweep_dir = _sweep_dir(cmd)
    jobs, done = cell_jobs(sweep_dir), finished_cells(sweep_dir)
    commands, notes = [], []
    for task, row, seed in sorted(wanted_cells(cmd) - done):
        name = f"{task}_{row}_s{seed}"
        for old, status in jobs.get((task, row, seed), []):
            aside = sweep_dir / SUPERSEDED / old.name
            aside.parent.mkdir(parents=True, exist_ok=True)
            old.rename(aside if not aside.exists() else aside.with_name(f"{old.name}.{time.time_ns()}"))
            notes.append(f"{old.name} ({status}) set aside in {sweep_dir / SUPERSEDED}")
            name = old.name
        commands.append(cell_command(cmd, task, row, seed, sweep_dir / name))
    return commands, notes


class SweepProgress:
    """One line per finished job: jobs done / total, elapsed, and an estimate of the time left from
    the jobs this call finished. `poll()` reads the sweep directories; `run_all()` polls every
    second or few while the sweep's processes run."""

    def __init__(self, steps: list[tuple[str, str, list[str]]]):
        self.cells = {(_sweep_dir(cmd), cell) for step, _, cmd in steps if step in ("eval", "train")
                      for cell in wanted_cells(cmd)}
        self.started = time.time()
        self.at_start = self.count()
        self.last = self.at_start

    def count(self) -> int:
        dirs = {d for d, _ in self.cells}
        done = {d: finished_cells(d) if d.is_dir() else set() for d in dirs}
        return sum(cell in done[d] for d, cell in self.cells)

    def line(self, done: int) -> str:
        total, elapsed = len(self.cells), time.time() - self.started
        new = done - self.at_start
        eta = f", eta {_clock(elapsed / new * (total - done))}" if 0 < new and done < total else ""
        return f"{PROG}: {done}/{total} jobs done, {_clock(elapsed)} elapsed{eta}"

    def poll(self) -> None:
        """A line for each job finished since the last poll (two that finished between polls: two lines)."""
        done = self.count()
        for k in range(self.last + 1, done + 1):
            print(self.line(k), flush=True)
        self.last = max(self.last, done)

    def run_all(self, commands: list[list[str]], parallel: int) -> list[int]:
        """Run `commands` (a whole sweep's, or its jobs one by one), at most `parallel` at once,
        printing a line whenever a job finishes; their exit statuses, in order. On Ctrl-C (or a
        SIGTERM, see `main`) the running ones are stopped as a Ctrl-C stops them (`stop`)."""
        pending = list(enumerate(commands))
        running: dict[int, subprocess.Popen] = {}
        status: dict[int, int] = {}
        try:
            while pending or running:
                while pending and len(running) < max(1, parallel):
                    k, cmd = pending.pop(0)
                    running[k] = start_job(cmd)
                first = next(iter(running.values()))
                try:
                    first.wait(timeout=5 if len(running) == 1 else 1)
                except subprocess.TimeoutExpired:
                    pass
                for k, proc in list(running.items()):
                    if proc.poll() is not None:
                        status[k] = proc.returncode
                        del running[k]
                self.poll()
        except KeyboardInterrupt:
            stop(list(running.values()))
            raise
        return [status[k] for k in range(len(commands))]


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_job(cmd: list[str]) -> subprocess.Popen:
    """A sweep's process, with SIGINT at its default action (Python's KeyboardInterrupt), whatever
    magrpo-paper inherited: a table started in the background by a script (`make paper ... &` in
    it) inherits SIGINT ignored, and its jobs would then ignore the SIGINT `stop` sends them, run
    on to the end and be killed without a record."""
    return subprocess.Popen(cmd, preexec_fn=_sigint_default if os.name == "posix" else None)


def stop(procs: list[subprocess.Popen], grace: float = 5.0, patience: float = 30.0) -> None:
    """Stop running jobs after a Ctrl-C. A Ctrl-C at the terminal reaches them too, and they record
    themselves as interrupted; one that is still running after `grace` seconds did not get it (a
    SIGINT or SIGTERM sent to magrpo-paper alone) and is sent a SIGINT; one still running after
    `patience` more seconds is killed."""
    deadline = time.time() + grace
    for i, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for late in procs[i:]:
                if late.poll() is None:
                    late.send_signal(signal.SIGINT)
            break
    deadline = time.time() + patience
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def own_run(root: Path, task: str, row: str) -> Path | None:
    """The finished run of the row at its own values on seed 0 (tuning/defaults/), if it ran."""
    for summary in sorted((tuning_dir(root) / "defaults").glob("*/summary.json")):
        data = read_summary(summary)
        if not data:
            continue
        cfg = data.get("config")
        if isinstance(cfg, dict) and cfg.get("task") == task and cfg.get("label") == row and data.get("status") == "finished":
            return summary.parent
    return None


def own_value(root: Path, task: str, row: str) -> float | None:
    """The objective the row reached at its own values on seed 0, if it ran."""
    run = own_run(root, task, row)
    if run is None:
        return None
    final = (read_summary(run / "summary.json") or {}).get("final_eval")
    value = final.get(OBJECTIVE) if isinstance(final, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def reuse_best_run(root: Path, task: str, row: str, record: dict[str, Any]) -> Path | None:
    """Copy the best candidate's seed-0 run (a trial, or the row at its own values) into train/ as
    the row's seed-0 run: it is the run the seeds phase would repeat (same config, same seed), so
    it is not run twice. Returns the copy."""

    best = record["best"]
    if best.get("own_values"):
        source = own_run(root, task, row)
    else:
        source = next((Path(record["sweep_dir"]) / t["dir"] for t in record["trials"]
                       if t["params"] == best["params"] and t["value"] == best["value"]), None)
    if source is None or not (source / "summary.json").exists():
        return None
    dest = best_runs_dir(root) / f"tuning-best_{task}_{row}_s0"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("checkpoints"))
    return dest


def record_tuning(table: str, tuned: list[tuple[str, str]], root: Path, trials: int) -> list[str]:
    """For each tuned (task, row): tuning/<task>_<row>.json (space, trials, best) and the tuned
    config its seeds run. The best values are the sweeper's (optimization_results.yaml); a sweep
    without that file (it stopped early) leaves the row at its own values. Returns what went wrong."""

    problems = []
    for task, row in tuned:
        space = tune_space(task, row)
        sweep_dir = tuning_dir(root) / f"{task}_{row}"
        results = sweep_dir / "optimization_results.yaml"
        best, error = None, None
        own = own_value(root, task, row)
        if results.exists():
            found = yaml.safe_load(results.read_text()) or {}
            best = {"params": {str(k): _scalar(v) for k, v in (found.get("best_params") or {}).items()},
                    "value": _scalar(found.get("best_value"))}
            if own is not None and (best["value"] is None or own >= best["value"]):
                best = {"params": {}, "value": own, "own_values": True}     # the untuned row did best
        else:
            error = (f"no {results}: the tuning sweep did not finish (a trial that fails stops the Optuna sweeper); "
                     "the seeds run at the row's own values")
            problems.append(f"tuning {task}/{row}: {error}")
        record = {"task": task, "row": row, "experiment": f"recipe={task} method={row}", "objective": OBJECTIVE,
                  "direction": "maximize", "seed": 0, "n_trials": trials, "space": space,
                  "trials": read_trials(sweep_dir, space), "own_values_value": own, "best": best, "error": error,
                  "sweep_dir": str(sweep_dir)}
        path = tuning_dir(root) / f"{task}_{row}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
        write_tuned_config(tuned_conf_dir(root) / "experiment" / "tuned" / task / f"{row}.yaml", task, row,
                           best["params"] if best else {})
        if best is not None:
            reuse_best_run(root, task, row, record)
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in (best["params"] if best else {}).items())
        print(f"{PROG}: {task}/{row}: " + (f"best {shown or 'its own values'} ({OBJECTIVE} {best['value']})"
                                            if best else error or ""),
              flush=True)
    return problems


def _count(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; {what}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value}: {what}")
        return value
    return parse


def _names(text: str) -> list[str]:
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, got nothing")
    return items


def _seeds(text: str) -> str:
    """--seeds: distinct whole numbers >= 0, comma-separated; given back as Hydra's sweep reads it ("0,1,2")."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more seeds, comma-separated, e.g. 0,1,2")
    bad = [part for part in parts if not (part.isascii() and part.isdigit())]
    if bad:
        raise argparse.ArgumentTypeError(f"{text!r}: {', '.join(map(repr, bad))} "
                                         f"{'is not a whole number' if len(bad) == 1 else 'are not whole numbers'} "
                                         f">= 0; give seeds as 0,1,2")
    seeds = [int(part) for part in parts]
    twice = sorted({x for x in seeds if seeds.count(x) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{text!r}: seed {', '.join(map(str, twice))} is given twice; "
                                         f"each seed is one run per row")
    return ",".join(map(str, seeds))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Run one table of the paper (rows x seeds as Hydra "
                                "multiruns: prompting rows with magrpo-eval, trained rows with magrpo-train) "
                                "and render it with magrpo-table --layout paper.")
    p.add_argument("table", choices=sorted(TABLES), help="which table")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Hydra overrides for every job, e.g. logger=wandb hardware=multi_gpu")
    p.add_argument("--scale", choices=PAPER_SCALES, default="paper", help="paper (default) or tiny (offline, CPU)")
    p.add_argument("--seeds", type=_seeds, default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--launcher", default="joblib",
                   help="hydra/launcher option: joblib (default), basic, ray, ray_local, submitit_slurm, ...")
    p.add_argument("--jobs", type=_count(1, "give 1 or more parallel jobs"), default=2,
                   help="parallel jobs for the joblib launcher (default 2)")
    p.add_argument("--out", type=Path, default=None,
                   help="sweep directory (default multirun/paper/<table>-<scale>-<date>)")
    p.add_argument("--only", choices=["eval", "train"], default=None, help="run only the eval or the train rows")
    p.add_argument("--tasks", type=_names, default=None, metavar="A,B", help="only these of the table's tasks")
    p.add_argument("--rows", type=_names, default=None, metavar="A,B", help="only these of the table's rows")
    p.add_argument("--tune-trials", type=_count(0, "give 0 (no tuning, the default) or more trials"), default=0,
                   metavar="K", help="first tune every trained row: K Optuna trials on seed 0 over its `tune:` "
                                     "space, then run the seeds at its best values (default 0: no tuning)")
    p.add_argument("--record-tuning", action="store_true",
                   help="only record the finished tuning sweeps under --out (tuning/*.json and the tuned configs): "
                        "the step a run with --tune-trials takes between the tuning and the seeds")
    p.add_argument("--crossplay", action="store_true",
                   help="zero-shot coordination: pair each trained row's seeds with magrpo-crossplay after training, "
                        "and add self-play, cross-play and the ZSC gap to the table (docs/zsc.md)")
    p.add_argument("--crossplay-partners", type=_names, default=None, metavar="A,B",
                   help="with --crossplay: these rows' runs of each task are every other row's held-out partners "
                        "(the held-out partner column)")
    p.add_argument("--record-crossplay", action="store_true",
                   help="only run the cross-play of the finished trained rows under --out: the step --crossplay "
                        "adds between the training and the table")
    p.add_argument("--costs", type=Path, nargs="+", default=None, metavar="DIR",
                   help="earlier runs whose summary.json give each cell's cost, to run the longest first and "
                        "estimate the wall time (default: the folder that holds --out, where earlier table runs are)")
    p.add_argument("--write-cells", action="store_true",
                   help="only write each trained cell's experiment config under --out (cells/conf/): the step "
                        "before the train sweep, which lists the cells longest first")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    return p


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, naming the bad value and what is allowed, what the parser alone cannot check."""
    t = TABLES[args.table]
    for option, given, allowed in (("--tasks", args.tasks, list(t.tasks)), ("--rows", args.rows, list(t.rows)),
                                   ("--crossplay-partners", args.crossplay_partners, list(t.rows))):
        bad = [x for x in given or [] if x not in allowed]
        if bad:
            p.error(f"{option} {','.join(bad)}: not in the {args.table} table; it has: {', '.join(allowed)}")
    if args.crossplay_partners and not (args.crossplay or args.record_crossplay):
        p.error("--crossplay-partners names the held-out partners of --crossplay: give --crossplay too")
    if sum((args.record_crossplay, args.record_tuning, args.write_cells)) > 1:
        p.error("--record-crossplay, --record-tuning and --write-cells are steps of a table run: give one at a time")
    if args.write_cells and args.out is None:
        p.error("--write-cells writes the cell configs of a table run: give its --out")
    if args.record_crossplay and args.out is None:
        p.error("--record-crossplay pairs the seeds of a table run: give its --out")
    if args.record_tuning and (args.out is None or args.tune_trials == 0):
        p.error("--record-tuning records the tuning sweeps of a table run: give its --out and its --tune-trials")
    if args.tune_trials == 0 or args.only == "eval":
        return

    if not args.dry_run and importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        p.error(f"--tune-trials {args.tune_trials} runs Hydra's Optuna sweeper, which is not installed here: "
                "pip install -e '.[optuna]'")
    trained = runnable(args.table, "train", args)
    bare = [f"recipe={task} method={row}" for task, row in trained if not tune_space(task, row)]
    if bare:
        tunable = [name for name in TABLES if all(tune_space(task, row) for task, row in cells(name, "train"))]
        p.error(f"--tune-trials {args.tune_trials}: these rows have no search space (`tune:` in their config): "
                f"{', '.join(bare)}; tables whose rows all have one: {', '.join(tunable) or 'none'}")
    tuned_keys = {key for task, row in trained for key in tune_space(task, row)}
    for o in args.overrides:
        key = o.partition("=")[0].lstrip("+~")
        if key in tuned_keys:
            p.error(f"{o}: {key} is what --tune-trials {args.tune_trials} tunes; drop the override, "
                    "or run with --tune-trials 0")


def main(argv: list[str] | None = None) -> int:

    # Intermixed: overrides may follow options (`make paper` appends ARGS after --jobs).
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    check(parser, args)
    if not TABLES[args.table].scaled and args.scale != "paper":     # said, not silently dropped
        print(f"{PROG}: the {args.table} table has one scale: its recipes are written for the tiny agents, so "
              f"--scale {args.scale} runs them as they are", file=sys.stderr, flush=True)
    root = args.out or Path("multirun") / "paper" / f"{args.table}-{args.scale}-{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    if args.write_cells:      # the step before the train sweep, alone
        write_cells(runnable(args.table, "train", args), root)
        return 0
    if args.record_tuning or args.record_crossplay:     # a step between the sweeps and the table, alone
        problems = record_tuning(args.table, runnable(args.table, "train", args), root, args.tune_trials) \
            if args.record_tuning else record_crossplay(args, root)
        for msg in problems:
            print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 1 if problems else 0
    steps = plan(args, root)
    estimate = estimate_line(steps, args, root)
    if args.dry_run:
        try:
            if estimate:
                print(f"# {PROG}: {estimate}", flush=True)
            for _, what, cmd in steps:
                # a newline in a path would end the comment and run the rest of the line
                print(f"# {PROG}: {what.replace(chr(10), ' ')}\n{shlex.join(cmd)}", flush=True)
        except BrokenPipeError:     # `--dry-run | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    try:  # a folder that cannot be made stops the table before any job runs
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"{PROG}: error: cannot create the sweep directory {root}: {e}", file=sys.stderr)
        return 2
    if estimate:
        print(f"{PROG}: {estimate}", flush=True)
    failed: list[str] = []
    started = time.time()
    progress = SweepProgress(steps)
    try:
        with term_as_interrupt():      # a SIGTERM (a scheduler's stop, `kill`) ends the call as a Ctrl-C does
            _run_steps(steps, progress, args, root, started, failed)
    except KeyboardInterrupt as e:
        how, code = stopped(e)
        done = progress.count()
        again = [a for a in (argv if argv is not None else sys.argv[1:])]
        if args.out is None:
            again += ["--out", str(root)]
        print(f"{PROG}: {how}: {done} of {len(progress.cells)} jobs finished in {root}; continue with: "
              f"magrpo-paper {shlex.join(again)}", file=sys.stderr, flush=True)
        return code
    for msg in failed:
        print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 1 if failed else 0


def _run_steps(steps: list, progress: SweepProgress, args: argparse.Namespace, root: Path, started: float,
               failed: list[str]) -> None:
    """Run a table's steps in order (main), adding what failed to `failed`."""
    for step, what, cmd in steps:
        print(f"{PROG}: {what}\n  {shlex.join(cmd)}", flush=True)
        if step == "table":
            print(f"{PROG}: sweeps done in {time.time() - started:.0f} s; W&B group (with logger=wandb): "
                  f"{root.name}", flush=True)
            rc = table_cli.main(cmd[3:])
            if rc != 0:
                failed.append(f"magrpo-table exited with {rc}")
            continue
        if step in ("tune", "eval", "train") and sweep_done(cmd):
            print(f"{PROG}: already done in {root}, not run again", flush=True)
            continue
        if step == "crossplay":     # in this process; a row it cannot pair is named, the others go on
            rc = main(cmd[3:])
            if rc != 0:
                failed.append("cross-play did not cover every trained row (above)")
            continue
        if step == "cells":     # in this process: small files the train sweep reads
            main(cmd[3:])
            continue
        if step == "record":    # in this process; a row whose tuning failed runs at its own values
            rc = main(cmd[3:])
            if rc != 0:
                failed.append("a tuning found no best value (above); those rows ran at their own values")
            continue
        if step in ("eval", "train") and _sweep_dir(cmd).is_dir() and any(_sweep_dir(cmd).glob("*/summary.json")):
            # An earlier call stopped inside this sweep: its finished jobs stay, the rest run as single
            # runs, --jobs at a time with the joblib launcher.
            commands, notes = continue_sweep(cmd)
            for note in notes:
                print(f"{PROG}: {note}", flush=True)
            parallel = args.jobs if args.launcher in JOBS_KEY else 1
            print(f"{PROG}: continuing the {step} sweep: {len(commands)} job(s) left, {parallel} at a time",
                  flush=True)
            for single, rc in zip(commands, progress.run_all(commands, parallel)):
                if rc != 0:
                    failed.append(f"the {step} job {Path(_run_dir(single)).name} exited with {rc}")
            continue
        rc = progress.run_all([cmd], 1)[0]
        if rc != 0:
            # Hydra runs every job of the sweep before it reports a failed one: the others are there.
            failed.append(f"the {step} sweep {what.split(':')[1].strip() + ' ' if step == 'tune' else ''}"
                          f"exited with {rc}")


def _run_dir(cmd: list[str]) -> str:
    return next(c for c in cmd if c.startswith("hydra.run.dir=")).split("=", 1)[1]


if __name__ == "__main__":
    sys.exit(main())
