"""`magrpo-table --layout paper`: the paper's tables from run directories.

One table per task. Rows are methods: the runs' `label` (set by every paper row, conf/method/<row>.yaml;
else the algo, or the method of a magrpo-eval run), named and ordered as magrpo.launch.paper_grid lists
them, the one list magrpo-paper runs too -- prompting baselines, single-model baselines,
multi-agent baselines, MAGRPO, multi-turn MAGRPO. Columns are the task's paper metrics, each labelled by what it holds:

  every task     normalized return = the raw reward (shift and scale undone) / the task's
                 `reward_max` (with the reference weights 3.0 for tldr/arxiv; 4.0 for the
                 two-agent code reward, 2.1 for its single-agent form; 1.0 for length_ratio),
                 so 1.0 means every level paid. A run whose evaluation did not report it gets it
                 from its own task and reward config, rebuilt from `.hydra/config.yaml`
  writing        structure (levels 1-3), style (the Jaccard term), coherence (the transition
                 term), ROUGE-L against the reference
  coding         pass@1/3/5/10, CodeBLEU (the `codebleu` package's, whose floor for empty code
                 is shown beside it), and per-level accuracy: the fraction of samples whose
                 program reached each level of the gated code reward
  maporl_qa      the reward and every accuracy the evaluation reports
  multi-turn     the normalized return after turn 1 and after the final turn (when any run of
                 the table has more than one turn)
  trained rows   cost: generated sequences per item per update (`train/sequences_per_item`, the mean
                 over a run's steps), where any run logged it: what differs where a method's
                 sampling does (DAPO's refills, C3's counterfactual alternatives)
  every task     response time: generation seconds per item (lower is better)
  cross-play     self-play, cross-play, ZSC gap and held-out partner, for the rows a magrpo-crossplay
                 result under the DIRs covers (magrpo.table.zsc; `magrpo-paper --crossplay` makes them)

A cell is the mean ± sample standard deviation over seeds of each run's final evaluation; in the
coordination table (a matched-budget comparison of every method, FAIR_FAMILIES) it is the mean ±
the 95% confidence interval of the mean (Student's t over the seeds), the tables end in an
overview of every method on every task with each method's mean rank (1 = best), the checks of
whether each task separates the methods, and the aggregates over its tasks (rliable's IQM, mean,
optimality gap and probability of improvement with stratified-bootstrap intervals, and the
performance profiles); each of its tasks gets the AUC of the eval return over the generated tokens
(sample-matched), over the update wall time and over the training FLOPs (compute-matched), and
curves of the normalized return against each. The
best mean of each column is in bold (none where every row ties). Runs left out (failed,
unfinished, without summary.json) and rows whose runs lack a metric are listed under the table,
never dropped silently.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from magrpo.launch.paper_grid import FAMILY, METHODS, title
from magrpo.table import stats
from magrpo.table import zsc as zsc_mod
from magrpo.table.render import (
    CI_NOTE,
    STD_NOTE,
    TEX_CI_NOTE,
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
from magrpo.table.runs import PROG, Run, TableError, num_answers, run_task
from magrpo.table.stats import (
    Cell,
    Interval,
    aggregate,
    area_under,
    best_rows,
    first_reach,
    intervals_overlap,
    kendall_w,
    mean_std,
    ranks,
    smooth,
)

# A task's family is its table in the paper (magrpo.launch.paper_grid.FAMILY).
# Tables run as matched-budget comparisons of every method (magrpo-paper's coordination table): their
# cells carry the 95% CI of the mean, and they get the rank overview and the budget curves.
FAIR_FAMILIES = {"coordination"}


@dataclass(frozen=True)
class Column:
    key: str                    # final-eval metric, or a derived one (final_turn/...)
    header: str                 # what the cell holds
    higher_is_better: bool = True
    ranked: bool = True         # False: a quantity with no better direction (no bold)
    trained_only: bool = False  # a training quantity: evaluation-only rows have none, and that is no gap
    censored: bool = False      # a run may lack it by design (a level it never reached): no gap either


NORM = Column("normalized_return", "norm. return")
REWARD = Column("reward_mean", "reward")
TIME = Column("response_time_s", "response time (s/item)", higher_is_better=False)
# What a row spent per update: every generated sequence per item of the batch, DAPO's refill rounds
# and C3's counterfactual samples included (the budget's one exception, so the table says it).
COST = Column("sequences_per_item", "cost (sequences/item/update)", higher_is_better=False, ranked=False,
              trained_only=True)
# Sample efficiency (FAIR_FAMILIES): the eval curve against the generated tokens (sample_efficiency).
AUC = Column("auc_tokens", "AUC over tokens (0-1)", trained_only=True)
TO_90 = Column("ktokens_to_90", "k tokens to 90%", higher_is_better=False, trained_only=True, censored=True)
REACH = 0.9        # "90% of the optimum": norm. return is 1 at the task's optimum
TOKENS = "train/completions/tokens"
# Compute efficiency (FAIR_FAMILIES): the same curve against the update wall time and the training FLOPs
# (counted, not timed: magrpo.models.flops), beside the sample-matched AUC over tokens.
AUC_WALL = Column("auc_wall", "AUC over wall time (0-1)", trained_only=True)
AUC_FLOPS = Column("auc_flops", "AUC over FLOPs (0-1)", trained_only=True)
WALL = "time/step_s"
FLOPS = "train/flops"
# Each AUC column and the per-step budget its curve runs over.
AUC_BUDGETS: tuple[tuple[Column, str], ...] = ((AUC, TOKENS), (AUC_WALL, WALL), (AUC_FLOPS, FLOPS))
FAMILY_COLUMNS: dict[str, list[Column]] = {
    "writing": [NORM, Column("reward/structure", "structure (levels 1-3)"), Column("reward/style", "style (Jaccard term)"),
                Column("reward/coherence", "coherence (transitions)"), Column("rouge_l", "ROUGE-L")],
    "coding": [NORM, *(Column(f"pass@{k}", f"pass@{k}") for k in (1, 3, 5, 10)), Column("codebleu", "CodeBLEU"),
               Column("acc/level_1_main_defined", "L1 acc (main defined)"),
               Column("acc/level_2_parses", "L2 acc (parses)"),
               Column("acc/level_3_test_passed", "L3 acc (a test passes)"),
               Column("acc/level_4_cooperates", "L4 acc (main uses helper)")],
    "maporl": [NORM, REWARD],
    # the suite's games: normalized return is the game score (1 = the team optimum)
    "coordination": [NORM, AUC, TO_90, AUC_WALL, AUC_FLOPS, Column("reward/agreement", "agreement (pairs)"), Column("reward/covered", "covered"),
                     Column("reward/collisions", "collisions", higher_is_better=False),
                     Column("reward/correct", "listener right"), Column("reward/leaked", "object named",
                                                                        higher_is_better=False)],
}
# Zero-shot coordination, from magrpo-crossplay over a row's seeds (magrpo.table.zsc): a row may lack
# them by design (no crossplay run for it), so no gap is noted.
ZSC_COLUMNS = [Column(key, header, higher_is_better=better, trained_only=True, censored=True)
               for key, header, _, better in zsc_mod.FIELDS]
# The collaboration diagnostics (magrpo.evaluation.collaboration) as --columns may add them: no better direction.
DIAGNOSTIC_HEADERS = {"lazy_agent_rate": "lazy-agent rate", "answer_similarity": "answer similarity (ROUGE-L)"}


def extra_column(key: str) -> Column:
    """A column asked for with --columns: a known header where there is one, never in bold."""
    m = re.fullmatch(r"agent_(\d+)/(contribution|influence)", key)
    header = f"agent {m.group(1)} {m.group(2)}" if m else DIAGNOSTIC_HEADERS.get(key, key)
    return Column(key, header, ranked=False)


# Components that are not rewards, labelled by what they hold; other components as "<name> (reward part)".
COMPONENT_HEADERS = {"reward/length_ratio": "length ratio a2/a1 (a ratio, not a reward)"}

# The paper's row order (magrpo.launch.paper_grid.METHODS); rows of other labels follow in the order they were found.
ROW_ORDER = list(METHODS)


def row_name(label: str) -> str:
    """A row's name in the paper's tables (its label where the paper has no name for it)."""
    return title(label)


NORM_NOTE = ("norm. return = the raw reward, (total - reward.shift) / reward.scale, as a fraction of the "
             "task's maximum raw reward (with the reference weights: 3.0 for tldr and arxiv, 4.0 for the two-agent "
             "code reward and 2.1 for its single-agent form (single, grpo, ppo), 1.0 for length_ratio and the "
             "coordination games; signal's counts from chance: (accuracy - 1/K) / (1 - 1/K), at least 0; "
             "stag_hunt's from the hare: (R - hare) / (1 - hare), at least 0).")
BOLD_NOTE = ("Bold: the best mean of its column (the lowest for response time); a column where every row "
             "ties has none.")
COST_NOTE = ("cost = generated sequences per item per update (the mean over a run's steps of "
             "`train/sequences_per_item`): every row draws num_generations answers per agent per item (a sequential "
             "team: per prefix), unless its sampling differs: DAPO's refills, C3's counterfactual alternatives.")
AUC_NOTE = ("AUC over tokens = the mean eval norm. return over the first B generated tokens, (1/B) ∫ return "
            "d(tokens), linear between evaluations, from the untrained evaluation at 0 tokens; B is the fewest tokens "
            "any trained run of the task spent, so every row is measured over the same budget (1 = at the optimum "
            "from the start). k tokens to 90% = thousands of generated tokens until the eval norm. return first "
            "reached 0.9 (linear between evaluations); a cell marked (n=k) reached it in k seeds, its mean is over "
            "those, and an empty one never did.")
COMPUTE_NOTE = ("AUC over wall time and AUC over FLOPs = the same mean eval norm. return, over the first B "
                "seconds of updates (`time/step_s` summed; evaluations excluded) and over the first B training FLOPs "
                "(`train/flops` summed: counted from the tokens each pass ran, 2N per token forward and 6N with a full "
                "backward, magrpo.models.flops; not timed), B the least any trained run of the task spent: the "
                "compute-matched view beside the sample-matched AUC over tokens. The final value is the norm. return "
                "column.")
RANK_NOTE = ("Mean rank: a method's place on each task by mean norm. return among the rows of that task (1 = best; "
             "ties share the mean of their places), averaged over the tasks it ran; (k/m) marks one that ran k of "
             "the m tasks.")


@dataclass
class PaperRow:
    label: str
    runs: list[Run]
    cells: dict[str, Cell] = field(default_factory=dict)
    finals: list[dict[str, float]] = field(default_factory=list)   # per run (as `runs`): what its cells hold

    @property
    def name(self) -> str:
        return row_name(self.label)

    @property
    def eval_only(self) -> bool:
        return all(r.job_type == "eval" for r in self.runs)


@dataclass
class RenderedTable:
    """One task's table as magrpo-table renders it: its columns, its rows (methods) with their cells."""

    task: str
    columns: list[Column]
    rows: list[PaperRow]
    best: dict[str, set[int]]          # column key -> indices of the rows in bold
    missing: list[str]                 # notes on metrics that runs lack
    budgets: dict[str, float] = field(default_factory=dict)   # AUC column key -> the budget B it integrates
                                                              # over (FAIR_FAMILIES): tokens, seconds, FLOPs

    @property
    def family(self) -> str:
        return FAMILY.get(self.task, "")

    @property
    def interval(self) -> str:
        """What ± means in this table's cells: "ci95" (FAIR_FAMILIES) or "std"."""
        return "ci95" if self.family in FAIR_FAMILIES else "std"


@dataclass
class Overview:
    """Every method of a FAIR family on every task: the norm. return cells, and each method's
    place per task and mean rank across them."""
    family: str
    tasks: list[str]
    labels: list[str]                                  # methods, in the paper's row order
    cells: dict[tuple[str, str], Cell]                 # (task, label) -> norm. return
    runs: dict[tuple[str, str], int]                   # (task, label) -> seeds
    place: dict[tuple[str, str], float]                # (task, label) -> rank on that task
    mean_rank: dict[str, tuple[float, int]]            # label -> (mean rank, number of tasks it ran)


# -- derived metrics -----------------------------------------------------------------------------


def _turns(metrics: dict[str, float], name: str) -> dict[int, float]:
    out = {}
    for key, value in metrics.items():
        m = re.fullmatch(r"turn_(\d+)/" + re.escape(name), key)
        if m:
            out[int(m.group(1))] = value
    return out


def derived_returns(run: Run, final: dict[str, float]) -> tuple[dict[str, float], str | None]:
    """`normalized_return` (and `turn_<t>/normalized_return`) of a run whose evaluation did not
    report them, from its `reward_mean` values through its own task: `Task.normalized_return`, the
    evaluation's one normalization (`raw_reward` over the task's `reward_max`). Returns them and a
    note for the table when they rest on a guess, or could not be had."""
    wanted = {k: v for k, v in final.items()
              if (k == "reward_mean" or re.fullmatch(r"turn_\d+/reward_mean", k))
              and k.replace("reward_mean", "normalized_return") not in final}
    if not wanted:
        return {}, None
    try:
        task = run_task(run)
    except TableError as e:
        return {}, f"`{run.path}`: no norm. return: {e}"
    n = num_answers(run)
    if task is None or not task.reward_max(n):
        return {}, None     # a reward without a fixed maximum has no normalized return
    out = {k.replace("reward_mean", "normalized_return"): task.normalized_return(v, n) for k, v in wanted.items()}
    if not (run.path / ".hydra" / "config.yaml").exists():
        return out, (f"`{run.path}`: norm. return derived from reward_mean with the {run.task} task's default "
                     "reward config (the run has no .hydra/config.yaml to say its shift, scale and weights)")
    return out, None


def with_derived(run: Run, notes: list[str] | None = None) -> dict[str, float]:
    """The run's final metrics plus normalized_return (when an older run lacks it) and the
    final turn's value of each per-turn metric (`final_turn/<name>`). A note on how the
    normalized return was had, if any, goes to `notes`."""
    final = dict(run.final)
    per_step = run.curves.get("train/sequences_per_item")
    if per_step:     # what a trained run spent per update, over its steps (COST)
        final.setdefault(COST.key, sum(per_step.values()) / len(per_step))
    derived, note = derived_returns(run, final)
    final.update(derived)
    if note is not None and notes is not None:
        notes.append(note)
    for name in ("normalized_return", "reward_mean"):
        turns = _turns(final, name)
        if turns:
            final[f"final_turn/{name}"] = turns[max(turns)]
    return final


def cumulative(run: Run, key: str) -> dict[int, float]:
    """Step -> the sum of `key` (a per-step training quantity) over the steps up to it; the eval
    logged at step s came after s updates, so its budget is the sum over steps 1..s (0 at step 0)."""
    per_step = run.curves.get(key) or {}
    total, out = 0.0, {0: 0.0}
    for step in sorted(per_step):
        total += per_step[step]
        out[step] = total
    return out


def spent_at_evals(run: Run, key: str, metric: str = NORM.key) -> dict[int, tuple[float, float]]:
    """Eval step -> (the budget `key` spent by then, the eval `metric` there): the budget at the
    last logged step at or before the eval. Empty when the run logged no eval `metric` or no `key`."""
    returns = run.curves.get(f"eval/{metric}")
    if not returns or not run.curves.get(key):
        return {}
    spent = cumulative(run, key)
    done = sorted(spent)
    return {step: (spent[[s for s in done if s <= step][-1]], value) for step, value in sorted(returns.items())}


def budget_curve(run: Run, key: str = TOKENS, metric: str = NORM.key) -> list[tuple[float, float]]:
    """A trained run's eval `metric` (norm. return) against the budget `key` spent before each
    evaluation (generated tokens, update seconds, training FLOPs): (spent, value) per eval step,
    the untrained evaluation at 0. Empty when the run logged no eval `metric` or no `key`."""
    points = list(spent_at_evals(run, key, metric).values())
    if not points:
        return []
    initial = run.initial.get(metric)
    if initial is not None and points[0][0] > 0:
        points.insert(0, (0.0, initial))
    return points


def sample_efficiency(runs: Sequence[Run], finals: dict[int, dict[str, float]]) -> dict[str, float]:
    """Add each trained run's sample and compute efficiency to its final metrics, and return the
    budget B of each AUC column (column key -> B; a column no run logged the budget of is absent):

      auc_tokens     (1 / B) * integral_0^B of the eval norm. return over the generated tokens
                     (stats.area_under), B the fewest tokens any trained run of the task spent, so
                     every run is measured over the same budget; 1 = at the optimum from the start
      ktokens_to_90  thousands of generated tokens until the eval norm. return first reached 0.9
                     (90% of the optimum; linear between evaluations); absent where a run never did
      auc_wall       the same over the update wall time (`time/step_s` summed; evaluations excluded),
                     B the least any trained run of the task spent
      auc_flops      the same over the training FLOPs (`train/flops` summed: counted, not timed),
                     B the fewest any trained run of the task spent

    The AUCs over wall time and FLOPs are the compute-matched view: a cheap method's speed shows there,
    a sample-efficient method's efficiency in the AUC over tokens."""
    budgets: dict[str, float] = {}
    for col, key in AUC_BUDGETS:
        curves = {id(r): budget_curve(r, key) for r in runs}
        ends = [c[-1][0] for c in curves.values() if c and c[-1][0] > 0]
        if not ends:
            continue
        budget = budgets[col.key] = min(ends)
        for r in runs:
            points = curves[id(r)]
            if not points:
                continue
            if (auc := area_under(points, budget)) is not None:
                finals[id(r)][col.key] = auc
            if col is AUC and (reach := first_reach(points, REACH)) is not None:
                finals[id(r)][TO_90.key] = reach / 1000
    return budgets


def budget_text(b: float) -> str:
    """A budget as the notes print it: FLOPs in scientific notation, seconds and tokens as they are."""
    return f"{b:.3g}" if b >= 1e6 else f"{b:,.1f}" if b < 100 else f"{b:,.0f}"


def columns_for(task: str, finals: list[dict[str, float]]) -> list[Column]:
    family = FAMILY.get(task)
    present = {k for f in finals for k in f}
    if family in FAMILY_COLUMNS:
        cols = list(FAMILY_COLUMNS[family])
    else:
        comps = sorted(k for k in present if k.startswith("reward/"))
        cols = [NORM, *(Column(c, COMPONENT_HEADERS[c], ranked=False) if c in COMPONENT_HEADERS
                        else Column(c, f"{c[len('reward/'):]} (reward part)") for c in comps)]
    if family == "coordination":       # one family, many games: the columns of this game's reward
        cols = [c for c in cols if c is NORM or c.key in present or (c is TO_90 and AUC.key in present)]
    if family == "maporl":
        cols += [Column(k, k.replace("_", " ")) for k in sorted(present)
                 if re.search(r"acc", k) and not k.startswith(("acc/level_", "turn_", "final_turn/"))]
    if any(t >= 2 for f in finals for t in _turns(f, "reward_mean")):
        name = "normalized_return" if any("turn_1/normalized_return" in f for f in finals) else "reward_mean"
        what = "norm. return" if name == "normalized_return" else "reward"
        cols += [Column(f"turn_1/{name}", f"turn 1 {what}"), Column(f"final_turn/{name}", f"final turn {what}")]
    if COST.key in present:
        cols.append(COST)
    return [*cols, TIME]


# -- building ------------------------------------------------------------------------------------


def _row_key(label: str, found: int) -> tuple[int, int]:
    return (ROW_ORDER.index(label), 0) if label in ROW_ORDER else (len(ROW_ORDER), found)


def build(runs: Sequence[Run], metrics: Sequence[str] | None = None, extra: Sequence[str] = (),
          zsc: dict[tuple[str, str], zsc_mod.Result] | None = None) -> list[RenderedTable]:
    """One table per task. `extra` (--columns) adds columns after the task's (or `metrics`'), empty
    where a run lacks them. `zsc` ((task, row label) -> magrpo-crossplay's scores, magrpo.table.zsc)
    adds the zero-shot coordination columns to the tables of the tasks it covers."""
    by_task: dict[str, list[Run]] = {}
    for r in runs:
        by_task.setdefault(r.task, []).append(r)
    tables = []
    for task, task_runs in by_task.items():
        derived_notes: list[str] = []
        finals = {id(r): with_derived(r, derived_notes) for r in task_runs}
        budgets = sample_efficiency(task_runs, finals) if FAMILY.get(task) in FAIR_FAMILIES else {}
        columns = columns_for(task, list(finals.values()))
        if metrics:
            known = {c.key: c for c in columns}
            columns = [known.get(m, Column(m, m)) for m in metrics]
        columns += [extra_column(c) for c in extra if c not in {col.key for col in columns}]
        crossplay = {lab: res for (t, lab), res in (zsc or {}).items() if t == task}
        columns += [c for c in ZSC_COLUMNS if c.key not in {col.key for col in columns}
                    and any(c.key in res.values for res in crossplay.values())]
        groups: dict[str, list[Run]] = {}
        for r in task_runs:
            groups.setdefault(r.label, []).append(r)
        labels = sorted(groups, key=lambda lab: _row_key(lab, list(groups).index(lab)))
        rows = [PaperRow(label, groups[label], finals=[finals[id(r)] for r in groups[label]]) for label in labels]
        missing = list(dict.fromkeys(derived_notes))   # an eval run split per method would say it twice
        for col in columns:
            if col not in ZSC_COLUMNS and not any(col.key in finals[id(r)] for r in task_runs):
                missing.append(f"`{col.key}` ({col.header}): no run reports it (a metric the task's data or "
                               "settings do not give, e.g. ROUGE-L without references, pass@k with fewer samples)")
        for row in rows:
            for col in columns:
                if col in ZSC_COLUMNS:      # one value per row, over its seeds: magrpo-crossplay's
                    res = crossplay.get(row.label)
                    row.cells[col.key] = res.values.get(col.key, Cell(None, None, 0)) if res else Cell(None, None, 0)
                    continue
                have = [finals[id(r)][col.key] for r in row.runs if col.key in finals[id(r)]]
                row.cells[col.key] = mean_std(have)
                if (col.trained_only and row.eval_only) or col.censored:
                    continue
                if have and len(have) < len(row.runs):
                    lacking = [str(r.path) for r in row.runs if col.key not in finals[id(r)]]
                    missing.append(f"`{row.name}`: no `{col.key}` in {len(lacking)} of {len(row.runs)} run(s): "
                                   + ", ".join(f"`{p}`" for p in lacking))
                elif not have and any(col.key in finals[id(r)] for r in task_runs):
                    missing.append(f"`{row.name}`: no `{col.key}` in any of its {len(row.runs)} run(s)")
        best = {col.key: best_rows([row.cells[col.key].mean for row in rows], col.higher_is_better)
                for col in columns if col.ranked}
        tables.append(RenderedTable(task, columns, rows, best, missing, budgets))
    return tables


def overviews(tables: Sequence[RenderedTable]) -> list[Overview]:
    """One Overview per FAIR family with tables here: the norm. return of every row on every task,
    each row's place per task (ties share the mean of their places) and its mean rank over the
    tasks it ran."""
    out = []
    for family in sorted({t.family for t in tables} & FAIR_FAMILIES):
        mine = [t for t in tables if t.family == family]
        found: list[str] = []
        for t in mine:
            found += [row.label for row in t.rows if row.label not in found]
        labels = sorted(found, key=lambda lab: _row_key(lab, found.index(lab)))
        cells, seeds, place = {}, {}, {}
        for t in mine:
            means = [row.cells[NORM.key].mean if NORM.key in row.cells else None for row in t.rows]
            for row, r in zip(t.rows, ranks(means)):
                if NORM.key in row.cells:
                    cells[(t.task, row.label)] = row.cells[NORM.key]
                seeds[(t.task, row.label)] = len(row.runs)
                if r is not None:
                    place[(t.task, row.label)] = r
        mean_rank = {}
        for lab in labels:
            got = [place[(t.task, lab)] for t in mine if (t.task, lab) in place]
            if got:
                mean_rank[lab] = (sum(got) / len(got), len(got))
        out.append(Overview(family, [t.task for t in mine], labels, cells, seeds, place, mean_rank))
    return out


HIGH, LOW = 0.95, 0.05      # a task every method ends at or above HIGH (or at or below LOW) separates nothing


@dataclass
class Discrimination:
    """Whether one task of a FAIR family separates its trained methods (`discrimination`)."""
    task: str
    methods: int                                   # trained rows
    all_high: bool                                 # every trained row's mean final norm. return >= HIGH
    all_low: bool                                  # every one <= LOW
    apart: dict[str, list[tuple[str, str]]]        # column key -> (better, worse) labels whose 95% intervals
                                                   # (mean ± CI over seeds) do not overlap
    kendall_w: float | None                        # how alike the seeds rank the methods (final norm. return)
    w_seeds: int                                   # the seeds every trained row ran: W's raters
    widest: tuple[str, str] | None = None          # the pair apart with the largest gap of means (final, else AUC)

    @property
    def separates(self) -> bool:
        return self.methods >= 2 and not self.all_high and not self.all_low and any(self.apart.values())

    def as_dict(self) -> dict:
        return {"task": self.task, "methods": self.methods, "all_high": self.all_high, "all_low": self.all_low,
                "apart": {k: [list(p) for p in v] for k, v in self.apart.items()}, "kendall_w": self.kendall_w,
                "w_seeds": self.w_seeds, "widest": None if self.widest is None else list(self.widest),
                "separates": self.separates}


def discrimination(t: RenderedTable) -> Discrimination:
    """The checks a benchmark table must pass to compare methods at all, on one task: not every
    method at the ceiling (>= HIGH) or the floor (<= LOW); at least one pair of methods whose 95%
    intervals do not overlap, on the final norm. return or on the AUC over tokens; and Kendall's W
    (stats.kendall_w) of the seeds as raters of the methods' final norm. return, over the seeds every
    trained method ran (a method's repeated seed counts once, its mean)."""
    trained = [row for row in t.rows if not row.eval_only]
    norms = [row.cells[NORM.key].mean for row in trained if NORM.key in row.cells]
    means = [m for m in norms if m is not None]
    apart: dict[str, list[tuple[str, str]]] = {}
    mean_of: dict[str, dict[str, float]] = {}       # column -> row label -> its mean, where it has one
    for col in (NORM, AUC):
        have = [(row, m) for row in trained if col.key in row.cells and (m := row.cells[col.key].mean) is not None]
        have.sort(key=lambda p: -p[1])
        mean_of[col.key] = {row.label: m for row, m in have}
        apart[col.key] = [(a.label, b.label) for i, (a, ma) in enumerate(have) for b, mb in have[i + 1:]
                          if ma > mb and not intervals_overlap(a.cells[col.key], b.cells[col.key])]
    widest = None
    for col in (NORM, AUC):
        if apart[col.key]:
            got = mean_of[col.key]
            widest = max(apart[col.key], key=lambda p: got[p[0]] - got[p[1]])
            break
    per_seed: list[dict[object, float]] = []
    for row in trained:
        values: dict[object, list[float]] = {}
        for run, final in zip(row.runs, row.finals):
            if math.isfinite(final.get(NORM.key, math.nan)):      # a broken run's NaN ranks nowhere
                values.setdefault(run.seed, []).append(final[NORM.key])
        per_seed.append({seed: sum(v) / len(v) for seed, v in values.items()})
    seeds = sorted(set.intersection(*(set(d) for d in per_seed)), key=str) if per_seed else []
    w = kendall_w([[d[seed] for d in per_seed] for seed in seeds]) if len(trained) >= 2 else None
    return Discrimination(t.task, len(trained), bool(means) and min(means) >= HIGH,
                          bool(means) and max(means) <= LOW, apart, w, len(seeds), widest)


DISCRIMINATION_NOTE = ("Pairs apart: method pairs whose 95% intervals (mean ± CI over seeds) do not overlap. Kendall's W: "
                       "how alike the seeds rank the trained methods by final norm. return (1 = every seed the same "
                       "order, 0 = no agreement; ties share places), over the seeds every method ran. Separates: not "
                       f"every method >= {HIGH}, not every method <= {LOW}, and at least one pair apart on the final "
                       "value or the AUC.")


def discrimination_lines(tables: Sequence[RenderedTable]) -> list[str]:
    """The markdown section under a FAIR family's overview: one row per task (`discrimination`)."""
    checks = [discrimination(t) for t in tables if t.family in FAIR_FAMILIES]
    if not checks:
        return []
    out = ["### Does each task separate the methods?\n",
           "| task | trained methods | all >= 0.95 | all <= 0.05 | pairs apart (final) | pairs apart (AUC) "
           "| widest pair apart | Kendall's W (seeds) | separates |",
           "|:---|---:|:---:|:---:|---:|---:|:---|---:|:---:|"]
    for d in checks:
        widest = "–" if d.widest is None else f"{row_name(d.widest[0])} > {row_name(d.widest[1])}"
        w = "–" if d.kendall_w is None else f"{d.kendall_w:.2f} ({d.w_seeds})"
        out.append(f"| {md_escape(d.task)} | {d.methods} | {'yes' if d.all_high else 'no'} | "
                   f"{'yes' if d.all_low else 'no'} | {len(d.apart.get(NORM.key, []))} | "
                   f"{len(d.apart.get(AUC.key, []))} | {md_escape(widest)} | {w} | {'yes' if d.separates else 'no'} |")
    return out + ["", DISCRIMINATION_NOTE, ""]


# -- aggregates over the games (rliable) ----------------------------------------------------------

BASE_ROW = "magrpo"        # the row whose probability of improvement over every other row is shown
TAUS = [k / 50 for k in range(51)]       # the performance profile's thresholds over [0, 1]


@dataclass
class Aggregates:
    """A FAIR family's methods over its games as the field reports a benchmark (Agarwal et al. 2021,
    magrpo.table.stats): each row's IQM, mean and optimality gap of its runs' normalized scores
    with stratified-bootstrap intervals, the base row's probability of improvement over each, and
    the performance profiles. Rows that did not run every game are left out (`partial`)."""
    family: str
    tasks: list[str]
    labels: list[str]                                  # the rows that ran every game, in the paper's order
    partial: dict[str, int]                            # label -> the games it ran, of a row left out
    scores: dict[str, dict[str, list[float]]]          # label -> game -> its runs' scores in [0, 1]
    minmax: list[str]                                  # games scored min-max over the runs (no norm. return)
    intervals: dict[str, dict[str, Interval]]          # label -> "iqm" / "mean" / "optimality_gap"
    base: str | None                                   # the row compared with every other
    improvement: dict[str, Interval]                   # label -> P(base > label)

    def as_dict(self) -> dict:
        def iv(i: Interval) -> dict[str, float]:
            return {"point": i.point, "low": i.low, "high": i.high}
        return {"family": self.family, "games": self.tasks, "methods": self.labels, "left_out": self.partial,
                "min_max_games": self.minmax, "reps": stats.REPS, "seed": stats.SEED,
                "aggregates": {lab: {k: iv(v) for k, v in d.items()} for lab, d in self.intervals.items()},
                "base": self.base, "probability_of_improvement": {lab: iv(v) for lab, v in self.improvement.items()},
                "scores": self.scores}


def game_scores(t: RenderedTable) -> tuple[dict[str, list[float]], bool]:
    """Each row's runs' scores on one game, in [0, 1]: the final norm. return (0 = nothing paid, 1 = the
    game's optimum: what the table knows of the game's bounds) when every run has it; else min-max of
    the final reward over every run of the game. And whether it was min-max."""
    if all(NORM.key in f for row in t.rows for f in row.finals):
        return {row.label: [f[NORM.key] for f in row.finals] for row in t.rows}, False
    rewards = [f[REWARD.key] for row in t.rows for f in row.finals if REWARD.key in f]
    lo, hi = (min(rewards), max(rewards)) if rewards else (0.0, 0.0)
    return {row.label: [(f[REWARD.key] - lo) / (hi - lo) if hi > lo else 0.0 for f in row.finals if REWARD.key in f]
            for row in t.rows}, True


def aggregates(tables: Sequence[RenderedTable], reps: int = stats.REPS) -> list[Aggregates]:
    """One `Aggregates` per FAIR family with tables here."""
    out = []
    for family in sorted({t.family for t in tables} & FAIR_FAMILIES):
        mine = [t for t in tables if t.family == family]
        per_game: dict[str, dict[str, list[float]]] = {}
        minmax = []
        for t in mine:
            per_game[t.task], scaled = game_scores(t)
            if scaled:
                minmax.append(t.task)
        found: list[str] = []
        for t in mine:
            found += [row.label for row in t.rows if row.label not in found]
        order = sorted(found, key=lambda lab: _row_key(lab, found.index(lab)))
        ran = {lab: [t.task for t in mine if per_game[t.task].get(lab)] for lab in order}
        labels = [lab for lab in order if len(ran[lab]) == len(mine)]
        partial = {lab: len(ran[lab]) for lab in order if lab not in labels}
        scores = {lab: {task: per_game[task][lab] for task in ran[lab]} for lab in labels}
        intervals = {lab: stats.aggregate_intervals(scores[lab], reps) for lab in labels}
        base = BASE_ROW if BASE_ROW in labels else next((lab for t in mine for row in t.rows if not row.eval_only
                                                         for lab in [row.label] if lab in labels), None)
        improvement = {}
        for lab in labels:
            if base is not None and lab != base and (p := stats.probability_of_improvement(scores[base], scores[lab], reps)):
                improvement[lab] = p
        out.append(Aggregates(family, [t.task for t in mine], labels, partial, scores, minmax, intervals, base,
                              improvement))
    return out


AGGREGATE_NOTE = ("Aggregates over the games (Agarwal et al. 2021, \"Deep RL at the Edge of the Statistical Precipice\"; "
                  "the rliable library's estimators): every run's final score on every game, normalized to [0, 1] "
                  "(the norm. return: 0 = nothing paid, 1 = the game's optimum), pooled. IQM = the mean of the middle "
                  "50% of the runs' scores (a quarter cut at each end), robust to a few outlying runs; mean; optimality "
                  "gap = how far the runs fall short of 1 on average (lower is better). P(base > method) = the chance "
                  "a run of the base row scores more than a run of that method on the same game (ties half), averaged "
                  "over the games: 0.5 = neither is better. [low, high]: 95% stratified-bootstrap interval ({reps} "
                  "resamples of each game's runs with replacement, seed {seed}). The performance profile "
                  "(<family>_performance_profile.png): the fraction of a method's runs scoring above each threshold.")


def interval_text(i: Interval | None, digits: int, dash: str = "–") -> str:
    return dash if i is None else f"{i.point:.{digits}f} [{i.low:.{digits}f}, {i.high:.{digits}f}]"


def aggregate_body(a: Aggregates, digits: int, dash: str) -> list[list[str]]:
    """The aggregates' rows: method, runs, IQM, mean, optimality gap, P(base > method)."""
    body = []
    for lab in a.labels:
        iv = a.intervals[lab]
        runs = sum(len(v) for v in a.scores[lab].values())
        poi = "(base)" if lab == a.base else interval_text(a.improvement.get(lab), digits, dash)
        body.append([row_name(lab), str(runs), *(interval_text(iv.get(k), digits, dash) for k in stats.AGGREGATES), poi])
    return body


def aggregate_notes(a: Aggregates) -> list[str]:
    notes = [AGGREGATE_NOTE.format(reps=stats.REPS, seed=stats.SEED)]
    if a.minmax:
        notes.append(f"Scored min-max over the runs of the game (no norm. return for every run): {', '.join(a.minmax)}.")
    if a.partial:
        notes.append("Not aggregated (ran only some of the games): "
                     + ", ".join(f"{row_name(lab)} ({k}/{len(a.tasks)})" for lab, k in a.partial.items()) + ".")
    return notes


def aggregate_lines(aggs: Sequence[Aggregates], digits: int) -> list[str]:
    out = []
    for a in aggs:
        base = row_name(a.base) if a.base else "base"
        out += [f"### {md_escape(a.family)}: aggregates over {len(a.tasks)} games (IQM, mean, optimality gap, "
                "probability of improvement)\n",
                "| " + " | ".join(md_escape(h) for h in ["method", "runs", "IQM", "mean", "optimality gap (lower is better)",
                                                       f"P({base} > method)"]) + " |",
                "|" + "|".join([":---", "---:", "---:", "---:", "---:", "---:"]) + "|"]
        out += ["| " + " | ".join(md_escape(c) for c in cells) + " |" for cells in aggregate_body(a, digits, "–")]
        out += ["", *aggregate_notes(a), ""]
    return out


def plot_performance_profiles(aggs: Sequence[Aggregates], out: Path) -> list[Path]:
    """Per FAIR family, the performance profile of every aggregated row (stats.performance_profile):
    the fraction of its runs scoring above tau against tau in [0, 1], its 95% band shaded."""
    plt = pyplot()
    written = []
    for a in aggs:
        if not a.labels:
            continue
        fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=120)
        for k, lab in enumerate(a.labels):
            profile = stats.performance_profile(a.scores[lab], TAUS)
            if profile is None:
                continue
            point, low, high = profile
            runs = sum(len(v) for v in a.scores[lab].values())
            (line,) = ax.plot(TAUS, point, linewidth=1.6, label=f"{short_label(row_name(lab))} (n={runs})",
                              **line_style(k, len(TAUS)))
            ax.fill_between(TAUS, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        written.append(save_curve_plot(fig, ax, a.family, "performance_profile", "fraction of runs with score > tau",
                                       out, legend_size=7, xlabel="normalized score tau",
                                       spread="95% stratified-bootstrap band", title="performance profile"))
    return written


def rank_text(o: Overview, label: str) -> str:
    if label not in o.mean_rank:
        return ""
    value, k = o.mean_rank[label]
    return f"{value:.2f}" + (f" ({k}/{len(o.tasks)})" if k < len(o.tasks) else "")


def best_mean_rank(o: Overview) -> set[str]:
    """The labels with the lowest mean rank among those that ran every task (none when all tie)."""
    full = [lab for lab in o.labels if lab in o.mean_rank and o.mean_rank[lab][1] == len(o.tasks)]
    best = best_rows([o.mean_rank[lab][0] for lab in full], higher_is_better=False)
    return {full[i] for i in best}


def overview_cells(o: Overview, digits: int, pm: str, dash: str, bold: Callable[[str], str]) -> list[list[str]]:
    """The overview's body: a row per task (norm. return of each method, the best in bold), then
    the rank row."""
    body = []
    for task in o.tasks:
        have = [lab for lab in o.labels if (task, lab) in o.cells]
        best = {have[i] for i in best_rows([o.cells[(task, lab)].mean for lab in have])}
        texts = []
        for lab in o.labels:
            if (task, lab) not in o.cells:
                texts.append(dash)
                continue
            text = cell_text(o.cells[(task, lab)], o.runs[(task, lab)], digits, pm, dash, "ci95")
            texts.append(bold(text) if lab in best else text)
        body.append([task, *texts])
    top = best_mean_rank(o)
    body.append(["mean rank (1 = best)", *(bold(rank_text(o, lab)) if lab in top else rank_text(o, lab) or dash
                                          for lab in o.labels)])
    return body


# -- writers -------------------------------------------------------------------------------------


def heading(col: Column) -> str:
    """A column's header as printed: CodeBLEU carries its floor (the package's score of empty code)."""
    return codebleu_header(col.header) if col.key == "codebleu" else col.header


def shows_codebleu(tables: Sequence[RenderedTable]) -> bool:
    return any(c.key == "codebleu" for t in tables for c in t.columns)


def row_cells(t: RenderedTable, i: int, digits: int, pm: str, dash: str, bold: Callable[[str], str]) -> list[str]:
    """Row i's cells as text (mean ± std or CI, `dash` where empty), those best in their column through `bold`."""
    row = t.rows[i]
    texts = [cell_text(row.cells[c.key], len(row.runs), digits, pm, dash, t.interval) for c in t.columns]
    return [bold(x) if i in t.best.get(c.key, ()) else x for c, x in zip(t.columns, texts)]


def to_markdown(tables: list[RenderedTable], digits: int, notes: Sequence[str] = (),
                aggs: Sequence[Aggregates] | None = None) -> str:
    out = []
    for t in tables:
        family = t.family
        out.append(f"### {md_escape(t.task)}" + (f" ({family})" if family else "") + "\n")
        out.append("| " + " | ".join(md_escape(h) for h in ["method", "n", *(heading(c) for c in t.columns)]) + " |")
        out.append("|" + "|".join([":---", "---:"] + ["---:"] * len(t.columns)) + "|")
        for i, row in enumerate(t.rows):
            cells = row_cells(t, i, digits, "±", "–", lambda text: f"**{text}**")
            out.append("| " + " | ".join([md_escape(row.name), str(len(row.runs)), *(md_escape(x) for x in cells)])
                       + " |")
        out.append("")
        if t.missing:
            out += ["Runs lacking a metric:", ""] + [f"- {m}" for m in t.missing] + [""]
    for o in overviews(tables):
        out.append(f"### {md_escape(o.family)}: norm. return on every task, and each method's mean rank\n")
        out.append("| " + " | ".join(md_escape(h) for h in ["task", *(row_name(lab) for lab in o.labels)]) + " |")
        out.append("|" + "|".join([":---"] + ["---:"] * len(o.labels)) + "|")
        for cells in overview_cells(o, digits, "±", "–", lambda text: f"**{text}**"):
            out.append("| " + " | ".join(md_escape(c) for c in cells) + " |")
        out += ["", RANK_NOTE, ""]
    out += discrimination_lines(tables)
    out += aggregate_lines(aggs if aggs is not None else aggregates(tables), digits)
    std = [t.task for t in tables if t.interval == "std"]
    ci = [t.task for t in tables if t.interval == "ci95"]
    if std and ci:
        cells_note = f"Cells of {', '.join(std)}: {STD_NOTE}. Cells of {', '.join(ci)}: {CI_NOTE}."
    else:
        cells_note = f"Cells: {CI_NOTE if ci else STD_NOTE}."
    out.append(f"{cells_note} {BOLD_NOTE} {NORM_NOTE} Rows marked (prompting) and 'untrained' are "
               "evaluations of the base models; the others are trained.")
    if any(COST in t.columns for t in tables):
        out.append(COST_NOTE)
    budgets = [(t.task, t.budgets[AUC.key]) for t in tables if AUC in t.columns and AUC.key in t.budgets]
    if budgets:
        out.append(AUC_NOTE + " B: " + ", ".join(f"{task} {b:,.0f}" for task, b in budgets) + ".")
    compute = [(col, what, [(t.task, t.budgets[col.key]) for t in tables if col in t.columns and col.key in t.budgets])
               for col, what in ((AUC_WALL, "s"), (AUC_FLOPS, "FLOPs"))]
    if any(b for _, _, b in compute):
        out.append(COMPUTE_NOTE + " " + " ".join(
            f"B ({col.header.split(' (')[0]}): " + ", ".join(f"{task} {budget_text(b)} {what}" for task, b in b) + "."
            for col, what, b in compute if b))
    if shows_codebleu(tables):
        out.append(codebleu_note())
    if any(c in ZSC_COLUMNS for t in tables for c in t.columns):
        out.append(zsc_mod.NOTE)
    out += list(notes)
    return "\n".join(out) + "\n"


def write_csv(tables: list[RenderedTable], path: Path) -> None:
    """One row per (task, method): mean, std and 95% CI half-width per metric key, the columns where
    it is best, and (FAIR_FAMILIES) its rank on the task and mean rank across the family's tasks."""
    keys: list[str] = []
    for t in tables:
        keys += [c.key for c in t.columns if c.key not in keys]
    ranked = {(task, lab): place for o in overviews(tables) for (task, lab), place in o.place.items()}
    mean_ranks = {(o.family, lab): value for o in overviews(tables) for lab, (value, _) in o.mean_rank.items()}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "method", "label", "n", "seeds",
                    *(f"{k}_{s}" for k in keys for s in ("mean", "std", "ci95")), "best_in", "rank", "mean_rank"])
        for t in tables:
            for i, row in enumerate(t.rows):
                values = []
                for k in keys:
                    cell = row.cells.get(k, Cell(None, None, 0))
                    values += ["" if v is None else repr(v) for v in (cell.mean, cell.std, cell.ci95)]
                best = [c.key for c in t.columns if i in t.best.get(c.key, ())]
                place = ranked.get((t.task, row.label))
                mean_rank = mean_ranks.get((t.family, row.label))
                w.writerow([t.task, row.name, row.label, len(row.runs), ";".join(str(r.seed) for r in row.runs),
                            *values, ";".join(best), "" if place is None else repr(place),
                            "" if mean_rank is None else repr(mean_rank)])


def to_latex(tables: list[RenderedTable], digits: int, aggs: Sequence[Aggregates] | None = None) -> str:
    out = [f"% written by {PROG} --layout paper; needs \\usepackage{{booktabs}}"]
    for t in tables:
        ncols = 2 + len(t.columns)
        out += [f"% task: {tex_escape(t.task)}", "\\begin{tabular}{l" + "r" * (ncols - 1) + "}", "\\toprule",
                " & ".join(tex_escape(h) for h in ["method", "n", *(heading(c) for c in t.columns)]) + " \\\\",
                "\\midrule"]
        for i, row in enumerate(t.rows):
            cells = row_cells(t, i, digits, "$\\pm$", "--", lambda text: f"\\textbf{{{text}}}")
            out.append(" & ".join([tex_escape(row.name), str(len(row.runs)), *cells]) + " \\\\")
        note = (TEX_CI_NOTE if t.interval == "ci95" else "Mean $\\pm$ sample std (n-1) over n seeds (n/a: one seed);") \
            + " bold: best in its column."
        if shows_codebleu([t]):
            note += " " + tex_escape(codebleu_note(short=True))
        out += ["\\bottomrule", tex_note_row(ncols, note), "\\end{tabular}", ""]
    for o in overviews(tables):
        ncols = 1 + len(o.labels)
        out += [f"% {tex_escape(o.family)}: norm. return on every task and the mean rank",
                "\\begin{tabular}{l" + "r" * (ncols - 1) + "}", "\\toprule",
                " & ".join(tex_escape(h) for h in ["task", *(row_name(lab) for lab in o.labels)]) + " \\\\",
                "\\midrule"]
        body = overview_cells(o, digits, "$\\pm$", "--", lambda text: f"\\textbf{{{text}}}")
        for j, cells in enumerate(body):
            if j == len(body) - 1:
                out.append("\\midrule")
            out.append(" & ".join([tex_escape(cells[0]), *cells[1:]]) + " \\\\")
        out += ["\\bottomrule", tex_note_row(ncols, "Norm. return, mean $\\pm$ 95\\% CI (n/a: one seed); mean rank over the tasks "
                                                    "(1 = best; (k/m): ran k of m tasks)."), "\\end{tabular}", ""]
    for a in aggs if aggs is not None else aggregates(tables):
        base = row_name(a.base) if a.base else "base"
        out += [f"% {tex_escape(a.family)}: aggregates over the games (rliable)", "\\begin{tabular}{lrrrrr}", "\\toprule",
                " & ".join(tex_escape(h) for h in ["method", "runs", "IQM", "mean", "optimality gap",
                                                   f"P({base} > method)"]) + " \\\\", "\\midrule"]
        out += [" & ".join(tex_escape(c) for c in cells) + " \\\\" for cells in aggregate_body(a, digits, "--")]
        out += ["\\bottomrule", tex_note_row(6, f"Normalized final scores pooled over {len(a.tasks)} games; [low, high]: 95\\% "
                                               f"stratified-bootstrap interval ({stats.REPS} resamples); optimality gap: "
                                               "lower is better."), "\\end{tabular}", ""]
    return "\n".join(out)


# (per-step key, x-axis label, file-name suffix, what the title calls it)
BUDGETS = (("train/completions/tokens", "generated tokens (cumulative)", "tokens", "generated tokens"),
           ("time/step_s", "wall time of the updates (s, cumulative; evaluations excluded)", "wall_time",
            "wall time"),
           ("train/flops", "training FLOPs (cumulative; counted, not timed)", "flops", "training FLOPs"))


def budget_series(row: PaperRow, key: str) -> tuple[list[float], list[float], int]:
    """A trained row's norm. return against a cumulative budget: at each eval step that any seed
    logged, x = the seeds' mean budget spent by then and y = their mean return; and the seeds that
    had the budget logged."""
    points: dict[int, list[tuple[float, float]]] = {}
    used = 0
    for r in row.runs:
        evals = spent_at_evals(r, key)
        used += bool(evals)
        for step, point in evals.items():
            points.setdefault(step, []).append(point)
    steps = sorted(points)
    xs = [sum(x for x, _ in points[s]) / len(points[s]) for s in steps]
    ys = [sum(y for _, y in points[s]) / len(points[s]) for s in steps]
    return xs, ys, used


def plot_budget_curves(tables: list[RenderedTable], out: Path) -> list[Path]:
    """Per task of a FAIR family, two PNGs: norm. return against the cumulative generated tokens
    (`train/completions/tokens`) and against the cumulative update time (`time/step_s`), one line
    per trained row (mean over seeds), evaluation-only rows as dashed levels. What a method reaches
    for what it spent, so a method that spends more per update (DAPO, C3) is seen doing so."""
    plt = pyplot()

    written = []
    for t in tables:
        if t.family not in FAIR_FAMILIES:
            continue
        for key, xlabel, suffix, what in BUDGETS:
            lines = [(row, *budget_series(row, key)) for row in t.rows if not row.eval_only]
            lines = [line for line in lines if line[3]]
            if not lines:
                continue
            fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=120)
            for k, (row, xs, ys, used) in enumerate(lines):
                ax.plot(xs, ys, linewidth=1.6, label=f"{short_label(row.name)} (n={used})", **line_style(k, len(xs)))
            for j, row in enumerate(r for r in t.rows if r.eval_only):
                cell = row.cells.get(NORM.key)
                if cell is not None and cell.mean is not None:
                    ax.axhline(cell.mean, color=line_style(len(lines) + j)["color"], linestyle="--", linewidth=1.2,
                               label=f"{short_label(row.name)} (n={cell.count})")
            written.append(save_curve_plot(fig, ax, t.task, f"{NORM.key}_vs_{suffix}", NORM.header, out,
                                           legend_size=7, xlabel=xlabel, spread="mean over seeds",
                                           title=f"{NORM.header} vs {what}"))
    return written


def plot_curves(tables: list[RenderedTable], out: Path, smooth_window: int = 1) -> list[Path]:
    """One PNG per (task, metric): trained rows as mean over seeds vs step with ± std shaded;
    evaluation-only rows (prompting baselines) as a dashed level with its band. Then the budget
    curves of the FAIR families (plot_budget_curves)."""
    plt = pyplot()

    written = []
    for t in tables:
        metrics = ["train/reward_mean"] + [f"eval/{c.key}" for c in t.columns if not c.trained_only]
        headers = {f"eval/{c.key}": c.header for c in t.columns}
        for metric in metrics:
            lines = [(row, [smooth(r.curves[metric], smooth_window) for r in row.runs if r.curves.get(metric)])
                     for row in t.rows if not row.eval_only]
            lines = [(row, s) for row, s in lines if s]
            levels = [(row, c, level) for row in t.rows if row.eval_only
                      and (c := row.cells.get(metric[len("eval/"):])) is not None and (level := c.mean) is not None]
            if not lines:   # nothing trained logged it: a plot of flat levels says nothing a table does not
                continue
            fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=120)
            x_max = 0
            for k, (row, series) in enumerate(lines):
                steps, means, stds, _ = aggregate(series)
                x_max = max(x_max, steps[-1])
                (line,) = ax.plot(steps, means, linewidth=1.6, label=f"{short_label(row.name)} (n={len(series)})",
                                  **line_style(k, len(steps)))
                ax.fill_between(steps, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                                color=line.get_color(), alpha=0.2, linewidth=0)
            for j, (row, cell, level) in enumerate(levels):   # colours after the trained rows' (axhline does not cycle)
                color = line_style(len(lines) + j)["color"]
                ax.axhline(level, color=color, linestyle="--", linewidth=1.2,
                           label=f"{short_label(row.name)} (n={cell.count})")
                if cell.std:
                    ax.axhspan(level - cell.std, level + cell.std, color=color, alpha=0.08)
            ax.set_xlim(0, max(x_max, 1))
            written.append(save_curve_plot(fig, ax, t.task, metric, headers.get(metric, metric), out, legend_size=7))
    return written + plot_budget_curves(tables, out)


def write(runs: list[Run], skipped: Sequence[tuple[Path, str]], out: Path, digits: int = 3,
          notes: Sequence[str] = (), plots: bool = True, smooth_window: int = 1,
          metrics: Sequence[str] | None = None, extra: Sequence[str] = (),
          zsc: dict[tuple[str, str], zsc_mod.Result] | None = None) -> int:
    """Write table.md, table.csv, table.tex and the curves into `out`; print the markdown."""
    tables = build(runs, metrics, extra, zsc)
    checks = [discrimination(t).as_dict() for t in tables if t.family in FAIR_FAMILIES]
    aggs = aggregates(tables)
    if checks:
        out.mkdir(parents=True, exist_ok=True)
        (out / "discrimination.json").write_text(json.dumps(checks, indent=1) + "\n")
        (out / "aggregates.json").write_text(json.dumps([a.as_dict() for a in aggs], indent=1) + "\n")
    save_and_report(out, to_markdown(tables, digits, notes, aggs), skipped, lambda path: write_csv(tables, path),
                    to_latex(tables, digits, aggs),
                    lambda: plot_curves(tables, out, smooth_window) + plot_performance_profiles(aggs, out) if plots else [],
                    f"{len(runs)} run(s), {sum(len(t.rows) for t in tables)} row(s), {len(tables)} task(s)"
                    + (f"; {len(skipped)} run(s) not in the table" if skipped else ""))
    return 0
