"""Task registry: `task.name` in the config picks a class registered here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magrpo.config.groups import RewardConfig, TaskConfig
from magrpo.core.registry import Registry, registrar
from magrpo.tasks.base import Item, Scores, Task, columns, raw_reward, reward_keys, reward_schema_of
from magrpo.tasks.reward_fns import task_class

if TYPE_CHECKING:       # start-up: magrpo.config.schemas loads OmegaConf, and the tasks load without it
    from magrpo.config.schemas import SandboxSchema

# The built-in task families register on the first lookup; one whose optional dependency is
# missing does not break the others.
TASKS: Registry[type[Task]] = Registry("task", "task.name", set_name=True, builtins=tuple(
    f"magrpo.tasks.{m}" for m in ("length_ratio", "writing", "coding", "maporl", "coordination",
                                             "coordination.games")))


register_task = registrar(TASKS)


def available_tasks() -> list[str]:
    return sorted(TASKS)


def build_task(cfg: TaskConfig, reward_cfg: RewardConfig, sandbox: SandboxSchema | None = None) -> Task:
    """The task `cfg.name` names, with its `task`, `reward` and `sandbox` configs (a run's validated
    `cfg.task`, `cfg.reward`, `cfg.sandbox`; `sandbox` None = its defaults). When the reward config
    names reward functions (`reward.fn`, `reward.fns`), they replace the task's reward."""
    return task_class(TASKS[cfg.name], reward_cfg)(cfg, reward_cfg, sandbox)


__all__ = ["Item", "RewardConfig", "Scores", "Task", "TASKS", "available_tasks", "build_task", "columns", "raw_reward",
           "register_task", "reward_keys", "reward_schema_of"]
