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

Options every group-relative method here shares (grpo, dr_mas, at_grpo, c3 inherit them):
  * `ratio_level=sequence` (GSPO, Zheng et al., arXiv 2507.18071): the importance ratio of a whole
    completion, the geometric mean of its token ratios
        s = exp( (1/|y|) * sum_t [log pi(y_t) - log pi_old(y_t)] ),
    clipped at sequence level: L = -min(s A, clip(s, 1 - eps, 1 + eps_high) A), placed on each of
    the completion's tokens (with `loss_agg=seq_mean_token_mean` this is GSPO's (1/G) sum_i L_i);
  * `dynamic_sampling` (DAPO, Yu et al., arXiv 2503.14476): groups whose returns are all equal
    carry no gradient; they are dropped, and up to `dynamic_sampling_rounds` more batches are drawn
    until B items with signal are held (the first B kept);
  * `overlong_penalty` (DAPO's soft overlong punishment): with L_max = max_new_tokens and a buffer
    of `overlong_buffer` tokens, a completion of L tokens adds to its agent's return
        overlong_penalty * min(0, max(-1, ((L_max - buffer) - L) / buffer)),
    0 up to L_max - buffer, falling linearly to -overlong_penalty at L_max (a cut-off answer);
  * `epsilon_high` (DAPO's clip-higher) and `loss_agg` (DAPO's `token_mean`);
  * `loss`: the policy loss by name (core.POLICY_LOSSES, each with its equation: `reinforce`,
    `clip`, `gspo`, or a plugin's `register_policy_loss`); left null it follows the keys above:
    gspo at `ratio_level=sequence`, clip when `num_iterations` > 1, else reinforce.
The update of one policy reads: the ratio's pi_old (the rollout policy, fixed on the first pass),
the policy loss, then the aggregation (`loss_agg`).

GRPO (magrpo/algos/grpo.py) is the same algorithm with one agent writing the whole joint answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from magrpo import distributed
from magrpo.algos.base import AlgoConfig, register_algo
from magrpo.algos.core import (
    ADVANTAGES,
    LOSS_AGG,
    POLICY_LOSSES,
    SCALES,
    AggContext,
    advantages,
    k3_kl,
    keyed_advantages,
    rollout_logprobs,
    row_chunks,
    row_logprobs,
    shares_prompt,
)
from magrpo.algos.optim import clip_and_step
from magrpo.algos.scaffold import Episode, TeamAlgorithm, group_items
from magrpo.algos.step_metrics import update_phase
from magrpo.models import Agent
from magrpo.rollout import Generation
from magrpo.schema import ConfigError, at_least, option, positive
from magrpo.turns import select_prompts


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
    ratio_level: str = option("token", choices=["token", "sequence"])   # sequence: GSPO
    # The policy loss (core.POLICY_LOSSES: reinforce, clip, gspo, or a plugin's); null = the one the
    # keys above imply (policy_loss_name).
    loss: str | None = option(None, choices=lambda: sorted(POLICY_LOSSES))
    dynamic_sampling: bool = False               # DAPO: drop groups without signal, draw more
    dynamic_sampling_rounds: int = at_least(1, 3)   # extra batches drawn at most per step
    overlong_penalty: float = at_least(0, 0.0)   # DAPO soft overlong punishment (0 = off; DAPO: 1.0)
    overlong_buffer: int = at_least(1, 4)        # tokens before max_new_tokens where the penalty ramps

    @staticmethod
    def check_node(node, prefix: str) -> None:
        loss, iterations = node.get("loss"), node.get("num_iterations", 1)
        if loss is not None and loss != "gspo" and node.get("ratio_level") == "sequence":
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
    if algo.get("loss") is not None:
        return algo.loss
    if algo.get("ratio_level", "token") == "sequence":
        return "gspo"
    return "clip" if algo.num_iterations > 1 else "reinforce"


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment of completions of `lengths` tokens (see the module docstring)."""
    buffer = min(buffer, max_len)
    return factor * (((max_len - buffer) - lengths) / buffer).clamp(-1.0, 0.0)


@register_algo("magrpo")
class MAGRPO(TeamAlgorithm):
    config_schema = MAGRPOConfig

    def steps_per_update(self) -> int:
        return self.algo.num_iterations          # the schedule spans every optimizer step

    # -- one training step ----------------------------------------------------------------------
    def step(self, items: list[dict]) -> dict[str, float]:
        ep = self.collect(items)
        keep = self.signal_rows(ep) if self.algo.dynamic_sampling else None
        # A policy's one update runs over the samples of every role it plays, each role's
        # advantages computed within its own groups.
        for p, policy, gen, adv in self.policy_batches(ep, lambda agent: self.role_advantages(agent, ep)):
            if keep is not None:
                rows = torch.cat([keep[a.index] for a in self.roles[p]])
                if rows.any():         # else every group is flat: all advantages are 0, keep the batch
                    gen, adv = select_prompts(gen, rows), adv[rows]
            self.log_policy(ep, policy, self._update(p, gen, adv))
        return ep.finish()

    # -- advantages -------------------------------------------------------------------------------
    def role_returns(self, agent: Agent, ep: Episode) -> list[torch.Tensor]:
        """Per turn, [B_t, S_i] the returns of the agent's samples, minus DAPO's overlong penalty."""
        algo = self.algo
        returns = ep.returns(agent.index, algo.discount, algo.get("reward", "team"), algo.cross_credit)
        if algo.overlong_penalty > 0:
            max_len = (agent.sampling or {}).get("max_new_tokens", algo.max_new_tokens)
            returns = [R + overlong_penalty(lv.samples[agent.index].lengths, max_len, algo.overlong_buffer,
                                            algo.overlong_penalty).view_as(R)
                       for R, lv in zip(returns, ep.levels())]
        return returns

    def role_advantages(self, agent: Agent, ep: Episode) -> torch.Tensor:
        """[rows] the agent's advantages (`group_advantages` of its returns), with their metrics."""
        returns = self.role_returns(agent, ep)
        adv = self.group_advantages(agent, ep, returns)
        ep.metrics[f"train/{agent.name}/advantage_abs_mean"] = adv.abs().mean().item()
        ep.metrics[f"train/{agent.name}/return_mean"] = torch.cat([R.flatten() for R in returns]).mean().item()
        return adv

    def group_advantages(self, agent: Agent, ep: Episode, returns: list[torch.Tensor]) -> torch.Tensor:
        """Per group, the G_i samples that answer one prompt (an item's, or one prefix's in a
        sequential chain), so a baseline never mixes two prompts. The methods that group otherwise
        (at_grpo, dr_mas) override this."""
        algo = self.algo
        return torch.cat([advantages(R.reshape(-1, lv.samples[agent.index].num_generations), algo.advantage,
                                     algo.scale).flatten() for lv, R in zip(ep.levels(), returns)])

    def item_advantages(self, agent: Agent, ep: Episode, returns: list[torch.Tensor]) -> torch.Tensor:
        """Per turn, a group is every sample of the agent that descends from one item."""
        algo = self.algo
        return torch.cat([keyed_advantages(R.flatten(), items, algo.advantage, algo.scale)
                          for R, items in zip(returns, ep.row_items(agent.index))])

    # -- dynamic sampling (DAPO) --------------------------------------------------------------------
    def collect(self, items: list[dict]) -> Episode:
        ep = super().collect(items)
        if not self.algo.dynamic_sampling:
            return ep
        B, informative, rounds = len(items), self.informative_items(ep.root), 0
        while len(informative) < B and rounds < self.algo.dynamic_sampling_rounds:
            rounds += 1
            more = self.refill(rounds, B) if self.refill is not None else items
            root, stats = self.grow(more)
            offset = sum(r.num_items for r in ep.roots)
            informative += [offset + b for b in self.informative_items(root)]
            ep.roots.append(root)
            ep.stats.generate_s += stats.generate_s
            ep.stats.feedback_s += stats.feedback_s
        ep.t_gen = ep.t0 + ep.stats.generate_s       # every round's generation; the rest of it is scoring
        ep.t_reward = time.perf_counter()
        self._kept_items = set(informative[:B])
        total = sum(r.num_items for r in ep.roots)
        ep.metrics.update({"train/dynamic_sampling/rounds": float(rounds),
                           "train/dynamic_sampling/items_drawn": float(total),
                           "train/dynamic_sampling/items_kept": float(len(self._kept_items)),
                           "train/dynamic_sampling/dropped_groups": 0.0})
        return ep

    @staticmethod
    def informative_items(root) -> list[int]:
        """Items of a scored tree with at least one sibling set whose rewards differ."""
        out = set()
        for lv, items in zip(root.levels(), group_items(root)):
            varied = lv.rewards.std(-1, unbiased=False) > 1e-8
            out.update(items[varied].tolist())
        return sorted(out)

    def signal_rows(self, ep: Episode) -> dict[int, torch.Tensor]:
        """Per agent, [rows] which of its rows train: those of a kept item in a group whose returns differ."""
        keep, dropped = {}, 0
        for agent in self.agents:
            parts = []
            returns = self.role_returns(agent, ep)
            for lv, R, items in zip(ep.levels(), returns, ep.row_items(agent.index)):
                G = lv.samples[agent.index].num_generations
                groups = R.reshape(-1, G)
                varied = (groups.std(-1, unbiased=False) > 1e-8).repeat_interleave(G)
                kept = torch.tensor([int(b) in self._kept_items for b in items], dtype=torch.bool)
                parts.append(varied & kept)
                dropped += int((~(varied & kept)).view(-1, G).all(-1).sum())
            keep[agent.index] = torch.cat(parts)
        ep.metrics["train/dynamic_sampling/dropped_groups"] = float(dropped)
        return keep

    # -- the update of one policy ------------------------------------------------------------------
    @update_phase
    def _update(self, i: int, gen: Generation, adv: torch.Tensor) -> dict[str, float]:
        """`num_iterations` optimizer steps of policy i on its rows `gen` with advantages `adv`:
        per micro-batch, the ratio's pi_old, the policy loss (POLICY_LOSSES), a k3 KL to the
        reference when beta > 0, and the aggregation (LOSS_AGG)."""
        algo, agent = self.algo, self.policies[i]
        optimizer, scheduler = self.optimizers[i], self.schedulers[i]
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
                logp, entropy = row_logprobs(agent.model, gen, mb, temperature, dev, share, with_entropy=(it == 0))
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
                loss = aggregate(token_loss, m, ctx)
                loss.backward()
                totals["loss"] += loss.item()
                if entropy is not None:
                    totals["entropy"] += (entropy * m).sum().item() / n_tok
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
