"""Evaluation of a team on held-out items: the reward, its components and the task's metrics.

Used before training, every `eval.every` steps, at the end, and by `magrpo-eval`. Sampling runs
under a forked RNG seeded from the run's seed, so evaluating never changes the training stream
(a resumed run and an uninterrupted one see the same random numbers).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from magrpo.models import Agent
from magrpo.rollout import Sampling, generate, joint_completions, joint_indices
from magrpo.tasks import Scores, Task


def eval_sampling(cfg: Any) -> Sampling:
    return Sampling(num_generations=cfg.eval.num_samples, max_new_tokens=cfg.algo.max_new_tokens,
                    do_sample=cfg.eval.do_sample, temperature=cfg.eval.temperature, top_p=cfg.algo.top_p,
                    top_k=cfg.algo.top_k, max_prompt_length=cfg.algo.max_prompt_length)


def evaluate(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling, batch_size: int,
             seed: int, num_examples: int = 8) -> tuple[dict[str, float], list[dict]]:
    """Metrics (unprefixed: reward_mean, reward/<component>, pass@1, ...) and example rows.

    Sample s of every agent forms joint answer s (aligned); with one agent (GRPO, `single`)
    the lone answer holds the whole joint answer.
    """
    N, S = len(agents), sampling.num_generations
    joint = joint_indices(N, S, "aligned")
    all_items, all_prompts, all_joint, gen_seconds, lengths = [], [], [], 0.0, []
    devices = [a.device for a in agents if a.device.type == "cuda"]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]
            prompts = [task.prompts(item, N) for item in chunk]
            gens = [generate(a, [p[i] for p in prompts], sampling) for i, a in enumerate(agents)]
            gen_seconds += sum(g.seconds for g in gens)
            lengths.append(torch.stack([g.lengths for g in gens]).sum(0))   # output tokens per joint answer
            all_items += [it for it in chunk for _ in range(S)]
            all_prompts += [p for p in prompts for _ in range(S)]
            all_joint += joint_completions(gens, joint)
    t0 = time.perf_counter()
    scores = task.score(all_items, all_prompts, all_joint)
    reward_seconds = time.perf_counter() - t0
    metrics = summarize_scores(scores)
    metrics["turn_1/reward_mean"] = metrics["reward_mean"]
    metrics.update(task.metrics(all_items, all_joint, scores))
    tokens = torch.cat(lengths).float() if lengths else torch.zeros(1)
    metrics.update({"output_tokens_mean": tokens.mean().item(),
                    "response_time_s": gen_seconds / max(len(items), 1),
                    "reward_time_s": reward_seconds, "num_items": float(len(items))})
    examples = [{"id": it.get("id"), "prompts": p, "completions": c, "reward": r}
                for it, p, c, r in list(zip(all_items, all_prompts, all_joint, scores))[:: max(S, 1)][:num_examples]]
    return metrics, examples


def summarize_scores(scores: Scores) -> dict[str, float]:
    t = torch.tensor(list(scores), dtype=torch.float64) if len(scores) else torch.zeros(1, dtype=torch.float64)
    m = {"reward_mean": t.mean().item(), "reward_std": t.std(unbiased=False).item()}
    for name, values in scores.components.items():
        m[f"reward/{name}"] = sum(values) / max(len(values), 1)
    return m
