"""A run's config as `validate` hands it down: instances of the schemas, every chosen group typed.

`RunConfig` is a training run's (magrpo-train), `EvalRunConfig` an evaluation's (magrpo-eval). They
are TrainSchema and EvalRunSchema (magrpo.config.schemas: every key with its default and its
check) with the groups a run chooses typed by their bases (magrpo.config.groups); the instance a
run holds carries the chosen option's own schema (`cfg.algo` is an IPPOConfig when algo=ippo), so
a function reads `cfg.algo.vf_coef` where the algorithm's schema declares it. Nothing below the
entry points reads a config node: they read these attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magrpo.config.groups import AlgoConfig, FeedbackConfig, RewardConfig, TaskConfig
from magrpo.config.schemas import EvalRunSchema, TrainSchema


@dataclass
class RunConfig(TrainSchema):
    """A training run's validated config (magrpo.validation.checks.validate)."""

    task: TaskConfig = field(default_factory=TaskConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)


@dataclass
class EvalRunConfig(RunConfig, EvalRunSchema):
    """magrpo-eval's validated config: a run's, and what to evaluate (methods, checkpoint, team, split)."""
