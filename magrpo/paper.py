"""`magrpo-paper TABLE`: regenerate one table of the paper with one command (`make paper TABLE=...`).

    magrpo-paper writing                       # tldr + arxiv, every row, seeds 0,1,2, the paper's scale
    magrpo-paper writing --scale tiny          # the same recipes with the tiny offline agents (CPU)
    magrpo-paper coding --seeds 0,1 logger=wandb logger.mode=online

A table is a set of tasks times a set of rows. Each row is one experiment config,
`conf/experiment/paper/<task>/<row>.yaml`, holding the paper's settings (`scale=tiny` shrinks it).
Untrained prompting rows are evaluations and go through `magrpo-eval`; trained rows go through
`magrpo-train`. Both run as Hydra multiruns (rows x seeds) into one sweep directory, and every
job there leaves the same run-directory layout (summary.json, metrics.jsonl, .hydra/):

    multirun/paper/<table>-<scale>-<date>/
        eval/<n>_<task>_<row>_s<seed>/       prompting rows
        train/<n>_<task>_<row>_s<seed>/      trained rows
        table/                               magrpo-table --layout paper: table.md/.csv/.tex, curves

Every job joins one W&B group named after the sweep directory (with `logger=wandb`), so
`magrpo-dashboard --group <that name>` compares them. A failed job never stops the others:
both sweeps run to the end, the table is built from what finished and names what did not, and
the command exits non-zero.

Every command is printed before it runs, and `--dry-run` prints them only, as a shell script:
`#` comment lines say what each step is, the commands carry the interpreter and every argument
shell-quoted (Hydra's `${...}` interpolations stay literal), so the output can be pasted into a
shell or piped to `sh` as it is.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PROG = "magrpo-paper"

PROMPTING = ("single", "naive_concat", "sequential", "discussion")
# Feedback modes of the two-turn MAGRPO rows (conf/feedback/<mode>.yaml); `none` is the one-turn row.
FEEDBACK_MODES = ("plain", "diagnostics", "passed", "expert", "discussion")


@dataclass(frozen=True)
class Row:
    name: str       # conf/experiment/paper/<task>/<name>.yaml; also the runs' `label`
    entry: str      # "eval": magrpo-eval (untrained); "train": magrpo-train


@dataclass(frozen=True)
class PaperTable:
    tasks: tuple[str, ...]
    rows: tuple[Row, ...]
    skip: frozenset[tuple[str, str]] = frozenset()   # (task, row) pairs that do not exist
    # False: the recipes are written for the tiny agents already (the coordination suite), so
    # every --scale runs them as they are.
    scaled: bool = True


def _rows(evals: tuple[str, ...], trains: tuple[str, ...]) -> tuple[Row, ...]:
    return tuple(Row(n, "eval") for n in evals) + tuple(Row(n, "train") for n in trains)


TABLES: dict[str, PaperTable] = {
    "writing": PaperTable(("tldr", "arxiv"),
                          _rows(PROMPTING, ("grpo", "ppo", "ippo", "mappo", "magrpo"))),
    "coding": PaperTable(("humaneval", "coophumaneval", "mbpp"),
                         _rows(PROMPTING, ("grpo", "ppo", "ippo", "magrpo",
                                           *(f"magrpo_2turn_{m}" for m in FEEDBACK_MODES)))),
    "maporl": PaperTable(("maporl_qa",), _rows(("untrained_discussion",), ("magrpo", "ippo"))),
    # The coordination suite (magrpo/tasks/coordination); signal's reward does not split per agent.
    "coordination": PaperTable(("agree", "cover", "signal"),
                               _rows(("untrained",), ("magrpo", "ippo", "ippo_individual", "mappo", "grpo")),
                               skip=frozenset({("signal", "ippo_individual")}), scaled=False),
}
SCALES = ("paper", "tiny")
# Launchers with a parallel-jobs knob; `basic` runs the jobs one after another in one process.
JOBS_KEY = {"joblib": "hydra.launcher.n_jobs"}


def experiments(table: str, entry: str) -> list[str]:
    """The `experiment=` options of one table's rows that run through `entry` (eval or train)."""
    t = TABLES[table]
    return [f"paper/{task}/{row.name}" for task in t.tasks for row in t.rows
            if row.entry == entry and (task, row.name) not in t.skip]


def for_every_job(overrides: list[str]) -> list[str]:
    """The overrides with each plain key forced (`++key=value`): a key that only the swept
    experiments define (a recipe's `max_steps` under magrpo-eval, whose own config has none) is
    refused by Hydra when it composes the sweep, before any experiment is chosen. Config groups
    (`logger=wandb`), `hydra.*` keys and overrides that already carry a +/~ stay as they are."""
    from magrpo.launch import group_options

    out = []
    for o in overrides:
        key, eq, _ = o.partition("=")
        plain = eq and not key.startswith(("+", "~", "hydra.")) and not group_options(key)
        out.append(f"++{o}" if plain else o)
    return out


def sweep_command(entry: str, exps: list[str], seeds: str, scale: str, group: str, sweep_dir: Path,
                  launcher: str, jobs: int, overrides: list[str]) -> list[str]:
    module = {"eval": "magrpo.evaluate", "train": "magrpo.train"}[entry]
    cmd = [sys.executable, "-m", module, "-m", f"experiment={','.join(exps)}", f"seed={seeds}",
           f"scale={scale}", f"logger.group={group}", f"hydra.sweep.dir={sweep_dir}",
           # `experiment=paper/x/y` holds slashes: name job directories by what they hold instead
           "hydra.sweep.subdir=${hydra.job.num}_${task.name}_${label}_s${seed}",
           f"hydra/launcher={launcher}"]
    if launcher in JOBS_KEY:
        cmd.append(f"{JOBS_KEY[launcher]}={jobs}")
    return cmd + for_every_job(overrides)


def table_command(root: Path) -> list[str]:
    """magrpo-table over the whole sweep directory, in the paper layout (run in this process)."""
    return [sys.executable, "-m", "magrpo.table", str(root), "--layout", "paper", "--out", str(root / "table")]


def plan(args: argparse.Namespace, root: Path) -> list[tuple[str, str, list[str]]]:
    """(step, what it does, argv) of every command the table needs, in order: the sweeps, then
    the table."""
    steps = []
    for entry in ("eval", "train"):
        exps = experiments(args.table, entry)
        if not exps or args.only not in (None, entry):
            continue
        scale = args.scale if TABLES[args.table].scaled else "paper"     # "paper" changes nothing
        cmd = sweep_command(entry, exps, args.seeds, scale, root.name, root / entry, args.launcher, args.jobs,
                            args.overrides)
        steps.append((entry, f"{entry}: {len(exps)} row(s) x seeds {args.seeds} -> {root / entry}", cmd))
    steps.append(("table", f"table: magrpo-table --layout paper -> {root / 'table'}", table_command(root)))
    return steps


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Run one table of the paper (rows x seeds as Hydra "
                                "multiruns: prompting rows with magrpo-eval, trained rows with magrpo-train) "
                                "and render it with magrpo-table --layout paper.")
    p.add_argument("table", choices=sorted(TABLES), help="which table")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Hydra overrides for every job, e.g. logger=wandb hardware=multi_gpu")
    p.add_argument("--scale", choices=SCALES, default="paper", help="paper (default) or tiny (offline, CPU)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--launcher", default="joblib",
                   help="hydra/launcher option: joblib (default), basic, ray, ray_local, submitit_slurm, ...")
    p.add_argument("--jobs", type=int, default=2, help="parallel jobs for the joblib launcher (default 2)")
    p.add_argument("--out", type=Path, default=None,
                   help="sweep directory (default multirun/paper/<table>-<scale>-<date>)")
    p.add_argument("--only", choices=["eval", "train"], default=None, help="run only the eval or the train rows")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    from magrpo import table as table_cli

    # Intermixed: overrides may follow options (`make paper` appends ARGS after --jobs).
    args = build_parser().parse_intermixed_args(argv)
    root = args.out or Path("multirun") / "paper" / f"{args.table}-{args.scale}-{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    steps = plan(args, root)
    if args.dry_run:
        for _, what, cmd in steps:
            # a newline in a path would end the comment and run the rest of the line
            print(f"# {PROG}: {what.replace(chr(10), ' ')}\n{shlex.join(cmd)}")
        return 0
    try:  # a folder that cannot be made stops the table before any job runs
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"{PROG}: error: cannot create the sweep directory {root}: {e}", file=sys.stderr)
        return 2
    failed: list[str] = []
    started = time.time()
    for step, what, cmd in steps:
        print(f"{PROG}: {what}\n  {shlex.join(cmd)}", flush=True)
        if step == "table":
            print(f"{PROG}: sweeps done in {time.time() - started:.0f} s; W&B group (with logger=wandb): "
                  f"{root.name}", flush=True)
            rc = table_cli.main(cmd[3:])
            if rc != 0:
                failed.append(f"magrpo-table exited with {rc}")
            continue
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            # Hydra runs every job of the sweep before it reports a failed one: the others are there.
            failed.append(f"the {step} sweep exited with {rc}")
    for msg in failed:
        print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
