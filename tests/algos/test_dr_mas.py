"""Dr. MAS (magrpo/algos/dr_mas.py): agent-wise normalization, and where it equals MAGRPO."""

import math

import pytest
import torch

from magrpo.algos.advantages import keyed_advantages
from magrpo.algos.base import StepInput
from magrpo.cli.train import run
from magrpo.tasks import Scores
from tests.algos import FAST
from tests.conftest import build_algorithm, train_rows

# --- Dr. MAS -------------------------------------------------------------------------------------


def test_dr_mas_normalizes_each_agent_by_its_own_statistics():
    # one item, two agents with different reward scales (individual shares)
    a1, a2 = torch.tensor([1.0, 3.0]), torch.tensor([10.0, 30.0])
    key = torch.zeros(2, dtype=torch.long)
    eps = 1e-4
    # agent-wise: mu_1 = 2, sigma_1 = 1; mu_2 = 20, sigma_2 = 10
    assert keyed_advantages(a1, key, "mean", "group").tolist() == pytest.approx([-1 / (1 + eps), 1 / (1 + eps)])
    assert keyed_advantages(a2, key, "mean", "group").tolist() == pytest.approx([-10 / (10 + eps), 10 / (10 + eps)])
    # global (pooled over both agents): mu = 11, sigma = sqrt(((10^2 + 8^2 + 1^2 + 19^2) / 4)) = sqrt(131.5)
    pooled = keyed_advantages(torch.cat([a1, a2]), torch.zeros(4, dtype=torch.long), "mean", "group")
    s = math.sqrt(131.5) + eps
    assert pooled.tolist() == pytest.approx([-10 / s, -8 / s, -1 / s, 19 / s])


@pytest.mark.parametrize("shared", [False, True])
def test_dr_mas_equals_magrpo_with_group_scale_under_the_team_reward(make_cfg, tmp_path, shared):
    common = ["max_steps=2", "eval.every=0", "save_final=false", "task=agree", *FAST,
              f"agents.share_policy={str(shared).lower()}"]
    run(make_cfg(["algo=dr_mas", *common], out=str(tmp_path / "dr")))
    run(make_cfg(["algo=magrpo", "algo.scale=group", *common], out=str(tmp_path / "ma")))
    a, b = train_rows(tmp_path / "dr"), train_rows(tmp_path / "ma")
    who = "policy" if shared else "agent_1"
    for step in (1, 2):
        for key in ("train/reward_mean", f"train/{who}/loss", f"train/{who}/grad_norm"):
            assert a[step][key] == b[step][key], (step, key)


def test_dr_mas_agent_and_global_statistics_on_a_real_episode(make_cfg, monkeypatch):
    """Individual shares of different scales: agent-wise normalization gives each agent (R - mu_i) /
    (sigma_i + eps) over its own samples of an item; global pools both agents' samples."""
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=dr_mas", "task=cover", "algo.reward=individual", *FAST])
    task.score = lambda items, prompts, completions: Scores([float(k + 1) for k in range(len(completions))])
    monkeypatch.setattr(type(task), "individual_rewards",
                        lambda self, scores, n: [[0.1 * r, 10.0 * r] for r in scores])
    ep = algo.collect(StepInput(task.load("train")[:2]))
    r = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(2, 2)            # item-major joint rewards
    own = {0: 0.1 * r, 1: 10.0 * r}
    eps = 1e-4
    for i in (0, 1):
        want = (own[i] - own[i].mean(-1, keepdim=True)) / (own[i].std(-1, unbiased=False, keepdim=True) + eps)
        assert algo.role_advantages(agents[i], ep).tolist() == pytest.approx(want.flatten().tolist(), rel=1e-5)
    algo.algo.normalization = "global"
    pooled = torch.cat([own[0], own[1]], dim=1)                     # per item, both agents' samples
    mu, sd = pooled.mean(-1, keepdim=True), pooled.std(-1, unbiased=False, keepdim=True) + eps
    for i in (0, 1):
        assert algo.role_advantages(agents[i], ep).tolist() == pytest.approx(((own[i] - mu) / sd).flatten().tolist(),
                                                                            rel=1e-5)
