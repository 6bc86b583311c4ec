"""`algo.*` keys that several algorithms share, each declared once: an algorithm's schema composes
the ones it reads (`class IPPOConfig(CriticConfig, RewardKeys, CrossCreditKeys, ...)`), so a key
means one thing, with one default and one check, wherever it appears."""

from __future__ import annotations

from dataclasses import dataclass

from magrpo.algos.aggregation import LOSS_AGG
from magrpo.algos.losses import POLICY_LOSSES
from magrpo.config.groups import AlgoConfig
from magrpo.core.schema import ConfigError, at_least, option, positive


@dataclass
class RewardKeys:
    reward: str = option("team", choices=["team", "individual"],
                         help="team reward, or each agent's own share (tasks that split it)")


@dataclass
class CrossCreditKeys:
    cross_credit: str = option("mean", choices=["mean", "sum"],
                               help="joint_mode=cross: a sample's return is the mean or sum of its joints'")


@dataclass
class ClipKeys:
    epsilon: float = positive(0.2,
                              help="clip range of the importance ratio: [1 - epsilon, 1 + epsilon] "
                                   "(the group-relative update's upper bound is epsilon_high)")


@dataclass
class ValueKeys:
    vf_coef: float = at_least(0, 0.5, help="weight of the value (critic) loss")


@dataclass
class EntropyKeys:
    ent_coef: float = at_least(0, 0.0,
                               help="entropy bonus c_H: the loss gains -c_H * H_t per "
                                    "completion token (0 = off, the paper's setting)")


@dataclass
class LossKeys:
    """The policy loss and its aggregation, each chosen by name: every algorithm that composes these
    keys calls the registered loss and aggregation, and sets its own defaults."""

    loss: str = option("reinforce", choices=lambda: sorted(POLICY_LOSSES),
                       help="the policy loss (losses.POLICY_LOSSES: reinforce, "
                            "clip, gspo, or a plugin's register_policy_loss)")
    loss_agg: str = option("seq_sum", choices=lambda: sorted(LOSS_AGG),
                           help="how token losses become one scalar (aggregation.LOSS_AGG)")


def check_ratio_loss(node, prefix: str, steps: int, keys: str, one_step: str) -> None:
    """`loss=reinforce` has no importance ratio to the rollout policy, so it takes one optimizer step
    per rollout: refused when the keys `keys` take `steps` > 1 (`one_step`: the keys that take one)."""
    if node.loss == "reinforce" and steps > 1:
        raise ConfigError(f"{prefix}loss='reinforce' has no importance ratio, so it cannot reuse a rollout "
                          f"({keys}); set {prefix}loss=clip or gspo, or {one_step}")


def reward_kind(algo: AlgoConfig) -> str:
    """The reward an algorithm's credit is computed from: `algo.reward` when its schema composes
    RewardKeys (team or individual), else "team" (an algorithm without the key trains on the team's
    reward by construction). The one place that asks whether the key is there."""
    if isinstance(algo, RewardKeys):
        return algo.reward
    return "team"
