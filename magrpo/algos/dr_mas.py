"""Dr. MAS: agent-wise advantage normalization (Feng et al., arXiv 2602.08847).

GRPO on a multi-agent system normalizes every sample of a query by one set of statistics, pooled
over all agents: A = (R - mu) / (sigma + eps). When the agents' rewards have different
distributions (a planner and an executor, or each agent's own share of the reward), that global
baseline is off for every agent and the gradient norm spikes. Dr. MAS normalizes each agent's
samples by that agent's own statistics of the query:

    A_{i,k} = (R_{i,k} - mu_i) / (sigma_i + eps),   mu_i, sigma_i over agent i's samples of the item

(per turn, `normalization=agent`); `normalization=global` pools every agent's samples of the item,
the baseline the paper compares against. The estimator and scale are MAGRPO's keys (defaults:
mean and group, i.e. the formula above).

Where it equals MAGRPO: with the team reward (`reward=team`) in a simultaneous team every agent
of a joint action has the same return, so each agent's statistics over its G samples of an item
are the group's, and dr_mas is MAGRPO with `scale=group`, step for step, whether the policies are
separate or shared (tests/algos/test_dr_mas.py). It differs when the agents' returns differ:
`reward=individual` (each agent's own share, for tasks that split the reward), or a sequential
team, whose later agents' samples of an item span several prefixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from magrpo.algos.advantages import ADVANTAGE_SCALES, keyed_advantages
from magrpo.algos.base import register_algo
from magrpo.algos.keys import RewardKeys
from magrpo.algos.magrpo import MAGRPO, MAGRPOConfig
from magrpo.algos.scaffold import Episode
from magrpo.core.schema import option
from magrpo.models.agents import Agent


@dataclass
class DrMASConfig(MAGRPOConfig, RewardKeys):
    name: str = "dr_mas"
    scale: str = option("group", choices=lambda: sorted(ADVANTAGE_SCALES),
                        help="divide by the agent's own std")
    normalization: str = option("agent", choices=["agent", "global"], help="whose samples give mu and sigma")


@register_algo("dr_mas")
class DrMAS(MAGRPO):
    # annotated: DrMASConfig's constructor takes RewardKeys' key first, so mypy would not take the
    # class where MAGRPO's (inferred, as a constructor) type[MAGRPOConfig] stands
    config_schema: ClassVar[type[DrMASConfig]] = DrMASConfig
    algo: DrMASConfig           # its config_schema's instance (checked when built: TeamAlgorithm.reads)

    def group_advantages(self, agent: Agent, ep: Episode, returns: list[torch.Tensor]) -> torch.Tensor:
        if self.algo.normalization == "global":
            return self.pooled_advantages(ep)[agent.index]
        return self.item_advantages(agent, ep, returns)     # agent i's own samples of an item (per turn)

    def pooled_advantages(self, ep: Episode) -> dict[int, torch.Tensor]:
        """Per agent, [rows] advantages whose statistics pool every agent's samples of an item (per turn)."""
        cached = ep.cache.get("pooled_advantages")
        if cached is not None:
            return cached
        algo = self.algo
        per_agent = {a.index: [R.flatten() for R in self.role_returns(a, ep)] for a in self.agents}
        keys = {a.index: ep.row_items(a.index) for a in self.agents}
        parts: dict[int, list[torch.Tensor]] = {a.index: [] for a in self.agents}
        for t in range(len(ep.levels())):
            pooled = torch.cat([per_agent[i][t] for i in per_agent])
            pooled_keys = torch.cat([keys[i][t] for i in per_agent])
            adv = keyed_advantages(pooled, pooled_keys, algo.advantage, algo.scale)
            for i, chunk in zip(per_agent, adv.split([len(per_agent[i][t]) for i in per_agent])):
                parts[i].append(chunk)
        out = {i: torch.cat(p) for i, p in parts.items()}
        ep.cache["pooled_advantages"] = out
        return out
