"""The generic layout of `magrpo-table` (the default): one row per method, where a method is a
run's config minus its seed, one column per final-eval metric, and the evaluation before
training as the last column; plus the learning curves of every column."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magrpo.table.paper import budget_curve
from magrpo.table.render import (
    STD_NOTE,
    TEX_NOTE,
    cell_text,
    codebleu_header,
    codebleu_note,
    line_style,
    md_escape,
    pyplot,
    save_and_report,
    save_curve_plot,
    short_label,
    tex_escape,
    tex_note_row,
)
from magrpo.table.runs import PROG, Run, warn
from magrpo.table.stats import Cell, aggregate, area_under, mean_std, smooth

# Config keys that never distinguish one method from another: the seed is what we average over;
# the rest only say where the run wrote things or how it reported them (the collaboration
# diagnostics too: extra metrics of the same evaluation).
IGNORED_KEYS = {"seed", "output_dir", "resume", "save_every", "save_final", "eval.log_completions",
                "eval.batch_size", "eval.diagnostics", "eval.ablation", "eval.lazy_threshold"}
IGNORED_PREFIXES = ("logger.", "hydra.")

# Final-eval entries that are bookkeeping rather than results: left out of the default columns.
NOT_RESULTS = {"reward_std", "num_items", "output_tokens_mean", "response_time_s", "reward_time_s",
               "diagnostics_time_s"}


# -- grouping ------------------------------------------------------------------------------------

@dataclass
class RunGroup:
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


def group_runs(runs: list[Run], group_by: Sequence[str] | None = None) -> list[RunGroup]:
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
        return _checked([RunGroup(labels[key], members) for key, members in groups.items()])

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
    return _checked([RunGroup(labels[key], members) for key, members in groups.items()])


def _checked(methods: list[RunGroup]) -> list[RunGroup]:
    """Two runs of one method with the same seed are usually the same sweep passed twice: say so."""
    for m in methods:
        seen: dict[Any, Path] = {}
        for r in m.runs:
            if r.seed in seen:
                warn(f"method {m.label!r} has seed {r.seed} twice ({seen[r.seed]} and {r.path}); both are averaged")
            seen.setdefault(r.seed, r.path)
    return methods


# -- columns -------------------------------------------------------------------------------------

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
    passes = sorted((n for n in names if _pass_k(n) is not None), key=lambda n: _pass_k(n) or 0)
    others = [n for n in names if n != "reward_mean" and n not in NOT_RESULTS and not n.startswith(("reward/", "feedback/", "diagnostics/"))
              and _pass_k(n) is None and not re.match(r"turn_\d+/", n)]
    return ["reward_mean", *turn_columns(names), *components, *passes, *others]


@dataclass
class Row:
    task: str
    method: RunGroup
    cells: dict[str, Cell]       # column -> statistics; "initial/reward_mean" for the reference column


@dataclass
class Table:
    task: str
    columns: list[str]           # metric columns, then "initial/reward_mean"
    rows: list[Row]


INITIAL = "initial/reward_mean"


def build_tables(runs: list[Run], metrics: Sequence[str] | None = None,
                 group_by: Sequence[str] | None = None, extra: Sequence[str] = ()) -> list[Table]:
    """One table per task (tasks in the order their first run was found); `extra` columns follow
    the others (--columns), empty where no run reports them."""
    by_task: dict[str, list[Run]] = {}
    for r in runs:
        by_task.setdefault(r.task, []).append(r)
    tables = []
    for task, task_runs in by_task.items():
        columns = list(metrics) if metrics else default_columns(task_runs)
        columns += [c for c in extra if c not in columns]
        rows = []
        for method in group_runs(task_runs, group_by):
            cells = {c: mean_std([r.final[c] for r in method.runs if c in r.final]) for c in columns}
            cells[INITIAL] = mean_std([r.initial["reward_mean"] for r in method.runs if "reward_mean" in r.initial])
            rows.append(Row(task, method, cells))
        tables.append(Table(task, [*columns, INITIAL], rows))
    return tables


# -- the compute-matched view ---------------------------------------------------------------------

# (per-step training quantity, what its AUC column is called, its unit in the note)
SPENT = (("train/completions/tokens", "AUC over tokens", "tokens"), ("time/step_s", "AUC over wall time", "s"),
         ("train/flops", "AUC over FLOPs", "FLOPs"))


@dataclass
class Spending:
    """One task's methods against what their training spent: the final eval value of `metric` and
    its AUC over each budget some run logged (the mean eval value over the first B of it, B the
    least any run of the task spent: paper.sample_efficiency's measure)."""
    task: str
    metric: str                                  # the eval curve: normalized_return where every run has it
    budgets: dict[str, float]                    # per-step key (SPENT) -> B
    rows: list[tuple[RunGroup, dict[str, Cell]]]  # method -> "final" and each budget key -> cell


def spending(tables: list[Table]) -> list[Spending]:
    """A `Spending` per task whose runs logged an eval curve and a per-step budget."""
    out = []
    for t in tables:
        runs = [r for row in t.rows for r in row.method.runs]
        metric = "normalized_return" if all(r.curves.get("eval/normalized_return") for r in runs) else "reward_mean"
        curves = {(id(r), key): budget_curve(r, key, metric) for r in runs for key, _, _ in SPENT}
        budgets = {}
        for key, _, _ in SPENT:
            ends = [c[-1][0] for (_, k), c in curves.items() if k == key and c and c[-1][0] > 0]
            if ends:
                budgets[key] = min(ends)
        if not budgets:
            continue
        rows = []
        for row in t.rows:
            cells = {"final": mean_std([r.final[metric] for r in row.method.runs if metric in r.final])}
            for key, b in budgets.items():
                aucs = [area_under(curves[(id(r), key)], b) for r in row.method.runs]
                cells[key] = mean_std([a for a in aucs if a is not None])
            rows.append((row.method, cells))
        out.append(Spending(t.task, metric, budgets, rows))
    return out


def spending_lines(spent: list[Spending], digits: int) -> list[str]:
    """The markdown of the compute-matched view: a table per task, what its B were under it."""
    out = []
    for s in spent:
        keys = [key for key, _, _ in SPENT if key in s.budgets]
        names = {key: name for key, name, _ in SPENT}
        units = {key: unit for key, _, unit in SPENT}
        out.append(f"### Task: {md_escape(s.task)}, against what training spent (eval {md_escape(s.metric)})\n")
        heads = ["method", "n", f"final {s.metric}", *(names[k] for k in keys)]
        out.append("| " + " | ".join(md_escape(h) for h in heads) + " |")
        out.append("|" + "|".join([":---", "---:"] + ["---:"] * (len(heads) - 2)) + "|")
        for method, cells in s.rows:
            n = len(method.runs)
            texts = [method.label, str(n), *(cell_text(cells[k], n, digits) for k in ["final", *keys])]
            out.append("| " + " | ".join(md_escape(c) for c in texts) + " |")
        out += ["", f"AUC over X = the mean eval {s.metric} over the first B of X that training spent, (1/B) ∫ value dX, "
                "linear between evaluations, from the evaluation before training at 0; B is the least any run of the "
                "task spent, so every method is measured over the same budget: over generated tokens the "
                "sample-matched view, over update wall time (`time/step_s`, evaluations excluded) and training FLOPs "
                "(`train/flops`, counted: magrpo.models.flops) the compute-matched one. B: "
                + ", ".join(f"{names[k]} {s.budgets[k]:.4g} {units[k]}" for k in keys) + ".", ""]
    return out


# -- writers -------------------------------------------------------------------------------------


def header(column: str) -> str:
    if column == INITIAL:
        return "initial reward_mean"
    return codebleu_header(column) if column == "codebleu" else column


def table_notes(tables: list[Table], notes: Sequence[str], short: bool = False) -> list[str]:
    """The notes every format carries: the caller's, then the CodeBLEU floor when a table shows it."""
    return [*notes, *([codebleu_note(short)] if any("codebleu" in t.columns for t in tables) else [])]


def to_markdown(tables: list[Table], digits: int = 3, notes: Sequence[str] = (),
                spent: list[Spending] | None = None) -> str:
    out = []
    for t in tables:
        out.append(f"### Task: {md_escape(t.task)}\n")
        heads = ["method", "n", *(header(c) for c in t.columns)]
        out.append("| " + " | ".join(md_escape(h) for h in heads) + " |")
        out.append("|" + "|".join([":---", "---:"] + ["---:"] * len(t.columns)) + "|")
        for row in t.rows:
            n = len(row.method.runs)
            cells = [row.method.label, str(n), *(cell_text(row.cells[c], n, digits) for c in t.columns)]
            out.append("| " + " | ".join(md_escape(c) for c in cells) + " |")
        out.append("")
    out += spending_lines(spent if spent is not None else spending(tables), digits)
    out.append(f"Cells: {STD_NOTE}. `initial reward_mean` is the evaluation before training.")
    out += table_notes(tables, notes)
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
        note = " ".join([TEX_NOTE, *(tex_escape(n) for n in table_notes([t], notes, short=True))])
        out += ["\\bottomrule", tex_note_row(ncols, note), "\\end{tabular}", ""]
    return "\n".join(out)


# -- learning curves -----------------------------------------------------------------------------


def plot_curves(tables: list[Table], out: Path, smooth_window: int = 1) -> list[Path]:
    """One PNG per (task, metric): train/reward_mean and eval/<each table column>."""
    plt = pyplot()

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
            for k, (method, series) in enumerate(lines):
                steps, means, stds, _ = aggregate(series)
                lo = [m - s for m, s in zip(means, stds)]
                hi = [m + s for m, s in zip(means, stds)]
                (line,) = ax.plot(steps, means, linewidth=1.6, label=f"{short_label(method.label)} (n={len(series)})",
                                  **line_style(k, len(steps)))
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
            ylabel = metric + (f" (moving avg, {smooth_window})" if smooth_window > 1 else "")
            written.append(save_curve_plot(fig, ax, t.task, metric, ylabel, out, legend_size=8))
    return written



def write(runs: list[Run], skipped: Sequence[tuple[Path, str]], out: Path, digits: int = 3,
          notes: Sequence[str] = (), plots: bool = True, smooth_window: int = 1,
          metrics: Sequence[str] | None = None, group_by: Sequence[str] | None = None,
          extra: Sequence[str] = ()) -> int:
    """Write table.md, table.csv, table.tex and the curves into `out`; print the markdown."""
    tables = build_tables(runs, metrics, group_by, extra)
    n_methods = sum(len(t.rows) for t in tables)
    save_and_report(out, to_markdown(tables, digits, notes), skipped, lambda path: write_csv(tables, path),
                    to_latex(tables, digits, notes), lambda: plot_curves(tables, out, smooth_window) if plots else [],
                    f"{len(runs)} run(s), {n_methods} method(s), {len(tables)} task(s)"
                    + (f"; {len(skipped)} run(s) skipped" if skipped else ""))
    return 0
