"""MAGRPO: Multi-Agent Group Relative Policy Optimization (Liu et al., arXiv 2508.04652).

One step, for a batch of B items and N agents:

  1. every agent samples G completions per item from its own prompt (one batched generate each);
  2. the team is rewarded once per joint action (aligned: G per item, cross: G^N);
  3. each agent's sample k gets a return R_k (its joint reward, or under `cross` the mean over
     the joint actions that contain it) and a group-relative advantage A_k = R_k - b(R);
  4. each agent minimises its own loss  L_i = -E[A * log pi_i(completion | own prompt)]
     (with PPO clipping when num_iterations > 1, and a k3 KL to a reference when beta > 0): the
     update every group-relative method shares, group_relative.py.

The advantage is shared through the joint reward; the gradient of each agent uses only its own
log-probs (centralised training, decentralised execution).

With `num_turns` > 1 the step grows a turn tree (magrpo/rollout/turns.py): every node's return is
R = r + discount * mean(children's R), each sibling set is a group for step 3, and one loss runs
over the samples of every node of every turn.

Options of MAGRPO and the methods that subclass it (grpo, dr_mas, at_grpo; c3 shares only the
update's: loss, loss_agg, epsilon_high, num_iterations):

  * `loss`: the policy loss by name (losses.POLICY_LOSSES, each with its equation), the only key that
    picks it: `reinforce` (the default: the paper's -A log pi, one pass per rollout), `clip` (PPO's
    token-clipped surrogate, to reuse a rollout `num_iterations` > 1 times), `gspo`, or a plugin's
    `register_policy_loss`;

  * `loss=gspo` (GSPO, Zheng et al., arXiv 2507.18071): the importance ratio of a whole
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

  * `epsilon_high` (DAPO's clip-higher) and `loss_agg` (DAPO's `token_mean`).

The update of one policy (group_relative.py) reads: the ratio's pi_old (the rollout policy, fixed
on the first pass), the policy loss, then the aggregation (`loss_agg`).

GRPO (magrpo/algos/grpo.py) is the same algorithm with one agent writing the whole joint answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from magrpo.algos.advantages import advantages, keyed_advantages
from magrpo.algos.base import StepInput, register_algo
from magrpo.algos.group_relative import GroupRelativeAlgorithm, GroupRelativeConfig
from magrpo.algos.keys import CrossCreditKeys, reward_kind
from magrpo.algos.scaffold import Episode, group_items
from magrpo.core.schema import at_least, option
from magrpo.models.agents import Agent
from magrpo.rollout.record import Rollout
from magrpo.rollout.turns import select_prompts


@dataclass
class MAGRPOConfig(GroupRelativeConfig, CrossCreditKeys):
    name: str = "magrpo"
    dynamic_sampling: bool = option(False, help="DAPO: drop groups without signal, draw more")
    dynamic_sampling_rounds: int = at_least(1, 3, help="extra batches drawn at most per step")
    overlong_penalty: float = at_least(0, 0.0, help="DAPO soft overlong punishment (0 = off; DAPO: 1.0)")
    overlong_buffer: int = at_least(1, 4, help="tokens before max_new_tokens where the penalty ramps")


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment of completions of `lengths` tokens (see the module docstring)."""
    buffer = min(buffer, max_len)
    return factor * (((max_len - buffer) - lengths) / buffer).clamp(-1.0, 0.0)


@register_algo("magrpo")
class MAGRPO(GroupRelativeAlgorithm[MAGRPOConfig]):
    config_schema = MAGRPOConfig
    reads_returns = True        # algo.signal_bonus: magrpo/algos/signalling.py

    # -- one training step ----------------------------------------------------------------------
    def step(self, inp: StepInput) -> dict[str, float]:
        ep = self.collect(inp)
        keep = None
        if self.algo.dynamic_sampling:      # DAPO: more batches until B items have signal, then keep those
            keep = self.signal_rows(ep, self.draw_until_signal(ep, inp))
        # A policy's one update runs over the samples of every role it plays, each role's
        # advantages computed within its own groups.
        for p, policy, gen, adv in self.policy_batches(ep, lambda agent: self.role_advantages(agent, ep)):
            if keep is not None:
                rows = torch.cat([keep[a.index] for a in self.trained_roles(p, ep.seat)])
                if rows.any():         # else every group is flat: all advantages are 0, keep the batch
                    gen, adv = select_prompts(gen, rows), adv[rows]
            self.log_policy(ep, policy, self._update(p, gen, adv))
        return ep.finish()

    # -- advantages -------------------------------------------------------------------------------
    def role_returns(self, agent: Agent, ep: Episode) -> list[torch.Tensor]:
        """Per turn, [B_t, S_i] the returns of the agent's samples, minus DAPO's overlong penalty."""
        algo = self.algo
        returns = ep.returns(agent.index, algo.discount, reward_kind(algo), algo.cross_credit)
        if algo.overlong_penalty > 0:
            max_len = agent.max_new_tokens(algo.max_new_tokens)
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
    def draw_until_signal(self, ep: Episode, inp: StepInput) -> set[int]:
        """While fewer than B = len(inp.items) of the episode's items have a sibling set whose returns
        differ, grow up to `dynamic_sampling_rounds` more batches into it (`inp.refill`, else the same
        items again); the items kept: the first B informative ones, numbered across the batches."""
        B, informative, rounds = len(inp.items), self.informative_items(ep.root), 0
        while len(informative) < B and rounds < self.algo.dynamic_sampling_rounds:
            rounds += 1
            more = inp.refill(rounds, B) if inp.refill is not None else inp.items
            root, stats = self.grow(more, inp.seat)
            offset = sum(r.num_items for r in ep.roots)
            informative += [offset + b for b in self.informative_items(root)]
            ep.roots.append(root)
            ep.stats.generate_s += stats.generate_s
            ep.stats.feedback_s += stats.feedback_s
        ep.t_gen = ep.t0 + ep.stats.generate_s       # every round's generation; the rest of it is scoring
        ep.t_reward = time.perf_counter()
        kept = set(informative[:B])
        total = sum(r.num_items for r in ep.roots)
        ep.metrics.update({"train/dynamic_sampling/rounds": float(rounds),
                           "train/dynamic_sampling/items_drawn": float(total),
                           "train/dynamic_sampling/items_kept": float(len(kept)),
                           "train/dynamic_sampling/dropped_groups": 0.0})
        return kept

    @staticmethod
    def informative_items(root: Rollout) -> list[int]:
        """Items of a scored tree with at least one sibling set whose rewards differ."""
        out = set()
        for lv, items in zip(root.levels(), group_items(root)):
            varied = lv.rewards.std(-1, unbiased=False) > 1e-8
            out.update(items[varied].tolist())
        return sorted(out)

    def signal_rows(self, ep: Episode, kept: set[int]) -> dict[int, torch.Tensor]:
        """Per agent, [rows] which of its rows train: those of a `kept` item in a group whose returns differ."""
        keep, dropped = {}, 0
        for agent in self.agents:
            parts = []
            returns = self.role_returns(agent, ep)
            for lv, R, items in zip(ep.levels(), returns, ep.row_items(agent.index)):
                G = lv.samples[agent.index].num_generations
                groups = R.reshape(-1, G)
                varied = (groups.std(-1, unbiased=False) > 1e-8).repeat_interleave(G)
                in_kept = torch.tensor([int(b) in kept for b in items], dtype=torch.bool)
                parts.append(varied & in_kept)
                dropped += int((~(varied & in_kept)).view(-1, G).all(-1).sum())
            keep[agent.index] = torch.cat(parts)
        ep.metrics["train/dynamic_sampling/dropped_groups"] = float(dropped)
        return keep

    # -- the update of one policy (group_relative.py, shared with C3) -----------------------------
