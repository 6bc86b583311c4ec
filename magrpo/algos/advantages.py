"""Advantages: how much better than expected a sample did, chosen by name where there is a choice.

- ADVANTAGES (`algo.advantage`): group-relative baselines over a sibling set of returns, A = R - b(R)
  (the paper, Sec. 4; the last dim is the group); ADVANTAGE_SCALES (`algo.scale`): an optional
  division by a standard deviation; `advantages` applies both, `keyed_advantages` over groups of
  any size;
- gae and masked_whiten: the per-token advantages of the actor-critic methods (the PPO family).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from magrpo.algos.aggregation import global_masked_mean
from magrpo.core.registry import Registry, registrar

# --- group-relative: A = R - b(R) over the group ---------------------------------------------------


def _mean(R: torch.Tensor) -> torch.Tensor:
    return R - R.mean(-1, keepdim=True)  # MAGRPO (paper): A_j = R_j - mean_k R_k


def _rloo(R: torch.Tensor) -> torch.Tensor:
    G = R.shape[-1]  # MARLOO: A_j = R_j - (sum_k R_k - R_j) / (G - 1)
    return R - (R.sum(-1, keepdim=True) - R) / (G - 1)


def _max(R: torch.Tensor) -> torch.Tensor:
    return R - R.max(-1, keepdim=True).values  # MAReMax: A_j = R_j - max_k R_k


def _raw(R: torch.Tensor) -> torch.Tensor:
    return R.clone()  # MAREINFORCE: A_j = R_j


# An estimator maps a group's returns [..., G] to advantages of the same shape (register_advantage).
ADVANTAGES: Registry[Callable[[torch.Tensor], torch.Tensor]] = Registry("advantage estimator", "algo.advantage")
for _name, _fn in {"mean": _mean, "rloo": _rloo, "max": _max, "raw": _raw}.items():
    ADVANTAGES.register(_name, _fn)

STD_EPS = 1e-4


def _no_scale(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    return A


def _group_std(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    return A / (R.std(-1, keepdim=True, unbiased=False) + STD_EPS)


def _batch_std(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    return A / (R.std(unbiased=False) + STD_EPS)


# A scale maps (advantages, returns), both [..., G], to scaled advantages (register_scale).
ADVANTAGE_SCALES: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry(
    "advantage scale", "algo.scale")
for _scale_name, _scale in {"none": _no_scale, "group": _group_std, "batch": _batch_std}.items():
    ADVANTAGE_SCALES.register(_scale_name, _scale)


def advantages(returns: torch.Tensor, estimator: str = "mean", scale: str = "none") -> torch.Tensor:
    """returns: [..., G] sibling groups -> advantages of the same shape."""
    return ADVANTAGE_SCALES[scale](ADVANTAGES[estimator](returns), returns)


def keyed_advantages(returns: torch.Tensor, keys: torch.Tensor, estimator: str = "mean",
                     scale: str = "none") -> torch.Tensor:
    """[n] advantages of flat `returns`, each group being the entries that share a key (groups may
    differ in size, e.g. an item's samples over several sibling sets)."""
    out = torch.empty_like(returns)
    for k in torch.unique(keys):
        at = keys == k
        out[at] = advantages(returns[at].unsqueeze(0), estimator, scale).squeeze(0) if at.sum() > 1 else 0.0
    return out


register_advantage = registrar(ADVANTAGES)
register_scale = registrar(ADVANTAGE_SCALES)


# --- per token: GAE over a critic's values -----------------------------------------------------------


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  min_std: float = 0.0) -> torch.Tensor:
    """(x - mean) / sqrt(max(var, min_std^2) + 1e-8) over the masked entries of the whole batch
    (every rank's); masked-out entries come back as 0.

    min_std > 0 stops the division from blowing a batch of near-equal values up to unit scale:
    once every return is the same, the advantages are the critic's errors, and dividing them by
    their own small spread turns that noise into full-size updates."""
    mean = global_masked_mean(x, mask)
    var = global_masked_mean((x - mean) ** 2, mask)
    out = (x - mean) * torch.rsqrt(var.clamp(min=min_std ** 2) + 1e-8)
    if not shift_mean:
        out = out + mean
    return out * mask


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's valid tokens (Schulman et al., 2016).

    delta_t = r_t + gamma * V_{t+1} - V_t,  A_t = sum_l (gamma * lam)^l delta_{t+l},  returns = A + V;
    V after a row's last valid token is 0 (the episode ends there), and masked positions give 0.
    rewards, values, mask: [n, C] -> (advantages, returns), each [n, C].
    """
    values = values * mask
    rewards = rewards * mask
    C = rewards.shape[1]
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(C)):
        next_v = values[:, t + 1] if t + 1 < C else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = (delta + gamma * lam * last) * mask[:, t]
        adv[:, t] = last
    return adv, (adv + values) * mask
