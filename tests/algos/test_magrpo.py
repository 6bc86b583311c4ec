"""MAGRPO's GSPO and DAPO options (magrpo/algos/magrpo.py, group_relative.py): hand-computed math
and their pieces on a real episode."""

import functools
import math

import pytest
import torch

from magrpo.algos.base import StepInput
from magrpo.algos.losses import clipped_surrogate, sequence_log_ratio
from magrpo.algos.magrpo import MAGRPO, overlong_penalty
from magrpo.models.agents import seed_everything
from magrpo.rollout.turns import select_prompts
from magrpo.tasks import Scores
from tests.algos import FAST, scored_rollout
from tests.conftest import build_algorithm

# --- GSPO -----------------------------------------------------------------------------------------


def test_gspo_sequence_ratio_is_the_geometric_mean_of_token_ratios():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    old = torch.tensor([[-1.5, -2.0, -2.0], [-1.0, -0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])      # row 2: its last token is padding
    log_s = sequence_log_ratio(logp, old, mask)
    # row 1: ratios e^0.5, e^0, e^-1 -> geometric mean e^(-0.5/3); row 2: e^0.5, e^0 -> e^0.25
    assert torch.exp(log_s).tolist() == pytest.approx([math.exp(-0.5 / 3), math.exp(0.25)])
    # sequence-level clipping: s = e^0.25 = 1.284 > 1.2 with A = 2 is clipped to 1.2 * 2
    loss, clipped = clipped_surrogate(log_s, torch.zeros(2), torch.tensor([1.0, 2.0]), 0.2, 0.2)
    assert loss.tolist() == pytest.approx([-math.exp(-0.5 / 3), -2.4])
    assert clipped.tolist() == [0.0, 1.0]


def test_gspo_on_policy_gradient_weights_each_token_by_one_over_the_length(make_cfg):
    """At ratio 1 with seq_mean_token_mean, GSPO's gradient is A * (1/|y|) sum_t grad log pi: the
    same as MAGRPO's token ratio with that aggregation; with seq_sum it is the plain sum."""
    grads = {}
    for level, loss in (("token", "clip"), ("sequence", "gspo")):
        cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=magrpo", f"algo.loss={loss}",
                                                    "algo.loss_agg=seq_mean_token_mean", *FAST])
        seed_everything(0)
        ep = algo.collect(StepInput(task.load("train")[:2]))
        batch = next(algo.policy_batches(ep, functools.partial(algo.role_advantages, ep=ep)))
        algo._update(0, batch[2], batch[3])
        grads[level] = [p.detach().clone() for p in agents[0].model.parameters()]
    for a, b in zip(grads["token"], grads["sequence"]):
        assert torch.allclose(a, b, atol=1e-6)


# --- DAPO -----------------------------------------------------------------------------------------


def test_dapo_overlong_penalty_ramps_over_the_buffer():
    lengths = torch.tensor([3.0, 6.0, 7.0, 8.0, 10.0])
    # L_max = 10, buffer 4: nothing up to 6, then (6 - L) / 4, -1 at the cap; factor 0.5 scales it
    assert overlong_penalty(lengths, 10, 4, 1.0).tolist() == pytest.approx([0, 0, -0.25, -0.5, -1.0])
    assert overlong_penalty(lengths, 10, 4, 0.5).tolist() == pytest.approx([0, 0, -0.125, -0.25, -0.5])


def test_dynamic_sampling_keeps_only_items_whose_rewards_differ():
    root = scored_rollout([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5], [0.2, 0.3, 0.2]])
    assert MAGRPO.informative_items(root) == [1, 3]


def test_dynamic_sampling_drops_flat_groups_and_refills(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=magrpo", "algo.dynamic_sampling=true",
                                                "algo.dynamic_sampling_rounds=3", *FAST])
    calls = []

    def score(items, prompts, completions):     # round 0 flat (no signal), later rounds varied
        calls.append(len(items))
        flat = len(calls) == 1
        return Scores([0.5 if flat else float(len(c[0]) % 3) + 0.1 * k for k, c in enumerate(completions)])

    task.score = score
    m = algo.step(StepInput(task.load("train")[:2]))
    assert m["train/dynamic_sampling/rounds"] == 1.0 and m["train/dynamic_sampling/items_drawn"] == 4.0
    assert m["train/dynamic_sampling/items_kept"] == 2.0
    assert m["train/dynamic_sampling/dropped_groups"] == 2 * 2        # round 0: 2 agents x 2 items
    assert m["train/sequences_per_item"] == 2 * (2 * 2)                # two rounds of N G per item
    assert m["train/reward_mean"] == pytest.approx(0.5)                # the batch as drawn

    calls.clear()
    task.score = lambda items, prompts, completions: Scores([1.0] * len(completions))   # never any signal
    m = algo.step(StepInput(task.load("train")[:2]))
    assert m["train/dynamic_sampling/rounds"] == 3.0 and m["train/dynamic_sampling/items_kept"] == 0.0
    assert m["train/agent_1/grad_norm"] == 0.0            # nothing to learn from: every advantage is 0


def test_select_prompts_keeps_whole_groups(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=magrpo", *FAST])
    ep = algo.collect(StepInput(task.load("train")[:2]))
    gen = ep.generation(agents[0])
    sub = select_prompts(gen, torch.tensor([False, False, True, True]))
    assert sub.texts == gen.texts[2:] and torch.equal(sub.prompt_ids, gen.prompt_ids[1:])
    with pytest.raises(ValueError, match="whole groups"):
        select_prompts(gen, torch.tensor([True, False, True, True]))


# --- the entropy bonus ----------------------------------------------------------------------------

@pytest.mark.parametrize("coef", [0.0, 0.5])
def test_entropy_bonus_is_minus_its_coefficient_times_the_token_mean_entropy(make_cfg, monkeypatch, coef):
    """With every advantage 0 the policy loss vanishes, so token_mean's loss is -c_H * mean_t H_t:
    exactly -coef times the entropy the update reports (0 with the bonus off)."""
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=magrpo", "algo.loss_agg=token_mean",
                                                          f"algo.ent_coef={coef}", *FAST])
    monkeypatch.setattr(MAGRPO, "group_advantages", lambda self, agent, ep, returns: torch.zeros(
        sum(r.numel() for r in returns)))
    before = [p.detach().clone() for p in agents[0].trainable_parameters()]
    metrics = method.step(StepInput(task.load("train")[:2]))
    entropy, loss = metrics["train/agent_1/entropy"], metrics["train/agent_1/loss"]
    assert entropy > 0
    assert loss == pytest.approx(-coef * entropy, rel=1e-5, abs=1e-7)
    moved = any(not torch.equal(p, q) for p, q in zip(before, agents[0].trainable_parameters()))
    assert moved == (coef > 0)        # with A = 0 only the bonus moves the weights
