"""`magrpo-table DIR [DIR ...] [--out OUT]`: paper-style tables and learning curves from run directories.

    magrpo-table multirun/train/2026-01-01_12-00-00             # one sweep -> DIR/table/
    magrpo-table outputs multirun --out results                 # several places, one table
    magrpo-table runs --group-by algo.joint_mode,algo.advantage --metrics reward_mean,pass@1
    magrpo-table multirun/paper/writing-tiny-<date> --layout paper   # the paper's layout (paper_table.py)

Runs are found recursively by their `summary.json` (README, "Run outputs"); an eval run of
`magrpo-eval` that evaluated several methods counts as one run per method. A *method* is a run's config minus
its seed: runs that agree on everything else are seeds of one method and become one row, each
cell the mean ± sample standard deviation over those seeds of the run's final evaluation. Each
task gets its own table. Written into OUT:

  table.md    one markdown table per task, with a footnote saying what the ± is
  table.csv   one row per (task, method): plain numbers, mean and std in separate columns
  table.tex   one booktabs tabular per task
  <task>_<metric>.png   learning curves: mean over seeds vs step, shaded ± std, one line per method

Runs left out of a table (failed, still running, unreadable, or a job directory with a config but
no summary.json: a job that died before its first evaluation) are listed under it.

A user error (a DIR that does not exist, no runs found, an unknown --metrics or --group-by name)
is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROG = "magrpo-table"

# Config keys that never distinguish one method from another: the seed is what we average over;
# the rest only say where the run wrote things or how it reported them.
IGNORED_KEYS = {"seed", "output_dir", "resume", "save_every", "save_final", "eval.log_completions",
                "eval.batch_size"}
IGNORED_PREFIXES = ("logger.", "hydra.")

# Final-eval entries that are bookkeeping rather than results: left out of the default columns.
NOT_RESULTS = {"reward_std", "num_items", "output_tokens_mean", "response_time_s", "reward_time_s"}

# Directories that never contain runs of their own; skipping them keeps the walk fast.
PRUNE_DIRS = {"checkpoints", "wandb", ".hydra", "__pycache__"}

STD_NOTE = ("mean ± sample standard deviation (n − 1 in the denominator) over seeds of each run's "
            "final evaluation; n = number of seeds; a cell marked (n=k) has the metric in only k of them")


TEX_NOTE = "Mean $\\pm$ sample std (n-1) over n seeds, final evaluation."


class TableError(Exception):
    """A problem with the user's input: reported on stderr as one line, exit code 2."""


def warn(msg: str) -> None:
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


# -- reading runs --------------------------------------------------------------------------------


@dataclass
class Run:
    path: Path
    status: str
    task: str
    algo: str
    seed: Any
    final: dict[str, float]                      # final-eval metric -> value (unprefixed)
    initial: dict[str, float]
    summary_config: dict[str, Any]               # the summary's `config` block
    hydra_config: dict[str, Any] | None          # flattened `.hydra/config.yaml` (dotted keys), if present
    curves: dict[str, dict[int, float]] = field(default_factory=dict)   # "eval/reward_mean" -> {step: value}
    job_type: str = "train"                      # "eval": a magrpo-eval run (untrained or a checkpoint)
    results: dict[str, dict[str, float]] = field(default_factory=dict)  # eval runs: method -> metrics
    reason: str = ""                             # why a failed run failed (summary.json)

    @property
    def label(self) -> str:
        """The method's name for the paper layout: the config's `label`, else the algo (or eval method)."""
        found, value = self.lookup("label")
        return str(value) if found and value else self.algo

    def config(self, use_hydra: bool) -> dict[str, Any]:
        return self.hydra_config if use_hydra and self.hydra_config is not None else self.summary_config

    def lookup(self, key: str) -> tuple[bool, Any]:
        """A dotted config key: the Hydra config first, then the summary's short names (`advantage`)."""
        for source in (self.hydra_config or {}, self.summary_config):
            if key in source:
                return True, source[key]
        if key == "algo":
            return True, self.algo
        if key == "task":
            return True, self.task
        return False, None


def natural_key(text: str) -> list:
    """Sort `10_seed=1` after `9_seed=0`: Hydra numbers multirun jobs without padding."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def find_runs(dirs: Iterable[Path], skip: Iterable[Path] = ()) -> list[Path]:
    """Every directory holding a summary.json under `dirs` (each dir itself included), once each."""
    skip_real = {os.path.realpath(p) for p in skip}
    found: dict[str, Path] = {}
    for top in dirs:
        hits = []
        for root, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if d not in PRUNE_DIRS
                          and os.path.realpath(os.path.join(root, d)) not in skip_real]
            if "summary.json" in files:
                hits.append(Path(root))
        for path in sorted(hits, key=lambda p: natural_key(str(p))):
            found.setdefault(os.path.realpath(path), path)   # overlapping DIRs must not double-count
    return list(found.values())


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/lists -> {"a.b.0.c": leaf}; empty containers are kept as leaves."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(node, list) and node:
        out = {}
        for i, v in enumerate(node):
            out.update(flatten(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: _hashable(node)}


def read_hydra_config(path: Path) -> dict[str, Any]:
    """`.hydra/config.yaml` flattened, with interpolations resolved where they can be outside Hydra
    (`${algo.temperature}` can; `${hydra:runtime.output_dir}` cannot and stays as written)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    flat = flatten(OmegaConf.to_container(cfg, resolve=False))
    for key, value in flat.items():
        if isinstance(value, str) and "${" in value:
            try:
                flat[key] = _hashable(OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, key)}),
                                                             resolve=True)["v"])
            except Exception:  # resolvers that only exist inside a Hydra app
                pass
    return flat


def read_curves(path: Path) -> dict[str, dict[int, float]]:
    """metrics.jsonl -> metric -> {step: value}. A resumed run re-logs the steps after its checkpoint:
    the later line wins, as it is the one the final weights descend from."""
    curves: dict[str, dict[int, float]] = {}
    if not path.exists():
        return curves
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            step = row.get("step")
            if not isinstance(step, (int, float)):
                continue
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    curves.setdefault(key, {})[int(step)] = float(value)
    return curves


def _numbers(d: Any) -> dict[str, float]:
    if not isinstance(d, dict):
        return {}
    return {k: float(v) for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def load_run(path: Path) -> Run:
    """One run directory. Raises TableError when its summary.json cannot be read."""
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TableError(f"cannot read {path / 'summary.json'}: {e}") from None
    if not isinstance(summary, dict):
        raise TableError(f"{path / 'summary.json'} is not a JSON object")
    scfg = summary.get("config") or {}
    summary_config = {k: _hashable(v) for k, v in scfg.items()}
    hydra_file = path / ".hydra" / "config.yaml"
    hydra_config = None
    if hydra_file.exists():
        try:
            hydra_config = read_hydra_config(hydra_file)
        except Exception as e:  # a hand-edited or truncated file: fall back to the summary's config
            warn(f"cannot read {hydra_file} ({e}); using the config in summary.json")
    hc = hydra_config or {}
    task = scfg.get("task", hc.get("task.name", "unknown"))
    algo = scfg.get("algo", hc.get("algo.name", "unknown"))
    seed = scfg.get("seed", hc.get("seed"))
    final = _numbers(summary.get("final_eval"))
    curves = read_curves(path / "metrics.jsonl")
    if not final:
        final = last_eval(curves, summary)
    from magrpo.tracking import effective_status

    results = {str(m): _numbers(v) for m, v in (summary.get("results") or {}).items() if isinstance(v, dict)}
    # A run killed without a word (SIGKILL, power loss) still says "running": its pid or heartbeat tells.
    return Run(path=path, status=effective_status(summary), task=str(task), algo=str(algo), seed=seed,
               final=final, initial=_numbers(summary.get("initial_eval")), summary_config=summary_config,
               hydra_config=hydra_config, curves=curves, job_type=str(summary.get("job_type", "train")),
               results=results, reason=str(summary.get("reason") or ""))


def split_methods(run: Run) -> list[Run]:
    """An eval run that evaluated several methods -> one run per method (its `algo` and label)."""
    if len(run.results) <= 1:
        return [run]
    out = []
    for method, metrics in run.results.items():
        config = {**run.summary_config, "algo": method, "label": method}
        hydra = {**run.hydra_config, "methods": method, "label": method} if run.hydra_config is not None else None
        curves = {k: v for k, v in run.curves.items() if not k.startswith("eval/")}
        prefix = f"eval/{method}/"
        curves.update({"eval/" + k[len(prefix):]: v for k, v in run.curves.items() if k.startswith(prefix)})
        out.append(Run(path=run.path, status=run.status, task=run.task, algo=method, seed=run.seed, final=metrics,
                       initial={}, summary_config=config, hydra_config=hydra, curves=curves, job_type=run.job_type,
                       results={method: metrics}, reason=run.reason))
    return out


def find_unstarted(dirs: Iterable[Path], skip: Iterable[Path] = ()) -> list[Path]:
    """Job directories with a Hydra config but no summary.json: jobs that died before their first
    evaluation (a bad model path, data that cannot be loaded...) or that have not got there yet."""
    skip_real = {os.path.realpath(p) for p in skip}
    found = []
    for top in dirs:
        for root, subdirs, files in os.walk(top):
            if ".hydra" in subdirs and "summary.json" not in files and os.path.realpath(root) not in skip_real:
                found.append(Path(root))
            subdirs[:] = [d for d in subdirs if d not in PRUNE_DIRS
                          and os.path.realpath(os.path.join(root, d)) not in skip_real]
    return sorted(found, key=lambda p: natural_key(str(p)))


def last_eval(curves: dict[str, dict[int, float]], summary: dict) -> dict[str, float]:
    """The latest evaluation of a run without a final one (only used with --include-unfinished)."""
    steps = curves.get("eval/reward_mean")
    if steps:
        last = max(steps)
        return {k[len("eval/"):]: v[last] for k, v in curves.items() if k.startswith("eval/") and last in v}
    evals = [e for e in summary.get("evals") or [] if isinstance(e, dict)]
    return _numbers(evals[-1]) if evals else {}


# -- grouping ------------------------------------------------------------------------------------


@dataclass
class Method:
    label: str
    runs: list[Run]

    @property
    def seeds(self) -> list[Any]:
        return [r.seed for r in self.runs]


def fmt_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """`algo.advantage` -> `advantage` when no other shown key ends the same; `reward.name` ->
    `reward` (a group choice reads better by its group); list items keep their parent."""
    def short(key: str) -> str:
        parts = key.split(".")
        if len(parts) >= 2 and parts[-1] == "name":
            return parts[-2]
        if len(parts) >= 2 and parts[-1].isdigit():
            return ".".join(parts[-2:])
        return parts[-1]

    shorts = {k: short(k) for k in keys}
    counts: dict[str, int] = {}
    for s in shorts.values():
        counts[s] = counts.get(s, 0) + 1
    return {k: (s if counts[s] == 1 else k) for k, s in shorts.items()}


def _ignored(key: str) -> bool:
    return key in IGNORED_KEYS or key.startswith(IGNORED_PREFIXES) or key in ("task.name", "task")


def group_runs(runs: list[Run], group_by: Sequence[str] | None = None) -> list[Method]:
    """Runs of ONE task -> methods, in the order their first run was found.

    Default label: the algo, then `key=value` for each config key that differs between the runs
    and is not already fixed by the algo (a key that is constant within every algo, such as
    `single_agent` for grpo, adds nothing the algo name does not say). With `group_by`, the label
    is exactly those keys.
    """
    if group_by:
        shorts = short_names(list(group_by))
        groups: dict[tuple, list[Run]] = {}
        labels: dict[tuple, str] = {}
        for run in runs:
            values = tuple(run.lookup(k)[1] for k in group_by)
            groups.setdefault(values, []).append(run)
            labels[values] = " ".join(fmt_value(v) if k in ("algo", "algo.name") else f"{shorts[k]}={fmt_value(v)}"
                                      for k, v in zip(group_by, values))
        return _checked([Method(labels[key], members) for key, members in groups.items()])

    use_hydra = all(r.hydra_config is not None for r in runs)   # compare like with like
    configs = [r.config(use_hydra) for r in runs]
    keys: list[str] = []
    for c in configs:
        keys += [k for k in c if k not in keys and not _ignored(k)]

    def value(c: dict, k: str) -> str:   # repr keeps 1 and "1" apart; an absent key is its own value
        return repr(c[k]) if k in c else "<absent>"

    differing = [k for k in keys if k not in ("algo", "algo.name") and len({value(c, k) for c in configs}) > 1]
    by_algo: dict[str, list[dict]] = {}
    for run, c in zip(runs, configs):
        by_algo.setdefault(run.algo, []).append(c)
    shown = [k for k in differing if any(len({value(c, k) for c in cs}) > 1 for cs in by_algo.values())]
    shorts = short_names(shown)
    groups = {}
    labels = {}
    for run, c in zip(runs, configs):
        key = (run.algo, *(value(c, k) for k in differing))
        groups.setdefault(key, []).append(run)
        labels[key] = " ".join([run.algo] + [f"{shorts[k]}={fmt_value(c.get(k))}" for k in shown])
    return _checked([Method(labels[key], members) for key, members in groups.items()])


def _checked(methods: list[Method]) -> list[Method]:
    """Two runs of one method with the same seed are usually the same sweep passed twice: say so."""
    for m in methods:
        seen: dict[Any, Path] = {}
        for r in m.runs:
            if r.seed in seen:
                warn(f"method {m.label!r} has seed {r.seed} twice ({seen[r.seed]} and {r.path}); both are averaged")
            seen.setdefault(r.seed, r.path)
    return methods


# -- statistics and columns ----------------------------------------------------------------------


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


def _pass_k(name: str) -> int | None:
    m = re.fullmatch(r"pass@(\d+)", name)
    return int(m.group(1)) if m else None


def turn_columns(names: Sequence[str]) -> list[str]:
    """Multi-turn runs: the reward after turn 1 and after the last turn (the team's answer)."""
    turns = sorted({int(m.group(1)) for n in names if (m := re.match(r"turn_(\d+)/reward_mean$", n))})
    return [f"turn_{turns[0]}/reward_mean", f"turn_{turns[-1]}/reward_mean"] if len(turns) > 1 else []


def default_columns(runs: list[Run]) -> list[str]:
    """reward_mean (for multi-turn runs then its turn-1 and final-turn values), the reward
    components, pass@k by k, then the task's other metrics."""
    names: list[str] = []
    for r in runs:
        names += [k for k in r.final if k not in names]
    components = [n for n in names if n.startswith("reward/")]
    passes = sorted((n for n in names if _pass_k(n) is not None), key=_pass_k)
    others = [n for n in names if n != "reward_mean" and n not in NOT_RESULTS and not n.startswith(("reward/", "feedback/"))
              and _pass_k(n) is None and not re.match(r"turn_\d+/", n)]
    return ["reward_mean", *turn_columns(names), *components, *passes, *others]


@dataclass
class Row:
    task: str
    method: Method
    cells: dict[str, Cell]       # column -> statistics; "initial/reward_mean" for the reference column


@dataclass
class Table:
    task: str
    columns: list[str]           # metric columns, then "initial/reward_mean"
    rows: list[Row]


INITIAL = "initial/reward_mean"


def build_tables(runs: list[Run], metrics: Sequence[str] | None = None,
                 group_by: Sequence[str] | None = None) -> list[Table]:
    """One table per task (tasks in the order their first run was found)."""
    by_task: dict[str, list[Run]] = {}
    for r in runs:
        by_task.setdefault(r.task, []).append(r)
    tables = []
    for task, task_runs in by_task.items():
        columns = list(metrics) if metrics else default_columns(task_runs)
        rows = []
        for method in group_runs(task_runs, group_by):
            cells = {c: mean_std([r.final[c] for r in method.runs if c in r.final]) for c in columns}
            cells[INITIAL] = mean_std([r.initial["reward_mean"] for r in method.runs if "reward_mean" in r.initial])
            rows.append(Row(task, method, cells))
        tables.append(Table(task, [*columns, INITIAL], rows))
    return tables


# -- writers -------------------------------------------------------------------------------------


def header(column: str) -> str:
    return "initial reward_mean" if column == INITIAL else column


def cell_text(cell: Cell, n: int, digits: int, pm: str = "±", missing: str = "–") -> str:
    if cell.mean is None:
        return missing
    text = f"{cell.mean:.{digits}f}"
    if cell.std is not None:
        text += f" {pm} {cell.std:.{digits}f}"
    if cell.count < n:
        text += f" (n={cell.count})"
    return text


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(tables: list[Table], digits: int = 3, notes: Sequence[str] = ()) -> str:
    out = []
    for t in tables:
        out.append(f"### Task: {_md_escape(t.task)}\n")
        heads = ["method", "n", *(header(c) for c in t.columns)]
        out.append("| " + " | ".join(_md_escape(h) for h in heads) + " |")
        out.append("|" + "|".join([":---", "---:"] + ["---:"] * len(t.columns)) + "|")
        for row in t.rows:
            n = len(row.method.runs)
            cells = [row.method.label, str(n), *(cell_text(row.cells[c], n, digits) for c in t.columns)]
            out.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
        out.append("")
    out.append(f"Cells: {STD_NOTE}. `initial reward_mean` is the evaluation before training.")
    out += [f"{note}" for note in notes]
    return "\n".join(out) + "\n"


def write_csv(tables: list[Table], path: Path) -> None:
    """Plain numbers at full precision; std left empty where there is a single seed."""
    columns: list[str] = []
    for t in tables:
        columns += [c for c in t.columns if c not in columns]
    columns = [c for c in columns if c != INITIAL] + [INITIAL]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "method", "n", "seeds"] + [f"{c}_{s}" for c in columns for s in ("mean", "std")])
        for t in tables:
            for row in t.rows:
                values = []
                for c in columns:
                    cell = row.cells.get(c, Cell(None, None, 0))
                    values += ["" if cell.mean is None else repr(cell.mean), "" if cell.std is None else repr(cell.std)]
                w.writerow([t.task, row.method.label, len(row.method.runs),
                            ";".join(str(s) for s in row.method.seeds), *values])


TEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


def tex_escape(text: str) -> str:
    return "".join(TEX_SPECIALS.get(ch, ch) for ch in text)


def tex_cell(cell: Cell, n: int, digits: int) -> str:
    return cell_text(cell, n, digits, pm="$\\pm$", missing="--")


def to_latex(tables: list[Table], digits: int = 3, notes: Sequence[str] = ()) -> str:
    """One booktabs tabular per task (needs \\usepackage{booktabs})."""
    out = [f"% written by {PROG}; needs \\usepackage{{booktabs}}"]
    for t in tables:
        ncols = 2 + len(t.columns)
        out += [f"% task: {tex_escape(t.task)}", "\\begin{tabular}{l" + "r" * (ncols - 1) + "}", "\\toprule",
                " & ".join(tex_escape(h) for h in ["method", "n", *(header(c) for c in t.columns)]) + " \\\\",
                "\\midrule"]
        for row in t.rows:
            n = len(row.method.runs)
            cells = [tex_escape(row.method.label), str(n), *(tex_cell(row.cells[c], n, digits) for c in t.columns)]
            out.append(" & ".join(cells) + " \\\\")
        # Short on purpose: a long footnote would set the width of the whole tabular.
        note = " ".join([TEX_NOTE, *(tex_escape(n) for n in notes)])
        out += ["\\bottomrule",
                f"\\multicolumn{{{ncols}}}{{l}}{{\\footnotesize {note}}} \\\\",
                "\\end{tabular}", ""]
    return "\n".join(out)


# -- learning curves -----------------------------------------------------------------------------


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


def _filename(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9@.=+-]+", "_", text).strip("_")


def plot_curves(tables: list[Table], out: Path, smooth_window: int = 1) -> list[Path]:
    """One PNG per (task, metric): train/reward_mean and eval/<each table column>."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for t in tables:
        metrics = ["train/reward_mean"] + [f"eval/{c}" for c in t.columns if c != INITIAL]
        for metric in metrics:
            lines = []
            for row in t.rows:
                series = [smooth(r.curves[metric], smooth_window) for r in row.method.runs if r.curves.get(metric)]
                if series:
                    lines.append((row.method, series))
            if not lines:
                continue
            fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
            for method, series in lines:
                steps, means, stds, _ = aggregate(series)
                lo = [m - s for m, s in zip(means, stds)]
                hi = [m + s for m, s in zip(means, stds)]
                (line,) = ax.plot(steps, means, marker="o" if len(steps) <= 25 else None, markersize=3,
                                  linewidth=1.6, label=f"{method.label} (n={len(series)})")
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
            ylabel = metric + (f" (moving avg, {smooth_window})" if smooth_window > 1 else "")
            written.append(save_curve_plot(fig, ax, t.task, metric, ylabel, out, legend_size=8))
    return written


def save_curve_plot(fig, ax, task: str, metric: str, ylabel: str, out: Path, legend_size: int = 8) -> Path:
    """Label, title and save one curves figure as OUT/<task>_<metric>.png; returns its path."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.set_title(f"{task}: {metric}  (mean ± sample std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, loc="best")
    fig.tight_layout()
    path = out / f"{_filename(task)}_{_filename(metric.replace('/', '_'))}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


# -- the command ---------------------------------------------------------------------------------


def _csv_list(text: str) -> list[str]:
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, got nothing")
    return items


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Tables (md, csv, tex) and learning curves from "
                                "magrpo-train run or multirun directories: one row per method, mean ± std over seeds.")
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="run or multirun directories (searched recursively)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: DIR/table for a single DIR)")
    p.add_argument("--group-by", type=_csv_list, default=None, metavar="KEY[,KEY]",
                   help="dotted config keys that define a method, e.g. algo.name,algo.joint_mode "
                        "(default: the algo plus the keys that differ between the runs)")
    p.add_argument("--metrics", type=_csv_list, default=None, metavar="A,B,C",
                   help="final-eval metrics to show, e.g. reward_mean,pass@1 (default: reward_mean, the reward "
                        "components and the task's metrics)")
    p.add_argument("--include-unfinished", action="store_true",
                   help="include runs whose status is not 'finished' (their last evaluation stands in for the final one)")
    p.add_argument("--digits", type=int, default=3, help="decimals in table.md / table.tex (default 3)")
    p.add_argument("--smooth", type=int, default=1, metavar="N",
                   help="moving average over N logged points in the learning curves (default 1: none)")
    p.add_argument("--no-plots", action="store_true", help="write the tables only")
    p.add_argument("--layout", choices=["generic", "paper"], default="generic",
                   help="generic (default): every config difference is a method; paper: rows = the runs' "
                        "`label` (paper rows), columns = the task's paper metrics, best in bold")
    return p


def collect(dirs: Sequence[Path], out: Path | None,
            include_unfinished: bool) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Finished (or all) runs under `dirs`, and the runs left out with the reason."""
    for d in dirs:
        if not d.exists():
            raise TableError(f"{d}: no such directory")
        if not d.is_dir():
            raise TableError(f"{d}: not a directory")
    paths = find_runs(dirs, skip=[out] if out else [])
    if not paths:
        raise TableError(f"no runs found under {', '.join(map(str, dirs))} (looked for */summary.json)")
    runs: list[Run] = []
    skipped: list[tuple[Path, str]] = []

    def skip(path: Path, reason: str) -> None:
        warn(f"skipping {path}: {reason}")
        skipped.append((path, reason))

    for path in paths:
        try:
            run = load_run(path)
        except TableError as e:
            skip(path, str(e))
            continue
        if run.status != "finished" and not include_unfinished:
            why = f": {run.reason.splitlines()[0]}" if run.reason else ""
            skip(path, f"status {run.status!r}{why} (pass --include-unfinished to include it)")
            continue
        if not run.final:
            skip(path, "no evaluation recorded yet")
            continue
        runs += split_methods(run)
    for path in find_unstarted(dirs, skip=[out] if out else []):
        skip(path, "no summary.json: the job stopped before its first evaluation (see its log), or is starting")
    if not runs:
        raise TableError(f"no usable runs under {', '.join(map(str, dirs))} ({len(skipped)} skipped, "
                         "see warnings above)")
    return runs, skipped


def skipped_note(skipped: Sequence[tuple[Path, str]]) -> list[str]:
    """Markdown lines naming every run left out of the tables."""
    if not skipped:
        return []
    return ["", f"Not in the table ({len(skipped)} run(s)):", ""] + [f"- `{p}`: {why}" for p, why in skipped]


def check_names(runs: list[Run], metrics: Sequence[str] | None, group_by: Sequence[str] | None) -> list[str] | None:
    """Fail early, naming the bad name and what exists, on an unknown --metrics or --group-by entry."""
    if metrics:
        metrics = [m.removeprefix("eval/") for m in metrics]
        known = {k for r in runs for k in r.final}
        unknown = [m for m in metrics if m not in known]
        if unknown:
            raise TableError(f"unknown metric(s) {', '.join(unknown)}; the runs have: {', '.join(sorted(known))}")
    for key in group_by or []:
        if not any(r.lookup(key)[0] for r in runs):
            raise TableError(f"--group-by key {key!r} is in no run's config (use dotted keys of .hydra/config.yaml, "
                             "e.g. algo.joint_mode)")
    return metrics


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.out is None and len(args.dirs) > 1:
            raise TableError("several DIRs given: say where the tables go with --out")
        out = args.out if args.out is not None else args.dirs[0] / "table"
        runs, skipped = collect(args.dirs, out, args.include_unfinished)
        metrics = check_names(runs, args.metrics, args.group_by)
        notes = []
        if args.include_unfinished and any(r.status != "finished" for r in runs):
            notes.append("Includes unfinished runs: their latest evaluation stands in for the final one.")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TableError(f"cannot create {out}: {e}") from None
        if args.layout == "paper":
            from magrpo import paper_table

            return paper_table.write(runs, skipped, out, args.digits, notes, plots=not args.no_plots,
                                     smooth_window=args.smooth, metrics=metrics)
        tables = build_tables(runs, metrics, args.group_by)
    except TableError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    md = to_markdown(tables, args.digits, notes)
    n_methods = sum(len(t.rows) for t in tables)
    save_and_report(out, md, skipped, lambda path: write_csv(tables, path), to_latex(tables, args.digits, notes),
                    lambda: [] if args.no_plots else plot_curves(tables, out, args.smooth),
                    f"{len(runs)} run(s), {n_methods} method(s), {len(tables)} task(s)"
                    + (f"; {len(skipped)} run(s) skipped" if skipped else ""))
    return 0


def save_and_report(out: Path, md: str, skipped: Sequence[tuple[Path, str]], write_csv_to: Callable[[Path], None],
                    tex: str, plot: Callable[[], list[Path]], counts: str) -> None:
    """Write table.md (with the runs left out listed under it), table.csv, table.tex and the
    curves into `out`, then print the markdown, `counts` and every file written."""
    if skipped:
        md += "\n".join(skipped_note(skipped)) + "\n"
    (out / "table.md").write_text(md)
    write_csv_to(out / "table.csv")
    (out / "table.tex").write_text(tex)
    pngs = plot()
    print(md)
    print(counts)
    for name in ("table.md", "table.csv", "table.tex"):
        print(f"wrote {out / name}")
    for p in pngs:
        print(f"wrote {p}")


if __name__ == "__main__":
    sys.exit(main())
