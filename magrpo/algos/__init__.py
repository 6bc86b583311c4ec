"""Algorithms, registered by name: `algo.name` (the `algo` config group) picks one.

Each is one file whose math reads top to bottom. What they share:
  base.py            the contract every algorithm keeps (ALGOS, register_algo, AlgoConfig, TeamSpec,
                     StepSpecs, StepInput);
  advantages.py      advantage estimators and scales (ADVANTAGES, ADVANTAGE_SCALES), GAE, whitening;
  losses.py          the policy losses (POLICY_LOSSES: reinforce, clip, gspo), the clipped value loss,
                     the KL estimator and its adaptive coefficient;
  aggregation.py     how per-token losses become one scalar (LOSS_AGG);
  logprobs.py        token log-probabilities of completion rows (each distinct prompt run once);
  scaffold.py        TeamAlgorithm and Episode: set-up, collection, per-policy batches, checkpoint state;
  group_relative.py  the update of the group-relative methods (MAGRPO's family and C3);
  critics.py         value heads and critic models; optim.py the optimizers; step_metrics.py the
                     step's reward and timing metrics.
"""

from __future__ import annotations

from magrpo.algos.advantages import ADVANTAGES, register_advantage, register_scale
from magrpo.algos.aggregation import LOSS_AGG, register_loss_agg
from magrpo.algos.base import ALGOS, Algorithm, TeamSpec, register_algo
from magrpo.algos.losses import POLICY_LOSSES, register_policy_loss
from magrpo.config.groups import AlgoConfig

# Importing a module registers its algorithm.
from magrpo.algos import magrpo as _magrpo  # noqa: E402,F401  isort: skip
from magrpo.algos import grpo as _grpo  # noqa: E402,F401  isort: skip
from magrpo.algos import ippo as _ippo  # noqa: E402,F401  isort: skip
from magrpo.algos import mappo as _mappo  # noqa: E402,F401  isort: skip
from magrpo.algos import ppo as _ppo  # noqa: E402,F401  isort: skip
from magrpo.algos import dr_mas as _dr_mas  # noqa: E402,F401  isort: skip
from magrpo.algos import at_grpo as _at_grpo  # noqa: E402,F401  isort: skip
from magrpo.algos import actor_critic as _actor_critic  # noqa: E402,F401  isort: skip
from magrpo.algos import c3 as _c3  # noqa: E402,F401  isort: skip

__all__ = ["ADVANTAGES", "ALGOS", "LOSS_AGG", "POLICY_LOSSES", "AlgoConfig", "Algorithm", "TeamSpec",
           "register_advantage", "register_algo", "register_loss_agg", "register_policy_loss", "register_scale"]
