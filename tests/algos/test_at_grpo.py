"""AT-GRPO (magrpo/algos/at_grpo.py): best-branch trees, groups keyed by (item, agent, turn), and
where it equals MAGRPO."""

import pytest
import torch

from magrpo.algos.advantages import keyed_advantages
from magrpo.cli.train import run
from magrpo.rollout.turns import TreeStats, TurnSpec, choose_expansions
from tests.algos import FAST, scored_rollout
from tests.conftest import train_rows

# --- AT-GRPO -------------------------------------------------------------------------------------


def test_at_grpo_best_branch_expands_each_sets_best_node():
    root = scored_rollout([[0.1, 0.9, 0.3], [0.5, 0.5, 0.2]])
    nodes = choose_expansions(root, TurnSpec(num_turns=2, branch="best"), TreeStats())
    assert nodes == [1, 3]        # item 0: node 1; item 1: the first of the equal best (node 0 -> index 3)


def test_at_grpo_groups_by_item_agent_and_turn():
    # two sibling sets of one item at turn 2 merge into one group; a second item stays apart
    R = torch.tensor([1.0, 3.0, 5.0, 7.0, 2.0, 4.0])
    items = torch.tensor([0, 0, 0, 0, 1, 1])
    assert keyed_advantages(R, items, "mean").tolist() == pytest.approx([-3, -1, 1, 3, -1, 1])


def test_at_grpo_with_one_turn_is_magrpo(make_cfg, tmp_path):
    common = ["max_steps=2", "eval.every=0", "save_final=false", *FAST]
    run(make_cfg(["algo=at_grpo", *common], out=str(tmp_path / "at")))
    run(make_cfg(["algo=magrpo", *common], out=str(tmp_path / "ma")))
    a, b = train_rows(tmp_path / "at"), train_rows(tmp_path / "ma")
    for step in (1, 2):
        for key in ("train/reward_mean", "train/agent_1/loss", "train/agent_2/grad_norm"):
            assert a[step][key] == b[step][key], (step, key)


def test_at_grpo_two_turns_expand_one_node_per_set(make_cfg, tmp_path):
    out = tmp_path / "at2"
    run(make_cfg(["algo=at_grpo", "algo.num_turns=2", "feedback=plain", "max_steps=1", "eval.every=0",
                  "save_final=false", *FAST], out=str(out)))
    row = train_rows(out)[1]
    assert row["train/turn_1/expanded"] == 2.0 and row["train/turn_2/nodes"] == 2 * 2
