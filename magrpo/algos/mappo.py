"""MAPPO: IPPO with a centralised critic (Yu et al., "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games", arXiv 2103.01955), for LLM teams.

The actors stay decentralised (each sees only its own prompt, pi_i(a_i,t | o_i, a_i,<t)); the
critic reads the joint action and predicts the team return at every token of each agent's
completion. `algo.critic_view` says what it reads:

  own_last (the default): each agent has its own critic (a head on its own backbone, or with
    `algo.critic=model` a model of its own) that reads every agent's prompt, then the other
    agents' answers, then its own completion, once per completion row:

        V_i(s_t) = V_i(prompt_1, ..., prompt_N, answer_{-i}, answer_i[:t]).

    N critic texts per joint action, each through another backbone.

  joint: the paper's critic, one for the team: ONE separate model (`algo.critic=model`,
    `algo.critic_model`) reads each joint action's text once, every agent's prompt and then every
    answer in agent order, and one value head per agent reads agent i's values at the positions
    of its own answer (the paper shares one critic network between the agents, separate from the
    actors, and gives it an agent-specific input; here the agent is the head and the positions):

        V_i(s_t) = w_i . h(prompt_1, ..., prompt_N, answer_1, ..., answer_{i-1}, answer_i[:t]) + b_i.

    The backbone is causal, so the state before agent i's token t has read every prompt, the
    answers of the agents before i and agent i's first t tokens, and not the answers of the
    agents after i: agent 1's values do not see agent 2's answer, agent N's see every other one.
    In a sequential chain (`algo.topology=sequential`) agent j's prompt holds the answers of
    agents 1..j-1, so each prompt stands just before its own agent's answer instead
    ([prompt_1][answer_1][prompt_2][answer_2]...): no value reads its own agent's later tokens
    inside a later prompt. One critic text per joint action: 1/N of own_last's.

  others_first: the same team critic (one model, a head per agent) reads, for each agent, the
    own_last text: every other answer first, then the agent's own,

        V_i(s_t) = w_i . h(prompt_1, ..., prompt_N, answer_{-i}, answer_i[:t]) + b_i,

    so every value sees every other answer; N texts per joint action, their prompts run once per
    item. In a chain, a later agent's prompt holds an earlier agent's answer, so in this view and
    in own_last an earlier agent's values read its own whole answer there.

The prompts are the same for the G samples of an item, so they run once per item (the shared
prompt pass); only the answers are read per text (ippo.CriticInput).

With the team critic (joint, others_first) the actors' PPO epochs minimise the clipped surrogate
and the entropy bonus alone, and the critic trains apart on the same rollout: `ppo_epochs` passes
over `num_mini_batches` mini-batches of its texts, one step of its own optimizer each, minimising

    vf_coef * agg over every agent's tokens in the mini-batch of
        0.5 * max((V_i - R_i)^2, (V_old,i + clip(V_i - V_old,i, +-c) - R_i)^2),

with `loss_agg` as the average (the paper's shared critic learns from every agent's samples
together). Its mini-batches hold whole items, shuffled, so each item's prompts (every agent's: the
larger part of a text on the 8-agent `crowd`) run once per pass rather than once per mini-batch;
the actors keep IPPO's shuffled rows. GAE, the surrogate, the epochs and the advantages are
IPPO's (ippo.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from magrpo.algos.aggregation import LOSS_AGG, AggContext
from magrpo.algos.base import StepInput, register_algo
from magrpo.algos.critics import Critic, TeamCritic
from magrpo.algos.ippo import IPPO, Batch, CriticInput, IPPOConfig
from magrpo.algos.losses import clipped_value_loss
from magrpo.algos.optim import clip_and_step
from magrpo.algos.scaffold import CriticParts, Episode
from magrpo.algos.step_metrics import update_phase
from magrpo.core.schema import ConfigError, option
from magrpo.rollout.record import Rollout

CRITIC_VIEWS = ("own_last", "joint", "others_first")


@dataclass
class MAPPOConfig(IPPOConfig):
    name: str = "mappo"
    critic_view: str = option("own_last", choices=list(CRITIC_VIEWS), help=(
        "what the centralised critic reads: own_last = a critic per agent, every prompt and the other "
        "answers, its own answer last; joint = one critic model for the team reads each joint action "
        "once, a value head per agent; others_first = that critic, each agent's answer last (N texts "
        "per joint action)"))

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        IPPOConfig.check_node(node, prefix)
        # A centralised value is a function of ONE joint action; under `cross` a sample is part of
        # G^(N-1) of them and its critic would have to pick one.
        if node.joint_mode != "aligned":
            raise ConfigError(f"{prefix}joint_mode={node.joint_mode!r} is not allowed for mappo; choose: aligned")
        if node.critic_view != "own_last" and node.critic != "model":
            raise ConfigError(f"{prefix}critic={node.critic!r} is not allowed with {prefix}critic_view="
                              f"{node.critic_view}; choose: model (the team's one critic is a model of its own, "
                              f"{prefix}critic_model)")


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


def joint_text(prompts: list[str], answers: list[str | list[int]], chain: bool = False,
               last: int | None = None) -> tuple[str, list[str | list[int]], list[int]]:
    """The team critic's text of one joint action: (the prefix an item's samples share, the pieces
    after it, the index in the pieces of each agent's answer). Every prompt, then every answer,
    each after a short mark of its agent (`\n[j] `; the prompts keep own_last's headers): in agent
    order, or with agent `last`'s answer last (others_first). In a `chain` (agent j's prompt holds
    the answers before it) each prompt stands just before its own agent's answer instead."""
    def task(j: int) -> str:
        return f"[Agent {j + 1}] task:\n{prompts[j].strip()}"

    chain = chain and last is None
    order = [j for j in range(len(answers)) if j != last] + ([] if last is None else [last])
    prefix = task(0) if chain else "\n\n".join(task(j) for j in range(len(prompts)))
    pieces: list[str | list[int]] = []
    where = [0] * len(answers)
    for j in order:
        if chain and j > 0:
            pieces.append(f"\n\n{task(j)}")
        pieces.append(f"\n[{j + 1}] ")
        where[j] = len(pieces)
        a = answers[j]
        pieces.append(a.strip() if isinstance(a, str) else a)
    return prefix, pieces, where


def answers(rollout: Rollout, node: int, ids: list[bool]) -> list[str | list[int]]:
    """Every agent's answer in joint action `node`: its token ids as generated where `ids[j]` (the
    reader shares agent j's tokenizer), else its text."""
    out: list[str | list[int]] = []
    for j, gen in enumerate(rollout.samples):
        r = rollout.row(j, node)
        out.append(gen.completion_ids[r, :int(gen.completion_mask[r].sum())].tolist() if ids[j] else gen.texts[r])
    return out


@dataclass
class TeamReads:
    """What the team critic reads in one step: its texts (one row each, the prompts shared per
    item) and, for each policy's completion rows (in its batch's order), the text its values are
    read in, where its answer starts in that text's tail, and whose head reads them."""

    text: CriticInput                                    # the critic's rows (`offset` unused)
    row: dict[int, torch.Tensor] = field(default_factory=dict)     # policy -> [n_p] critic row
    start: dict[int, torch.Tensor] = field(default_factory=dict)   # policy -> [n_p] answer's start in the tail
    head: dict[int, torch.Tensor] = field(default_factory=dict)    # policy -> [n_p] agent (value head)

    @property
    def num_rows(self) -> int:
        return self.text.index.shape[0]


def team_values(critic: TeamCritic, reads: TeamReads, rows: torch.Tensor, widths: dict[int, int],
                share_prompt: bool) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """One forward of the critic texts `rows`; per policy p, (which of its completion rows are
    read in them [k], their values [k, widths[p]]): head i on the hidden state before each of
    agent i's answer tokens."""
    batch, _ = reads.text.rows(rows, critic.device)
    hidden = critic.hidden(batch, share_prompt)                               # [m, T, H]
    local = torch.full((reads.num_rows,), -1, dtype=torch.long)
    local[rows] = torch.arange(len(rows))
    out = {}
    for p, crow in reads.row.items():
        sel = (local[crow] >= 0).nonzero().squeeze(1)
        if not len(sel):
            continue
        at = (reads.start[p][sel].unsqueeze(1) + torch.arange(widths[p])).clamp(max=hidden.shape[1] - 1)
        h = hidden[local[crow[sel]].unsqueeze(1).to(hidden.device), at.to(hidden.device)]   # [k, C, H]
        heads = reads.head[p][sel]
        order, parts = [], []
        for a in heads.unique().tolist():
            idx = (heads == a).nonzero().squeeze(1)
            order.append(idx)
            parts.append(critic.heads[a](h[idx.to(h.device)]))
        out[p] = (sel, torch.cat(parts)[torch.argsort(torch.cat(order)).to(h.device)])
    return out


@register_algo("mappo")
class MAPPO(IPPO):
    config_schema = MAPPOConfig
    algo: MAPPOConfig          # its config_schema's instance (checked when built: TeamAlgorithm.reads)
    centralized = True

    @property
    def team_critic(self) -> bool:
        """Whether one critic serves the team (critic_view joint or others_first)."""
        return self.algo.critic_view != "own_last"

    def build_critics(self) -> list[CriticParts]:
        if not self.team_critic:
            return super().build_critics()
        algo = self.algo
        return [self.critic_parts(TeamCritic(self.agents, algo.critic_model), self.policies[0], algo.critic_lr)]

    def policy_critic(self, policy: int) -> Critic | None:
        return None if self.team_critic else super().policy_critic(policy)

    def the_team_critic(self) -> TeamCritic:
        """The team's one critic (critic_view joint or others_first), as build_critics built it."""
        critic = self.critics[0]
        if not isinstance(critic, TeamCritic):
            raise TypeError(f"{type(self).__name__}: the team critic is a {type(critic).__name__}, not a TeamCritic")
        return critic

    def critic_prompts(self, rollout: Rollout, i: int) -> list[tuple[str, list[str | list[int]]]]:
        """own_last: one critic input per completion row of agent i: the joint action it is part of
        (aligned: row r is joint action r; in a sequential chain, the first leaf of the sample's subtree)."""
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

    # -- the team critic (critic_view joint / others_first) ---------------------------------------------
    def team_reads(self, ep: Episode) -> TeamReads:
        """The team critic's texts of a step and where each trained completion row is read: under
        `joint` one text per joint action that is some sample's (its first leaf in a chain), under
        `others_first` one per (joint action, agent)."""
        critic = self.the_team_critic()
        vocab = critic.tokenizer.get_vocab()
        players = self.players(ep.seat)
        # a team member's tokens are read as generated; a seated partner's with another tokenizer as text
        same = [p is a or p.tokenizer.get_vocab() == vocab for p, a in zip(players, self.agents)]
        trained = [a.index for p in range(len(self.roles)) for a in self.trained_roles(p, ep.seat)]
        texts: list[tuple[str, list[str | list[int]]]] = []
        pieces_at: dict[int, list[tuple[int, int]]] = {a: [] for a in trained}   # per row: (text, piece)
        chain = self.turns.topology == "sequential"
        for lv in ep.levels():
            prompts = lv.prompts
            first = {a: [int((lv.joint[:, a] == s).nonzero()[0]) for s in range(lv.per_item(a))] for a in trained}

            for b in range(lv.num_items):
                if self.algo.critic_view == "joint":      # one text per joint action, read by every agent
                    read: dict[int, tuple[int, list[int]]] = {}
                    for j0 in sorted({j for a in trained for j in first[a]}):
                        node = b * lv.num_joint + j0
                        prefix, pieces, where = joint_text(prompts[node], answers(lv, node, same), chain)
                        read[j0] = (len(texts), where)
                        texts.append((prefix, pieces))
                    for a in trained:
                        pieces_at[a] += [(read[j0][0], read[j0][1][a]) for j0 in first[a]]
                else:                                     # others_first: a text per agent, its answer last
                    for a in trained:
                        for j0 in first[a]:
                            node = b * lv.num_joint + j0
                            prefix, pieces, where = joint_text(prompts[node], answers(lv, node, same), last=a)
                            pieces_at[a].append((len(texts), where[a]))
                            texts.append((prefix, pieces))
        inputs, starts = CriticInput.of_pieces(critic.tokenizer, texts, self.algo.max_prompt_length * len(self.agents))
        reads = TeamReads(inputs)
        for p in range(len(self.roles)):
            roles = [a.index for a in self.trained_roles(p, ep.seat)]
            if not roles:
                continue
            at = [x for a in roles for x in pieces_at[a]]
            reads.row[p] = torch.tensor([c for c, _ in at], dtype=torch.long)
            reads.start[p] = torch.tensor([starts[c][k] for c, k in at], dtype=torch.long)
            reads.head[p] = torch.tensor([a for a in roles for _ in pieces_at[a]], dtype=torch.long)
        return reads

    @update_phase
    @torch.no_grad()
    def _team_values(self, reads: TeamReads, widths: dict[int, int]) -> dict[int, torch.Tensor]:
        """Per policy, [rows, C] the rollout values of its completion rows under the team critic."""
        critic = self.the_team_critic()
        values = {p: torch.zeros(len(crow), widths[p], device=critic.device) for p, crow in reads.row.items()}
        for rows in torch.arange(reads.num_rows).split(self.algo.micro_batch_size):
            for p, (sel, v) in team_values(critic, reads, rows, widths, self.algo.share_prompt).items():
                values[p][sel.to(v.device)] = v
        return values

    @update_phase
    def _update_critic(self, reads: TeamReads, batches: dict[int, Batch]) -> tuple[dict[str, float], dict[int, dict]]:
        """`ppo_epochs` passes over `num_mini_batches` mini-batches of the critic's texts (whole
        items, shuffled: each item's prompts run once a pass), one step of its optimizer each, on the
        clipped value loss of every agent's tokens read in them (the module docstring); the critic's
        metrics, and each policy's share of the value loss and its clipping (token means over the
        passes)."""
        algo, critic = self.algo, self.the_team_critic()
        copt, csch = self.critic_optimizers[0], self.critic_schedulers[0]
        aggregate = LOSS_AGG[algo.loss_agg]
        widths = {p: b.mask.shape[1] for p, b in batches.items()}
        dev = critic.device
        target = {p: (b.mask.to(dev), b.old_values.to(dev), b.returns.to(dev)) for p, b in batches.items()}
        n, items = reads.num_rows, reads.text.prefix_ids.shape[0]
        passes = algo.ppo_epochs * algo.num_mini_batches
        sums = dict.fromkeys(("value_loss", "value_clip_frac", "grad_norm"), 0.0)
        own = {p: [0.0, 0.0, 0.0] for p in batches}          # per policy: value-loss sum, clipped, tokens
        for _ in range(algo.ppo_epochs):
            # exactly num_mini_batches parts, the same count on every data-parallel rank
            for part in torch.randperm(items).tensor_split(algo.num_mini_batches):
                idx = torch.isin(reads.text.index, part).nonzero().squeeze(1)     # whole items
                copt.zero_grad(set_to_none=True)
                inside = torch.zeros(n, dtype=torch.bool)
                inside[idx] = True
                C = max(widths.values())
                masks = [torch.nn.functional.pad(target[p][0][inside[crow].to(dev)], (0, C - widths[p]))
                         for p, crow in reads.row.items()]
                ctx = AggContext.of(torch.cat(masks), algo.max_new_tokens)
                n_tok = max(ctx.num_tokens, 1)
                for rows in idx.split(algo.micro_batch_size):
                    loss = torch.zeros((), device=dev)
                    for p, (sel, v) in team_values(critic, reads, rows, widths, algo.share_prompt).items():
                        m, old, ret = (t[sel.to(dev)] for t in target[p])
                        vl, vclipped = clipped_value_loss(v, old, ret, algo.cliprange_value)
                        loss = loss + aggregate(algo.vf_coef * vl, m, ctx)
                        sums["value_loss"] += aggregate(vl.detach(), m, ctx).item() / passes
                        sums["value_clip_frac"] += ((vclipped * m).sum() / n_tok).item() / passes
                        own[p][0] += (vl.detach() * m).sum().item()
                        own[p][1] += (vclipped * m).sum().item()
                        own[p][2] += m.sum().item()
                    loss.backward()
                sums["grad_norm"] += clip_and_step(list(critic.parameters()), copt, csch,
                                                   self.cfg.optimizer.max_grad_norm) / passes
        shares = {p: {"value_loss": s / max(t, 1), "value_clip_frac": c / max(t, 1)} for p, (s, c, t) in own.items()}
        return {**sums, "lr": csch.get_last_lr()[0]}, shares

    def step(self, inp: StepInput) -> dict[str, float]:
        if not self.team_critic:
            return super().step(inp)
        ep = self.collect(inp)
        parts = list(self.policy_batches(ep, lambda agent: self.role_returns(agent, ep)))
        reads = self.team_reads(ep)                                   # the critic's texts, once per step
        old = self._team_values(reads, {p: gen.completion_ids.shape[1] for p, _, gen, _ in parts})
        batches, logged = {}, {}
        for p, policy, gen, R in parts:
            batch, stats = self._prepare(p, gen, R, None, values=old[p])    # GAE advantages, returns
            stats.update(self._update(p, batch))                         # the actor's PPO epochs
            batches[p], logged[p] = batch, (policy, stats)
        critic_stats, shares = self._update_critic(reads, batches)       # the critic's own epochs
        for p, (policy, stats) in logged.items():
            self.log_policy(ep, policy, {**stats, **shares[p]})
        ep.metrics.update({f"train/critic/{k}": v for k, v in critic_stats.items()})
        return self.finish_step(ep)
