"""Tests of magrpo/algos, one file per algorithm (the fixtures, make_cfg and the rest, come from
tests/conftest.py); what several of them share is here."""

import torch

from magrpo.rollout.record import Rollout
from magrpo.tasks import Scores

FAST = ["algo.max_new_tokens=8", "eval.num_items=2", "eval.num_samples=2", "algo.batch_size=2",
        "algo.num_generations=2"]


def scored_rollout(rewards: list[list[float]]) -> Rollout:
    B, J = len(rewards), len(rewards[0])
    r = Rollout(items=[{} for _ in range(B)], samples=[], joint=torch.zeros(J, 2, dtype=torch.long))
    r.scores = Scores([x for row in rewards for x in row])
    return r
