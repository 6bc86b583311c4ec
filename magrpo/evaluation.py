"""Evaluation of a team on held-out items: the reward, its components and the task's metrics.

Used before training, every `eval.every` steps, at the end, and by `magrpo-eval`. How the
agents produce a joint answer is a named protocol (SPEC §4):

  team / naive_concat  every agent answers its own prompt in parallel (what MAGRPO trains)
  single               one model (agent 1's) writes the whole joint answer
  sequential           agent i also sees the answers of agents 1..i-1
  discussion           parallel answers, then one round where each agent sees the others'
                       first answers and answers again; the second answers are scored

Sampling runs under a forked RNG seeded from the run's seed, so evaluating never changes the
training stream (a resumed run and an uninterrupted one see the same random numbers).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from magrpo.models import Agent
from magrpo.rollout import Sampling, generate
from magrpo.tasks import Scores, Task


@dataclass
class Answers:
    """Joint answers of a chunk of items, item-major with S samples per item."""

    prompts: list[list[str]] = field(default_factory=list)       # [n*S][N] the prompt each agent answered
    completions: list[list[str]] = field(default_factory=list)   # [n*S][N]
    seconds: float = 0.0                                          # generation time
    tokens: list[float] = field(default_factory=list)             # output tokens per joint answer

    def add(self, other: Answers) -> None:
        self.prompts += other.prompts
        self.completions += other.completions
        self.seconds += other.seconds
        self.tokens += other.tokens


def _parallel(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling) -> Answers:
    N, S = len(agents), sampling.num_generations
    prompts = [task.prompts(item, N) for item in items]
    gens = [generate(a, [p[i] for p in prompts], sampling) for i, a in enumerate(agents)]
    lengths = torch.stack([g.lengths for g in gens]).sum(0).tolist()
    return Answers(prompts=[p for p in prompts for _ in range(S)],
                   completions=[[g.texts[r] for g in gens] for r in range(len(items) * S)],
                   seconds=sum(g.seconds for g in gens), tokens=lengths)


def _single(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling) -> Answers:
    return _parallel(agents[:1], task, items, sampling)


def _sequential(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling) -> Answers:
    """Agent 1 samples S answers per item; agent i>1 answers once per sample, seeing answers 1..i-1."""
    N, S = len(agents), sampling.num_generations
    base = [task.prompts(item, N) for item in items]
    first = generate(agents[0], [p[0] for p in base], sampling)
    rows = [[first.texts[r]] for r in range(len(items) * S)]
    prompts = [[base[r // S][0]] for r in range(len(items) * S)]
    seconds, tokens = first.seconds, first.lengths.clone()
    one = replace(sampling, num_generations=1)
    for i in range(1, N):
        ctx = [task.context_prompt(items[r // S], i, base[r // S][i], None, dict(enumerate(rows[r])))
               for r in range(len(rows))]
        gen = generate(agents[i], ctx, one)
        for r in range(len(rows)):
            rows[r].append(gen.texts[r])
            prompts[r].append(ctx[r])
        seconds, tokens = seconds + gen.seconds, tokens + gen.lengths
    return Answers(prompts, rows, seconds, tokens.tolist())


def _discussion(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling) -> Answers:
    """One MAPoRL-style round: each agent revises its answer after seeing the others' answers."""
    S = sampling.num_generations
    first = _parallel(agents, task, items, sampling)
    one = replace(sampling, num_generations=1)
    rows: list[list[str]] = [[] for _ in first.completions]
    prompts: list[list[str]] = [[] for _ in first.completions]
    seconds, tokens = first.seconds, torch.tensor(first.tokens)
    for i, agent in enumerate(agents):
        ctx = [task.context_prompt(items[r // S], i, first.prompts[r][i], first.completions[r][i],
                                   {j: a for j, a in enumerate(first.completions[r]) if j != i})
               for r in range(len(rows))]
        gen = generate(agent, ctx, one)
        for r in range(len(rows)):
            rows[r].append(gen.texts[r])
            prompts[r].append(ctx[r])
        seconds, tokens = seconds + gen.seconds, tokens + gen.lengths
    return Answers(prompts, rows, seconds, tokens.tolist())


PROTOCOLS: dict[str, Callable[[list[Agent], Task, list[dict], Sampling], Answers]] = {
    "team": _parallel,
    "naive_concat": _parallel,
    "single": _single,
    "sequential": _sequential,
    "discussion": _discussion,
}


def eval_sampling(cfg: Any) -> Sampling:
    return Sampling(num_generations=cfg.eval.num_samples, max_new_tokens=cfg.algo.max_new_tokens,
                    do_sample=cfg.eval.do_sample, temperature=cfg.eval.temperature, top_p=cfg.algo.top_p,
                    top_k=cfg.algo.top_k, max_prompt_length=cfg.algo.max_prompt_length)


def evaluate(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling, batch_size: int,
             seed: int, num_examples: int = 8, protocol: str = "team") -> tuple[dict[str, float], list[dict]]:
    """Metrics (unprefixed: reward_mean, reward/<component>, pass@1, ...) and example rows."""
    S = sampling.num_generations
    answers = Answers()
    devices = [a.device for a in agents if a.device.type == "cuda"]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            answers.add(PROTOCOLS[protocol](agents, task, items[start:start + batch_size], sampling))
    all_items = [it for it in items for _ in range(S)]
    t0 = time.perf_counter()
    scores = task.score(all_items, answers.prompts, answers.completions)
    reward_seconds = time.perf_counter() - t0
    metrics = summarize_scores(scores)
    metrics["turn_1/reward_mean"] = metrics["reward_mean"]
    metrics.update(task.metrics(all_items, answers.completions, scores))
    metrics.update({"output_tokens_mean": sum(answers.tokens) / max(len(answers.tokens), 1),
                    "response_time_s": answers.seconds / max(len(items), 1),
                    "reward_time_s": reward_seconds, "num_items": float(len(items))})
    rows = list(zip(all_items, answers.prompts, answers.completions, scores))[::max(S, 1)][:num_examples]
    examples = [{"id": it.get("id"), "prompts": p, "completions": c, "reward": r} for it, p, c, r in rows]
    return metrics, examples


def summarize_scores(scores: Scores) -> dict[str, float]:
    t = torch.tensor(list(scores), dtype=torch.float64) if len(scores) else torch.zeros(1, dtype=torch.float64)
    m = {"reward_mean": t.mean().item(), "reward_std": t.std(unbiased=False).item()}
    for name, values in scores.components.items():
        m[f"reward/{name}"] = sum(values) / max(len(values), 1)
    return m
