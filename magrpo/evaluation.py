"""Evaluation of a team on held-out items: the reward, its components and the task's metrics.

Used before training, every `eval.every` steps, at the end, and by `magrpo-eval`. How the
agents produce a joint answer is a named scheme from `magrpo.rollout.SCHEMES` (team, single,
naive_concat, sequential, discussion): the same rollout code that training uses.

With `algo.num_turns` > 1 the evaluation follows one path per sample through the turns
(magrpo.turns.follow_paths) with the same feedback as training; `reward_mean`, its components and
the task's metrics describe the answers after the last turn, and `turn_{t}/...` the answers after
turn t (a path stopped early keeps its last answer).

Sampling runs under a forked RNG seeded from the run's seed, so evaluating never changes the
training stream (a resumed run and an uninterrupted one see the same random numbers).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from magrpo.feedback import Feedback
from magrpo.models import Agent
from magrpo.rollout import SCHEMES, Rollout, Sampling, rollout_cost
from magrpo.tasks import Scores, Task
from magrpo.turns import TurnSpec, follow_paths, path_cost, path_turn


def eval_sampling(cfg: Any) -> Sampling:
    return Sampling(num_generations=cfg.eval.num_samples, max_new_tokens=cfg.algo.max_new_tokens,
                    do_sample=cfg.eval.do_sample, temperature=cfg.eval.temperature, top_p=cfg.algo.top_p,
                    top_k=cfg.algo.top_k, max_prompt_length=cfg.algo.max_prompt_length)


def evaluate(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling, batch_size: int,
             seed: int, num_examples: int = 8, scheme: str = "team", turns: TurnSpec | None = None,
             feedback: Feedback | None = None) -> tuple[dict[str, float], list[dict]]:
    """Metrics (unprefixed: reward_mean, reward/<component>, pass@1, ...) and example rows."""
    if turns is not None and turns.num_turns > 1:
        return evaluate_turns(agents, task, items, sampling, batch_size, seed, num_examples, scheme, turns, feedback)
    S = sampling.num_generations
    rollouts: list[Rollout] = []
    devices = [a.device for a in agents if a.device.type == "cuda"]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            rollouts.append(SCHEMES[scheme](agents, task, items[start:start + batch_size], sampling))
    all_items = [it for r in rollouts for it in r.joint_items]
    prompts = [p for r in rollouts for p in r.prompts]
    completions = [c for r in rollouts for c in r.completions]
    costs = [rollout_cost(r) for r in rollouts]
    tokens = torch.cat([t for _, t in costs]).tolist() if costs else []
    t0 = time.perf_counter()
    scores = task.score(all_items, prompts, completions)
    reward_seconds = time.perf_counter() - t0
    metrics = summarize_scores(scores)
    metrics.update({f"turn_1/{k}": v for k, v in summarize_scores(scores).items() if k != "reward_std"})
    metrics.update(task.metrics(all_items, completions, scores))
    metrics.update({"output_tokens_mean": sum(tokens) / max(len(tokens), 1),
                    "response_time_s": sum(s for s, _ in costs) / max(len(items), 1),
                    "reward_time_s": reward_seconds, "num_items": float(len(items))})
    rows = list(zip(all_items, prompts, completions, scores))[::max(S, 1)][:num_examples]
    examples = [{"id": it.get("id"), "prompts": p, "completions": c, "reward": r} for it, p, c, r in rows]
    return metrics, examples


def summarize_scores(scores: Scores) -> dict[str, float]:
    t = torch.tensor(list(scores), dtype=torch.float64) if len(scores) else torch.zeros(1, dtype=torch.float64)
    m = {"reward_mean": t.mean().item(), "reward_std": t.std(unbiased=False).item()}
    for name, values in scores.components.items():
        m[f"reward/{name}"] = sum(values) / max(len(values), 1)
    return m


def evaluate_turns(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling, batch_size: int,
                   seed: int, num_examples: int, scheme: str, turns: TurnSpec,
                   feedback: Feedback) -> tuple[dict[str, float], list[dict]]:
    """`evaluate` over `turns.num_turns` turns: one path per first-turn sample."""
    S = sampling.num_generations
    paths, costs, degraded, reward_s = [], [], 0, 0.0
    devices = [a.device for a in agents if a.device.type == "cuda"]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            first = SCHEMES[scheme](agents, task, items[start:start + batch_size], sampling)
            path, stats = follow_paths(agents, task, feedback, first, sampling, turns)
            paths.append(path)
            costs.append(path_cost(path, rollout_cost(first)))
            degraded += stats.degraded
            reward_s += stats.reward_s
    metrics: dict[str, float] = {}
    for t in range(1, turns.num_turns + 1):
        parts = [path_turn(p, t) for p in paths]
        all_items = [it for part in parts for it in part[0]]
        prompts = [x for part in parts for x in part[1]]
        completions = [c for part in parts for c in part[2]]
        scores = Scores.concat([part[3] for part in parts])
        turn = {**summarize_scores(scores), **task.metrics(all_items, completions, scores)}
        metrics.update({f"turn_{t}/{k}": v for k, v in turn.items() if k != "reward_std"})
    metrics.update(turn)                                           # the last turn is the team's answer
    tokens = [n for _, per_path in costs for n in per_path]
    metrics.update({"output_tokens_mean": sum(tokens) / max(len(tokens), 1),
                    "response_time_s": sum(s for s, _ in costs) / max(len(items), 1),
                    "reward_time_s": reward_s, "num_items": float(len(items)),
                    "feedback/degraded": float(degraded)})
    rows = list(zip(all_items, prompts, completions, scores))[::max(S, 1)][:num_examples]
    examples = [{"id": it.get("id"), "prompts": p, "completions": c, "reward": r} for it, p, c, r in rows]
    return metrics, examples
