"""The policy losses of a group-relative update (magrpo.algos.core.POLICY_LOSSES) on hand-computed
numbers, and how `algo.loss` picks one."""

import math
from types import SimpleNamespace

import pytest
import torch

from magrpo.algos.core import POLICY_LOSSES
from magrpo.algos.group_relative import policy_loss_name
from magrpo.config import ConfigError
from magrpo.registry import RegistryError
from magrpo.validation import validate

CLIP_HIGHER = SimpleNamespace(epsilon=0.2, epsilon_high=0.28)     # DAPO's clip-higher band


def test_reinforce_is_minus_the_advantage_times_the_log_prob():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    loss, clipped = POLICY_LOSSES["reinforce"](logp, torch.full_like(logp, 9.0), torch.tensor([2.0, -1.0]),
                                               torch.ones_like(logp), CLIP_HIGHER)
    assert loss.tolist() == [[2.0, 4.0], [-0.5, -3.0]]        # L_t = -A log pi; old log-probs unread
    assert clipped.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_clip_is_the_token_clipped_surrogate_with_a_higher_upper_bound():
    ratios = torch.tensor([[1.5, 0.5, 1.25], [1.5, 0.5, 1.25]])
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -2.2]])
    old = logp - ratios.log()                                  # pi / pi_old = ratios
    loss, clipped = POLICY_LOSSES["clip"](logp, old, torch.tensor([1.0, -1.0]), torch.ones_like(logp),
                                          CLIP_HIGHER)
    # A = +1: -min(r, clip(r, 0.8, 1.28)) -> -1.28, -0.5, -1.25 (1.25 is inside the higher band)
    # A = -1: -min(-r, -clip(r, 0.8, 1.28)) -> 1.5, 0.8, 1.25
    torch.testing.assert_close(loss, torch.tensor([[-1.28, -0.5, -1.25], [1.5, 0.8, 1.25]]))
    assert clipped.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]     # ratio outside [0.8, 1.28]
    symmetric, _ = POLICY_LOSSES["clip"](logp, old, torch.tensor([1.0, -1.0]), torch.ones_like(logp),
                                         SimpleNamespace(epsilon=0.2, epsilon_high=0.2))
    assert symmetric[0, 2].item() == pytest.approx(-1.2)       # PPO's band clips 1.25 to 1.2


def test_gspo_clips_one_sequence_ratio_and_places_it_on_every_token():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -2.2]], requires_grad=True)
    log_ratio = torch.tensor([[0.3, -0.1, 0.4], [0.1, -0.3, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])    # row 2's last token is padding
    loss, clipped = POLICY_LOSSES["gspo"](logp, logp.detach() - log_ratio, torch.tensor([1.0, -2.0]), mask,
                                          CLIP_HIGHER)
    # row 1: s = exp(mean(0.3, -0.1, 0.4)) = e^0.2 = 1.221, inside [0.8, 1.28]: -s A = -1.221;
    # row 2: s = exp(mean(0.1, -0.3)) = e^-0.1 (the padded 5.0 not counted), A = -2: -min(-2s, -2s) = 2s
    s1, s2 = math.exp(0.2), math.exp(-0.1)
    torch.testing.assert_close(loss, torch.tensor([[-s1] * 3, [2 * s2] * 3]))
    assert clipped.tolist() == [[0.0] * 3, [0.0] * 3]
    tight, tight_clipped = POLICY_LOSSES["gspo"](logp, logp.detach() - log_ratio, torch.tensor([1.0, -2.0]), mask,
                                                 SimpleNamespace(epsilon=0.2, epsilon_high=0.2))
    torch.testing.assert_close(tight[0], torch.tensor([-1.2] * 3))       # PPO's band clips 1.221 to 1.2
    assert tight_clipped[0].tolist() == [1.0] * 3


def test_gspo_on_policy_weights_each_token_by_one_over_the_length():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -2.2]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    loss, _ = POLICY_LOSSES["gspo"](logp, logp.detach(), torch.tensor([1.0, -2.0]), mask, CLIP_HIGHER)
    (loss[:, 0]).sum().backward()          # one copy of each sequence's loss: L(y)
    # dL(y)/dlog pi(y_t) = -A / |y| at s = 1
    torch.testing.assert_close(logp.grad, torch.tensor([[-1 / 3] * 3, [1.0, 1.0, 0.0]]))


def test_a_null_loss_follows_the_ratio_keys_and_a_set_one_wins():
    def algo(**kw):
        return SimpleNamespace(num_iterations=kw.get("num_iterations", 1), loss=kw.get("loss"),
                               ratio_level=kw.get("ratio_level", "token"))

    assert policy_loss_name(algo()) == "reinforce"
    assert policy_loss_name(algo(num_iterations=2)) == "clip"
    assert policy_loss_name(algo(ratio_level="sequence")) == "gspo"
    assert policy_loss_name(algo(loss="gspo", num_iterations=2)) == "gspo"


def test_an_unknown_loss_names_the_key_the_value_and_the_known_losses(make_cfg):
    with pytest.raises(RegistryError) as e:
        POLICY_LOSSES["ppo"]
    for needle in ("algo.loss", "'ppo'", "clip", "gspo", "reinforce"):
        assert needle in str(e.value), (needle, str(e.value))
    for overrides, needles in [(["algo.loss=ppo"], ["algo.loss='ppo'", "clip", "gspo", "reinforce"]),
                               (["algo.loss=clip", "algo.ratio_level=sequence"], ["algo.loss='clip'", "gspo"]),
                               (["algo.loss=reinforce", "algo.num_iterations=2"], ["algo.loss='reinforce'",
                                                                                  "algo.num_iterations=2"])]:
        with pytest.raises(ConfigError) as e:
            validate(make_cfg(["algo=magrpo", *overrides]))
        for needle in needles:
            assert needle in str(e.value), (needle, str(e.value))
    validate(make_cfg(["algo=magrpo", "algo.loss=gspo", "algo.num_iterations=2"]))
