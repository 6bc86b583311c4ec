"""Critics: learned values for the actor-critic algorithms.

- `ValueHead`: V = w . h + b on a hidden state, zero-initialised (the critic starts at V = 0).
- `CriticModule`: what every critic is to the set-up (its kind and its head).
- `Critic`: per-token values of an agent's completion tokens (IPPO, MAPPO, PPO: GAE over tokens),
  a head on the actor's own backbone or a separate model.
- `TeamCritic`: one separate model for the whole team with a ValueHead per agent: each agent's
  per-token values read from one text of the joint action (MAPPO's `critic_view=joint`).
- `TurnCritic`: one value per agent turn, read from a text (a history h_t, or h_t and an answer
  for a Q critic) at its last token (CoLLM-CC/DC, magrpo/algos/actor_critic.py); a head on a
  policy's backbone or a separate model with its own tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoModel, AutoTokenizer

from magrpo.algos.logprobs import RowBatch, sequence_forward
from magrpo.config.groups import AlgoConfig
from magrpo.core.schema import ConfigError, option
from magrpo.models import hub
from magrpo.models.agents import Agent, resolve_model_path
from magrpo.models.sampler import set_kv_cache, shares_prompt


@dataclass
class CriticConfig(AlgoConfig):
    """`algo.*` keys of every algorithm with a learned critic (the PPO family, iac, maac)."""

    critic: str = option("head", choices=["head", "model"],
                         help="head: on a policy's backbone; model: separate LM")
    critic_model: str = option("builtin:tiny", help="critic=model: the causal LM that carries its value head")
    critic_lr: float | None = option(None, check=lambda v: v is None or v > 0,
                                     allowed="> 0, or null = optimizer.lr",
                                     help="the critic's learning rate")


class ValueHead(torch.nn.Module):
    """V(s_t) = w . h_t + b, zero-initialised so the critic starts at V = 0 and leaves the backbone's
    first gradients to the policy."""

    def __init__(self, hidden: int):
        super().__init__()
        self.v = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.v.weight)
        torch.nn.init.zeros_(self.v.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.v(hidden.float()).squeeze(-1)


def _backbone(critic_model: str, device):
    path = resolve_model_path(critic_model)
    with hub.quiet_bars("transformers"):        # a "Loading weights" bar per critic is noise
        tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).to(device)
    # The body of a causal LM runs its key/value cache, so a critic model runs each distinct prompt
    # once (algo.share_prompt) as the actors do; transformers states that on the causal LM's class.
    lm: Any = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(model.config), None)     # a model class (its stubs say otherwise)
    set_kv_cache(model, lm is not None and lm._supports_default_dynamic_cache())
    return tokenizer, model


class CriticModule(torch.nn.Module):
    """What the set-up (magrpo.algos.scaffold.TeamAlgorithm) knows of every critic: its `kind` (`head`:
    a ValueHead on a policy's backbone, trained in that policy's update; `model`: a separate backbone
    with its own optimizer) and its ValueHead `head`."""

    kind: str
    head: ValueHead


class Critic(CriticModule):
    """Per-token values of one agent's completion tokens.

    `head`: a ValueHead on the agent's own backbone (trained with the actor, LoRA adapter included).
    `model`: a separate backbone (`algo.critic_model`) with its own ValueHead and optimizer; it must
    share the actor's tokenizer, since it scores the actor's own tokens.
    """

    def __init__(self, kind: str, agent: Agent, critic_model: str):
        super().__init__()
        self.kind = kind
        if kind == "head":
            self.backbone = None
            self.head = ValueHead(agent.model.config.hidden_size).to(agent.device)
            return
        tok, self.backbone = _backbone(critic_model, agent.device)
        if tok.get_vocab() != agent.tokenizer.get_vocab():
            raise ConfigError(f"algo.critic_model={critic_model!r} has a different tokenizer than {agent.name}; "
                              f"per-token values need the actor's vocabulary (or use algo.critic=head)")
        self.head = ValueHead(self.backbone.config.hidden_size).to(agent.device)

    def values(self, agent: Agent, rows: RowBatch, share_prompt: bool) -> torch.Tensor:
        """[n, C] values of the states before each completion token, given (prompt, completion) rows."""
        if self.backbone is None:
            agent.activate()
            model, lm = agent.model, True
        else:
            model, lm = self.backbone, False
        share = shares_prompt(model, share_prompt)
        _, hidden = sequence_forward(model, rows.prompt_ids, rows.prompt_mask, rows.completion_ids,
                                     rows.completion_mask, rows.prompt_index, share, with_hidden=True, lm=lm,
                                     logits=False)
        return self.head(hidden)


class TeamCritic(CriticModule):
    """One critic for the whole team (MAPPO's shared views, magrpo/algos/mappo.py): a separate
    backbone (`algo.critic_model`) that reads a joint action's text, and one ValueHead per agent,
    V_i = w_i . h + b_i, on the hidden states before agent i's own tokens. It values every agent's
    tokens as that agent generated them, so it must share every agent's tokenizer. Its own
    optimizer steps it (`critic_lr`); the actors' updates do not touch it.
    """

    device: torch.device

    def __init__(self, agents: list[Agent], critic_model: str):
        super().__init__()
        self.kind = "model"
        self.tokenizer, self.backbone = _backbone(critic_model, agents[0].device)
        vocab = self.tokenizer.get_vocab()
        for agent in agents:
            if agent.tokenizer.get_vocab() != vocab:
                raise ConfigError(f"algo.critic_model={critic_model!r} has a different tokenizer than {agent.name}; "
                                  f"the team's critic values every agent's tokens: choose a model with the agents' "
                                  f"tokenizer (or algo.critic_view=own_last)")
        self.heads = torch.nn.ModuleList(ValueHead(self.backbone.config.hidden_size) for _ in agents)
        self.heads.to(agents[0].device)
        self.device = agents[0].device

    def hidden(self, rows: RowBatch, share_prompt: bool) -> torch.Tensor:
        """[n, T, H] the backbone's last hidden state before each tail token of the rows (the
        state a head reads for that token), each distinct prefix run once when shared."""
        share = shares_prompt(self.backbone, share_prompt)
        _, hidden = sequence_forward(self.backbone, rows.prompt_ids, rows.prompt_mask, rows.completion_ids,
                                     rows.completion_mask, rows.prompt_index, share, with_hidden=True, lm=False,
                                     logits=False)
        return hidden


class TurnCritic(CriticModule):
    """One value per text: V(h) (or Q(h, a) when the text holds the answer too), read by a ValueHead
    at the text's last token.

    `head`: on `agent`'s backbone (it trains with that policy: its loss joins the policy's update);
    `model`: a separate backbone (`algo.critic_model`) with its own tokenizer and optimizer. Texts
    are cut from the left to `max_length` tokens, so the most recent part of a history is kept.
    """

    def __init__(self, kind: str, agent: Agent, critic_model: str, max_length: int):
        super().__init__()
        self.kind, self.max_length = kind, max_length
        if kind == "head":
            self.backbone, self.tokenizer = None, agent.tokenizer
            self.head = ValueHead(agent.model.config.hidden_size).to(agent.device)
        else:
            self.tokenizer, self.backbone = _backbone(critic_model, agent.device)
            if self.tokenizer.pad_token is None:
                self.tokenizer.pad_token = self.tokenizer.eos_token
            self.head = ValueHead(self.backbone.config.hidden_size).to(agent.device)
        self.device = agent.device

    def forward(self, agent: Agent, texts: list[str]) -> torch.Tensor:
        """[len(texts)] values (with gradients where grad mode is on)."""
        tok = self.tokenizer
        side, tok.padding_side, tok.truncation_side = (tok.padding_side, tok.truncation_side), "left", "left"
        try:
            enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_length,
                      add_special_tokens=False)
        finally:
            tok.padding_side, tok.truncation_side = side
        ids, mask = enc.input_ids.to(self.device), enc.attention_mask.to(self.device)
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
        if self.backbone is None:
            agent.activate()
            out = agent.model(input_ids=ids, attention_mask=mask, position_ids=pos, output_hidden_states=True,
                              logits_to_keep=1, use_cache=False)
            hidden = out.hidden_states[-1]
        else:
            hidden = self.backbone(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).last_hidden_state
        return self.head(hidden[:, -1])        # left-padded: the last column is every text's last token
