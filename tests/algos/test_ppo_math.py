"""The actor-critic pieces of the PPO family on hand-computed numbers."""

import math

import pytest
import torch

from magrpo.algos.advantages import gae, masked_whiten
from magrpo.algos.losses import AdaptiveKLController, clipped_surrogate, clipped_value_loss


def _gae_by_hand(r, v, gamma, lam):
    """Textbook GAE over one episode (lists), V after the last step = 0."""
    T = len(r)
    adv = [0.0] * T
    last = 0.0
    for t in reversed(range(T)):
        next_v = v[t + 1] if t + 1 < T else 0.0
        delta = r[t] + gamma * next_v - v[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 1.0), (1.0, 1.0), (0.99, 0.5)])
def test_gae_matches_a_hand_computed_sequence_and_ignores_padding_after_eos(gamma, lam):
    r = [0.0, -0.1, 0.0, 1.5]
    v = [0.3, 0.2, -0.4, 0.8]
    expected = _gae_by_hand(r, v, gamma, lam)
    # row 0: the episode then two padding positions holding garbage rewards and values
    rewards = torch.tensor([r + [7.0, -3.0]])
    values = torch.tensor([v + [5.0, 9.0]])
    mask = torch.tensor([[1.0, 1, 1, 1, 0, 0]])
    adv, ret = gae(rewards, values, mask, gamma, lam)
    assert adv[0, :4].tolist() == pytest.approx(expected, abs=1e-6)
    assert adv[0, 4:].tolist() == [0.0, 0.0] and ret[0, 4:].tolist() == [0.0, 0.0]
    assert ret[0, :4].tolist() == pytest.approx([a + b for a, b in zip(expected, v)], abs=1e-6)


def test_gae_with_lam_one_is_the_discounted_return_minus_value():
    r, v = [0.5, 0.0, 2.0], [0.1, 0.2, 0.3]
    adv, ret = gae(torch.tensor([r]), torch.tensor([v]), torch.ones(1, 3), 0.5, 1.0)
    returns = [0.5 + 0.5 * 0.0 + 0.25 * 2.0, 0.0 + 0.5 * 2.0, 2.0]   # Monte-Carlo returns
    assert ret[0].tolist() == pytest.approx(returns)
    assert adv[0].tolist() == pytest.approx([R - b for R, b in zip(returns, v)])


def test_whitening_gives_zero_mean_unit_variance_on_the_mask_only():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, -50.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0]])
    w = masked_whiten(x, mask)
    vals = w[mask.bool()]
    assert vals.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert (vals ** 2).mean().item() == pytest.approx(1.0, abs=1e-4)
    assert w[~mask.bool()].abs().sum().item() == 0.0
    # the masked-out outliers did not move the statistics
    ref = torch.tensor([1.0, 2, 3, 4, 5])
    assert vals.tolist() == pytest.approx(((ref - ref.mean()) / ref.std(unbiased=False)).tolist(), abs=1e-4)


def test_whitening_floor_divides_by_the_larger_of_std_and_min_std():
    # values 0.98, 1.00, 1.02 on the mask: mean 1.00, var = (0.0004 + 0 + 0.0004) / 3, std 0.01633
    x = torch.tensor([[0.98, 1.00, 1.02, 7.0]])
    mask = torch.tensor([[1.0, 1, 1, 0]])
    std = (0.0008 / 3) ** 0.5
    plain = masked_whiten(x, mask)
    assert plain[0, :3].tolist() == pytest.approx([-0.02 / std, 0.0, 0.02 / std], rel=1e-4)   # +-1.22
    # a floor above the spread: divide by 0.1 instead, the noise stays noise-sized (+-0.2)
    floored = masked_whiten(x, mask, min_std=0.1)
    assert floored[0, :3].tolist() == pytest.approx([-0.2, 0.0, 0.2], rel=1e-4)
    assert floored[0, 3].item() == 0.0
    # a floor below the spread changes nothing
    assert masked_whiten(x, mask, min_std=0.01)[0].tolist() == pytest.approx(plain[0].tolist(), rel=1e-5)


def test_clipped_value_loss_takes_the_larger_of_the_two_errors():
    old = torch.tensor([1.0, 1.0, 1.0])
    new = torch.tensor([1.5, 1.1, 0.0])
    ret = torch.tensor([2.0, 0.0, 0.0])
    loss, clipped = clipped_value_loss(new, old, ret, clip=0.2)
    # row 0: unclipped (1.5-2)^2=0.25, clipped V=1.2 -> 0.64: takes 0.64
    # row 1: within the clip range: both 1.21
    # row 2: unclipped 0, clipped V=0.8 -> 0.64
    assert loss.tolist() == pytest.approx([0.5 * 0.64, 0.5 * 1.21, 0.5 * 0.64])
    assert clipped.tolist() == [1.0, 0.0, 1.0]


def test_clipped_surrogate_is_the_plain_policy_gradient_at_ratio_one():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, requires_grad=True)
    adv = torch.tensor([[1.0], [-2.0], [0.5]])
    logp = torch.log_softmax(logits, -1)
    loss, clipped = clipped_surrogate(logp, logp.detach(), adv, 0.2, 0.28)
    g_ppo, = torch.autograd.grad(loss.sum(), logits)
    logp2 = torch.log_softmax(logits, -1)
    g_pg, = torch.autograd.grad((-adv * logp2).sum(), logits)
    assert torch.allclose(g_ppo, g_pg, atol=1e-6)
    assert clipped.sum().item() == 0.0


def test_clipped_surrogate_stops_the_gradient_outside_the_trust_region():
    old = torch.zeros(2)
    logp = torch.tensor([math.log(1.5), math.log(0.5)], requires_grad=True)
    adv = torch.tensor([1.0, -1.0])
    loss, clipped = clipped_surrogate(logp, old, adv, 0.2, 0.2)
    g, = torch.autograd.grad(loss.sum(), logp)
    assert clipped.tolist() == [1.0, 1.0] and g.tolist() == [0.0, 0.0]


def test_adaptive_kl_controller_moves_towards_the_target():
    ctl = AdaptiveKLController(0.1, target=6.0, horizon=100)
    ctl.update(kl=12.0, n_steps=10)              # KL too high: error clipped to +0.2
    assert ctl.value == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))
    ctl.update(kl=3.0, n_steps=10)               # too low: error -0.5 clipped to -0.2
    assert ctl.value == pytest.approx(0.1 * 1.02 * (1 - 0.02))
    ctl.update(kl=6.6, n_steps=50)               # error 0.1 inside the clip
    assert ctl.value == pytest.approx(0.1 * 1.02 * 0.98 * (1 + 0.1 * 0.5))
    fixed = AdaptiveKLController(0.3, target=None, horizon=100)
    fixed.update(kl=50.0, n_steps=10)
    assert fixed.value == 0.3
    restored = AdaptiveKLController(0.0, 6.0, 100)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value == ctl.value
