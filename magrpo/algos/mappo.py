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
from magrpo.core.schema import ConfigError
from magrpo.rollout.record import Rollout


@dataclass
class MAPPOConfig(IPPOConfig):
    name: str = "mappo"

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        IPPOConfig.check_node(node, prefix)
        # A centralised value is a function of ONE joint action; under `cross` a sample is part of
        # G^(N-1) of them and its critic would have to pick one.
        if node.joint_mode != "aligned":
            raise ConfigError(f"{prefix}joint_mode={node.joint_mode!r} is not allowed for mappo; choose: aligned")


def joint_context(prompts: list[str], answers: list[str | list[int]], agent: int) -> tuple[str, list[str | list[int]]]:
    """The centralised critic's view of one joint action from agent `agent`'s seat, in two parts:
    every agent's prompt (the same for all G samples of an item: it runs once per item, as the
    actor's prompt does), then the pieces of the other agents' answers and the cue of the agent's
    own answer (its completion follows). An answer is its text, or its token ids when the critic
    shares that agent's tokenizer (read as generated: no re-tokenization, no longer sequence)."""
    tasks = "\n\n".join(f"[Agent {j + 1}] task:\n{p.strip()}" for j, p in enumerate(prompts))
    pieces: list[str | list[int]] = []
    for j, a in enumerate(answers):
        if j != agent:
            pieces += [f"\n\n[Agent {j + 1}] answer:\n", a.strip() if isinstance(a, str) else a]
    return tasks, [*pieces, f"\n\n[Agent {agent + 1}] answer:\n"]


@register_algo("mappo")
class MAPPO(IPPO):
    config_schema = MAPPOConfig
    algo: MAPPOConfig          # its config_schema's instance (checked when built: TeamAlgorithm.reads)
    centralized = True

    def critic_prompts(self, rollout: Rollout, i: int) -> list[tuple[str, list[str | list[int]]]]:
        """One critic input per completion row of agent i: the joint action it is part of (aligned:
        row r is joint action r; in a sequential chain, the first leaf of the sample's subtree)."""
        vocab = self.agents[i].tokenizer.get_vocab()
        same = [a.tokenizer.get_vocab() == vocab for a in self.agents]
        first = [int((rollout.joint[:, i] == s).nonzero()[0]) for s in range(rollout.per_item(i))]
        prompts, completions = rollout.prompts, rollout.completions
        rows = []
        for b in range(rollout.num_items):
            for j0 in first:
                node = b * rollout.num_joint + j0
                answers = []
                for j, text in enumerate(completions[node]):
                    g, r = rollout.samples[j], rollout.row(j, node)
                    answers.append(g.completion_ids[r, :int(g.completion_mask[r].sum())].tolist() if same[j] else text)
                rows.append(joint_context(prompts[node], answers, i))
        return rows
