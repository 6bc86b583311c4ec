"""Group-relative advantage estimators and scales on hand-computed numbers (the paper's MAGRPO family)."""

import pytest
import torch

from magrpo.algos.advantages import ADVANTAGES, STD_EPS, advantages

R = torch.tensor([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 4.0, 4.0]])


def test_mean_baseline():
    # group 1: mean 3 -> [-2, -1, 0, 3]; group 2: mean 2 -> [-2, -2, 2, 2]
    assert torch.allclose(advantages(R, "mean"), torch.tensor([[-2.0, -1.0, 0.0, 3.0], [-2.0, -2.0, 2.0, 2.0]]))


def test_rloo_baseline():
    # A_j = R_j - (sum - R_j)/(G-1): group 1 sum 12 -> 1-11/3, 2-10/3, 3-9/3, 6-6/3
    expected = torch.tensor([[1 - 11 / 3, 2 - 10 / 3, 0.0, 4.0], [0 - 8 / 3, 0 - 8 / 3, 4 - 4 / 3, 4 - 4 / 3]])
    assert torch.allclose(advantages(R, "rloo"), expected)


def test_max_and_raw():
    assert torch.allclose(advantages(R, "max"), torch.tensor([[-5.0, -4.0, -3.0, 0.0], [-4.0, -4.0, 0.0, 0.0]]))
    assert torch.equal(advantages(R, "raw"), R)


def test_group_scale_divides_by_group_std():
    std1 = torch.tensor([1.0, 2.0, 3.0, 6.0]).std(unbiased=False)   # sqrt(3.5)
    got = advantages(R, "mean", "group")
    assert got[0, 3].item() == pytest.approx(3.0 / (std1.item() + STD_EPS))
    assert got[1, 0].item() == pytest.approx(-2.0 / (2.0 + STD_EPS))


def test_batch_scale_uses_one_std():
    std = R.std(unbiased=False).item()
    assert torch.allclose(advantages(R, "mean", "batch"), advantages(R, "mean") / (std + STD_EPS))


def test_equal_returns_give_zero_advantage_and_finite_scale():
    same = torch.full((1, 4), 0.7)
    for name in ADVANTAGES:
        if name == "raw":
            continue
        a = advantages(same, name, "group")
        assert torch.isfinite(a).all() and torch.allclose(a, torch.zeros_like(a), atol=1e-5)
