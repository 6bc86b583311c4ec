"""MAPPO: IPPO with a centralised critic per agent (Yu et al., 2022, for LLM teams).

The actors stay decentralised (each sees only its own prompt); each agent's critic reads the whole
joint action -- every agent's prompt and completion in a fixed template, ending with the agent's
own prompt -- and predicts the team return at every token of the agent's completion:
    V_i(s_t) = V_i(prompt_1, answer_1, ..., prompt_N, answer_{-i}, prompt_i, answer_i[:t]).
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


def joint_context(prompts: list[str], answers: list[str], agent: int) -> str:
    """The centralised critic's view of one joint action, from agent `agent`'s seat."""
    parts = [f"[Agent {j + 1}] task:\n{p.strip()}\n[Agent {j + 1}] answer:\n{a.strip()}"
             for j, (p, a) in enumerate(zip(prompts, answers)) if j != agent]
    parts.append(f"[Agent {agent + 1}] task:\n{prompts[agent].strip()}\n[Agent {agent + 1}] answer:\n")
    return "\n\n".join(parts)


@register_algo("mappo")
class MAPPO(IPPO):
    config_schema = MAPPOConfig
    centralized_critic = True

    def critic_prompts(self, rollout: Rollout, i: int) -> list[str]:
        # Aligned joint actions: completion row r of every agent is joint action r.
        return [joint_context(p, a, i) for p, a in zip(rollout.prompts, rollout.completions)]
