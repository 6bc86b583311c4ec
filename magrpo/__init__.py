"""MAGRPO: multi-agent group relative policy optimization for teams of cooperating LLMs."""
import importlib

__version__ = "0.1.0"


# The public API, importable from the top (`from magrpo import Task, register_task, Experiment`),
# each loaded on first use: `import magrpo` stays cheap (no torch, no transformers).
_PUBLIC = {
    "Team": "magrpo.team.team", "TeamAnswer": "magrpo.team.team",
    "Experiment": "magrpo.experiment",
    "Task": "magrpo.tasks.base", "check_task": "magrpo.tasks.check", "Item": "magrpo.tasks.base", "Scores": "magrpo.tasks.base",
    "register_task": "magrpo.tasks", "register_reward": "magrpo.rollout.rewards",
    "register_algo": "magrpo.algos.base", "AlgoConfig": "magrpo.config.groups", "TeamSpec": "magrpo.algos.base",
    "register_advantage": "magrpo.algos.advantages", "register_scale": "magrpo.algos.advantages",
    "register_loss_agg": "magrpo.algos.aggregation", "register_policy_loss": "magrpo.algos.losses",
    "PolicyLossInfo": "magrpo.algos.losses",
    "register_feedback": "magrpo.rollout.feedback", "Feedback": "magrpo.rollout.feedback", "FeedbackConfig": "magrpo.config.groups",
    "ConfigError": "magrpo.core.schema", "SetupError": "magrpo.core.schema", "option": "magrpo.core.schema",
    "at_least": "magrpo.core.schema", "within": "magrpo.core.schema", "positive": "magrpo.core.schema",
    # writing an algorithm from outside: the scaffold every team algorithm builds on
    "TeamAlgorithm": "magrpo.algos.scaffold", "Episode": "magrpo.algos.scaffold",
    "GroupRelativeAlgorithm": "magrpo.algos.group_relative", "GroupRelativeConfig": "magrpo.algos.group_relative",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'magrpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
