"""IPPO: independent PPO for a team of LLM agents (the paper's IPPO baseline).

Each agent i is an actor pi_i with its own critic V_i, and treats the other agents as part of its
environment: it learns from the team's joint reward (or, with `algo.reward=individual`, from its
own share where the task can split it). One step, for a batch of B items and N agents:

  1. every agent samples G completions per item (one batched generate each; same budget as MAGRPO);
  2. the team is rewarded once per joint action; agent i's sample k gets its return R (its joint
     reward, or the mean over the joint actions containing it under `joint_mode=cross`);
  3. per token t of the completion: reward r_t = R at the last token, minus beta * (log pi - log ref)
     when beta > 0; values V_t from the critic (a head on the agent's own backbone, or a separate
     LM with a head); GAE:  delta_t = r_t + gamma V_{t+1} - V_t,  A_t = sum_l (gamma lam)^l delta_{t+l};
     returns R_t = A_t + V_t; advantages whitened over the batch's tokens,
     A <- (A - mean A) / max(std A, whiten_min_std) (whiten_min_std = 0: plain). With the defaults
     gamma = lam = 1, A_t = (R minus the KL penalties from t on) - V_t: the critic is a baseline,
     not a stand-in for the return;

  4. `ppo_epochs` passes over `num_mini_batches` shuffled mini-batches minimise, per token,
        L = -min(r A, clip(r, 1 - eps, 1 + eps) A)                                  (clipped surrogate)
          + vf_coef * 0.5 * max((V - R)^2, (V_old + clip(V - V_old, +-c) - R)^2)     (clipped value loss)
          - ent_coef * H(pi)                                                        (entropy bonus)
     averaged over the mini-batch's tokens, r = pi / pi_old; the epochs stop early once the mean
     approx KL(pi_old || pi) of an epoch exceeds `target_kl`. The surrogate is the registered policy
     loss `loss` (default clip; losses.POLICY_LOSSES) and the average the aggregation `loss_agg`
     (default token_mean; aggregation.LOSS_AGG), as in every algorithm.

With `num_turns` > 1 the step grows a turn tree (magrpo/rollout/turns.py) and each turn's completion is
one episode of the token-level MDP above whose terminal reward is its node's return: the reward
plus the discounted mean return of the node's children (R = r + discount * mean(children's R),
a Monte-Carlo estimate of the future turns). The critic thus learns the value of the multi-turn
return, the advantage of an early turn carries the turns it led to, and the PPO epochs run over the
completions of every turn together.

MAPPO (mappo.py) changes only what the critic reads; single-agent PPO (ppo.py) only the team and
the KL coefficient's controller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from magrpo.algos.advantages import gae, masked_whiten
from magrpo.algos.aggregation import LOSS_AGG, AggContext, masked_mean
from magrpo.algos.base import StepInput, StepSpecs, register_algo
from magrpo.algos.critics import Critic, CriticConfig
from magrpo.algos.keys import (
    ClipKeys,
    CrossCreditKeys,
    EntropyKeys,
    LossKeys,
    RewardKeys,
    ValueKeys,
    check_ratio_loss,
)
from magrpo.algos.logprobs import RowBatch, rollout_logprobs, row_chunks, row_logprobs
from magrpo.algos.losses import POLICY_LOSSES, AdaptiveKLController, clipped_value_loss, k3_kl
from magrpo.algos.optim import clip_and_step
from magrpo.algos.scaffold import CriticParts, Episode, TeamAlgorithm
from magrpo.algos.step_metrics import update_phase
from magrpo.config.run import RunConfig
from magrpo.core.schema import at_least, option, positive, within
from magrpo.models import distributed
from magrpo.models.agents import Agent
from magrpo.models.sampler import shares_prompt
from magrpo.rollout.record import Generation, Rollout
from magrpo.tasks import Task


@dataclass
class IPPOConfig(CriticConfig, RewardKeys, CrossCreditKeys, LossKeys, ClipKeys, ValueKeys, EntropyKeys):
    """critic_model (critic=model) must share the actor's tokenizer: it values the actor's tokens."""

    name: str = "ippo"
    loss: str = option("clip", choices=lambda: sorted(POLICY_LOSSES),
                       help="the policy loss (losses.POLICY_LOSSES): PPO's "
                            "token-clipped surrogate, one symmetric epsilon")
    loss_agg: str = option("token_mean", choices=lambda: sorted(LOSS_AGG),
                           help="how token losses become one scalar (aggregation.LOSS_AGG): "
                                "the mean over the mini-batch's tokens")
    gamma: float = within(0, 1, 1.0, help="per-token discount of GAE")
    lam: float = within(0, 1, 1.0,
                        help="1 (Monte-Carlo) by default. The reward comes once, at the last "
                             "token, and the critic starts as a zero head; with lam < 1 token t "
                             "gets lam^(T-t) of the return's signal and the rest from the critic's "
                             "guesses. At lam = 0.95 the opening tokens of a 48-token answer (the "
                             "ones that shape it) got 1/7 of the tail's advantage, and "
                             "single-agent PPO stalled on the embedded default. lam < 1 pays off "
                             "once a critic predicts the return (explained_variance well above 0).")
    cliprange_value: float = positive(0.2, help="clip range of the value update around V_old")
    whiten_advantages: bool = option(True, help="normalise advantages over the batch's tokens")
    whiten_min_std: float = at_least(0, 0.0,
                                     help="divide by max(std, whiten_min_std) rather than std: 0 = plain "
                                          "whitening. A floor keeps a batch whose returns are all alike "
                                          "(a solved game) from turning critic noise into full steps")
    ppo_epochs: int = at_least(1, 2, help="passes over each rollout")
    num_mini_batches: int = at_least(1, 2, help="shuffled mini-batches per pass")
    target_kl: float | None = option(None, check=lambda v: v is None or v > 0,
                                     allowed="> 0, or null = no early stop",
                                     help="stop the epochs once an epoch's mean approx KL exceeds it")
    # beta (AlgoConfig): per-token KL penalty to the agent's frozen reference in the reward.

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        epochs, minis = node.ppo_epochs, node.num_mini_batches
        check_ratio_loss(node, prefix, epochs * minis, f"{prefix}ppo_epochs={epochs} x {prefix}num_mini_batches={minis} "
                         f"optimizer steps", f"{prefix}ppo_epochs=1 {prefix}num_mini_batches=1")


@dataclass
class CriticInput:
    """What a centralised critic reads before each completion row, split so that the part every
    sample of a prompt shares (every agent's prompt) runs once per prompt, as the actor's prompt
    does: a shared prefix per group, then per row a tail (the other agents' answers, then the
    row's own completion). Values of the own completion's tokens sit at tail positions
    offset[r] + t."""

    prefix_ids: torch.Tensor      # [U, P] left-padded, one per distinct prefix
    prefix_mask: torch.Tensor
    index: torch.Tensor           # [n] row -> prefix
    tail_ids: torch.Tensor        # [n, T] right-padded: the row's middle text, then its completion
    tail_mask: torch.Tensor
    offset: torch.Tensor          # [n] where the completion starts in the tail

    @classmethod
    def encode(cls, tokenizer, texts: list[tuple[str, list[str | list[int]]]], gen: Generation,
               max_prefix: int) -> CriticInput:
        """texts[r] = (prefix, middle pieces) of row r, a piece being text or token ids; the tail
        ends with the row's own completion tokens."""
        lengths = gen.completion_mask.sum(-1).long().tolist()
        rows = [(prefix, [*middle, gen.completion_ids[r, :n].tolist()])
                for r, ((prefix, middle), n) in enumerate(zip(texts, lengths))]
        inputs, starts = cls.of_pieces(tokenizer, rows, max_prefix)
        inputs.offset = torch.tensor([s[-1] for s in starts])
        return inputs

    @classmethod
    def of_pieces(cls, tokenizer, rows: list[tuple[str, list[str | list[int]]]],
                  max_prefix: int) -> tuple[CriticInput, list[list[int]]]:
        """rows[r] = (prefix, pieces) of row r, a piece being text (tokenized once per distinct
        text) or token ids (read as they are); its tail is the pieces' tokens in order. Also where
        each piece starts in its row's tail; `offset` is left at 0."""
        prefixes = list(dict.fromkeys(p for p, _ in rows))
        where = {p: k for k, p in enumerate(prefixes)}
        side = (tokenizer.padding_side, tokenizer.truncation_side)
        tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
        try:
            enc = tokenizer(prefixes, return_tensors="pt", padding=True, truncation=True, add_special_tokens=False,
                            max_length=max_prefix)
        finally:
            tokenizer.padding_side, tokenizer.truncation_side = side
        known: dict[str, list[int]] = {}

        def ids(piece: str | list[int]) -> list[int]:
            if isinstance(piece, str):
                if piece not in known:
                    known[piece] = tokenizer(piece, add_special_tokens=False).input_ids
                return known[piece]
            return list(piece)

        tails, starts = [], []
        for _, pieces in rows:
            tail: list[int] = []
            at: list[int] = []
            for piece in pieces:
                at.append(len(tail))
                tail += ids(piece)
            tails.append(tail)
            starts.append(at)
        T = max(max(len(t) for t in tails), 1)
        pad = tokenizer.pad_token_id
        return cls(enc.input_ids, enc.attention_mask, torch.tensor([where[p] for p, _ in rows]),
                   torch.tensor([t + [pad] * (T - len(t)) for t in tails]),
                   torch.tensor([[1.0] * len(t) + [0.0] * (T - len(t)) for t in tails]),
                   torch.zeros(len(rows), dtype=torch.long)), starts

    def rows(self, rows: slice | torch.Tensor, device) -> tuple[RowBatch, torch.Tensor]:
        r = torch.arange(self.index.shape[0])[rows]
        used, inverse = torch.unique(self.index[r], return_inverse=True)
        mask = self.prefix_mask[used]
        keep = mask.any(0).nonzero()
        start = int(keep[0]) if len(keep) else 0
        batch = RowBatch(self.prefix_ids[used][:, start:].to(device), mask[:, start:].to(device), inverse.to(device),
                         self.tail_ids[r].to(device), self.tail_mask[r].to(device))
        return batch, self.offset[r].to(device)


@dataclass
class Batch:
    """One agent's rollout tensors for the PPO epochs (rows = completions)."""

    gen: Generation
    critic_input: CriticInput | None   # what a centralised critic reads; None = the agent's own prompt
    old_logp: torch.Tensor        # [n, C]
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor


def critic_values(critic: Critic, agent: Agent, gen: Generation, inputs: CriticInput | None,
                  rows: slice | torch.Tensor, device, share_prompt: bool) -> torch.Tensor:
    """[n, C] values before each completion token of rows `rows`: on the agent's own prompt, or on
    a centralised critic's input (its completion tokens' positions gathered from the tail)."""
    if inputs is None:
        return critic.values(agent, RowBatch.of(gen, rows, device), share_prompt)
    batch, offset = inputs.rows(rows, device)
    tail = critic.values(agent, batch, share_prompt)                             # [n, T]
    C = gen.completion_ids.shape[1]
    at = (offset.unsqueeze(1) + torch.arange(C, device=device)).clamp(max=tail.shape[1] - 1)
    return tail.gather(1, at)


def recorded(gen: Generation, temperature: float, hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """What the decoding pass recorded, where it is what the rollout pass would compute: (log-probs
    at this temperature of every row, the hidden states when `hidden`, else None); None where it
    recorded less."""
    shape = tuple(gen.completion_ids.shape)
    logprobs, states = gen.logprobs, gen.hidden
    if logprobs is None or tuple(logprobs.shape) != shape or gen.logprobs_temperature != temperature:
        return None
    if not hidden:
        return logprobs, None
    if states is None or tuple(states.shape[:2]) != shape:
        return None
    return logprobs, states


@register_algo("ippo")
class IPPO(TeamAlgorithm[IPPOConfig]):
    config_schema = IPPOConfig
    reads_returns = True        # algo.signal_bonus: magrpo/algos/signalling.py
    centralized = False

    def __init__(self, cfg: RunConfig, agents: list[Agent], task: Task, specs: StepSpecs | None = None):
        super().__init__(cfg, agents, task, specs)
        self.kl_ctl = self.make_kl_controller()
        # The decoding pass records the rollout policy's log-probs (and, for a head critic on the
        # actor's own prompt, the hidden states it reads), so _prepare runs no forward of its own.
        wants = ("logprobs", "hidden") if all(c.kind == "head" for c in self.critics) and not self.centralized \
            else ("logprobs",)
        self.sampling = replace(self.sampling, record=wants)

    def build_critics(self) -> list[CriticParts]:
        # One actor, critic and optimizer per policy (a shared policy has one for all its roles);
        # a head critic trains with its actor (and its adapter), a critic model has its own optimizer.
        algo = self.algo
        return [self.critic_parts(Critic(algo.critic, p, algo.critic_model), p, algo.critic_lr) for p in self.policies]

    def steps_per_update(self) -> int:
        return self.algo.ppo_epochs * self.algo.num_mini_batches   # optimizer steps over the run

    def extra_parameters(self, policy: int) -> list[torch.nn.Parameter]:
        critic = self.policy_critic(policy)
        return list(critic.head.parameters()) if critic is not None and critic.kind == "head" else []

    def policy_critic(self, policy: int) -> Critic | None:
        """The critic that trains in policy `policy`'s PPO epochs (its value loss beside the
        surrogate): its own. None: a critic that trains apart (MAPPO's team critic)."""
        return self.critic(policy)

    def critic(self, policy: int) -> Critic:
        """Policy `policy`'s critic: a Critic (per-token values), as build_critics builds it."""
        critic = self.critics[policy]
        if not isinstance(critic, Critic):
            raise TypeError(f"{type(self).__name__}: critic {policy} is a {type(critic).__name__}, not a Critic")
        return critic

    def make_kl_controller(self) -> AdaptiveKLController:
        return AdaptiveKLController(self.algo.beta, None, 1)   # IPPO: a fixed coefficient

    # -- what the critic reads ------------------------------------------------------------------------
    def critic_prompts(self, rollout: Rollout, i: int) -> list[tuple[str, list[str | list[int]]]] | None:
        """What the critic reads before agent i's completion, one (shared prefix, row text) pair per
        completion row (see CriticInput); None = the agent's own prompt (decentralised critic).
        MAPPO overrides this."""
        return None

    # -- one training step ----------------------------------------------------------------------------
    def step(self, inp: StepInput) -> dict[str, float]:
        ep = self.collect(inp)
        for p, policy, gen, R in self.policy_batches(ep, lambda agent: self.role_returns(agent, ep)):
            parts = [self.critic_prompts(lv, a.index) for a in self.trained_roles(p, ep.seat) for lv in ep.levels()]
            texts = None if parts[0] is None else [t for part in parts if part is not None for t in part]
            batch, stats = self._prepare(p, gen, R, texts)        # values, GAE advantages, returns
            stats.update(self._update(p, batch))                   # PPO epochs
            self.log_policy(ep, policy, stats)
        return self.finish_step(ep)

    def finish_step(self, ep: Episode) -> dict[str, float]:
        """The KL coefficient's update from the step's penalties, then the step's metrics."""
        penalties = [ep.metrics[f"train/{p.policy_name}/kl_penalty"] for p in self.policies]
        self.kl_ctl.update(sum(penalties) / len(penalties), self.algo.batch_size)
        ep.metrics["train/kl_coef"] = self.kl_ctl.value
        return ep.finish()

    def role_returns(self, agent: Agent, ep: Episode) -> torch.Tensor:
        """[rows] the return of each of the agent's samples, turn by turn (team or own share)."""
        algo = self.algo
        R = torch.cat([r.flatten() for r in ep.returns(agent.index, algo.discount, algo.reward, algo.cross_credit)])
        ep.metrics[f"train/{agent.name}/return_mean"] = R.mean().item()
        return R

    @update_phase
    @torch.no_grad()
    def _prepare(self, i: int, gen: Generation, R: torch.Tensor, texts: list[tuple[str, list[str | list[int]]]] | None,
                 values: torch.Tensor | None = None) -> tuple[Batch, dict[str, float]]:
        """Rollout log-probs, values, per-token rewards, GAE advantages and returns of agent i's
        completions `gen` with returns R (one per row); `texts`: what the critic reads (None: the
        agent's own prompt); `values`: the rollout values [rows, C] when a critic that trains
        apart gave them (MAPPO's team critic), else the policy's critic computes them here."""
        algo, agent = self.algo, self.policies[i]
        critic = self.policy_critic(i) if values is None else None
        dev = agent.device
        mask = gen.completion_mask.to(dev)
        chunks = row_chunks(mask.shape[0], algo.micro_batch_size, gen.num_generations)
        agent.activate()
        agent.model.eval()
        share = shares_prompt(agent.model, algo.share_prompt)
        temperature = agent.temperature(algo.temperature)
        head_values = critic is not None and critic.kind == "head" and texts is None   # from the actor's hidden states
        if (rec := recorded(gen, temperature, head_values)) is not None:
            # the decoding pass's own log-probs (and hidden states): equal to a forward's up to the
            # order of float additions (magrpo.models.sampler.sample_shared_prompt)
            logprobs, states = rec
            old_logp = logprobs.to(dev)
            if states is not None and critic is not None:      # head_values
                old_values = critic.head(states.to(dev))
        elif head_values and critic is not None:         # one pass gives the log-probs and the head's values
            outs = [row_logprobs(agent.model, gen, mb, temperature, dev, share, with_hidden=True) for mb in chunks]
            old_logp = torch.cat([o[0] for o in outs])
            old_values = torch.cat([critic.head(o[2]) for o in outs])
        else:
            old_logp = rollout_logprobs(agent.model, gen, chunks, temperature, dev, share)
        inputs = None
        if texts is not None:
            inputs = CriticInput.encode(agent.tokenizer, texts, gen, algo.max_prompt_length * max(len(self.agents), 1))
        if values is not None:
            old_values = values.to(dev)
        elif not head_values:
            if critic is None:
                raise RuntimeError(f"{type(self).__name__}: agent {i}'s critic trains apart and gave no values")
            old_values = torch.cat([critic_values(critic, agent, gen, inputs, mb, dev, algo.share_prompt)
                                    for mb in chunks])
        # r_t: the return at the last completion token, a KL penalty to the reference at every token
        token_rewards = torch.zeros_like(mask)
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        token_rewards[torch.arange(mask.shape[0], device=dev), last] = R.to(dev)
        kl = log_ratio = torch.zeros_like(mask)
        if algo.beta > 0:
            with agent.reference_mode() as ref:
                ref_logp = rollout_logprobs(ref, gen, chunks, agent.temperature(algo.temperature), dev, share)
            log_ratio = (old_logp - ref_logp) * mask
            kl = k3_kl(old_logp, ref_logp) * mask
            token_rewards = token_rewards - self.kl_ctl.value * log_ratio
        adv, returns = gae(token_rewards, old_values, mask, algo.gamma, algo.lam)
        ret_var = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
        explained = 1.0 - masked_mean((returns - old_values - masked_mean(returns - old_values, mask)) ** 2,
                                      mask) / ret_var.clamp(min=1e-8)
        stats = {"return_mean": R.mean().item(), "value_mean": masked_mean(old_values, mask).item(),
                 "explained_variance": explained.item(), "advantage_abs_mean": masked_mean(adv.abs(), mask).item(),
                 # kl: the token-mean k3 KL(pi || ref), as every algorithm logs it; kl_penalty: the
                 # sequence sum of log pi - log ref the reward is charged (the controller's input)
                 "kl": (kl.sum() / mask.sum().clamp(min=1)).item(), "kl_penalty": log_ratio.sum(-1).mean().item()}
        if algo.whiten_advantages:
            adv = masked_whiten(adv, mask, min_std=algo.whiten_min_std)
        agent.model.train()
        return Batch(gen, inputs, old_logp, old_values, adv, returns, mask), stats

    def _forward(self, i: int, b: Batch, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(log pi, entropy, V) of the tokens of rows `rows` under the current actor and critic: one
        pass for a head critic on the actor's own prompt, else the critic's own forward; V is None
        when the critic trains apart (policy_critic)."""
        algo, agent, critic = self.algo, self.policies[i], self.policy_critic(i)
        shared_forward = critic is not None and critic.kind == "head" and not self.centralized
        logp, entropy, *hidden = row_logprobs(agent.model, b.gen, rows, agent.temperature(algo.temperature), agent.device,
                                              shares_prompt(agent.model, algo.share_prompt), with_entropy=True,
                                              with_hidden=shared_forward, entropy_grad=algo.ent_coef > 0)
        if critic is None:
            return logp, entropy, None
        values = critic.head(hidden[0]) if shared_forward else critic_values(
            critic, agent, b.gen, b.critic_input, rows, agent.device, algo.share_prompt)
        return logp, entropy, values

    @update_phase
    def _update(self, i: int, b: Batch) -> dict[str, float]:
        """`ppo_epochs` passes over `num_mini_batches` shuffled mini-batches of agent i's rows, one
        optimizer step each (the module docstring, step 4); the policy's metrics."""
        algo, agent, critic = self.algo, self.policies[i], self.policy_critic(i)
        opt, sch = self.optimizers[i], self.schedulers[i]
        copt, csch = (self.critic_optimizers[i], self.critic_schedulers[i]) if critic is not None else (None, None)
        policy_loss, aggregate = POLICY_LOSSES[algo.loss], LOSS_AGG[algo.loss_agg]
        rows = b.mask.shape[0]
        # Shuffled rows, not whole groups: mini-batches of whole groups run each prompt once per
        # mini-batch, but they changed what IPPO learns (signal, seed 2: 0.08 instead of 0.98).
        mini = math.ceil(rows / algo.num_mini_batches)
        # The optimizer `opt` holds the actor (and a head critic); a separate critic model has `copt`;
        # a critic that trains apart (critic None) is in neither.
        params = agent.trainable_parameters() + (list(critic.parameters()) if critic is not None and copt is None else [])
        sums = dict.fromkeys(("loss", "policy_loss", "value_loss", "entropy", "clip_frac", "value_clip_frac",
                              "approx_kl", "grad_norm"), 0.0)
        frac = 1.0 / (algo.ppo_epochs * algo.num_mini_batches)     # each step's share of the run's metrics
        n_updates, epochs_run = 0, 0
        agent.activate()
        agent.model.train()
        for _ in range(algo.ppo_epochs):
            epoch_kl, epoch_tokens = 0.0, 0.0
            for idx in torch.randperm(rows).split(mini):
                opt.zero_grad(set_to_none=True)
                if copt is not None:
                    copt.zero_grad(set_to_none=True)
                # the mini-batch's sizes on every rank: each rank's loss is its share of the whole
                ctx = AggContext.of(b.mask[idx], algo.max_new_tokens)
                n_tok = max(ctx.num_tokens, 1)
                for s in range(0, len(idx), algo.micro_batch_size):
                    r = idx[s:s + algo.micro_batch_size]
                    m = b.mask[r]
                    logp, entropy, values = self._forward(i, b, r)
                    pg, info = policy_loss(logp, b.old_logp[r], b.advantages[r], m, algo)   # ratio, surrogate
                    if values is None:          # the critic trains apart: the actor's terms alone
                        loss = aggregate(pg - algo.ent_coef * entropy, m, ctx)
                    else:
                        vl, vclipped = clipped_value_loss(values, b.old_values[r], b.returns[r], algo.cliprange_value)
                        loss = aggregate(pg + algo.vf_coef * vl - algo.ent_coef * entropy, m, ctx)
                    loss.backward()
                    approx_kl = (info.approx_kl * m).sum().item()
                    epoch_kl, epoch_tokens = epoch_kl + approx_kl, epoch_tokens + m.sum().item()
                    sums["loss"] += loss.item() * frac
                    sums["policy_loss"] += aggregate(pg.detach(), m, ctx).item() * frac
                    if values is not None:
                        sums["value_loss"] += aggregate(vl.detach(), m, ctx).item() * frac
                        sums["value_clip_frac"] += ((vclipped * m).sum() / n_tok).item() * frac
                    sums["entropy"] += ((entropy.detach() * m).sum() / n_tok).item() * frac
                    sums["clip_frac"] += ((info.clipped * m).sum() / n_tok).item() * frac
                    sums["approx_kl"] += approx_kl / n_tok * frac
                sums["grad_norm"] += clip_and_step(params, opt, sch, self.cfg.optimizer.max_grad_norm)
                if copt is not None and critic is not None:
                    clip_and_step(list(critic.parameters()), copt, csch, self.cfg.optimizer.max_grad_norm)
                n_updates += 1
            epochs_run += 1
            epoch_kl, epoch_tokens = distributed.sum_floats(epoch_kl, epoch_tokens)   # every rank stops together
            if algo.target_kl is not None and epoch_kl / max(epoch_tokens, 1) > algo.target_kl:
                break          # early stop: the policy moved too far from the rollout policy
        sums = distributed.sum_dict(sums, skip=("grad_norm",))     # each rank held its share of the batch's
        # Sums were weighted for a full run of epochs; rescale to the passes that actually ran.
        scale = (algo.ppo_epochs * algo.num_mini_batches) / max(n_updates, 1)
        out = {k: v * scale for k, v in sums.items()}
        out["grad_norm"] = sums["grad_norm"] / max(n_updates, 1)
        out.update({"lr": float(sch.get_last_lr()[0]), "ppo_epochs_run": float(epochs_run)})
        return out

    # -- checkpoint state -------------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {"kl_ctl": self.kl_ctl.state_dict()}

    def load_extra_state(self, state: dict) -> None:
        self.kl_ctl.load_state_dict(state["kl_ctl"])
