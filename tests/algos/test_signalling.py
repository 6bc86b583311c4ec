"""Positive signalling (magrpo/algos/signalling.py): the pointwise mutual information by hand, the
gradient identity its docstring rests on, and the bonus on a real episode's returns."""

import math

import pytest
import torch

from magrpo.algos.base import StepInput
from magrpo.algos.signalling import pointwise_mi, row_prompts
from magrpo.core.schema import ConfigError
from magrpo.tasks.coordination.games import mutual_information
from tests.algos import FAST
from tests.conftest import build_algorithm


def test_pointwise_mi_by_hand():
    # s1 sends a twice; s2 sends a once and b once: n(a) = 3 of N = 4
    pmi = pointwise_mi(["s1", "s1", "s2", "s2"], ["a", "a", "a", "b"])
    want = [math.log2(1 / (3 / 4)), math.log2(1 / (3 / 4)), math.log2((1 / 2) / (3 / 4)), math.log2((1 / 2) / (1 / 4))]
    assert pmi.tolist() == pytest.approx(want)
    # its mean is the batch's empirical I(m; s) in bits
    pairs = list(zip(["s1", "s1", "s2", "s2"], ["a", "a", "a", "b"]))
    assert pmi.mean().item() == pytest.approx(mutual_information(pairs))


def test_a_none_move_is_a_move_of_its_own():
    # an empty message is a signal: two prompts, one always silent, one always "a" -> 1 bit each
    assert pointwise_mi(["x", "x", "y", "y"], [None, None, "a", "a"]).tolist() == pytest.approx([1.0] * 4)


def test_pooling_pays_less_and_trying_the_unused_move_pays_more():
    """4 prompts, 4 samples each. A full code gives every sample log2 4 = 2 bits. Pooling s3 and s4
    on move c (d unused) gives the pooled samples 1 bit; one sample of s4 that tries the unused d
    earns log2[(1/4) / (1/16)] = 2 bits, more than its pooled siblings' 1 - the push out of the pool."""
    prompts = [s for s in ("s1", "s2", "s3", "s4") for _ in range(4)]
    full = pointwise_mi(prompts, [m for m in "abcd" for _ in range(4)])
    assert full.tolist() == pytest.approx([2.0] * 16)
    pooled = pointwise_mi(prompts, list("aaaabbbbcccccccc"))
    assert pooled[8:].tolist() == pytest.approx([1.0] * 8)
    tried = pointwise_mi(prompts, list("aaaabbbbccccdccc"))
    assert tried[12].item() == pytest.approx(2.0)
    assert tried[13].item() == pytest.approx(math.log2((3 / 4) / (7 / 16)))      # 0.78 < 2
    assert tried[12] > tried[13]


def test_the_bonus_is_the_gradient_of_the_mutual_information():
    """d/dtheta I(m; s) = E[pmi(m, s) d/dtheta log pi(m | s)] for a softmax policy pi(m | s) over a
    uniform p(s): the identity that lets the bonus ride on the return as a reward."""
    torch.manual_seed(0)
    logits = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)      # 3 prompts, 4 moves
    pi = logits.softmax(-1)
    pbar = pi.mean(0)
    mi = (pi * (pi / pbar).log2()).sum(-1).mean()
    (exact,) = torch.autograd.grad(mi, logits)
    logits2 = logits.detach().clone().requires_grad_(True)
    pi2 = logits2.softmax(-1)
    pmi = (pi2 / pi2.mean(0)).log2().detach()
    surrogate = (pi2.detach() * pmi * pi2.log()).sum(-1).mean()       # E_s E_m[pmi * log pi] with pmi held fixed
    (score,) = torch.autograd.grad(surrogate, logits2)
    assert torch.allclose(exact, score, atol=1e-12)


def test_row_prompts_spreads_each_prompt_over_its_rows():
    assert row_prompts(["p", "q"], 4) == ["p", "p", "q", "q"]
    with pytest.raises(ValueError, match="do not divide"):
        row_prompts(["p", "q"], 3)


SIGNAL = ["task=signal", "algo.topology=sequential", "algo.max_new_tokens=2", *FAST[1:]]


@pytest.mark.parametrize("chosen", [None, [1]])
def test_the_bonus_adds_lam_times_pmi_to_the_chosen_agents_returns(make_cfg, chosen):
    extra = [] if chosen is None else [f"algo.signal_agents={chosen}"]
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=ippo", "algo.signal_bonus=0.5", *extra, *SIGNAL])
    ep = method.collect(StepInput(task.load("train")[:2]))
    for agent in (0, 1):
        with_bonus = torch.cat([r.flatten() for r in ep.returns(agent, 1.0)])
        level = ep.root
        gen = level.samples[agent]
        moves = [task.move(t) for t in gen.texts]
        pmi = pointwise_mi(row_prompts(gen.prompts, len(gen.texts)), moves)
        ep.signal_bonus = 0.0
        plain = torch.cat([r.flatten() for r in ep.returns(agent, 1.0)])
        ep.signal_bonus = 0.5
        gets = chosen is None or agent + 1 in chosen
        assert torch.allclose(with_bonus, plain + (0.5 * pmi if gets else 0.0))
        if gets:
            assert ep.metrics[f"train/agent_{agent + 1}/signal_info_bits"] == pytest.approx(pmi.mean().item())
        else:
            assert f"train/agent_{agent + 1}/signal_info_bits" not in ep.metrics


def test_off_by_default_and_the_returns_are_the_rewards(make_cfg):
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=ippo", *SIGNAL])
    assert cfg.algo.signal_bonus == 0
    ep = method.collect(StepInput(task.load("train")[:2]))
    # the listener answers once per joint action: its returns are the team's rewards, untouched
    assert torch.equal(torch.cat([r.flatten() for r in ep.returns(1, 1.0)]), ep.root.rewards.flatten())
    assert not any("signal_info_bits" in k for k in ep.metrics)


@pytest.mark.parametrize("overrides, match", [
    (["algo=ippo", "algo.signal_agents=[3]"], r"algo.signal_agents=\[3\]: 3 is not an agent.*1..2"),
    (["algo=ippo", "algo.signal_agents=[]"], r"algo.signal_agents=\[\] names no agent"),
    (["algo=ippo", "algo.signal_agents=[one]"], r"algo.signal_agents\[0\]='one' has the wrong type"),
    (["algo=maac", "algo.signal_bonus=0.1"], r"algo.signal_bonus=0.1 is not read by algo.name=maac.*ippo"),
    (["algo=c3", "algo.signal_bonus=0.1"], r"not read by algo.name=c3"),
])
def test_bad_settings_stop_at_start_naming_the_key(make_cfg, overrides, match):
    from magrpo.validation.checks import validate

    with pytest.raises(ConfigError, match=match):
        validate(make_cfg([*overrides, "task=signal", "algo.topology=sequential"]))


def test_a_real_step_logs_the_information_and_trains(make_cfg):
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=magrpo", "algo.signal_bonus=0.2", *SIGNAL])
    metrics = method.step(StepInput(task.load("train")[:2]))
    assert 0.0 <= metrics["train/agent_1/signal_info_bits"] <= 1.0 + 1e-6      # 2 objects: at most 1 bit
    assert math.isfinite(metrics["train/agent_1/loss"])
