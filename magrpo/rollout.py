"""Batched generation for every agent, and the joint actions the team is rewarded for.

One `generate` call per agent samples G completions for every prompt of the batch at once
(`num_return_sequences=G`), so a step costs N generate calls however many items it holds.
Joint actions pair the agents' samples (SPEC §3):
  aligned: joint j = (a_1^j, ..., a_N^j), G per item;
  cross:   the Cartesian product of the agents' samples, G^N per item.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import torch

from magrpo.models import Agent


@dataclass
class Sampling:
    num_generations: int
    max_new_tokens: int
    do_sample: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_prompt_length: int = 1024

    @classmethod
    def from_algo(cls, algo) -> Sampling:
        return cls(num_generations=algo.num_generations, max_new_tokens=algo.max_new_tokens,
                   temperature=algo.temperature, top_p=algo.top_p, top_k=algo.top_k,
                   max_prompt_length=algo.max_prompt_length)


@dataclass
class Generation:
    """One agent's samples: row r of the completions answers prompt r // G."""

    prompt_ids: torch.Tensor        # [n, P] left-padded
    prompt_mask: torch.Tensor       # [n, P]
    completion_ids: torch.Tensor    # [n*G, C] right-padded
    completion_mask: torch.Tensor   # [n*G, C] float, 0 for padding and after the first EOS
    texts: list[str]                # n*G decoded completions
    num_generations: int
    seconds: float

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(-1)

    def prompt_rows(self, rows: slice | torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt ids and mask repeated to align with completion rows."""
        ids = self.prompt_ids.repeat_interleave(self.num_generations, dim=0)
        mask = self.prompt_mask.repeat_interleave(self.num_generations, dim=0)
        return (ids, mask) if rows is None else (ids[rows], mask[rows])


def completion_mask(completion_ids: torch.Tensor, eos_token_ids: list[int]) -> torch.Tensor:
    """1 for every token up to and including the first EOS, 0 after it (padding included)."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos_token_ids, device=completion_ids.device))
    # number of EOS strictly before each position; a token counts only if there is none
    eos_before = is_eos.long().cumsum(-1) - is_eos.long()
    return (eos_before == 0).to(torch.float32)


def eos_ids(agent: Agent) -> list[int]:
    ids = agent.model.generation_config.eos_token_id
    ids = list(ids) if isinstance(ids, (list, tuple)) else ([ids] if ids is not None else [])
    if agent.tokenizer.eos_token_id is not None and agent.tokenizer.eos_token_id not in ids:
        ids.append(agent.tokenizer.eos_token_id)
    return ids


@torch.no_grad()
def generate(agent: Agent, prompts: list[str], sampling: Sampling) -> Generation:
    """Sample `sampling.num_generations` completions for each prompt in ONE generate call."""
    t0 = time.perf_counter()
    tok = agent.tokenizer
    tok.truncation_side = "left"  # keep the end of a long prompt, where the instruction is
    enc = tok([agent.format_prompt(p) for p in prompts], return_tensors="pt", padding=True, truncation=True,
              max_length=sampling.max_prompt_length, add_special_tokens=False).to(agent.device)
    agent.activate()
    model = agent.model
    was_training = model.training
    model.eval()
    kwargs = dict(max_new_tokens=sampling.max_new_tokens, num_return_sequences=sampling.num_generations,
                  pad_token_id=tok.pad_token_id, eos_token_id=eos_ids(agent))
    if sampling.do_sample:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                      top_k=sampling.top_k or None)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    out = model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, **kwargs)
    model.train(was_training)
    completion_ids = out[:, enc.input_ids.shape[1]:]
    mask = completion_mask(completion_ids, eos_ids(agent))
    texts = tok.batch_decode(completion_ids * mask.long() + tok.pad_token_id * (1 - mask.long()),
                             skip_special_tokens=True)
    return Generation(enc.input_ids, enc.attention_mask, completion_ids, mask, texts,
                      sampling.num_generations, time.perf_counter() - t0)


def joint_indices(num_agents: int, num_generations: int, mode: str) -> torch.Tensor:
    """[J, N]: for each joint action of one item, which sample of each agent it uses."""
    G = num_generations
    if mode == "aligned":
        return torch.arange(G).unsqueeze(1).repeat(1, num_agents)
    if mode == "cross":
        return torch.tensor(list(itertools.product(range(G), repeat=num_agents)))
    raise ValueError(f"joint_mode={mode!r}; choose aligned or cross")


def joint_completions(gens: list[Generation], joint: torch.Tensor) -> list[list[str]]:
    """Texts of every joint action, item-major: [n * J][N]."""
    G = gens[0].num_generations
    n = len(gens[0].texts) // G
    return [[g.texts[b * G + int(k)] for g, k in zip(gens, row)] for b in range(n) for row in joint]


def credit(rewards: torch.Tensor, joint: torch.Tensor, agent: int, num_generations: int,
           how: str = "mean") -> torch.Tensor:
    """Per-sample return of one agent, [n, G], from joint rewards [n, J].

    Aligned joints map one-to-one. Under `cross`, sample k of the agent is credited with the
    mean (or sum) of the returns of every joint action that contains it.
    """
    onehot = torch.nn.functional.one_hot(joint[:, agent], num_generations).to(rewards.dtype)  # [J, G]
    total = rewards @ onehot                                                                # [n, G]
    return total / onehot.sum(0) if how == "mean" else total
