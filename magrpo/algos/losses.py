"""Losses: the per-token terms of every algorithm's update, each written once.

- POLICY_LOSSES (`algo.loss`): the policy's per-token loss. `reinforce` (the plain policy
  gradient), `clip` (PPO's clipped surrogate, with DAPO's clip-higher), `gspo` (GSPO's sequence
  ratio), or a plugin's (`register_policy_loss`). Every algorithm calls the one its `algo.loss`
  names, so a registered loss trains every method. Each returns its diagnostics (PolicyLossInfo).
- clipped_value_loss: the critic's per-token loss (the PPO family).
- k3_kl and AdaptiveKLController: the KL to the frozen reference and its coefficient.

An update then adds the terms it uses and aggregates them (magrpo.algos.aggregation):

    loss = aggregate( L_policy + vf_coef * L_value + beta * KL - ent_coef * H )
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from magrpo.config.groups import AlgoConfig
from magrpo.core.registry import Registry, registrar
from magrpo.core.schema import ConfigError
from magrpo.models import distributed


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


# --- the PPO objective -----------------------------------------------------------------------------


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float,
                      eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A), r = pi/pi_old; and where it clipped.

    At r = 1 (the first pass over a fresh rollout) its gradient is the plain policy gradient -A grad log pi.
    """
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    loss = -torch.minimum(ratio * adv, clipped * adv)
    return loss, (ratio != clipped).float()


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[n] log of GSPO's sequence ratio (arXiv 2507.18071, eq. 7): the mean over a completion's
    tokens of log pi - log pi_old, i.e. the log of the geometric mean of its token ratios."""
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)


@runtime_checkable
class ClipRange(Protocol):
    """An `algo` schema with a clip range: keys.ClipKeys's `epsilon` (the PPO family's, symmetric).
    Its schemas compose ClipKeys (magrpo.algos.keys), which reads this module's registry: so the
    losses name its keys by their shape."""

    epsilon: float


@runtime_checkable
class ClipHigher(ClipRange, Protocol):
    """A clip range with DAPO's clip-higher: the group-relative update's `epsilon_high`
    (group_relative.GroupRelativeConfig)."""

    epsilon_high: float


def clip_range(algo: AlgoConfig) -> tuple[float, float]:
    """(eps_low, eps_high): `algo.epsilon`, and `algo.epsilon_high` where the algorithm has that key
    (the group-relative update's clip-higher); the PPO family clips symmetrically."""
    if isinstance(algo, ClipHigher):
        return algo.epsilon, algo.epsilon_high
    if isinstance(algo, ClipRange):
        return algo.epsilon, algo.epsilon
    raise ConfigError(f"algo={algo.name} has no clip range (algo.epsilon), and its algo.loss clips an importance "
                      f"ratio (clip, gspo); choose algo.loss=reinforce")


# --- policy losses ---------------------------------------------------------------------------------
#
# A policy loss maps (logp [n, T] with gradient, old_logp [n, T] of the rollout policy pi_old,
# adv [n, T] per-token advantages, mask [n, T], the `algo` config) to (per-token loss [n, T],
# PolicyLossInfo), before aggregation (LOSS_AGG) and before any KL, value or entropy term. A method
# with one advantage per completion (the group-relative ones, iac/maac) broadcasts it to the
# completion's tokens; the PPO family's are GAE's. On the first pass over a rollout
# old_logp == logp.detach(): ratio 1. `algo.loss` names one; each algorithm's schema gives its default.


@dataclass
class PolicyLossInfo:
    """What a policy loss reports beside its loss, per token [n, T] and without gradient; the update
    averages each over the batch's tokens and logs it as train/<policy>/clip_frac and .../approx_kl.

    clipped:   1 where the loss clipped the ratio (no gradient flows there), else 0;
    approx_kl: Schulman's k3 estimate of KL(pi_old || pi): how far the policy moved from the rollout's.
    """

    clipped: torch.Tensor
    approx_kl: torch.Tensor

    @classmethod
    def of(cls, logp: torch.Tensor, old_logp: torch.Tensor, clipped: torch.Tensor | None = None) -> PolicyLossInfo:
        """The info of a loss that clipped where `clipped` is 1 (None: nowhere)."""
        return cls(torch.zeros_like(logp) if clipped is None else clipped, k3_kl(old_logp, logp.detach()))


def sequence_advantage(adv: torch.Tensor) -> torch.Tensor:
    """[n] one advantage per completion from per-token ones [n, T]: the first token's (the
    completion's own where one was broadcast; R - V(prompt) under GAE with gamma = lam = 1)."""
    return adv[:, 0]


def _reinforce_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                    algo: AlgoConfig) -> tuple[torch.Tensor, PolicyLossInfo]:
    """The plain policy gradient (REINFORCE with a baseline: MAGRPO's on-policy loss, the
    actor-critic methods' -delta log pi):
        L_t = -A_t * log pi(y_t | x, y_<t),   grad L_t = -A_t * grad log pi.
    No ratio: old_logp is not read, nothing clips (so it is for one pass over a rollout)."""
    return -adv * logp, PolicyLossInfo.of(logp, old_logp)


def _clip_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
               algo: AlgoConfig) -> tuple[torch.Tensor, PolicyLossInfo]:
    """PPO's token-level clipped surrogate (Schulman et al., arXiv 1707.06347), with DAPO's
    clip-higher (Yu et al., arXiv 2503.14476, eq. 8-10: eps_high > eps_low keeps low-probability
    tokens free to rise):
        r_t = pi(y_t) / pi_old(y_t),   L_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
    with eps_low = `algo.epsilon`, eps_high = `algo.epsilon_high` (clip_range)."""
    loss, clipped = clipped_surrogate(logp, old_logp, adv, *clip_range(algo))
    return loss, PolicyLossInfo.of(logp, old_logp, clipped)


def _gspo_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
               algo: AlgoConfig) -> tuple[torch.Tensor, PolicyLossInfo]:
    """GSPO's sequence-level clipped loss (Zheng et al., arXiv 2507.18071, eq. 5-7): one ratio per
    completion y, the geometric mean of its token ratios,
        s(y) = exp( (1/|y|) * sum_t [log pi(y_t) - log pi_old(y_t)] ),
        L(y) = -min(s A, clip(s, 1 - eps_low, 1 + eps_high) A),   A = sequence_advantage(adv),
    placed on each of y's tokens (with `loss_agg=seq_mean_token_mean` the batch loss is GSPO's
    (1/G) sum_i L(y_i)); a completion clips as a whole. Even on-policy (s = 1) its gradient carries
    the 1/|y| weighting: A * (1/|y|) * sum_t grad log pi(y_t)."""
    log_s = sequence_log_ratio(logp, old_logp, mask)
    seq_loss, clipped = clipped_surrogate(log_s, torch.zeros_like(log_s), sequence_advantage(adv), *clip_range(algo))
    return seq_loss.unsqueeze(-1).expand_as(logp), PolicyLossInfo.of(logp, old_logp, clipped.unsqueeze(-1).expand_as(logp))


PolicyLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, AlgoConfig],
                      tuple[torch.Tensor, PolicyLossInfo]]
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss", "algo.loss")
for _name, _fn in {"reinforce": _reinforce_loss, "clip": _clip_loss, "gspo": _gspo_loss}.items():
    POLICY_LOSSES.register(_name, _fn)
register_policy_loss = registrar(POLICY_LOSSES)


# --- the critic's loss -----------------------------------------------------------------------------


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2), and where clipping won
    (its diagnostic, logged as value_clip_frac)."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    a, b = (values - returns) ** 2, (clipped - returns) ** 2
    return 0.5 * torch.maximum(a, b), (b > a).float()


# --- the KL coefficient ----------------------------------------------------------------------------


class AdaptiveKLController:
    """KL coefficient of RLHF PPO (Ziegler et al., 2019): beta <- beta * (1 + clip(KL/target - 1, +-0.2) * n/horizon).

    With target None the coefficient stays fixed.
    """

    def __init__(self, init: float, target: float | None, horizon: int):
        self.value, self.target, self.horizon = init, target, horizon

    def update(self, kl: float, n_steps: int) -> None:
        if self.target is None:
            return
        kl = distributed.sum_floats(kl)[0] / distributed.world().size     # the whole batch's KL
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]
