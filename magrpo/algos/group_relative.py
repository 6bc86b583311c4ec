"""The update every group-relative method shares: its `algo.*` keys and one policy's optimizer steps.

MAGRPO (magrpo.py, and grpo, dr_mas, at_grpo, which subclass it) and C3 (c3.py) compute their
advantages differently, then train each policy alike: for `num_iterations` passes over its rows,
per micro-batch

    log pi_old     the rollout policy's log-probs, fixed on the first pass (ratio 1 there);
    L_t            the policy loss (core.POLICY_LOSSES: reinforce, clip, gspo; `algo.loss`);
    + beta * KL_t  a k3 KL to the frozen reference when beta > 0;
    - c_H * H_t    an entropy bonus when `ent_coef` = c_H > 0, H_t = -sum_v pi(v | c_<t) log pi(v | c_<t)
                   the policy's entropy at completion token t (Williams and Peng, 1991; the term
                   IPPO carries): it pays the policy for keeping its options open, so a group whose
                   rewards all favour one answer does not collapse the policy onto it at once;
    aggregate      over tokens and sequences (core.LOSS_AGG, `algo.loss_agg`);

then one clipped optimizer step per pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from magrpo import distributed
from magrpo.algos.base import AlgoConfig
from magrpo.algos.core import (
    ADVANTAGE_SCALES,
    ADVANTAGES,
    LOSS_AGG,
    POLICY_LOSSES,
    AggContext,
    k3_kl,
    rollout_logprobs,
    row_chunks,
    row_logprobs,
    shares_prompt,
)
from magrpo.algos.keys import AggregationKeys, ClipKeys, EntropyKeys
from magrpo.algos.optim import clip_and_step
from magrpo.algos.scaffold import TeamAlgorithm
from magrpo.algos.step_metrics import update_phase
from magrpo.models import Agent
from magrpo.rollout import Generation
from magrpo.schema import ConfigError, at_least, option, positive


@dataclass
class GroupRelativeConfig(AlgoConfig, AggregationKeys, ClipKeys, EntropyKeys):
    """The keys of a group-relative update: its advantage within a group and its loss."""

    advantage: str = option("mean", choices=lambda: sorted(ADVANTAGES))  # raw = MAREINFORCE, rloo = MARLOO, max = MAReMax
    scale: str = option("none", choices=lambda: sorted(ADVANTAGE_SCALES))   # divide advantages by (std + 1e-4)
    num_iterations: int = at_least(1, 1)         # > 1: reuse each rollout with PPO-clipped ratios
    # upper clip range of the ratio: 1 + epsilon_high
    epsilon_high: float = positive(0.2)
    ratio_level: str = option("token", choices=["token", "sequence"])   # sequence: GSPO
    # The policy loss (core.POLICY_LOSSES: reinforce, clip, gspo, or a plugin's); null = the one the
    # keys above imply (policy_loss_name).
    loss: str | None = option(None, choices=lambda: sorted(POLICY_LOSSES))

    @staticmethod
    def check_node(node, prefix: str) -> None:
        loss, iterations = node.loss, node.num_iterations
        if loss is not None and loss != "gspo" and node.ratio_level == "sequence":
            raise ConfigError(f"{prefix}ratio_level='sequence' is GSPO's loss, but {prefix}loss={loss!r} is set; "
                              f"set {prefix}loss=gspo (or null), or {prefix}ratio_level=token")
        if loss == "reinforce" and iterations > 1:
            raise ConfigError(f"{prefix}loss='reinforce' has no importance ratio, so it cannot reuse a rollout "
                              f"({prefix}num_iterations={iterations}); set {prefix}loss=clip or gspo, "
                              f"or {prefix}num_iterations=1")


def policy_loss_name(algo) -> str:
    """The policy loss of a group-relative update (core.POLICY_LOSSES): `algo.loss` when set; null
    picks the one the ratio keys imply: GSPO's sequence ratio at `ratio_level=sequence`, the
    token-clipped surrogate when a rollout is reused (`num_iterations` > 1), else the plain
    policy gradient."""
    if algo.loss is not None:
        return algo.loss
    if algo.ratio_level == "sequence":
        return "gspo"
    return "clip" if algo.num_iterations > 1 else "reinforce"


def group_relative_update(algo: Any, agent: Agent, optimizer, scheduler, max_grad_norm: float | None,
                          gen: Generation, adv: torch.Tensor) -> dict[str, float]:
    """`algo.num_iterations` optimizer steps of the policy `agent` on its rows `gen` with one
    advantage per row `adv` (the module docstring); the policy's metrics."""
    agent.activate()
    agent.model.train()
    dev = agent.device
    adv = adv.to(dev)
    mask = gen.completion_mask.to(dev)
    ctx = AggContext.of(mask, algo.max_new_tokens)      # whole-batch sizes (all ranks)
    policy_loss, aggregate = POLICY_LOSSES[policy_loss_name(algo)], LOSS_AGG[algo.loss_agg]
    chunks = row_chunks(mask.shape[0], algo.micro_batch_size, gen.num_generations)
    share = shares_prompt(agent.model, algo.share_prompt)
    temperature = agent.temperature(algo.temperature)
    ref_logp = None
    if algo.beta > 0:
        with agent.reference_mode() as ref:
            ref_logp = rollout_logprobs(ref, gen, chunks, temperature, dev, share)
    old_logp = torch.zeros_like(mask)          # log pi_old: the rollout policy's, filled on the first pass

    totals = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "approx_kl": 0.0,
              "grad_norm": 0.0}
    n_tok = max(ctx.num_tokens, 1)
    for it in range(algo.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        for mb in chunks:
            bonus = algo.ent_coef
            logp, entropy = row_logprobs(agent.model, gen, mb, temperature, dev, share,
                                         with_entropy=(it == 0 or bonus > 0), entropy_grad=bonus > 0)
            m = mask[mb]
            if it == 0:                                  # policy == rollout policy before any update
                old_logp[mb] = logp.detach()
            token_loss, clipped = policy_loss(logp, old_logp[mb], adv[mb], m, algo)
            totals["policy_loss"] += aggregate(token_loss.detach(), m, ctx).item()
            if it > 0:                                   # the passes that follow an update
                totals["clip_frac"] += (clipped * m).sum().item() / n_tok
                totals["approx_kl"] += (k3_kl(old_logp[mb], logp.detach()) * m).sum().item() / n_tok
            if ref_logp is not None:
                kl = k3_kl(logp, ref_logp[mb])
                token_loss = token_loss + algo.beta * kl
                totals["kl"] += (kl.detach() * m).sum().item() / n_tok
            if bonus > 0:
                token_loss = token_loss - bonus * entropy
            loss = aggregate(token_loss, m, ctx)
            loss.backward()
            totals["loss"] += loss.item()
            if it == 0:
                totals["entropy"] += (entropy.detach() * m).sum().item() / n_tok
        totals["grad_norm"] += clip_and_step(agent.trainable_parameters(), optimizer, scheduler, max_grad_norm)
    totals = distributed.sum_dict(totals, skip=("grad_norm",))   # each rank held its share of the batch's
    k = algo.num_iterations
    # Iteration 0 never clips (ratio = 1), so the clip fraction averages the later ones;
    # on-policy REINFORCE (k = 1) logs 0 for a key set that is the same for every run.
    # approx_kl: k3 estimate of KL(pi_old || pi) over the passes that follow an update.
    return {"loss": totals["loss"] / k, "policy_loss": totals["policy_loss"] / k, "kl": totals["kl"] / k,
            "entropy": totals["entropy"], "grad_norm": totals["grad_norm"] / k, "lr": scheduler.get_last_lr()[0],
            "clip_frac": totals["clip_frac"] / (k - 1) if k > 1 else 0.0,
            "approx_kl": totals["approx_kl"] / (k - 1) if k > 1 else 0.0}


class GroupRelativeAlgorithm(TeamAlgorithm):
    """A team algorithm whose update is `group_relative_update` (MAGRPO and its family, C3): each
    subclass adds only how it samples and how it sets the advantages."""

    def steps_per_update(self) -> int:
        return self.algo.num_iterations          # the schedule spans every optimizer step

    @update_phase
    def _update(self, i: int, gen: Generation, adv: torch.Tensor) -> dict[str, float]:
        return group_relative_update(self.algo, self.policies[i], self.optimizers[i], self.schedulers[i],
                                     self.cfg.optimizer.max_grad_norm, gen, adv)
