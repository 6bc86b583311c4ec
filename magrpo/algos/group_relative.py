"""The update every group-relative method shares: its `algo.*` keys and one policy's optimizer steps.

MAGRPO (magrpo.py, and grpo, dr_mas, at_grpo, which subclass it) and C3 (c3.py) compute their
advantages differently, then train each policy alike: for `num_iterations` passes over its rows,
per micro-batch

    log pi_old     the rollout policy's log-probs, fixed on the first pass (ratio 1 there);
    L_t            the policy loss `algo.loss` (losses.POLICY_LOSSES: reinforce, the default, for
                   one pass; clip or gspo to reuse a rollout), the completion's advantage on each token;
    + beta * KL_t  a k3 KL to the frozen reference when beta > 0;
    - c_H * H_t    an entropy bonus when `ent_coef` = c_H > 0, H_t = -sum_v pi(v | c_<t) log pi(v | c_<t)
                   the policy's entropy at completion token t (Williams and Peng, 1991; the term
                   IPPO carries): it pays the policy for keeping its options open, so a group whose
                   rewards all favour one answer does not collapse the policy onto it at once;
    aggregate      over tokens and sequences (aggregation.LOSS_AGG, `algo.loss_agg`);

then one clipped optimizer step per pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch

from magrpo.algos.advantages import ADVANTAGE_SCALES, ADVANTAGES
from magrpo.algos.aggregation import LOSS_AGG, AggContext
from magrpo.algos.keys import ClipKeys, EntropyKeys, LossKeys, check_ratio_loss
from magrpo.algos.logprobs import rollout_logprobs, row_chunks, row_logprobs
from magrpo.algos.losses import POLICY_LOSSES, k3_kl
from magrpo.algos.optim import clip_and_step
from magrpo.algos.scaffold import TeamAlgorithm
from magrpo.algos.step_metrics import update_phase
from magrpo.config.groups import AlgoConfig
from magrpo.core.schema import at_least, option, positive
from magrpo.models import distributed
from magrpo.models.sampler import shares_prompt
from magrpo.rollout.record import Generation


@dataclass
class GroupRelativeConfig(AlgoConfig, LossKeys, ClipKeys, EntropyKeys):
    """The keys of a group-relative update: its advantage within a group and its loss (`loss`:
    reinforce by default, the paper's on-policy policy gradient)."""

    advantage: str = option("mean", choices=lambda: sorted(ADVANTAGES),
                            help="raw = MAREINFORCE, rloo = MARLOO, max = MAReMax")
    scale: str = option("none", choices=lambda: sorted(ADVANTAGE_SCALES),
                        help="divide advantages by (std + 1e-4)")
    num_iterations: int = at_least(1, 1, help="> 1: reuse each rollout (with loss=clip or gspo)")
    epsilon_high: float = positive(0.2, help="upper clip range of the ratio: 1 + epsilon_high")

    @staticmethod
    def check_node(node, prefix: str) -> None:
        n = node.num_iterations
        check_ratio_loss(node, prefix, n, f"{prefix}num_iterations={n}", f"{prefix}num_iterations=1")


# A group-relative algorithm's `algo` schema.
G = TypeVar("G", bound=GroupRelativeConfig)


class GroupRelativeAlgorithm(TeamAlgorithm[G]):
    """A team algorithm whose update is `_update` below (MAGRPO and its family, C3): each subclass
    adds only how it samples and how it sets the advantages."""

    def steps_per_update(self) -> int:
        return self.algo.num_iterations          # the schedule spans every optimizer step

    @update_phase
    def _update(self, i: int, gen: Generation, adv: torch.Tensor) -> dict[str, float]:
        """`algo.num_iterations` optimizer steps of policy i on its rows `gen`, with one advantage
        per row `adv` (the module docstring); the policy's metrics."""
        algo, agent, optimizer, scheduler = self.algo, self.policies[i], self.optimizers[i], self.schedulers[i]
        agent.activate()
        agent.model.train()
        dev = agent.device
        mask = gen.completion_mask.to(dev)
        adv = adv.to(dev).unsqueeze(-1).expand_as(mask)     # the completion's advantage on each of its tokens
        ctx = AggContext.of(mask, algo.max_new_tokens)      # whole-batch sizes (all ranks)
        policy_loss, aggregate = POLICY_LOSSES[algo.loss], LOSS_AGG[algo.loss_agg]
        chunks = row_chunks(mask.shape[0], algo.micro_batch_size, gen.num_generations)
        share = shares_prompt(agent.model, algo.share_prompt)
        temperature = agent.temperature(algo.temperature)
        ref_logp = None
        if algo.beta > 0:
            with agent.reference_mode() as ref:
                ref_logp = rollout_logprobs(ref, gen, chunks, temperature, dev, share)
        old_logp = torch.zeros_like(mask)          # log pi_old: the rollout policy's, filled on the first pass

        totals = dict.fromkeys(("loss", "policy_loss", "kl", "entropy", "clip_frac", "approx_kl", "grad_norm"), 0.0)
        n_tok = max(ctx.num_tokens, 1)
        for it in range(algo.num_iterations):
            optimizer.zero_grad(set_to_none=True)
            for mb in chunks:
                m = mask[mb]
                logp, entropy = row_logprobs(agent.model, gen, mb, temperature, dev, share,
                                             with_entropy=(it == 0 or algo.ent_coef > 0), entropy_grad=algo.ent_coef > 0)
                if it == 0:                              # policy == rollout policy before any update
                    old_logp[mb] = logp.detach()
                pg, info = policy_loss(logp, old_logp[mb], adv[mb], m, algo)     # ratio and surrogate
                token_loss = pg
                if ref_logp is not None:                 # + beta * KL(pi || ref)
                    kl = k3_kl(logp, ref_logp[mb])
                    token_loss = token_loss + algo.beta * kl
                    totals["kl"] += (kl.detach() * m).sum().item() / n_tok
                if algo.ent_coef > 0:                    # - c_H * H
                    token_loss = token_loss - algo.ent_coef * entropy
                loss = aggregate(token_loss, m, ctx)
                loss.backward()
                totals["loss"] += loss.item()
                totals["policy_loss"] += aggregate(pg.detach(), m, ctx).item()
                if it == 0:
                    totals["entropy"] += (entropy.detach() * m).sum().item() / n_tok
                else:                                    # the passes that follow an update
                    totals["clip_frac"] += (info.clipped * m).sum().item() / n_tok
                    totals["approx_kl"] += (info.approx_kl * m).sum().item() / n_tok
            totals["grad_norm"] += clip_and_step(agent.trainable_parameters(), optimizer, scheduler,
                                                 self.cfg.optimizer.max_grad_norm)
        totals = distributed.sum_dict(totals, skip=("grad_norm",))   # each rank held its share of the batch's
        k = algo.num_iterations
        # Iteration 0 never clips (ratio = 1), so the clip fraction averages the later ones;
        # on-policy REINFORCE (k = 1) logs 0 for a key set that is the same for every run.
        # approx_kl: k3 estimate of KL(pi_old || pi) over the passes that follow an update.
        return {"loss": totals["loss"] / k, "policy_loss": totals["policy_loss"] / k, "kl": totals["kl"] / k,
                "entropy": totals["entropy"], "grad_norm": totals["grad_norm"] / k, "lr": float(scheduler.get_last_lr()[0]),
                "clip_frac": totals["clip_frac"] / (k - 1) if k > 1 else 0.0,
                "approx_kl": totals["approx_kl"] / (k - 1) if k > 1 else 0.0}
