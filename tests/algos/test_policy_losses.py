"""The policy losses (magrpo.algos.losses.POLICY_LOSSES) on hand-computed numbers, how `algo.loss`
picks one (each algorithm's explicit default), and a loss registered from outside training every
method family."""

import math
import sys
import uuid
from types import SimpleNamespace

import pytest
import torch

from magrpo.algos import ALGOS
from magrpo.algos.losses import POLICY_LOSSES
from magrpo.cli.train import run
from magrpo.config.schemas import ConfigError
from magrpo.core.registry import RegistryError
from magrpo.validation.checks import validate
from tests.conftest import train_rows

CLIP_HIGHER = SimpleNamespace(epsilon=0.2, epsilon_high=0.28)     # DAPO's clip-higher band


def per_token(adv: list[float], logp: torch.Tensor) -> torch.Tensor:
    """One advantage per completion on each of its tokens, as the group-relative update passes it."""
    return torch.tensor(adv).unsqueeze(-1).expand_as(logp)


def test_reinforce_is_minus_the_advantage_times_the_log_prob():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    loss, info = POLICY_LOSSES["reinforce"](logp, logp.detach(), per_token([2.0, -1.0], logp),
                                            torch.ones_like(logp), CLIP_HIGHER)
    assert loss.tolist() == [[2.0, 4.0], [-0.5, -3.0]]        # L_t = -A log pi; old log-probs unread
    assert info.clipped.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert info.approx_kl.tolist() == [[0.0, 0.0], [0.0, 0.0]]   # on-policy: pi_old = pi


def test_clip_is_the_token_clipped_surrogate_with_a_higher_upper_bound():
    ratios = torch.tensor([[1.5, 0.5, 1.25], [1.5, 0.5, 1.25]])
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -2.2]])
    old = logp - ratios.log()                                  # pi / pi_old = ratios
    loss, info = POLICY_LOSSES["clip"](logp, old, per_token([1.0, -1.0], logp), torch.ones_like(logp),
                                       CLIP_HIGHER)
    # A = +1: -min(r, clip(r, 0.8, 1.28)) -> -1.28, -0.5, -1.25 (1.25 is inside the higher band)
    # A = -1: -min(-r, -clip(r, 0.8, 1.28)) -> 1.5, 0.8, 1.25
    torch.testing.assert_close(loss, torch.tensor([[-1.28, -0.5, -1.25], [1.5, 0.8, 1.25]]))
    assert info.clipped.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]     # ratio outside [0.8, 1.28]
    # approx KL(pi_old || pi), k3: r - 1 - log r per token
    torch.testing.assert_close(info.approx_kl, ratios - 1 - ratios.log())
    symmetric, _ = POLICY_LOSSES["clip"](logp, old, per_token([1.0, -1.0], logp), torch.ones_like(logp),
                                         SimpleNamespace(epsilon=0.2, epsilon_high=0.2))
    assert symmetric[0, 2].item() == pytest.approx(-1.2)       # PPO's band clips 1.25 to 1.2
    # the PPO family has one epsilon and no epsilon_high: the band is symmetric
    ppo, _ = POLICY_LOSSES["clip"](logp, old, per_token([1.0, -1.0], logp), torch.ones_like(logp),
                                   SimpleNamespace(epsilon=0.2))
    torch.testing.assert_close(ppo, symmetric)
    # per-token advantages (GAE's) act token by token
    adv = torch.tensor([[1.0, -1.0, 2.0], [0.0, 1.0, -1.0]])
    tok, _ = POLICY_LOSSES["clip"](logp, old, adv, torch.ones_like(logp), CLIP_HIGHER)
    torch.testing.assert_close(tok, torch.tensor([[-1.28, 0.8, -2.5], [0.0, -0.5, 1.25]]))


def test_gspo_clips_one_sequence_ratio_and_places_it_on_every_token():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -2.2]], requires_grad=True)
    log_ratio = torch.tensor([[0.3, -0.1, 0.4], [0.1, -0.3, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])    # row 2's last token is padding
    loss, info = POLICY_LOSSES["gspo"](logp, logp.detach() - log_ratio, per_token([1.0, -2.0], logp), mask,
                                       CLIP_HIGHER)
    # row 1: s = exp(mean(0.3, -0.1, 0.4)) = e^0.2 = 1.221, inside [0.8, 1.28]: -s A = -1.221;
    # row 2: s = exp(mean(0.1, -0.3)) = e^-0.1 (the padded 5.0 not counted), A = -2: -min(-2s, -2s) = 2s
    s1, s2 = math.exp(0.2), math.exp(-0.1)
    torch.testing.assert_close(loss, torch.tensor([[-s1] * 3, [2 * s2] * 3]))
    assert info.clipped.tolist() == [[0.0] * 3, [0.0] * 3]
    tight, tight_info = POLICY_LOSSES["gspo"](logp, logp.detach() - log_ratio, per_token([1.0, -2.0], logp), mask,
                                              SimpleNamespace(epsilon=0.2, epsilon_high=0.2))
    torch.testing.assert_close(tight[0], torch.tensor([-1.2] * 3))       # PPO's band clips 1.221 to 1.2
    assert tight_info.clipped[0].tolist() == [1.0] * 3


def test_gspo_on_policy_weights_each_token_by_one_over_the_length():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -2.2]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    loss, _ = POLICY_LOSSES["gspo"](logp, logp.detach(), per_token([1.0, -2.0], logp), mask, CLIP_HIGHER)
    (loss[:, 0]).sum().backward()          # one copy of each sequence's loss: L(y)
    # dL(y)/dlog pi(y_t) = -A / |y| at s = 1
    torch.testing.assert_close(logp.grad, torch.tensor([[-1 / 3] * 3, [1.0, 1.0, 0.0]]))


def test_algo_loss_is_the_one_selector_with_each_algorithms_own_default(make_cfg):
    defaults = {name: cls.config_schema.loss for name, cls in ALGOS.items()}
    assert defaults == {"magrpo": "reinforce", "grpo": "reinforce", "dr_mas": "reinforce", "at_grpo": "reinforce",
                        "c3": "clip", "ippo": "clip", "mappo": "clip", "ppo": "clip", "iac": "reinforce",
                        "maac": "reinforce"}
    aggs = {name: cls.config_schema.loss_agg for name, cls in ALGOS.items()}
    assert {aggs[n] for n in ("ippo", "mappo", "ppo")} == {"token_mean"}      # the mini-batch's token mean
    assert {aggs[n] for n in ("magrpo", "grpo", "dr_mas", "at_grpo", "c3", "iac", "maac")} == {"seq_sum"}
    for overrides, want in [([], "reinforce"), (["algo.loss=gspo"], "gspo"),
                            (["algo.loss=clip", "algo.num_iterations=2"], "clip"), (["algo=ppo"], "clip")]:
        assert validate(make_cfg(["algo=magrpo", *overrides])).algo.loss == want


def test_an_unknown_loss_names_the_key_the_value_and_the_known_losses(make_cfg):
    with pytest.raises(RegistryError) as e:
        POLICY_LOSSES["ppo"]
    for needle in ("algo.loss", "'ppo'", "clip", "gspo", "reinforce"):
        assert needle in str(e.value), (needle, str(e.value))
    for overrides, needles in [(["algo.loss=ppo"], ["algo.loss='ppo'", "clip", "gspo", "reinforce"]),
                               (["algo.num_iterations=2"], ["algo.loss='reinforce'", "algo.num_iterations=2",
                                                            "algo.loss=clip or gspo"]),
                               (["algo=ippo", "algo.loss=reinforce"], ["algo.loss='reinforce'", "algo.ppo_epochs=2",
                                                                       "algo.num_mini_batches=2"]),
                               (["algo=iac", "algo.loss=clip"], ["algo.loss='clip'", "algo.loss=reinforce"])]:
        with pytest.raises(ConfigError) as e:
            validate(make_cfg(["algo=magrpo", *overrides]))
        for needle in needles:
            assert needle in str(e.value), (needle, str(e.value))
    validate(make_cfg(["algo=magrpo", "algo.loss=gspo", "algo.num_iterations=2"]))


PLUGIN_LOSS = """
from magrpo import PolicyLossInfo, register_policy_loss

CALLED = []


@register_policy_loss("{name}")
def halved_policy_gradient(logp, old_logp, adv, mask, algo):
    \"\"\"Half the plain policy gradient: L_t = -A_t * log pi / 2.\"\"\"
    CALLED.append((algo.name, tuple(adv.shape) == tuple(logp.shape)))
    return -0.5 * adv * logp, PolicyLossInfo.of(logp, old_logp)
"""


@pytest.mark.parametrize("algo", ["ippo", "magrpo", "iac"])
def test_a_loss_registered_from_outside_trains_every_family(make_cfg, tmp_path, monkeypatch, algo):
    """A plugin module registers a policy loss through the public API; `algo.loss=<its name>` trains
    the PPO family, the group-relative family and the actor-critic family with it, to the end."""
    module = f"outside_loss_{uuid.uuid4().hex[:8]}"
    name = f"halved_pg_{module[-8:]}"
    (tmp_path / f"{module}.py").write_text(PLUGIN_LOSS.format(name=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    summary = run(make_cfg([f"algo={algo}", f"plugins=[{module}]", f"algo.loss={name}", "max_steps=1",
                            "algo.max_new_tokens=8", "algo.batch_size=2", "eval.num_items=2", "eval.num_samples=1",
                            "save_final=false"], out=str(out)))
    assert summary["steps"] == 1
    calls = sys.modules[module].CALLED
    assert calls and {c for c, _ in calls} == {algo} and all(per_token for _, per_token in calls)
    if algo == "ippo":           # every micro-batch of every mini-batch of every epoch
        assert len(calls) >= 2 * 2
    row = train_rows(out)[1]
    assert math.isfinite(row["train/agent_1/loss"]) and math.isfinite(row["train/agent_1/policy_loss"])
