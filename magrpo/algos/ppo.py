"""Single-agent PPO, the standard RLHF baseline (Ziegler et al., 2019; Ouyang et al., 2022).

One policy writes the whole joint answer from the task's single-agent prompt. The update is
IPPO's with N = 1 (ippo.py: per-token values, GAE, clipped surrogate and value loss), and the
reward carries a KL penalty to the frozen reference whose coefficient is fixed, or adaptive:

    beta <- beta * (1 + clip(KL / kl_target - 1, -0.2, 0.2) * batch_size / kl_horizon).
"""

from __future__ import annotations

from dataclasses import dataclass

from magrpo.algos.base import register_algo
from magrpo.algos.ippo import IPPO, IPPOConfig
from magrpo.algos.losses import AdaptiveKLController
from magrpo.core.schema import at_least, option


@dataclass
class PPOConfig(IPPOConfig):
    name: str = "ppo"
    beta: float = at_least(0, 0.0,
                           help="Initial KL coefficient; > 0 loads the frozen reference and turns "
                                "the penalty on (RLHF recipes use 0.05 with kl_target 6, as the "
                                "paper rows (conf/method/ppo.yaml) do). Off by default: on the "
                                "tiny embedded default any penalty held some seeds at their start.")
    kl_target: float | None = option(6.0, check=lambda v: v is None or v > 0,
                                     allowed="> 0, or null for a fixed coefficient",
                                     help="the KL to the reference the adaptive coefficient steers towards")
    kl_horizon: int = at_least(1, 10000, help="the adaptive controller's horizon, in samples")


@register_algo("ppo")
class PPO(IPPO):
    config_schema = PPOConfig
    algo: PPOConfig             # its config_schema's instance (checked when built: TeamAlgorithm.reads)
    form = "single"

    def make_kl_controller(self) -> AdaptiveKLController:
        return AdaptiveKLController(self.algo.beta, self.algo.kl_target, self.algo.kl_horizon)
