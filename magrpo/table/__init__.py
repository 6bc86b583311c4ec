"""`magrpo-table DIR [DIR ...] [--out OUT]`: paper-style tables and learning curves from run directories.

    magrpo-table multirun/train/2026-01-01_12-00-00             # one sweep -> DIR/table/
    magrpo-table outputs multirun --out results                 # several places, one table
    magrpo-table runs --group-by algo.joint_mode,algo.advantage --metrics reward_mean,pass@1
    magrpo-table multirun/paper/writing-tiny-<date> --layout paper   # the paper's layout (paper.py)

Runs are found recursively by their `summary.json` (docs/outputs.md); an eval run of
`magrpo-eval` that evaluated several methods counts as one run per method. A *method* is a run's config minus
its seed: runs that agree on everything else are seeds of one method and become one row, each
cell the mean ± sample standard deviation over those seeds of the run's final evaluation. Each
task gets its own table. Written into OUT:

  table.md    one markdown table per task, with a footnote saying what the ± is
  table.csv   one row per (task, method): plain numbers, mean and std in separate columns
  table.tex   one booktabs tabular per task
  <task>_<metric>.png   learning curves: mean over seeds vs step, shaded ± std, one line per method

Under each task's table, where its runs logged a per-step budget (`train/completions/tokens`,
`time/step_s`, `train/flops`), a second table sets each method's final eval value beside its AUC
over each budget (the mean eval value over the first B spent, B the least any run of the task spent):
over tokens the sample-matched view, over update wall time and counted training FLOPs the
compute-matched one.

With --layout paper, the coordination table (paper.py) also writes the return against generated
tokens, update wall time and training FLOPs (<task>_normalized_return_vs_{tokens,wall_time,flops}.png)
with an AUC column over each (the sample-matched and the compute-matched view), discrimination.json,
and the aggregates over its games (rliable's IQM, mean, optimality gap, probability of improvement,
each with a 95% stratified-bootstrap interval) in table.md, table.tex and aggregates.json, with the
performance profiles in <family>_performance_profile.png.

OUT is never inside a run or an exported team (the default DIR/table is refused when DIR is a
run: give --out), and an OUT that already holds any of these files is refused unless --force,
which replaces them and touches nothing else; the files are written aside and moved in together
(magrpo.core.writes).

Runs left out of a table (failed, still running, unreadable, or a job directory with a config but
no summary.json: a job that died before its first evaluation) are listed under it.

A user error (a DIR that does not exist, no runs found, an unknown --metrics or --group-by name)
is one line on stderr and exit code 2.

The package, by responsibility:

  runs.py     finding and reading run directories (summary.json, metrics.jsonl, .hydra/config.yaml)
  stats.py    mean ± sample std, the 95% CI of the mean, curve aggregates, the best rows of a column, ranks,
              the area under a curve, the aggregates over tasks (rliable) and their bootstrap intervals
  render.py   what both layouts share when they write: cell text, escaping, notes, files, figures
  generic.py  the default layout: a method = a config minus its seed
  paper.py    --layout paper: the paper's rows and columns, best in bold
  tuning.py   --tuning DIR: magrpo-paper's tuning records as tuning.md
  cli.py      the command's options and checks
"""

from __future__ import annotations

from magrpo.table.cli import build_parser, check_names, main
from magrpo.table.generic import (
    INITIAL,
    Row,
    RunGroup,
    Table,
    build_tables,
    default_columns,
    group_runs,
    plot_curves,
    to_latex,
    to_markdown,
    write_csv,
)
from magrpo.table.render import (
    STD_NOTE,
    TEX_NOTE,
    cell_text,
    codebleu_floor,
    md_escape,
    save_and_report,
    save_curve_plot,
    skipped_note,
    tex_escape,
)
from magrpo.table.runs import (
    PROG,
    Run,
    TableError,
    collect,
    find_runs,
    find_unstarted,
    flatten,
    load_run,
    natural_key,
    read_curves,
    read_hydra_config,
    split_methods,
    warn,
)
from magrpo.table.stats import Cell, aggregate, best_rows, mean_std, smooth

__all__ = ["INITIAL", "PROG", "STD_NOTE", "TEX_NOTE", "Cell", "Row", "Run", "RunGroup", "Table", "TableError",
           "aggregate", "best_rows", "build_parser", "build_tables", "cell_text", "check_names", "codebleu_floor",
           "collect", "default_columns", "find_runs", "find_unstarted", "flatten", "group_runs", "load_run", "main",
           "md_escape", "mean_std", "natural_key", "plot_curves", "read_curves", "read_hydra_config",
           "save_and_report", "save_curve_plot", "skipped_note", "smooth", "split_methods", "tex_escape",
           "to_latex", "to_markdown", "warn", "write_csv"]
