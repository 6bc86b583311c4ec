"""CoLLM-DC / CC (`algo=iac` / `algo=maac`, magrpo/algos/actor_critic.py): turn-level TD(0) targets
and baselines, and learning critics."""

import pytest
import torch

from magrpo.algos.base import StepInput
from tests.algos import FAST
from tests.conftest import build_algorithm

# --- CoLLM-CC / DC: turn-level TD(0) --------------------------------------------------------------


@pytest.mark.parametrize("algo", ["iac", "maac"])
def test_td_targets_on_a_two_turn_tree(make_cfg, monkeypatch, algo):
    """With every value V = 0.5: turn 2 (last) y = r2, delta = r2 - 0.5; turn 1: y = r1 + gamma * 0.5
    (the child's V), delta = y - 0.5; the critic of a prompt regresses on its samples' mean y."""
    gamma = 0.9
    cfg, agents, task, method = build_algorithm(make_cfg, [f"algo={algo}", "algo.num_turns=2", "feedback=plain",
                                                  f"algo.discount={gamma}", *FAST])
    monkeypatch.setattr(type(method), "values", lambda self, c, texts: torch.full((len(texts),), 0.5))
    ep = method.collect(StepInput(task.load("train")[:2]))
    deltas, batches = method.td_errors(ep)
    t1, t2 = ep.levels()
    r1, r2 = t1.rewards.flatten(), t2.rewards.flatten()        # aligned: sample k of each agent is joint k
    for i in range(2):
        assert deltas[i].tolist() == pytest.approx([*(r1 + gamma * 0.5 - 0.5).tolist(), *(r2 - 0.5).tolist()])
    y = torch.cat([r1 + gamma * 0.5, r2]).view(-1, 2).mean(-1)      # per prompt (iac) / per group (maac)
    assert batches[0].targets.tolist() == pytest.approx(y.tolist())
    if algo == "iac":
        assert len(batches) == 2 and batches[1].targets.tolist() == pytest.approx(y.tolist())
    else:
        assert len(batches) == 1 and "[Agent 2] task:" in batches[0].texts[0]


def test_q_critic_baseline_is_the_mean_q_of_the_answers_to_a_prompt(make_cfg, monkeypatch):
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=iac", "algo.critic_type=q", *FAST])
    q = iter([torch.tensor([1.0, 3.0, 2.0, 2.0]), torch.tensor([0.0, 0.0, 0.0, 0.0])])
    monkeypatch.setattr(type(method), "values", lambda self, c, texts: next(q))
    ep = method.collect(StepInput(task.load("train")[:2]))
    deltas, batches = method.td_errors(ep)
    r = ep.root.rewards.flatten()
    # agent 1: V(h) of item 1 = mean(1, 3) = 2, of item 2 = 2
    assert deltas[0].tolist() == pytest.approx((r - 2.0).tolist())
    assert batches[0].targets.tolist() == pytest.approx(r.tolist())   # Q regresses on its own sample's y


def test_the_critic_learns_and_the_actor_moves(make_cfg):
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=maac", "algo.critic=head", *FAST, "optimizer.lr=1e-2"])
    head = method.critics[0].head.v.weight
    before, actor = head.detach().clone(), [p.detach().clone() for p in agents[1].model.parameters()]
    metrics = method.step(StepInput(task.load("train")[:2]))
    assert not torch.equal(before, head.detach())
    assert any(not torch.equal(a, p) for a, p in zip(actor, agents[1].model.parameters()))
    assert "train/agent_1/value_loss" in metrics and "train/agent_2/value_loss" not in metrics
