"""`maporl_qa`: the MAPoRL setting -- agents answer a math word problem, discuss, and a verifier checks.

Turn 1: every agent solves the problem on its own. Later turns (`algo.num_turns` > 1 with
`feedback=discussion`, see conf/experiment/maporl.yaml): each agent reads the other agents'
previous answers and answers again. The reward (reward.py) is the verifier's score of each
agent's answer plus MAPoRL's persuasion / correction / regression incentives; it splits per
agent, so the PPO-family baselines can learn from `algo.reward=individual`.

Any number of agents works (one: the single-agent form). Evaluation reports `accuracy` (share of
right answers over agents), `majority_accuracy` (the majority vote of the agents' answers),
`agreement` (every agent gave the same answer), and per turn under `turn_{t}/` when the run has
several turns.

Data (data.py): a built-in seeded generator of arithmetic word problems offline, GSM8K from the
hub (`task.data.builtin=false`) or a local copy (`task.data.path`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from magrpo.tasks import register_task
from magrpo.tasks.base import Item, Scores, Task
from magrpo.tasks.maporl.data import MaporlTaskConfig, load_items
from magrpo.tasks.maporl.reward import MaporlRewardConfig, maporl_reward

FORMAT = "Reason step by step in a few short lines, then end with a line of the form 'Answer: <number>'."


@register_task("maporl_qa")
class MaporlQATask(Task):
    num_agents = 2
    agent_counts = tuple(range(1, 9))     # a debate of any size: the prompts and the reward take N answers
    splits_reward = True
    primary_metric = "majority_accuracy"
    feedback_kind = "math"
    config_schema = MaporlTaskConfig
    reward_schema = MaporlRewardConfig
    cfg: MaporlTaskConfig
    reward_cfg: MaporlRewardConfig

    def load(self, split: str) -> list[Item]:
        return load_items(self.cfg, split)

    # -- prompts --------------------------------------------------------------------------------------
    def team_prompts(self, item: Item, num_agents: int) -> list[str]:
        return [f"You are agent {i + 1} of a team of {num_agents} solving a math word problem. Solve it on "
                f"your own first; you will discuss with the other agents afterwards.\n\n"
                f"Problem: {item['question']}\n\n{FORMAT}" for i in range(num_agents)]

    def agent_prompts(self, item: Item) -> list[str]:
        return self.prompts(item, self.num_agents)

    def single_prompt(self, item: Item) -> str:
        return f"Solve the math word problem.\n\nProblem: {item['question']}\n\n{FORMAT}"

    def revise_instruction(self, item: Item, agent: int, num_agents: int) -> str:
        return f"Now give your answer to the problem again. {FORMAT}"

    # -- reward ---------------------------------------------------------------------------------------
    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: list[Any]) -> Scores:
        n = len(completions)
        return maporl_reward(completions, cols["question"], cols["answer"],
                             cols.get("turn_history") or [None] * n, self.reward_cfg)

    def individual_rewards(self, scores: Scores, num_agents: int) -> list[list[float]]:
        return [list(s) for s in scores.extras["individual"]]

    # -- metrics --------------------------------------------------------------------------------------
    def metrics(self, items: Sequence[Item], completions: list[list[str]], scores: Scores) -> dict[str, float]:
        if not len(scores):
            return {}
        right = [x for row in scores.extras["agent_correct"] for x in row]
        n = len(scores)
        return {"accuracy": sum(right) / max(len(right), 1),
                "majority_accuracy": sum(scores.extras["majority_correct"]) / n,
                "agreement": sum(scores.extras["agreement"]) / n}


__all__ = ["MaporlQATask", "MaporlRewardConfig", "MaporlTaskConfig"]
