"""MAGRPO: Multi-Agent Group Relative Policy Optimization (Liu et al., arXiv 2508.04652).

One step, for a batch of B items and N agents:
  1. every agent samples G completions per item from its own prompt (one batched generate each);
  2. the team is rewarded once per joint action (aligned: G per item, cross: G^N);
  3. each agent's sample k gets a return R_k (its joint reward, or under `cross` the mean over
     the joint actions that contain it) and a group-relative advantage A_k = R_k - b(R);
  4. each agent minimises its own loss  L_i = -E[A * log pi_i(completion | own prompt)]
     (with PPO clipping when num_iterations > 1, and a k3 KL to a reference when beta > 0).
The advantage is shared through the joint reward; the gradient of each agent uses only its own
log-probs (centralised training, decentralised execution).

With `num_turns` > 1 the step grows a turn tree (magrpo/turns.py): every node's return is
R = r + discount * mean(children's R), each sibling set is a group for step 3, and one loss runs
over the samples of every node of every turn.

GRPO (magrpo/algos/grpo.py) is the same algorithm with one agent writing the whole joint answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from magrpo import distributed
from magrpo.algos.base import (
    AlgoConfig,
    TeamSpec,
    agent_optimizer,
    build_optimizer,
    clip_and_step,
    register_algo,
    reward_metrics,
    timing_metrics,
    update_phase,
)
from magrpo.algos.core import (
    ADVANTAGES,
    LOSS_AGG,
    SCALES,
    AggContext,
    advantages,
    clipped_surrogate,
    k3_kl,
    rollout_logprobs,
    row_chunks,
    row_logprobs,
    shares_prompt,
)
from magrpo.feedback import build_feedback
from magrpo.models import Agent, policy_agents, policy_groups
from magrpo.rollout import Generation, Sampling, credit
from magrpo.schema import at_least, option, positive
from magrpo.tasks import Task
from magrpo.turns import TurnSpec, concat_generations, grow_tree, tree_metrics, tree_returns


@dataclass
class MAGRPOConfig(AlgoConfig):
    name: str = "magrpo"
    cross_credit: str = option("mean", choices=["mean", "sum"])   # cross: a sample's return over its joints
    advantage: str = option("mean", choices=lambda: sorted(ADVANTAGES))  # raw = MAREINFORCE, rloo = MARLOO, max = MAReMax
    scale: str = option("none", choices=lambda: sorted(SCALES))   # divide advantages by (std + 1e-4)
    loss_agg: str = option("seq_sum", choices=lambda: sorted(LOSS_AGG))
    num_iterations: int = at_least(1, 1)         # > 1: reuse each rollout with PPO-clipped ratios
    epsilon: float = positive(0.2)
    epsilon_high: float = positive(0.2)


@register_algo("magrpo")
class MAGRPO:
    config_schema = MAGRPOConfig
    form = "multi"

    @classmethod
    def team(cls, cfg: Any) -> TeamSpec:
        return TeamSpec.of(cfg, cls.form)

    def __init__(self, cfg: Any, agents: list[Agent], task: Task):
        self.cfg, self.algo, self.agents, self.task = cfg, cfg.algo, agents, task
        self.sampling = Sampling.from_algo(cfg.algo)
        self.turns = TurnSpec.from_algo(cfg.algo)
        self.feedback = build_feedback(cfg.get("feedback"), task)
        # Optimizer steps per rollout = num_iterations, so the schedule spans all of them.
        total = cfg.max_steps * cfg.algo.num_iterations
        # One optimizer per policy: a shared policy (agents.share_policy) steps once for all its roles.
        self.policies = policy_agents(agents)
        self.optimizers, self.schedulers = zip(*[build_optimizer(p.trainable_parameters(), agent_optimizer(cfg, p.index),
                                                                 total) for p in self.policies])

    # -- one training step ----------------------------------------------------------------------
    def step(self, items: list[dict]) -> dict[str, float]:
        algo = self.algo
        t0 = time.perf_counter()
        root, stats = grow_tree(self.agents, self.task, self.feedback, items, self.sampling, self.turns)
        t_gen = t0 + stats.generate_s
        t_reward = time.perf_counter()
        levels = root.levels()
        node_returns = tree_returns(root, algo.discount)                                # per turn [B_t, J]

        metrics = reward_metrics(root)
        if self.turns.num_turns > 1:
            metrics.update(tree_metrics(root, stats))
        for p, roles in enumerate(policy_groups(self.agents)):
            gens, advs = [], []
            for agent in roles:
                i = agent.index
                # Each sibling set is a group: advantages per turn, then one update over every turn's samples.
                returns = [credit(R, lv.joint, i, lv.per_item(i), algo.cross_credit) for lv, R in zip(levels, node_returns)]
                # A group is the G_i samples that answer one prompt: an item's (simultaneous), or
                # one prefix's in a sequential chain, so a baseline never mixes two prefixes.
                adv = torch.cat([advantages(R.reshape(-1, lv.samples[i].num_generations), algo.advantage,
                                            algo.scale).flatten() for lv, R in zip(levels, returns)])
                gens.append(concat_generations([lv.samples[i] for lv in levels], agent.tokenizer.pad_token_id))
                advs.append(adv)
                metrics[f"train/{agent.name}/advantage_abs_mean"] = adv.abs().mean().item()
                metrics[f"train/{agent.name}/return_mean"] = torch.cat([R.flatten() for R in returns]).mean().item()
            # A policy's one update runs over the samples of every role it plays, each role's
            # advantages computed within its own groups above.
            gen = concat_generations(gens, roles[0].tokenizer.pad_token_id)
            update = self._update(p, gen, torch.cat(advs))
            metrics.update({f"train/{roles[0].policy_name}/{k}": v for k, v in update.items()})
        metrics.update(timing_metrics(root, t0, t_gen, t_reward, time.perf_counter(), stats.feedback_s))
        return metrics

    # -- the update of one policy ------------------------------------------------------------------
    @update_phase
    def _update(self, i: int, gen: Generation, adv: torch.Tensor) -> dict[str, float]:
        algo, agent = self.algo, self.policies[i]
        optimizer, scheduler = self.optimizers[i], self.schedulers[i]
        agent.activate()
        agent.model.train()
        dev = agent.device
        adv = adv.to(dev)
        mask = gen.completion_mask.to(dev)
        rows = mask.shape[0]
        ctx = AggContext.of(mask, algo.max_new_tokens)      # whole-batch sizes (all ranks)
        aggregate = LOSS_AGG[algo.loss_agg]
        chunks = row_chunks(rows, algo.micro_batch_size, gen.num_generations)
        share = shares_prompt(agent.model, algo.share_prompt)
        ref_logp = None
        if algo.beta > 0:
            with agent.reference_mode() as ref:
                ref_logp = rollout_logprobs(ref, gen, chunks, agent.temperature(algo.temperature), dev, share)
        old_logp = torch.zeros_like(mask) if algo.num_iterations > 1 else None

        totals = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "approx_kl": 0.0,
                  "grad_norm": 0.0}
        for it in range(algo.num_iterations):
            optimizer.zero_grad(set_to_none=True)
            for mb in chunks:
                logp, entropy = row_logprobs(agent.model, gen, mb, agent.temperature(algo.temperature), dev, share, with_entropy=(it == 0))
                A, m = adv[mb].unsqueeze(-1), mask[mb]
                if old_logp is None:
                    token_loss = -A * logp                   # REINFORCE: grad = -A * grad log pi
                else:
                    if it == 0:                              # policy == rollout policy before any update
                        old_logp[mb] = logp.detach()
                    token_loss, clipped = clipped_surrogate(logp, old_logp[mb], A, algo.epsilon, algo.epsilon_high)
                    totals["clip_frac"] += (clipped * m).sum().item() / max(ctx.num_tokens, 1)
                    totals["approx_kl"] += (k3_kl(old_logp[mb], logp.detach()) * m).sum().item() / max(ctx.num_tokens, 1)
                totals["policy_loss"] += aggregate(token_loss.detach(), m, ctx).item()
                if ref_logp is not None:
                    kl = k3_kl(logp, ref_logp[mb])
                    token_loss = token_loss + algo.beta * kl
                    totals["kl"] += (kl.detach() * m).sum().item() / max(ctx.num_tokens, 1)
                loss = aggregate(token_loss, m, ctx)
                loss.backward()
                totals["loss"] += loss.item()
                if entropy is not None:
                    totals["entropy"] += (entropy * m).sum().item() / max(ctx.num_tokens, 1)
            totals["grad_norm"] += clip_and_step(agent.trainable_parameters(), optimizer, scheduler,
                                                 self.cfg.optimizer.max_grad_norm)
        totals = distributed.sum_dict(totals, skip=("grad_norm",))   # each rank held its share of the batch's
        k = algo.num_iterations
        # Iteration 0 never clips (ratio = 1), so the clip fraction averages the later ones;
        # on-policy REINFORCE (k = 1) logs 0 for a key set that is the same for every run.
        # approx_kl: k3 estimate of KL(pi_old || pi) over the passes that follow an update.
        return {"loss": totals["loss"] / k, "policy_loss": totals["policy_loss"] / k, "kl": totals["kl"] / k,
                "entropy": totals["entropy"], "grad_norm": totals["grad_norm"] / k, "lr": scheduler.get_last_lr()[0],
                "clip_frac": totals["clip_frac"] / (k - 1) if k > 1 else 0.0,
                "approx_kl": totals["approx_kl"] / (k - 1) if k > 1 else 0.0}

    # -- checkpoint state ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"optimizers": [o.state_dict() for o in self.optimizers],
                "schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state: dict) -> None:
        for o, s in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(s)
        for sch, s in zip(self.schedulers, state["schedulers"]):
            sch.load_state_dict(s)
