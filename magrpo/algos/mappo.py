"""MAPPO: IPPO with a centralised critic per agent (Yu et al., 2022, for LLM teams).

The actors stay decentralised (each sees only its own prompt); each agent's critic reads the whole
joint action -- every agent's prompt, then the other agents' answers, then the agent's own
completion -- and predicts the team return at every token of the agent's completion:
    V_i(s_t) = V_i(prompt_1, ..., prompt_N, answer_{-i}, answer_i[:t]).
The prompts are the same for the G samples of an item, so they run once per item (the shared
prompt pass); only the answers are read per sample (ippo.CriticInput).
Everything else (GAE, clipped surrogate and value loss, epochs) is IPPO's (ippo.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magrpo.algos.base import register_algo
from magrpo.algos.ippo import IPPO, IPPOConfig
from magrpo.rollout import Rollout
from magrpo.schema import ConfigError


@dataclass
class MAPPOConfig(IPPOConfig):
    name: str = "mappo"

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        # A centralised value is a function of ONE joint action; under `cross` a sample is part of
        # G^(N-1) of them and its critic would have to pick one.
        if node.joint_mode != "aligned":
            raise ConfigError(f"{prefix}joint_mode={node.joint_mode!r} is not allowed for mappo; choose: aligned")


def joint_context(prompts: list[str], answers: list[str], agent: int) -> tuple[str, str]:
    """The centralised critic's view of one joint action from agent `agent`'s seat, in two parts:
    every agent's prompt (the same for all G samples of an item: it runs once per item, as the
    actor's prompt does), then the other agents' answers and the cue of the agent's own answer
    (its completion follows)."""
    tasks = "\n\n".join(f"[Agent {j + 1}] task:\n{p.strip()}" for j, p in enumerate(prompts))
    others = "".join(f"\n\n[Agent {j + 1}] answer:\n{a.strip()}" for j, a in enumerate(answers) if j != agent)
    return tasks, f"{others}\n\n[Agent {agent + 1}] answer:\n"


@register_algo("mappo")
class MAPPO(IPPO):
    config_schema = MAPPOConfig
    centralized_critic = True

    def critic_prompts(self, rollout: Rollout, i: int) -> list[tuple[str, str]]:
        # Aligned joint actions: completion row r of every agent is joint action r.
        return [joint_context(p, a, i) for p, a in zip(rollout.prompts, rollout.completions)]
