"""Rollouts: batched generation for every agent, and the one record that training and evaluation share.

A `Rollout` is one turn of a team on a batch of B items: each agent's samples (`Generation`),
the joint actions that pair them (`joint`, [J, N]), the joint answers' texts, and once scored
their rewards and components. Every algorithm trains on it and every evaluation scheme produces
it, so a metric means the same thing in both. A multi-turn episode is a tree of rollouts: a
node's `children` are the next turn's rollouts grown from its joint actions.

One `generate` call per agent samples G completions for every prompt of the batch at once
(`num_return_sequences=G`), so a step costs N generate calls however many items it holds.
Joint actions pair the agents' samples (paper, Sec. 4):
  aligned: joint j = (a_1^j, ..., a_N^j), G per item;
  cross:   the Cartesian product of the agents' samples, G^N per item.

Evaluation schemes (the untrained prompting baselines of the paper and the trained team) are
named functions in `SCHEMES`, each `(agents, task, items, sampling) -> Rollout`:
  team / naive_concat  every agent answers its own prompt in parallel (what MAGRPO trains); a run
                       with `algo.topology=sequential` evaluates `team` as `sequential`
  single               one model (agent 1's) writes the whole joint answer
  sequential           agent i also sees the answers of agents 1..i-1
  discussion           parallel answers, then one round where each agent sees the others'
                       first answers and answers again; the second answers are the joint answer
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import overload

import torch
from transformers import LogitsProcessorList

from magrpo.config.groups import AlgoConfig, SamplingKeys
from magrpo.core.registry import Registry
from magrpo.models import distributed, flops
from magrpo.models.agents import Agent, transcript
from magrpo.models.sampler import VocabLimitProcessor, sample_shared_prompt, shares_prompt, vocab_limit
from magrpo.tasks import Scores, Task

log = logging.getLogger(__name__)




@dataclass
class Sampling:
    """How one rollout samples: `Sampling.from_algo(cfg.algo)`, or the evaluation's settings."""

    num_generations: int
    max_new_tokens: int
    do_sample: bool = True
    temperature: float = SamplingKeys.temperature
    top_p: float = SamplingKeys.top_p
    top_k: int = SamplingKeys.top_k
    max_prompt_length: int = SamplingKeys.max_prompt_length
    share_prompt: bool = SamplingKeys.share_prompt   # prefill each prompt once, not once per sample (magrpo.models.sampler)
    # what the decoding pass records for the update ("logprobs", "hidden"; magrpo.models.sampler), so that
    # an algorithm that needs the rollout policy's log-probs or a value head's input (the PPO
    # family) skips a forward over the rows; a path that cannot record leaves them None
    record: tuple[str, ...] = ()
    decode_step: str = SamplingKeys.decode_step      # algo.decode_step (magrpo.models.sampler.sample_shared_prompt)

    @classmethod
    def from_algo(cls, algo: AlgoConfig) -> Sampling:
        return cls(num_generations=algo.num_generations, max_new_tokens=algo.max_new_tokens,
                   temperature=algo.temperature, top_p=algo.top_p, top_k=algo.top_k,
                   max_prompt_length=algo.max_prompt_length, share_prompt=algo.share_prompt,
                   decode_step=algo.decode_step)


@dataclass
class Generation:
    """One agent's samples: row r of the completions answers prompt r // num_generations."""

    prompt_ids: torch.Tensor        # [n, P] left-padded
    prompt_mask: torch.Tensor       # [n, P]
    completion_ids: torch.Tensor    # [n*G, C] right-padded
    completion_mask: torch.Tensor   # [n*G, C] float, 0 for padding and after the first EOS
    texts: list[str]                # n*G decoded completions
    num_generations: int
    seconds: float
    prompts: list[str] = field(default_factory=list)   # the n prompt texts (before the chat template)
    # Multi-turn: each prompt's conversation (user, assistant, user, ...); its plain text is `prompts`.
    conversations: list[list[dict[str, str]]] | None = None
    truncated: int = 0                      # prompts cut from the left to max_prompt_length
    logprobs: torch.Tensor | None = None    # [n*G, C] rollout-time log-probs, where an algorithm needs them
    logprobs_temperature: float | None = None   # the temperature `logprobs` were taken at
    hidden: torch.Tensor | None = None      # [n*G, C, H] decoding-time last hidden states (Sampling.record)
    values: torch.Tensor | None = None      # [n*G, C] critic values, where an algorithm has a critic
    sample_seconds: float = 0.0             # of `seconds`, the model's decoding alone (bench phase `generate`)

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(-1)

    def prompt_rows(self, rows: slice | torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt ids and mask repeated to align with completion rows. Of a subset of rows, the
        left-padding columns that none of them uses are dropped (a multi-turn batch holds short
        first-turn prompts next to long later ones; see magrpo.rollout.turns.concat_generations)."""
        ids = self.prompt_ids.repeat_interleave(self.num_generations, dim=0)
        mask = self.prompt_mask.repeat_interleave(self.num_generations, dim=0)
        if rows is None:
            return ids, mask
        ids, mask = ids[rows], mask[rows]
        used = mask.any(0).nonzero()
        start = int(used[0]) if len(used) else 0
        return ids[:, start:], mask[:, start:]


@dataclass
class Rollout:
    """One turn of a team on B items. Joint action j of item b is (sample joint[j, i] of agent i).

    Turn t > 1 of a multi-turn episode (magrpo.rollout.turns) is one Rollout for ALL the nodes expanded at
    turn t - 1 across the batch: its "items" are one group per expanded node (that node's item),
    and `parents[g]` is the node of the previous turn (item-major joint-action index) that group
    g continues. A turn's rollout is its predecessor's only entry in `children`.
    """

    items: list[dict]
    samples: list[Generation]               # per agent; each holds S_i samples per item, item-major
    joint: torch.Tensor                     # [J, N]
    turn: int = 1
    scores: Scores | None = None            # [B*J], item-major
    children: list[Rollout] = field(default_factory=list)   # next turn (multi-turn episodes)
    history: Rollout | None = None          # an earlier round whose answers this one was shown
    parents: torch.Tensor | None = None     # [B] turn > 1: the previous turn's node each group continues

    @property
    def num_items(self) -> int:
        return len(self.items)

    @property
    def num_joint(self) -> int:
        return self.joint.shape[0]

    def per_item(self, agent: int) -> int:
        return len(self.samples[agent].texts) // self.num_items

    def _rows(self, agent: int) -> list[int]:
        S = self.per_item(agent)
        return [b * S + int(k) for b in range(self.num_items) for k in self.joint[:, agent]]

    @property
    def completions(self) -> list[list[str]]:
        """[B*J][N] texts of every joint action, item-major."""
        per_agent = [[g.texts[r] for r in self._rows(i)] for i, g in enumerate(self.samples)]
        return [list(t) for t in zip(*per_agent)]

    @property
    def prompts(self) -> list[list[str]]:
        """[B*J][N] the prompt each agent answered in every joint action."""
        per_agent = []
        for i, g in enumerate(self.samples):
            rows_per_prompt = len(g.texts) // max(len(g.prompts), 1)
            per_agent.append([g.prompts[r // rows_per_prompt] for r in self._rows(i)])
        return [list(t) for t in zip(*per_agent)]

    @property
    def joint_items(self) -> list[dict]:
        return [it for it in self.items for _ in range(self.num_joint)]

    @property
    def scored(self) -> Scores:
        """`scores`, which a rollout has once scored (Rollout.score)."""
        if self.scores is None:
            raise ValueError("score the rollout first (Rollout.score)")
        return self.scores

    @property
    def rewards(self) -> torch.Tensor:
        """[B, J] joint rewards."""
        return torch.tensor(list(self.scored), dtype=torch.float32).view(self.num_items, self.num_joint)

    @property
    def output_tokens(self) -> torch.Tensor:
        """[B*J] output tokens of every joint action (all agents)."""
        per_agent = [g.lengths[self._rows(i)] for i, g in enumerate(self.samples)]
        return torch.stack(per_agent).sum(0)

    @property
    def seconds(self) -> float:
        return sum(g.seconds for g in self.samples)

    def levels(self) -> list[Rollout]:
        """This turn and every later one, in order (one rollout per turn)."""
        out, node = [self], self
        while node.children:
            node = node.children[0]
            out.append(node)
        return out

    def row(self, agent: int, node: int) -> int:
        """Completion row of `agent` in joint action `node` (item-major index into B*J)."""
        b, j = divmod(node, self.num_joint)
        return b * self.per_item(agent) + int(self.joint[j, agent])

    def conversation(self, agent: int, node: int) -> list[dict[str, str]]:
        """The messages `agent` was shown before its answer in joint action `node`."""
        g = self.samples[agent]
        p = self.row(agent, node) // (len(g.texts) // max(len(g.prompts), 1))
        return list(g.conversations[p]) if g.conversations else [{"role": "user", "content": g.prompts[p]}]

    def score(self, task: Task) -> Scores:
        self.scores = task.score(self.joint_items, self.prompts, self.completions)
        return self.scores

    def returns(self, agent: int, how: str = "mean") -> torch.Tensor:
        """[B, G] return of each of `agent`'s samples (see `credit`)."""
        return credit(self.rewards, self.joint, agent, self.per_item(agent), how)


# --- generation ------------------------------------------------------------------------------------


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


_WARNED_TRUNCATION: set[str] = set()


@torch.no_grad()
def generate(agent: Agent, prompts: list[str], sampling: Sampling,
             conversations: list[list[dict[str, str]]] | None = None) -> Generation:
    """Sample `sampling.num_generations` completions for each prompt in ONE batched decoding.

    With `conversations` (multi-turn), each is formatted as a chat in place of its plain prompt."""
    t0 = time.perf_counter()
    if agent.sampling:                      # its own temperature, top_p, max_new_tokens
        sampling = replace(sampling, **agent.sampling)
    tok = agent.tokenizer
    prompt_ids, prompt_mask, truncated = agent.encode_prompts(
        conversations if conversations is not None else prompts, sampling.max_prompt_length)
    if truncated and agent.name not in _WARNED_TRUNCATION:   # once per agent; the metrics count every one
        _WARNED_TRUNCATION.add(agent.name)
        log.warning("%d prompt(s) of %s are longer than algo.max_prompt_length=%d tokens; their beginning "
                    "is cut off (counted in train/prompt_truncated)", truncated, agent.name,
                    sampling.max_prompt_length)
    agent.activate()
    model = agent.model
    was_training = model.training
    model.eval()
    eos = eos_ids(agent)
    t_sample = time.perf_counter()
    record = dict.fromkeys(sampling.record)
    with distributed.full_weights(model):       # a sharded (fsdp) model gathers its weights once
        completion_ids = _sample(model, prompt_ids, prompt_mask, sampling, eos, tok.pad_token_id, record)
    sample_seconds = time.perf_counter() - t_sample
    model.train(was_training)
    mask = completion_mask(completion_ids, eos)
    texts = tok.batch_decode(completion_ids.masked_fill(mask == 0, tok.pad_token_id), skip_special_tokens=True)
    return Generation(prompt_ids, prompt_mask, completion_ids, mask, texts, sampling.num_generations,
                      time.perf_counter() - t0, prompts=list(prompts), conversations=conversations,
                      truncated=truncated, sample_seconds=sample_seconds, logprobs=record.get("logprobs"),
                      logprobs_temperature=sampling.temperature if record.get("logprobs") is not None else None,
                      hidden=record.get("hidden"))


def _sample(model, prompt_ids, prompt_mask, sampling: Sampling, eos: list[int], pad_id: int,
            record: dict | None = None) -> torch.Tensor:
    """[n*G, C] completion ids: each prompt prefilled once (magrpo.models.sampler), or `model.generate`
    (which records nothing in `record`)."""
    if shares_prompt(model, sampling.share_prompt):
        out = sample_shared_prompt(model, prompt_ids, prompt_mask, sampling.num_generations, sampling.max_new_tokens,
                                   eos, pad_id, sampling.do_sample, sampling.temperature, sampling.top_k,
                                   sampling.top_p, record=record, decode_step=sampling.decode_step)
        if out is not None:
            if flops.active():      # each distinct prompt prefilled once, then every sample's tokens
                flops.add_generation(model, prompt_mask.sum().item(), completion_mask(out, eos).sum().item())
            return out
    kwargs = dict(max_new_tokens=sampling.max_new_tokens, num_return_sequences=sampling.num_generations,
                  pad_token_id=pad_id, eos_token_id=eos)
    if sampling.do_sample:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                      top_k=sampling.top_k)   # 0 = off, as in the shared sampler (None = the model's default)
    else:   # greedy: every sample of a prompt is the same, so decode it once
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None, num_return_sequences=1)
    limit = vocab_limit(model)
    vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else None
    if limit is not None and vocab is not None and limit < vocab:   # ids past the tokenizer are no tokens
        kwargs["logits_processor"] = LogitsProcessorList([VocabLimitProcessor(limit)])
    out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, **kwargs)[:, prompt_ids.shape[1]:]
    if flops.active():              # generate copies each prompt once per returned sequence
        flops.add_generation(model, prompt_mask.sum().item() * kwargs["num_return_sequences"],
                             completion_mask(out, eos).sum().item())
    return out if sampling.do_sample else out.repeat_interleave(sampling.num_generations, dim=0)


# --- joint actions and credit ----------------------------------------------------------------------


def joint_indices(num_agents: int, num_generations: int, mode: str) -> torch.Tensor:
    """[J, N]: for each joint action of one item, which sample of each agent it uses."""
    G = num_generations
    if mode == "aligned":
        return torch.arange(G).unsqueeze(1).repeat(1, num_agents)
    if mode == "cross":
        return torch.tensor(list(itertools.product(range(G), repeat=num_agents)))
    raise ValueError(f"joint_mode={mode!r}; choose aligned or cross")


def credit(rewards: torch.Tensor, joint: torch.Tensor, agent: int, num_generations: int,
           how: str = "mean") -> torch.Tensor:
    """Per-sample return of one agent, [n, G], from joint rewards [n, J].

    Aligned joints map one-to-one. Under `cross`, sample k of the agent is credited with the
    mean (or sum) of the returns of every joint action that contains it.
    """
    onehot = torch.nn.functional.one_hot(joint[:, agent], num_generations).to(rewards.dtype)  # [J, G]
    total = rewards @ onehot                                                                # [n, G]
    return total / onehot.sum(0) if how == "mean" else total


# --- schemes: how a team produces its joint answer -------------------------------------------------

Scheme = Callable[[list[Agent], Task, list[dict], Sampling], Rollout]
SCHEMES: Registry[Scheme] = Registry("evaluation scheme", "methods")
# The untrained prompting baselines: what `magrpo-eval` runs when no checkpoint is given, and rows of
# the paper's tables (magrpo.launch.paper_grid); each is a scheme registered below.
PROMPTING = ("single", "naive_concat", "sequential", "discussion")
BASELINES = list(PROMPTING)


def register_scheme(*names: str) -> Callable[[Scheme], Scheme]:
    def deco(fn: Scheme) -> Scheme:
        for name in names:
            SCHEMES.register(name, fn)
        return fn

    return deco


def team_budget(sampling: Sampling, task: Task, num_agents: int) -> Sampling:
    """One model writing a team task's whole joint answer (grpo, ppo, the `single` baseline) may
    generate the tokens of the whole team, `max_new_tokens` x the task's agents, so every
    algorithm spends the same generated tokens per update (docs/algorithms/index.md)."""
    team = getattr(task, "num_agents", 1) or 1
    if num_agents == 1 and team > 1:
        return replace(sampling, max_new_tokens=sampling.max_new_tokens * team)
    return sampling


def team_rollout(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling,
                 joint_mode: str = "aligned", topology: str = "simultaneous",
                 branching: list[int] | None = None) -> Rollout:
    """One turn of the team. Simultaneous: every agent samples G answers to its own prompt and joint
    actions pair them (`joint_mode`). Sequential: a chain (`chain_generations`)."""
    N = len(agents)
    sampling = team_budget(sampling, task, N)
    prompts = [task.prompts(item, N) for item in items]                                # [B][N]
    if topology == "sequential" and N > 1:
        levels = chain_branching(N, sampling.num_generations, branching)
        gens = chain_generations(agents, task, items, prompts, sampling, levels)
        return Rollout(list(items), gens, chain_joint(levels))
    gens = [generate(agent, [p[i] for p in prompts], sampling) for i, agent in enumerate(agents)]
    return Rollout(list(items), gens, joint_indices(N, sampling.num_generations, joint_mode))


# --- sequential teams: a chain within the turn ------------------------------------------------------
#
# Agent 1 samples G_1 answers per item; each is a prefix from which agent 2 samples G_2 answers,
# seeing agent 1's; and so on: a sampling tree of depth N whose leaves are the joint actions
# (prod_i G_i per item). Agent i's samples of one item are the S_i = G_1...G_i nodes of level i, in
# order, so sample s of agent i continues sample s // G_i of agent i - 1: its group (the siblings
# that share one prefix) is a run of G_i consecutive samples.


def chain_branching(num_agents: int, num_generations: int, branching: list[int] | None) -> list[int]:
    """G_i of every level: `algo.branching`, or `num_generations` at each."""
    return list(branching) if branching else [num_generations] * num_agents


def chain_joint(levels: list[int]) -> torch.Tensor:
    """[prod G, N]: leaf l of the chain uses sample l // (G_{i+1}...G_N) of agent i."""
    J = math.prod(levels)
    after = [math.prod(levels[i + 1:]) for i in range(len(levels))]
    return torch.tensor([[leaf // a for a in after] for leaf in range(J)], dtype=torch.long).view(J, len(levels))


def with_context(base: str | list[dict[str, str]], extend: Callable[[str], str]) -> str | list[dict[str, str]]:
    """A prompt, or a conversation whose last user message, extended by `extend`."""
    if isinstance(base, str):
        return extend(base)
    return [*base[:-1], {**base[-1], "content": extend(base[-1]["content"])}]


@overload
def chain_prompt(task: Task, item: dict, agent: int, base: str, others: dict[int, str]) -> str: ...


@overload
def chain_prompt(task: Task, item: dict, agent: int, base: list[dict[str, str]],
                 others: dict[int, str]) -> list[dict[str, str]]: ...


def chain_prompt(task: Task, item: dict, agent: int, base: str | list[dict[str, str]],
                 others: dict[int, str]) -> str | list[dict[str, str]]:
    """Agent `agent`'s prompt (or conversation) in a chain, shown the answers `others` of the
    agents before it (`Task.context_prompt`); the base prompt itself when there are none."""
    if not others:
        return base
    return with_context(base, functools.partial(task.context_prompt, item, agent, own=None, others=others))


def chain_generations(agents: list[Agent], task: Task, items: list[dict], bases: list[list],
                      sampling: Sampling, levels: list[int], fixed: list[Generation] | None = None) -> list[Generation]:
    """Per agent, its samples down a chain: agent i answers every prefix of agents 1..i-1 (its
    prompt extended with their answers by `Task.context_prompt`), `levels[i]` times each.
    `bases[b][i]`: agent i's prompt (a string) or conversation (multi-turn) for group b.
    `fixed`: the samples of the first agents, given rather than generated (a chain re-run from
    agent len(fixed) on, as the influence diagnostic does: magrpo.evaluation.collaboration)."""
    gens: list[Generation] = list(fixed or [])
    for i, agent in enumerate(agents):
        if i < len(gens):
            continue
        # The prefixes agent i answers are the leaves of the chain of agents 1..i-1: their
        # ancestor samples, one row per prefix (the same map as the joint actions').
        ancestors = chain_joint(levels[:i]).tolist()    # [prefixes per group][i]
        contexts = []
        for b, item in enumerate(items):
            for row in ancestors:
                others = {j: gens[j].texts[b * math.prod(levels[:j + 1]) + k] for j, k in enumerate(row)}
                contexts.append(chain_prompt(task, item, i, bases[b][i], others))
        conversations = [c for c in contexts if not isinstance(c, str)]    # multi-turn: every base is one
        convs = conversations if conversations and len(conversations) == len(contexts) else None
        prompts = [c if isinstance(c, str) else transcript(c) for c in contexts]
        gens.append(generate(agent, prompts, replace(sampling, num_generations=levels[i]), convs))
    return gens


@register_scheme("team", "naive_concat")
def _parallel(agents, task, items, sampling) -> Rollout:
    return team_rollout(agents, task, items, sampling)


@register_scheme("single")
def _single(agents, task, items, sampling) -> Rollout:
    return team_rollout(agents[:1], task, items, sampling)


@register_scheme("sequential")
def _sequential(agents, task, items, sampling) -> Rollout:
    """Agent 1 samples S answers per item; agent i>1 answers once per sample, seeing answers 1..i-1:
    the chain sequential training samples (`algo.topology=sequential`), with branching S, 1, ..., 1."""
    N = len(agents)
    return team_rollout(agents, task, items, sampling, topology="sequential",
                        branching=[sampling.num_generations] + [1] * (N - 1))


@register_scheme("discussion")
def _discussion(agents, task, items, sampling) -> Rollout:
    """One MAPoRL-style round: each agent revises its answer after seeing the others' answers.

    The first round is the returned rollout's `history`, so its cost is counted too.
    """
    N, S = len(agents), sampling.num_generations
    first = team_rollout(agents, task, items, sampling)
    answers, prompts = first.completions, first.prompts
    one = replace(sampling, num_generations=1)
    gens = []
    for i, agent in enumerate(agents):
        ctx = [task.context_prompt(items[r // S], i, prompts[r][i], answers[r][i],
                                   {j: a for j, a in enumerate(answers[r]) if j != i})
               for r in range(len(items) * S)]
        gens.append(generate(agent, ctx, one))
    return Rollout(list(items), gens, joint_indices(N, S, "aligned"), turn=2, history=first)


def rollout_cost(rollout: Rollout) -> tuple[float, torch.Tensor]:
    """Generation seconds and output tokens per joint action, including earlier rounds."""
    seconds, tokens = rollout.seconds, rollout.output_tokens
    prev = rollout.history
    while prev is not None:
        seconds, tokens = seconds + prev.seconds, tokens + prev.output_tokens
        prev = prev.history
    return seconds, tokens
