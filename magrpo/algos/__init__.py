"""Algorithms, registered by name: `algo.name` (the `algo` config group) picks one.

Each is one file whose math reads top to bottom; the pieces they share (token log-probs, masks,
advantage estimators, loss aggregation, clipped surrogates, KL estimators, GAE) live in
`core.py`, and the contract every algorithm keeps in `base.py`.
"""

from __future__ import annotations

from magrpo.algos.base import ALGOS, AlgoConfig, Algorithm, TeamSpec, register_algo
from magrpo.algos.core import (
    ADVANTAGES,
    LOSS_AGG,
    POLICY_LOSSES,
    register_advantage,
    register_loss_agg,
    register_policy_loss,
    register_scale,
)

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
