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

GRPO is the same algorithm with one agent writing the whole joint answer (`algo.single_agent`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from magrpo.algos.core import LOSS_AGG, AggContext, advantages, k3_kl, token_logprobs
from magrpo.models import Agent
from magrpo.rollout import Generation, Sampling, credit, generate, joint_completions, joint_indices
from magrpo.tasks import Scores, Task


def build_optimizer(agent: Agent, opt_cfg: Any, max_steps: int):
    params = agent.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=opt_cfg.lr, betas=tuple(opt_cfg.betas), eps=opt_cfg.eps,
                                  weight_decay=opt_cfg.weight_decay)
    warmup, total = opt_cfg.warmup_steps, max(max_steps, 1)

    def factor(step: int) -> float:  # linear warm-up, then constant / linear / cosine decay to 0
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        if opt_cfg.schedule == "linear":
            return 1.0 - progress
        if opt_cfg.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class MAGRPO:
    def __init__(self, cfg: Any, agents: list[Agent], task: Task):
        self.cfg, self.algo, self.agents, self.task = cfg, cfg.algo, agents, task
        self.sampling = Sampling.from_algo(cfg.algo)
        # Optimizer steps per rollout = num_iterations, so the schedule spans all of them.
        total = cfg.max_steps * cfg.algo.num_iterations
        self.optimizers, self.schedulers = zip(*[build_optimizer(a, cfg.optimizer, total) for a in agents])

    # -- one training step ----------------------------------------------------------------------
    def step(self, items: list[dict]) -> dict[str, float]:
        algo, N, G = self.algo, len(self.agents), self.algo.num_generations
        t0 = time.perf_counter()
        prompts = [self.task.prompts(item, N) for item in items]                       # [B][N]
        gens = [generate(agent, [p[i] for p in prompts], self.sampling) for i, agent in enumerate(self.agents)]
        t_gen = time.perf_counter()

        joint = joint_indices(N, G, algo.joint_mode)                                    # [J, N]
        J = joint.shape[0]
        scores = self.task.score([it for it in items for _ in range(J)],
                                 [p for p in prompts for _ in range(J)], joint_completions(gens, joint))
        rewards = torch.tensor(scores, dtype=torch.float32).view(len(items), J)         # [B, J]
        t_reward = time.perf_counter()

        metrics = self._reward_metrics(scores, rewards)
        for i, (agent, gen) in enumerate(zip(self.agents, gens)):
            returns = credit(rewards, joint, i, G, algo.cross_credit)                   # [B, G]
            adv = advantages(returns, algo.advantage, algo.scale).flatten()             # [B*G]
            metrics.update({f"train/{agent.name}/{k}": v for k, v in self._update(i, gen, adv).items()})
            metrics[f"train/{agent.name}/completions/mean_length"] = gen.lengths.mean().item()
            metrics[f"train/{agent.name}/advantage_abs_mean"] = adv.abs().mean().item()
        t_end = time.perf_counter()

        n_tokens = sum(g.lengths.sum().item() for g in gens)
        metrics.update({
            "train/completions/mean_length": n_tokens / sum(len(g.texts) for g in gens),
            "time/generate_s": t_gen - t0, "time/reward_s": t_reward - t_gen, "time/update_s": t_end - t_reward,
            "time/step_s": t_end - t0, "speed/tokens_per_s": n_tokens / (t_end - t0),
            "speed/prompts_per_s": len(items) / (t_end - t0),
        })
        return metrics

    def _reward_metrics(self, scores: Scores, rewards: torch.Tensor) -> dict[str, float]:
        m = {"train/reward_mean": rewards.mean().item(), "train/reward_std": rewards.std(unbiased=False).item(),
             "train/turn_1/reward_mean": rewards.mean().item()}
        for name, values in scores.components.items():
            m[f"train/reward/{name}"] = sum(values) / max(len(values), 1)
        return m

    # -- the policy update of one agent -----------------------------------------------------------
    def _update(self, i: int, gen: Generation, adv: torch.Tensor) -> dict[str, float]:
        algo, agent = self.algo, self.agents[i]
        optimizer, scheduler = self.optimizers[i], self.schedulers[i]
        agent.activate()
        agent.model.train()
        dev = agent.device
        adv = adv.to(dev)
        mask = gen.completion_mask.to(dev)
        rows = mask.shape[0]
        ctx = AggContext(rows, int(mask.sum().item()), algo.max_new_tokens)
        aggregate = LOSS_AGG[algo.loss_agg]
        chunks = [slice(s, min(s + algo.micro_batch_size, rows)) for s in range(0, rows, algo.micro_batch_size)]
        ref_logp = self._reference_logprobs(agent, gen, chunks) if algo.beta > 0 else None
        old_logp = torch.zeros_like(mask) if algo.num_iterations > 1 else None

        totals = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
        for it in range(algo.num_iterations):
            optimizer.zero_grad(set_to_none=True)
            for mb in chunks:
                p_ids, p_mask = gen.prompt_rows(mb)
                logp, entropy = token_logprobs(agent.model, p_ids.to(dev), p_mask.to(dev), gen.completion_ids[mb].to(dev),
                                               mask[mb], algo.temperature, with_entropy=(it == 0))
                A, m = adv[mb].unsqueeze(-1), mask[mb]
                if old_logp is None:
                    token_loss = -A * logp                   # REINFORCE: grad = -A * grad log pi
                else:
                    if it == 0:                              # policy == rollout policy before any update
                        old_logp[mb] = logp.detach()
                    ratio = torch.exp(logp - old_logp[mb])   # PPO: -min(r A, clip(r, 1-eps, 1+eps_high) A)
                    clipped = ratio.clamp(1 - algo.epsilon, 1 + algo.epsilon_high)
                    token_loss = -torch.minimum(ratio * A, clipped * A)
                    totals["clip_frac"] += ((ratio != clipped).float() * m).sum().item() / max(ctx.num_tokens, 1)
                if ref_logp is not None:
                    kl = k3_kl(logp, ref_logp[mb])
                    token_loss = token_loss + algo.beta * kl
                    totals["kl"] += (kl.detach() * m).sum().item() / max(ctx.num_tokens, 1)
                loss = aggregate(token_loss, m, ctx)
                loss.backward()
                totals["loss"] += loss.item()
                if entropy is not None:
                    totals["entropy"] += (entropy * m).sum().item() / max(ctx.num_tokens, 1)
            params = agent.trainable_parameters()
            if self.cfg.optimizer.max_grad_norm is not None:
                totals["grad_norm"] += float(torch.nn.utils.clip_grad_norm_(params, self.cfg.optimizer.max_grad_norm))
            optimizer.step()
            scheduler.step()
        k = algo.num_iterations
        # Iteration 0 never clips (ratio = 1), so the clip fraction averages the later ones;
        # on-policy REINFORCE (k = 1) logs 0 for a key set that is the same for every run.
        return {"loss": totals["loss"] / k, "kl": totals["kl"] / k, "entropy": totals["entropy"],
                "grad_norm": totals["grad_norm"] / k, "lr": scheduler.get_last_lr()[0],
                "clip_frac": totals["clip_frac"] / (k - 1) if k > 1 else 0.0}

    @torch.no_grad()
    def _reference_logprobs(self, agent: Agent, gen: Generation, chunks: list[slice]) -> torch.Tensor:
        dev = agent.device
        parts = []
        with agent.reference_mode() as ref:
            for mb in chunks:
                p_ids, p_mask = gen.prompt_rows(mb)
                logp, _ = token_logprobs(ref, p_ids.to(dev), p_mask.to(dev), gen.completion_ids[mb].to(dev),
                                         gen.completion_mask[mb].to(dev), self.algo.temperature)
                parts.append(logp)
        return torch.cat(parts)

    # -- checkpoint state ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"optimizers": [o.state_dict() for o in self.optimizers],
                "schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state: dict) -> None:
        for o, s in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(s)
        for sch, s in zip(self.schedulers, state["schedulers"]):
            sch.load_state_dict(s)
