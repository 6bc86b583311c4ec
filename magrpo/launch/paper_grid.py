"""The paper's tables as one grid of recipes x methods, written once: what `magrpo-paper` runs
(magrpo.cli.paper) and how `magrpo-table --layout paper` names and orders the rows (magrpo.table.paper).

A row of a table is one run config, `recipe=<task> method=<row>`:

    conf/recipe/<task>.yaml        the task's shared settings (model, data, sizes, sampling)
    conf/method/<row>.yaml         the row: its algorithm (`override /algo`), its keys, its `label`
    conf/method/family/<family>/<row>.yaml, conf/method/task/<task>/<row>.yaml
                                   the row's keys on some recipes only (taken up by those recipes):
                                   the coordination suite's search spaces (`tune:`), the LLM recipes'
                                   MAAC critic, Dr. MAS's individual reward where the reward splits

"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from magrpo.rollout.record import PROMPTING

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Method:
    name: str       # conf/method/<name>.yaml; also the runs' `label`
    title: str      # the row's name in the paper's tables
    entry: str      # "eval": magrpo-eval (untrained); "train": magrpo-train


# The untrained prompting baselines (magrpo.rollout.record.PROMPTING) are rows of the tables too.
# Feedback modes of the two-turn MAGRPO rows (conf/feedback/<mode>.yaml); `none` is the one-turn row.
FEEDBACK_MODES = ("plain", "diagnostics", "passed", "expert", "discussion")

# Every row of every table, in the paper's row order: prompting baselines, single-model baselines,
# multi-agent baselines, MAGRPO, multi-turn MAGRPO.
METHODS: dict[str, Method] = {m.name: m for m in (
    Method("single", "Single model (prompting)", "eval"),
    Method("naive_concat", "Naive concatenation (prompting)", "eval"),
    Method("sequential", "Sequential (prompting)", "eval"),
    Method("discussion", "One-round discussion (prompting)", "eval"),
    Method("untrained_discussion", "Discussion, untrained", "eval"),
    Method("untrained", "Untrained team", "eval"),
    Method("grpo", "GRPO (single model)", "train"),
    Method("ppo", "PPO (single model)", "train"),
    Method("ippo", "IPPO", "train"),
    Method("ippo_individual", "IPPO, individual reward", "train"),
    Method("mappo", "MAPPO", "train"),
    Method("mappo_joint", "MAPPO, team critic", "train"),
    Method("maac", "MAAC", "train"),
    Method("iac", "IAC", "train"),
    Method("c3", "C3", "train"),
    Method("at_grpo", "AT-GRPO", "train"),
    Method("dr_mas", "Dr. MAS", "train"),
    Method("magrpo", "MAGRPO", "train"),
    Method("gspo", "GSPO (MAGRPO, sequence ratio)", "train"),
    Method("dapo", "DAPO (MAGRPO, dynamic sampling)", "train"),
    *(Method(f"magrpo_2turn_{m}", f"MAGRPO, 2 turns, {m} feedback", "train") for m in FEEDBACK_MODES),
)}


@dataclass(frozen=True)
class TablePlan:
    """One table of the paper: the recipes (tasks) it runs every row on, and its rows (methods)."""
    tasks: tuple[str, ...]
    rows: tuple[str, ...]
    skip: frozenset[tuple[str, str]] = frozenset()   # (task, row) pairs that do not exist
    # False: the recipes are written for the tiny agents already (the coordination suite), so
    # every --scale runs them as they are.
    scaled: bool = True

    def cells(self) -> list[tuple[str, str]]:
        """Every (task, row) of the table."""
        return [(task, row) for task in self.tasks for row in self.rows if (task, row) not in self.skip]


# The suite's games that measure what a credit-assignment method claims (magrpo/tasks/coordination/games.py).
HARDER_GAMES = ("convention", "stag_hunt", "budget_signal", "invest", "crowd")

# The methods added to every table of trained rows besides the paper's own baselines: MAGRPO's GSPO
# and DAPO options, AT-GRPO, Dr. MAS, and the actor-critic baselines MAAC and IAC.
NEWER = ("maac", "iac", "at_grpo", "dr_mas", "gspo", "dapo")

TABLES: dict[str, TablePlan] = {
    "writing": TablePlan(("tldr", "arxiv"), (*PROMPTING, "grpo", "ppo", "ippo", "mappo", "magrpo", *NEWER)),
    "coding": TablePlan(("humaneval", "coophumaneval", "mbpp"),
                        (*PROMPTING, "grpo", "ppo", "ippo", "magrpo", *NEWER,
                         *(f"magrpo_2turn_{m}" for m in FEEDBACK_MODES))),
    "maporl": TablePlan(("maporl_qa",), ("untrained_discussion", "magrpo", "ippo")),
    # The coordination suite (magrpo/tasks/coordination): every method at matched budgets (docs/benchmarks.md).
    # signal's rewards (and budget_signal's) do not split per agent, so they have no individual-reward IPPO;
    # and they are played by a sequential team, which MAAC's centralized critic of the joint state does not allow.
    # C3's counterfactual tree does not fit two turns (invest: 4,160 nodes per item) or 8 agents (crowd: 16.7M)
    # under algo.max_tree_nodes.
    "coordination": TablePlan(("agree", "cover", "signal", *HARDER_GAMES),
                              ("untrained", "magrpo", "ippo", "ippo_individual", "mappo", "mappo_joint", "grpo", *NEWER,
                               "c3"),
                              skip=frozenset({(game, row) for game in ("signal", "budget_signal")
                                              for row in ("ippo_individual", "maac")}
                                             | {("invest", "c3"), ("crowd", "c3")}), scaled=False),
}

# Each task's table (magrpo-table names a task's family by it: its columns, its cells' interval).
FAMILY: dict[str, str] = {task: name for name, t in TABLES.items() for task in t.tasks}


def title(label: str) -> str:
    """A row's name in the paper's tables (its label where the paper has no name for it)."""
    return METHODS[label].title if label in METHODS else label
