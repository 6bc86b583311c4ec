"""A team's answers to items: each item's samples from the team's scheme, each followed through the
turns with its feedback and scored; what an evaluation summarizes (magrpo.evaluation.loop), what
cross-play pairs (magrpo.evaluation.pairing) and what a `Team` answers with (magrpo.team)."""

from __future__ import annotations

import torch

from magrpo.models import distributed
from magrpo.models.agents import Agent
from magrpo.rollout.feedback import Feedback
from magrpo.rollout.record import SCHEMES, Sampling, rollout_cost
from magrpo.rollout.turns import Answers, EvalAnswers, TurnSpec, follow_paths, path_cost, path_turn
from magrpo.tasks import Scores, Task


def collect_answers(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling, batch_size: int,
                    seed: int, scheme: str = "team", turns: TurnSpec | None = None,
                    feedback: Feedback | None = None) -> EvalAnswers:
    """Run the team (scheme `scheme`) on `items` with S = sampling.num_generations samples per
    item, each followed through the turns; scored, not yet summarized."""
    turns = turns or TurnSpec()
    if scheme == "team" and turns.topology == "sequential":
        scheme = "sequential"      # the team as it trains: a chain, one answer per prefix after the first
    world = distributed.world()
    mine = items[distributed.shard(len(items))]
    paths, costs, degraded, reward_s = [], [], 0, 0.0
    devices = [a.device for a in agents if a.device.type == "cuda"]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed + 1_000_003 * world.rank)
        for start in range(0, len(mine), batch_size):
            first = SCHEMES[scheme](agents, task, mine[start:start + batch_size], sampling)
            path, stats = follow_paths(agents, task, feedback, first, sampling, turns)
            paths.append(path)
            costs.append(path_cost(path, rollout_cost(first)))
            degraded += stats.degraded
            reward_s += stats.reward_s
    # Per turn, every path's answer after that turn; under torchrun, every rank's block in rank
    # order (= item order), so the metrics are computed on the whole split.
    per_turn = [_gather_turn([path_turn(p, t) for p in paths]) for t in range(1, turns.num_turns + 1)]
    tokens = [n for _, per_path in costs for n in per_path]
    gen_s = sum(s for s, _ in costs)
    if world.distributed:
        parts = distributed.gather_objects((tokens, gen_s, reward_s, degraded))
        tokens = [n for p in parts for n in p[0]]
        gen_s, reward_s, degraded = (sum(p[k] for p in parts) for k in (1, 2, 3))
    return EvalAnswers(per_turn, paths, tokens, gen_s, reward_s, degraded, len(items))


def _gather_turn(parts: list[Answers]) -> Answers:
    items = [it for part in parts for it in part[0]]
    prompts = [x for part in parts for x in part[1]]
    completions = [c for part in parts for c in part[2]]
    scores = Scores.concat([part[3] for part in parts])
    if distributed.world().distributed:
        ranks = distributed.gather_objects((items, prompts, completions, scores))
        items, prompts, completions = ([x for r in ranks for x in r[k]] for k in range(3))
        scores = Scores.concat([r[3] for r in ranks])
    return items, prompts, completions, scores
