"""What one training step logs besides each policy's update: the team's reward metrics of the scored
turn tree, and the lengths and phase times of the step (generate, reward, feedback, update, other).

The `update` phase is the wall time of the methods an algorithm marks @update_phase (its
forward/backward/optimizer work), added to the algorithm's own UpdateClock and taken once per step
by the step's metrics (scaffold.Episode.finish).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch

from magrpo.models import distributed
from magrpo.rollout.record import Rollout


def reward_metrics(rollout: Rollout, prefix: str = "train") -> dict[str, float]:
    """Team-level reward metrics of a scored rollout and the turns grown from it, over every rank's
    items: reward_mean/std and components over every node of every turn (what the loss sees), the
    same per turn (`turn_{t}/...`), and `frac_reward_zero_std`: the share of sibling sets whose
    rewards are all equal, i.e. carry no signal."""
    levels = rollout.levels()
    rewards = [distributed.gather_cat(lv.rewards) for lv in levels]
    R = torch.cat([r.flatten() for r in rewards])
    flat = torch.cat([r.std(-1, unbiased=False) for r in rewards])
    m = {f"{prefix}/reward_mean": R.mean().item(), f"{prefix}/reward_std": R.std(unbiased=False).item(),
         f"{prefix}/frac_reward_zero_std": (flat < 1e-8).float().mean().item()}
    names = list(dict.fromkeys(k for lv in levels for k in lv.scored.components))
    for name in names:
        values = [x for lv in levels for x in lv.scored.components.get(name, [])]
        m[f"{prefix}/reward/{name}"] = sum(values) / max(len(values), 1)
    for lv in levels:
        m[f"{prefix}/turn_{lv.turn}/reward_mean"] = lv.rewards.mean().item()
        for name, values in lv.scored.components.items():
            m[f"{prefix}/turn_{lv.turn}/reward/{name}"] = sum(values) / max(len(values), 1)
    return m


class UpdateClock:
    """Seconds spent in the learning computation of the current step (the `update` phase), owned by
    the algorithm that does the computing: @update_phase methods add to it, the step's metrics take it."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        self.seconds += seconds

    def take(self) -> float:
        """The seconds measured since the last take, and start over."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def update_phase(fn: Callable) -> Callable:
    """Count a method's wall time as the step's `update` phase, on its object's `update_clock`. On a
    GPU the queued kernels are waited for first, so their time is not billed to the next phase."""
    @functools.wraps(fn)
    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(self, *args, **kwargs)
        finally:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
            self.update_clock.add(time.perf_counter() - t0)

    return timed


def timing_metrics(rollout: Rollout | list[Rollout], t0: float, t_gen: float, t_reward: float, t_end: float,
                   feedback_s: float = 0.0, update_s: float = 0.0) -> dict[str, float]:
    """Lengths and phase times of one step: `generate` (the models' decoding, every turn),
    `reward` (scoring), `feedback` (between turns), `update` (`update_s`, the @update_phase methods'
    time; without it, everything after scoring) and `other` (the rest: tokenization, decoding to text, advantages, metrics), which sum to the step time;
    and the throughput. `t_gen - t0` is the generation time of every turn and `t_reward - t_gen`
    the scoring and, in multi-turn steps, the feedback (`feedback_s` of it). Several rollouts (the
    rounds of dynamic sampling) count together; `sequences_per_item` is every generated sequence
    per item of the batch (the first rollout's items), the step's generation budget."""
    roots = rollout if isinstance(rollout, list) else [rollout]
    levels = [lv for root in roots for lv in root.levels()]
    gens = [g for lv in levels for g in lv.samples]
    n_tokens = sum(g.lengths.sum().item() for g in gens)
    n_rows = sum(len(g.texts) for g in gens)
    m = {}
    for i in range(len(roots[0].samples)):
        mine = [lv.samples[i] for lv in levels]
        m[f"train/agent_{i + 1}/completions/mean_length"] = (sum(g.lengths.sum().item() for g in mine)
                                                            / max(sum(len(g.texts) for g in mine), 1))
    step = t_end - t0
    generate = sum(g.sample_seconds for g in gens) or (t_gen - t0)
    update = update_s or (t_end - t_reward)
    reward = max(t_reward - t_gen - feedback_s, 0.0)
    m.update({
        "train/completions/mean_length": n_tokens / max(n_rows, 1), "train/completions/tokens": float(n_tokens),
        "time/generate_s": generate, "time/reward_s": reward, "time/feedback_s": feedback_s,
        "time/update_s": update,
        "time/other_s": max(step - generate - reward - feedback_s - update, 0.0),
        "time/step_s": step, "speed/tokens_per_s": n_tokens / step,
        "speed/prompts_per_s": roots[0].num_items / step,
        "train/sequences_per_item": n_rows / max(roots[0].num_items, 1),
    })
    return m
