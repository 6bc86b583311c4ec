"""Reward functions, the public home of the extension API: `register_reward`, `REWARD_FNS` and the
error a failing function raises. The machinery lives with the tasks it wraps
(magrpo.tasks.reward_fns, whose docstring says how a reward function is written and checked)."""

from __future__ import annotations

from magrpo.tasks.reward_fns import (
    REWARD_FNS,
    ZERO_SPREAD_STEPS,
    RewardFn,
    RewardFns,
    RewardFnTask,
    RewardFunctionError,
    ZeroSpread,
    check_reward_node,
    check_splits,
    component_name,
    fallback_note,
    primary_metric,
    register_reward,
    resolve,
    reward_specs,
    task_class,
)

__all__ = ["REWARD_FNS", "ZERO_SPREAD_STEPS", "RewardFn", "RewardFns", "RewardFnTask", "RewardFunctionError", "ZeroSpread",
           "check_reward_node", "check_splits", "component_name", "fallback_note", "primary_metric", "register_reward",
           "resolve", "reward_specs", "task_class"]
