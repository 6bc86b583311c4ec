"""Task registry: `task.name` in the config picks a class registered here."""

from __future__ import annotations

from typing import Any

from magrpo.registry import registrar
from magrpo.tasks.base import Item, Scores, Task, columns, raw_reward

TASKS: dict[str, type[Task]] = {}


register_task = registrar(TASKS)


def _import_builtin_tasks() -> None:
    # Imported lazily so that `magrpo.tasks` stays cheap to import and a broken optional
    # dependency of one task family does not break the others.
    import importlib

    for mod in ("length_ratio", "writing", "coding", "maporl", "coordination"):
        try:
            importlib.import_module(f"magrpo.tasks.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"magrpo.tasks.{mod}":
                raise


def available_tasks() -> list[str]:
    _import_builtin_tasks()
    return sorted(TASKS)


def build_task(cfg: Any, reward_cfg: Any, sandbox: Any = None) -> Task:
    """The task named by the `task` node; `sandbox` is the `sandbox` node (None = defaults)."""
    _import_builtin_tasks()
    name = cfg.name
    if name not in TASKS:
        raise ValueError(f"task.name={name!r} is not a known task; choose one of: {', '.join(sorted(TASKS))}")
    return TASKS[name](cfg, reward_cfg, sandbox)


__all__ = ["Item", "Scores", "Task", "TASKS", "available_tasks", "build_task", "columns", "raw_reward", "register_task"]
