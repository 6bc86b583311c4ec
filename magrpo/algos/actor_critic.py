"""CoLLM-DC (`algo=iac`) and CoLLM-CC (`algo=maac`): multi-agent actor-critic with turn-level
critics (Liu, Chen, Amiri and Amato, "Learning Decentralized LLM Collaboration with Multi-Agent
Actor Critic", arXiv 2601.21972).

A critic gives one value per agent turn (a node of the turn tree), not one per token:
  iac  (decentralized): one critic per policy, on the agent's own history h_{i,t} (its prompt);
  maac (centralized):   one critic for the team, on the joint history h_t (every agent's prompt).
With `critic_type=v` it is V(h_t); with `critic_type=q` it is Q(h_t, a_t) (the history and the
answer: the agent's own for iac, the joint answer for maac), and V(h) is taken as the mean of Q
over the answers sampled from h.

The turn-level TD(0) error (gamma = `algo.discount`, V = 0 after the last turn or a stopped one):

    y_t     = r_t + gamma * V(h_{t+1})                        (the critic's target, no gradient)
    delta_t = y_t - V(h_t)

Each agent's actor follows its own log-probability times the team's TD error, on-policy, with no
ratio and no clipping (as in the paper):

    L_actor  = -delta_t * log pi_i(a_{i,t} | h_{i,t})  - ent_coef * H(pi_i)   (aggregated by `loss_agg`)
    L_critic = vf_coef * 0.5 * (V(h_t) - y_t)^2         (Q(h_t, a_t) for critic_type=q)

(the actor's term is the registered policy loss `loss`, `reinforce` by default, with delta_t as
its advantage on each token of the turn's answer).

r_t is the turn's reward (the team's, or for iac with `reward=individual` the agent's share),
credited to a sample as MAGRPO credits it (the mean over the joint actions that contain it). A
node left unexpanded by `max_branches` takes its expanded siblings' mean V(h_{t+1}).

The critic is a value head on a policy's backbone (`critic=head`: iac's on each policy's own,
maac's on the first policy's, trained in that policy's update) or a separate model
(`critic=model`, `critic_model`, its own optimizer and `critic_lr`); either reads text, so a
separate critic may have its own tokenizer. Unlike IPPO/MAPPO (ippo.py), there are no per-token
values, no GAE, no PPO epochs: one on-policy update per step.

maac needs a simultaneous team: its V(h_t) is the state before the agents act together; in a
sequential team agent i's state already holds earlier answers of the same turn (use iac there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from magrpo.algos.aggregation import LOSS_AGG, AggContext
from magrpo.algos.base import StepInput, register_algo
from magrpo.algos.critics import CriticConfig, TurnCritic
from magrpo.algos.keys import CrossCreditKeys, EntropyKeys, LossKeys, RewardKeys, ValueKeys
from magrpo.algos.logprobs import row_chunks, row_logprobs
from magrpo.algos.losses import POLICY_LOSSES
from magrpo.algos.optim import clip_and_step
from magrpo.algos.scaffold import CriticParts, Episode, TeamAlgorithm
from magrpo.algos.step_metrics import update_phase
from magrpo.config.run import RunConfig
from magrpo.core.schema import ConfigError, option
from magrpo.models import distributed
from magrpo.models.agents import Agent
from magrpo.models.sampler import shares_prompt
from magrpo.rollout.record import Generation, Rollout, credit
from magrpo.tasks import Task


@dataclass
class IACConfig(CriticConfig, RewardKeys, CrossCreditKeys, LossKeys, ValueKeys, EntropyKeys):
    """critic_model (critic=model) may have its own tokenizer: a turn-level critic reads text.
    `loss`: reinforce (the paper's -delta log pi), or a plugin's; clip and gspo read a clip range
    this on-policy actor has no key for."""

    name: str = "iac"
    critic_type: str = option("v", choices=["v", "q"], help="V(h_t) or Q(h_t, a_t)")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        if node.loss in ("clip", "gspo"):
            raise ConfigError(f"{prefix}loss={node.loss!r} clips an importance ratio, but this actor takes one "
                              f"on-policy step per rollout (ratio 1) and has no clip range ({prefix}epsilon); "
                              f"choose {prefix}loss=reinforce (the paper's) or a registered loss of your own")


@dataclass
class MAACConfig(IACConfig):
    name: str = "maac"
    critic: str = option("model", choices=["head", "model"],
                         help="the paper's shared critic is its own model")
    reward: str = option("team", choices=["team"], help="one critic of the team's return")


def joint_history(prompts: list[str], answers: list[str] | None = None) -> str:
    """What the centralized critic reads: every agent's prompt (and, for Q, its answer)."""
    parts = []
    for j, p in enumerate(prompts):
        part = f"[Agent {j + 1}] task:\n{p.strip()}"
        if answers is not None:
            part += f"\n[Agent {j + 1}] answer:\n{answers[j].strip()}"
        parts.append(part)
    return "\n\n".join(parts)


@dataclass
class CriticBatch:
    """One critic's inputs of a step and their TD targets."""

    texts: list[str]
    targets: torch.Tensor


@register_algo("iac")
class IAC(TeamAlgorithm[IACConfig]):
    """CoLLM-DC: decentralized actor-critic, one turn-level critic per policy on the agent's own history."""

    config_schema = IACConfig
    centralized = False

    @classmethod
    def check_config(cls, cfg: RunConfig, task_cls: type[Task]) -> None:
        if cfg.algo.beta > 0:
            raise ConfigError(f"algo.beta={cfg.algo.beta} is not used by algo={cls.name}: its actor follows the TD "
                              f"error alone, with no KL term; set algo.beta=0")
        if cls.centralized and cfg.algo.topology == "sequential":
            raise ConfigError(f"algo.topology='sequential' is not allowed for algo={cls.name}: its centralized "
                              f"V(h_t) is the state before the agents act together, and in a chain agent i's "
                              f"state already holds earlier answers; use algo=iac, or algo.topology=simultaneous")

    def critic_owners(self) -> list[Agent]:
        """The policy each critic rides on: maac's one critic on the first policy, iac's one per policy."""
        return [self.policies[0]] if self.centralized else self.policies

    def build_critics(self) -> list[CriticParts]:
        algo, n = self.algo, len(self.agents)
        length = algo.max_prompt_length * (n if self.centralized else 1) + algo.max_new_tokens * n
        return [self.critic_parts(TurnCritic(algo.critic, p, algo.critic_model, length), p, algo.critic_lr)
                for p in self.critic_owners()]

    def extra_parameters(self, policy: int) -> list[torch.nn.Parameter]:
        if policy >= len(self.critics) or self.critics[policy].kind != "head":
            return []
        return list(self.critics[policy].head.parameters())      # a head trains with the policy it rides on

    def critic_of(self, agent: Agent) -> int:
        """The critic that values agent's turns: maac's one, or its policy's."""
        return 0 if self.centralized else next(k for k, roles in enumerate(self.roles) if agent in roles)

    # -- one training step ----------------------------------------------------------------------------
    def step(self, inp: StepInput) -> dict[str, float]:
        ep = self.collect(inp)
        deltas, batches = self.td_errors(ep)                     # advantages: the turn-level TD errors
        for p, policy, gen, delta in self.policy_batches(ep, lambda agent: deltas[agent.index]):
            own = [c for c in range(len(self.critics)) if self.critics[c].kind == "head" and c == p]
            stats = self._update(p, gen, delta, {c: batches[c] for c in own})
            self.log_policy(ep, policy, stats)
        for c, critic in enumerate(self.critics):                # separate critic models step on their own
            if critic.kind != "head":
                stats = self._update_critic(c, batches[c])
                ep.metrics.update({f"train/critic_{c + 1}/{k}": v for k, v in stats.items()})
        return ep.finish()

    # -- the critic's view -------------------------------------------------------------------------------
    def state_texts(self, lv: Rollout, i: int) -> list[str]:
        """The histories agent i's samples at this turn start from, one per prompt row (iac: its own
        prompt; maac: every agent's prompt of the group)."""
        if self.centralized:
            return [joint_history([g.prompts[b] for g in lv.samples]) for b in range(lv.num_items)]
        return list(lv.samples[i].prompts)

    def action_texts(self, lv: Rollout, i: int) -> list[str]:
        """Q's inputs: iac, one per sample row of agent i (its prompt and answer); maac, one per
        joint action (the group's prompts and every agent's answer)."""
        if self.centralized:
            return [joint_history(p, a) for p, a in zip(lv.prompts, lv.completions)]
        g = lv.samples[i]
        G = g.num_generations
        return [f"{g.prompts[r // G].strip()}\n{t.strip()}" for r, t in enumerate(g.texts)]

    @torch.no_grad()
    def values(self, c: int, texts: list[str]) -> torch.Tensor:
        """[len(texts)] critic c's values of `texts` (no gradient), micro-batched."""
        critic, owner = self.critics[c], self.policies[0 if self.centralized else c]
        if critic.kind == "head":
            owner.model.eval()
        size = max(self.algo.micro_batch_size, 1)
        out = torch.cat([critic(owner, texts[s:s + size]) for s in range(0, len(texts), size)]) if texts else torch.zeros(0)
        return out.float().cpu()

    def td_errors(self, ep: Episode) -> tuple[dict[int, torch.Tensor], dict[int, CriticBatch]]:
        """Per agent, [rows] the TD error of each of its samples, turn by turn; per critic, its inputs
        and TD targets (see the module docstring)."""
        algo, q = self.algo, self.algo.critic_type == "q"
        levels = ep.levels()
        deltas: dict[int, list[torch.Tensor]] = {a.index: [] for a in self.agents}
        texts: dict[int, list[str]] = {c: [] for c in range(len(self.critics))}
        targets: dict[int, list[torch.Tensor]] = {c: [] for c in range(len(self.critics))}
        # V(h_t) of every group of every turn, per agent (maac: the same for every agent)
        values: dict[tuple[int, int], torch.Tensor] = {}
        inputs: dict[tuple[int, int], list[str]] = {}
        for t, lv in enumerate(levels):
            for agent in self.agents:
                i, c = agent.index, self.critic_of(agent)
                if self.centralized and i > 0:
                    values[t, i], inputs[t, i] = values[t, 0], inputs[t, 0]
                    continue
                inputs[t, i] = self.action_texts(lv, i) if q else self.state_texts(lv, i)
                values[t, i] = self.values(c, inputs[t, i])
        for t, lv in enumerate(levels):
            child = levels[t + 1] if t + 1 < len(levels) and levels[t + 1].parents is not None else None
            for agent in self.agents:
                i, c = agent.index, self.critic_of(agent)
                S = lv.per_item(i)
                G = lv.samples[i].num_generations
                r = lv.rewards if algo.reward == "team" else ep.turn_shares(lv, i)           # [B_t, J]
                nxt = self.next_values(lv, child, values[t + 1, i], i) if child is not None else torch.zeros_like(r)
                y_nodes = r + algo.discount * nxt                                                # [B_t, J]
                y = credit(y_nodes, lv.joint, i, S, algo.cross_credit)                           # [B_t, S]
                baseline = self.state_value(lv, values[t, i], i).view_as(y)
                deltas[i].append((y - baseline).flatten())
                if self.centralized and i > 0:
                    continue
                texts[c] += inputs[t, i]
                if q:       # Q(h, a) regresses on the target of its own joint action (maac) or sample (iac)
                    targets[c].append((y_nodes if self.centralized else y).flatten())
                elif self.centralized:   # V(h) of a group on the mean target of its joint actions
                    targets[c].append(y_nodes.mean(-1))
                else:                    # V(h) of a prompt row on the mean target of its G samples
                    targets[c].append(y.reshape(-1, G).mean(-1))
        out = {i: torch.cat(d) for i, d in deltas.items()}
        for agent in self.agents:
            ep.metrics[f"train/{agent.name}/advantage_abs_mean"] = out[agent.index].abs().mean().item()
            ep.metrics[f"train/{agent.name}/return_mean"] = torch.cat(
                [r.flatten() for r in ep.returns(agent.index, algo.discount, algo.reward, algo.cross_credit)]).mean().item()
        return out, {c: CriticBatch(texts[c], torch.cat(targets[c])) for c in texts}

    def state_value(self, lv: Rollout, v: torch.Tensor, i: int) -> torch.Tensor:
        """[B_t * S_i] V(h_t) of each of agent i's samples (the value of the state it answered)."""
        G = lv.samples[i].num_generations
        if self.algo.critic_type == "v":
            return v.repeat_interleave(lv.per_item(i) if self.centralized else G)
        if self.centralized:                         # mean Q over the group's joint actions
            return v.view(lv.num_items, -1).mean(-1).repeat_interleave(lv.per_item(i))
        return v.view(-1, G).mean(-1).repeat_interleave(G)   # mean Q over the answers to its prompt

    def next_values(self, lv: Rollout, child: Rollout, v_next: torch.Tensor, i: int) -> torch.Tensor:
        """[B_t, J] V(h_{t+1}) of every joint action of `lv`: its child group's V (averaged over
        agent i's prompts there); unexpanded siblings take the expanded ones' mean, and a set with
        none expanded (the episode stopped) gets 0."""
        state = self.state_value(child, v_next, i).view(child.num_items, -1).mean(-1)    # per child group
        B, J = lv.num_items, lv.num_joint
        future, has = torch.zeros(B * J), torch.zeros(B * J, dtype=torch.bool)
        future[child.parents], has[child.parents] = state, True
        future, has = future.view(B, J), has.view(B, J)
        fill = (future * has).sum(-1, keepdim=True) / has.sum(-1, keepdim=True).clamp(min=1)
        return torch.where(has, future, fill)

    # -- the updates --------------------------------------------------------------------------------------
    def _critic_loss(self, c: int, batch: CriticBatch, scale: float) -> tuple[float, float]:
        """Backward the critic's loss over its inputs (micro-batched); (loss, value mean)."""
        critic, owner = self.critics[c], self.policies[0 if self.centralized else c]
        total, vsum = 0.0, 0.0
        n = len(batch.texts)
        size = max(self.algo.micro_batch_size, 1)
        for s in range(0, n, size):
            v = critic(owner, batch.texts[s:s + size])
            y = batch.targets[s:s + size].to(v.device)
            loss = scale * 0.5 * ((v - y) ** 2).sum() / max(n, 1)
            loss.backward()
            total += loss.item()
            vsum += v.detach().sum().item()
        return total, vsum / max(n, 1)

    @update_phase
    def _update(self, p: int, gen: Generation, delta: torch.Tensor, critics: dict[int, CriticBatch]) -> dict[str, float]:
        algo, agent = self.algo, self.policies[p]
        optimizer, scheduler = self.optimizers[p], self.schedulers[p]
        agent.activate()
        agent.model.train()
        dev = agent.device
        mask = gen.completion_mask.to(dev)
        delta = delta.to(dev).unsqueeze(-1).expand_as(mask)    # the turn's TD error on each of its tokens
        ctx = AggContext.of(mask, algo.max_new_tokens)
        policy_loss, aggregate = POLICY_LOSSES[algo.loss], LOSS_AGG[algo.loss_agg]
        share = shares_prompt(agent.model, algo.share_prompt)
        optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(("loss", "policy_loss", "entropy", "clip_frac", "approx_kl"), 0.0)
        n_tok = max(ctx.num_tokens, 1)
        for mb in row_chunks(mask.shape[0], algo.micro_batch_size, gen.num_generations):
            logp, entropy = row_logprobs(agent.model, gen, mb, agent.temperature(algo.temperature), dev, share,
                                         with_entropy=True, entropy_grad=algo.ent_coef > 0)
            m = mask[mb]
            # -delta_t * log pi_i(a_i,t | h_i,t) (reinforce: no ratio, one on-policy step; pi_old = pi)
            pg, info = policy_loss(logp, logp.detach(), delta[mb], m, algo)
            loss = aggregate(pg - algo.ent_coef * entropy, m, ctx)
            loss.backward()
            sums["loss"] += loss.item()
            sums["policy_loss"] += aggregate(pg.detach(), m, ctx).item()
            sums["entropy"] += (entropy.detach() * m).sum().item() / n_tok
            sums["clip_frac"] += (info.clipped * m).sum().item() / n_tok        # 0 on-policy, as approx_kl
            sums["approx_kl"] += (info.approx_kl * m).sum().item() / n_tok
        stats = distributed.sum_dict(sums)
        for c, batch in critics.items():              # a head critic's loss joins its policy's step
            stats["value_loss"], stats["value_mean"] = self._critic_loss(c, batch, algo.vf_coef)
            agent.model.train()
        stats["grad_norm"] = clip_and_step(agent.trainable_parameters() + self.extra_parameters(p), optimizer,
                                           scheduler, self.cfg.optimizer.max_grad_norm)
        stats.update({"lr": float(scheduler.get_last_lr()[0]), "kl": 0.0})
        return stats

    @update_phase
    def _update_critic(self, c: int, batch: CriticBatch) -> dict[str, float]:
        critic, opt, sch = self.critics[c], self.critic_optimizers[c], self.critic_schedulers[c]
        critic.train()
        opt.zero_grad(set_to_none=True)
        loss, vmean = self._critic_loss(c, batch, 1.0)
        norm = clip_and_step(list(critic.parameters()), opt, sch, self.cfg.optimizer.max_grad_norm)
        return {"value_loss": loss, "value_mean": vmean, "grad_norm": norm, "lr": sch.get_last_lr()[0]}


@register_algo("maac")
class MAAC(IAC):
    """CoLLM-CC: centralized actor-critic, one turn-level critic of the team on the joint history."""

    config_schema = MAACConfig
    algo: MAACConfig           # its config_schema's instance (checked when built: TeamAlgorithm.reads)
    centralized = True
