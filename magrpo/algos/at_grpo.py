"""AT-GRPO: agent- and turn-wise grouped GRPO (PettingLLMs, Zhao et al., arXiv 2510.11062).

MAGRPO's group is a sibling set: the samples that answer one prompt. AT-GRPO keys its groups by
(item, agent, turn): every sample agent i produced at turn t of one item is compared with the
others, A = R - b({R of the same key}) (`advantage` and `scale` as MAGRPO's). Its tree sampling,
`branch=best`, continues only the best joint action of each sibling set into the next turn:

    turn t: each agent samples G answers from the one state of the item; the team is scored;
    turn t+1: only the highest-reward joint action is expanded (the first of equals).

So each item holds one sibling set per turn, and a candidate that was not continued is compared
with the continued one on its own turn reward: the returns of a set share the continuation of
its expanded node (magrpo.rollout.turns.tree_returns), so A reduces to the turn reward's r_k - b(r).
`branch=all` grows today's full tree, and then a turn's key merges the sibling sets of one item.

A best branch needs a reward, so it acts between turns; inside a sequential team's turn (a chain
with no intermediate reward) every prefix is continued. With one turn AT-GRPO is MAGRPO.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from magrpo.algos.base import StepSpecs, register_algo
from magrpo.algos.magrpo import MAGRPO, MAGRPOConfig
from magrpo.algos.scaffold import Episode
from magrpo.config.run import RunConfig
from magrpo.core.schema import option
from magrpo.models.agents import Agent
from magrpo.tasks import Task


@dataclass
class ATGRPOConfig(MAGRPOConfig):
    name: str = "at_grpo"
    branch: str = option("best", choices=["best", "all"], help="best: continue each sibling set's best node")


@register_algo("at_grpo")
class ATGRPO(MAGRPO):
    config_schema = ATGRPOConfig
    algo: ATGRPOConfig          # its config_schema's instance (checked when built: TeamAlgorithm.reads)

    def __init__(self, cfg: RunConfig, agents: list[Agent], task: Task, specs: StepSpecs | None = None) -> None:
        super().__init__(cfg, agents, task, specs)
        self.turns = replace(self.turns, branch=self.algo.branch)     # its tree sampling (module docstring)

    def group_advantages(self, agent: Agent, ep: Episode, returns: list[torch.Tensor]) -> torch.Tensor:
        """Groups keyed by (item, agent, turn): per turn, by the item each row descends from."""
        return self.item_advantages(agent, ep, returns)
