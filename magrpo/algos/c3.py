"""C3: counterfactual credit for sequential teams (Chen et al., arXiv 2603.06859).

In a sequential team (agent i answers after seeing agents 1..i-1), a joint reward cannot say which
agent's message made it. C3 asks, for each decision, what would have happened had the agent said
something else, with everything else held fixed:

  1. freeze the context of agent i's decision: the answers of agents 1..i-1;
  2. sample K alternatives a_1..a_K of agent i from that context (K = `algo.num_generations`);
  3. score each by replaying a fixed continuation: agents i+1..N answer greedily (argmax decoding,
     no seed involved) with the current policies, given the context and a_k; R_k is the team's
     reward of that joint answer;
  4. leave-one-out baseline, broadcast to the tokens of a_k:
        A_k = R_k - (1 / (K - 1)) * sum_{j != k} R_j            (`advantage=rloo`)
  5. a PPO-style update of agent i on its alternatives: the clipped surrogate over
     `num_iterations` passes (the group-relative update MAGRPO uses, group_relative.py, with its
     loss options: `loss=clip` by default).

The context of agent i + 1's decision is agent i's first alternative (a sample of the policy)
after the same context, so every context is on-policy.

Cost: decision i generates K alternatives and K (N - i) continuations, so a step generates
K N (N + 1) / 2 sequences per item (K = 4, N = 2: 12; MAGRPO: N K = 8), logged as
`train/sequences_per_item`; rewards per item: K N.

C3 needs a sequential team with one turn (`algo.topology=sequential`, `algo.num_turns=1`); the
team is evaluated as the chain it trains (the `sequential` scheme).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from magrpo.algos.advantages import ADVANTAGES, advantages
from magrpo.algos.base import StepInput, register_algo
from magrpo.algos.group_relative import GroupRelativeAlgorithm, GroupRelativeConfig
from magrpo.algos.losses import POLICY_LOSSES
from magrpo.algos.scaffold import Episode
from magrpo.algos.step_metrics import reward_metrics
from magrpo.config.run import RunConfig
from magrpo.core.schema import ConfigError, at_least, option
from magrpo.models.agents import Agent
from magrpo.rollout.record import Generation, Rollout, Sampling, chain_prompt, generate, team_budget
from magrpo.rollout.turns import TreeStats, concat_generations, one_per_prompt, select_prompts
from magrpo.tasks import Task


@dataclass
class C3Config(GroupRelativeConfig):
    """AlgoConfig's keys and the group-relative update's (group_relative.py): C3 draws its own
    alternatives, so MAGRPO's cross_credit, dynamic sampling and overlong penalty are not its keys."""

    name: str = "c3"
    topology: str = option("sequential", choices=["simultaneous", "sequential"], help="C3 needs: sequential")
    advantage: str = option("rloo", choices=lambda: sorted(ADVANTAGES), help="leave-one-out")
    num_iterations: int = at_least(1, 2, help="PPO-style: each rollout is reused with clipped ratios")
    loss: str = option("clip", choices=lambda: sorted(POLICY_LOSSES),
                       help="the policy loss (losses.POLICY_LOSSES): PPO's "
                            "token-clipped surrogate, for the reused rollouts")


def first_answers(gen: Generation) -> Generation:
    """The first sample of every prompt, as a Generation with one row per prompt (a copy: it costs
    no generation time of its own)."""
    rows = torch.zeros(len(gen.texts), dtype=torch.bool)
    rows[::gen.num_generations] = True
    return replace(select_prompts(one_per_prompt(gen), rows), seconds=0.0, sample_seconds=0.0)


def counterfactual_rollouts(agents: list[Agent], task: Task, items: list[dict],
                            sampling: Sampling) -> tuple[list[Rollout], list[Generation]]:
    """One scored Rollout per decision (agent) of the chain, and the generations that were sampled
    for it (alternatives and continuations). Decision i's joint action k holds the frozen context
    (agents < i: their first alternative, one per item), alternative k of agent i, and the greedy
    continuation of agents > i after it."""
    N, K, B = len(agents), sampling.num_generations, len(items)
    sampling = team_budget(sampling, task, N)
    greedy = replace(sampling, num_generations=1, do_sample=False)
    bases = [task.prompts(item, N) for item in items]
    context: list[dict[int, str]] = [{} for _ in items]
    frozen: list[Generation] = []
    decisions, generated = [], []
    for i in range(N):
        alts = generate(agents[i], [chain_prompt(task, items[b], i, bases[b][i], context[b]) for b in range(B)], sampling)
        gens = [*frozen, alts]
        chain = [{**context[r // K], i: alts.texts[r]} for r in range(B * K)]
        for j in range(i + 1, N):          # the fixed continuation
            cont = generate(agents[j], [chain_prompt(task, items[r // K], j, bases[r // K][j], chain[r])
                                        for r in range(B * K)], greedy)
            for r in range(B * K):
                chain[r][j] = cont.texts[r]
            gens.append(cont)
        generated += gens[i:]
        joint = torch.tensor([[0] * i + [k] * (N - i) for k in range(K)], dtype=torch.long)
        decisions.append(Rollout(list(items), gens, joint))
        frozen.append(first_answers(alts))
        for b in range(B):
            context[b][i] = alts.texts[b * K]
    return decisions, generated


@register_algo("c3")
class C3(GroupRelativeAlgorithm[C3Config]):
    config_schema = C3Config

    @classmethod
    def check_config(cls, cfg: RunConfig, task_cls: type[Task]) -> None:
        a = cfg.algo
        for key, value, bad, why in [("topology", a.topology, a.topology != "sequential",
                                      "it credits each decision of a chain by replaying the agents after it; a "
                                      "simultaneous team has no 'after' (set algo.topology=sequential)"),
                                     ("num_turns", a.num_turns, a.num_turns != 1,
                                      "its counterfactuals replay one turn of the chain"),
                                     ("branching", a.branching, a.branching is not None,
                                      "it samples algo.num_generations alternatives per decision")]:
            if bad:
                raise ConfigError(f"algo.{key}={value} does not apply to algo=c3: {why}; "
                                  f"leave it at its default")

    def collect(self, inp: StepInput) -> Episode:
        t0 = time.perf_counter()
        decisions, generated = counterfactual_rollouts(self.players(inp.seat), self.task, inp.items, self.sampling)
        t_gen = time.perf_counter()
        for d in decisions:
            d.score(self.task)
        stats = TreeStats(generate_s=t_gen - t0)
        ep = Episode(decisions, stats, self.task, len(self.agents), t0, t_gen, time.perf_counter(),
                     clock=self.update_clock, seat=inp.seat)
        ep.cache["generated"] = generated
        ep.metrics.update(reward_metrics(decisions[0]))      # decision 1: the team as a whole
        for i, d in enumerate(decisions):
            ep.metrics[f"train/c3/decision_{i + 1}/reward_mean"] = d.rewards.mean().item()
        return ep

    def step(self, inp: StepInput) -> dict[str, float]:
        ep = self.collect(inp)
        for p in range(len(self.roles)):
            roles = self.trained_roles(p, ep.seat)
            if not roles:                    # a partner plays every role of this policy this step
                continue
            # Agent i trains on its own decision's alternatives, each with its leave-one-out advantage.
            gens, advs = [], []
            for agent in roles:
                d = ep.roots[agent.index]
                R = d.rewards                                                   # [B, K]
                adv = advantages(R, self.algo.advantage, self.algo.scale).flatten()
                gens.append(d.samples[agent.index])
                advs.append(adv)
                ep.metrics[f"train/{agent.name}/advantage_abs_mean"] = adv.abs().mean().item()
                ep.metrics[f"train/{agent.name}/return_mean"] = R.mean().item()
            gen = concat_generations(gens, roles[0].tokenizer.pad_token_id)
            self.log_policy(ep, roles[0], self._update(p, gen, torch.cat(advs)))
        metrics = ep.finish()
        # The step's true cost: the sequences sampled (alternatives and continuations), not the
        # frozen contexts each decision's record repeats.
        generated = ep.cache["generated"]
        tokens = sum(g.lengths.sum().item() for g in generated)
        rows = sum(len(g.texts) for g in generated)
        metrics.update({"train/sequences_per_item": rows / len(inp.items), "train/completions/tokens": float(tokens),
                        "train/completions/mean_length": tokens / max(rows, 1),
                        "speed/tokens_per_s": tokens / metrics["time/step_s"]})
        return metrics
