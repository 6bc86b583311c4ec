"""The turn tree: its size, its returns, early termination, batching per turn, prompt truncation,
and multi-turn training and resume end to end."""

import json
from pathlib import Path

import pytest
import torch

from magrpo.cli.train import run
from magrpo.config.schemas import ConfigError
from magrpo.models.agents import load_agents, seed_everything
from magrpo.rollout.feedback import build_feedback
from magrpo.rollout.record import Rollout, Sampling, joint_indices
from magrpo.rollout.turns import (
    TreeStats,
    TurnSpec,
    choose_expansions,
    grow_tree,
    sequences_per_item,
    tree_returns,
    tree_size,
)
from magrpo.tasks import Scores, build_task
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg, run_and_resume, train_rows

FAST = ["algo.max_new_tokens=6", "eval.num_items=2", "eval.num_samples=2", "algo.batch_size=2"]


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """The default two tiny agents and the length_ratio task. The tree tests only sample from the
    agents (they never update them), so one loaded team serves them all."""
    cfg = validate(compose_cfg([f"output_dir={tmp_path_factory.mktemp('team')}"]))
    return load_agents(cfg.agents, cfg.hardware, 2, need_reference=False), build_task(cfg.task, cfg.reward)


@pytest.fixture
def seeded_team(team):
    seed_everything(0)
    return team


# --- sizes ----------------------------------------------------------------------------------------


def test_sequences_per_item_by_hand():
    assert sequences_per_item(3, 2, "aligned", 1) == 3 * 2                # N*G, one set
    assert sequences_per_item(3, 2, "cross", 2, 1) == 3 * 2 * (1 + 1)     # one node of 8 expands
    assert sequences_per_item(2, 4, "cross", 2) == 2 * 4 * (1 + 16)       # all 4^2 nodes expand
    assert sequences_per_item(2, 2, "aligned", 3) == 2 * 2 * (1 + 2 + 4)


@pytest.mark.parametrize("mode,turns,cap,want", [
    ("aligned", 2, None, 2 + 2 * 2),           # G + G*G
    ("aligned", 3, None, 2 + 4 + 8),
    ("cross", 2, None, 4 + 4 * 4),             # G^N per set, every node expands
    ("cross", 3, None, 4 + 16 + 64),
    ("cross", 2, 1, 4 + 4),                    # one node per set expands
    ("cross", 3, 2, 4 + 8 + 16),
    ("aligned", 3, 1, 2 + 2 + 2),
])
def test_grown_tree_has_the_size_it_promises(seeded_team, monkeypatch, mode, turns, cap, want):
    assert tree_size(2, 2, mode, turns, cap) == want
    agents, task = seeded_team
    items = task.load("train")[:2]
    spec = TurnSpec(num_turns=turns, joint_mode=mode, max_branches=cap)
    feedback = build_feedback({"mode": "plain"}, task)
    calls = []
    import magrpo.rollout.turns as turns_mod

    real = turns_mod.generate

    def counting(agent, prompts, sampling, conversations=None):
        calls.append(len(prompts))
        return real(agent, prompts, sampling, conversations)

    monkeypatch.setattr(turns_mod, "generate", counting)
    root, stats = grow_tree(agents, task, feedback, items, Sampling(2, 3), spec)
    levels = root.levels()
    assert len(levels) == turns
    assert sum(len(lv.scores) for lv in levels) == want * len(items)
    # every later turn is ONE generate call per agent for all its nodes across the batch
    assert len(calls) == 2 * (turns - 1)
    for t, lv in enumerate(levels[1:], start=1):
        assert lv.num_items == stats.expanded[t] == len(lv.parents)
        assert calls[2 * (t - 1)] == lv.num_items
    # the sequences the tree generated (every agent's samples of every set) are the ones promised
    generated = sum(g.completion_ids.shape[0] for lv in levels for g in lv.samples)
    assert generated == sequences_per_item(2, 2, mode, turns, cap) * len(items)
    # a capped set expands exactly `cap` nodes of each parent set
    if cap is not None:
        for lv, child in zip(levels, levels[1:]):
            per_set = torch.bincount(child.parents // lv.num_joint, minlength=lv.num_items)
            assert per_set.tolist() == [min(cap, lv.num_joint)] * lv.num_items


def test_a_tree_bigger_than_max_tree_nodes_stops_at_start(make_cfg):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(["algo.num_turns=3", "algo.joint_mode=cross", "algo.max_tree_nodes=50"]))
    # G=4, N=2: 16 + 256 + 4096 nodes
    assert "4368 nodes per item (2184 generated sequences)" in str(e.value)      # 2*4*(1 + 16 + 256)
    assert "algo.max_tree_nodes=50" in str(e.value) and "max_branches" in str(e.value)
    validate(make_cfg(["algo.num_turns=3", "algo.joint_mode=cross", "algo.max_tree_nodes=50", "algo.max_branches=1"]))


# --- returns --------------------------------------------------------------------------------------


def _scored(rewards: list[list[float]], parents: list[int] | None = None, turn: int = 1) -> Rollout:
    B, J = len(rewards), len(rewards[0])
    r = Rollout([{"id": str(b)} for b in range(B)], [], joint_indices(1, J, "aligned"), turn=turn,
                parents=None if parents is None else torch.tensor(parents))
    r.scores = Scores([x for row in rewards for x in row])
    return r


def test_returns_with_discount_on_a_hand_built_tree():
    # one item, 2 nodes at turn 1; both expand into a set of 2 children; at turn 2 both nodes of
    # the first set expand again, the second set is pruned (its nodes are leaves)
    root = _scored([[1.0, 0.0]])
    t2 = _scored([[1.0, 0.5], [0.0, 0.0]], parents=[0, 1], turn=2)
    t3 = _scored([[0.2, 0.6], [1.0, 0.0]], parents=[0, 1], turn=3)
    root.children, t2.children = [t2], [t3]
    g = 0.9
    R = tree_returns(root, g)
    r3 = [0.2, 0.6, 1.0, 0.0]
    r2 = [1.0 + g * (0.2 + 0.6) / 2, 0.5 + g * (1.0 + 0.0) / 2, 0.0, 0.0]
    r1 = [1.0 + g * (r2[0] + r2[1]) / 2, 0.0 + g * (r2[2] + r2[3]) / 2]
    assert R[2].flatten().tolist() == pytest.approx(r3)
    assert R[1].flatten().tolist() == pytest.approx(r2)
    assert R[0].flatten().tolist() == pytest.approx(r1)
    # gamma = 0: every node returns its own reward
    assert [x.flatten().tolist() for x in tree_returns(root, 0.0)] == [[1.0, 0.0], [1.0, 0.5, 0.0, 0.0],
                                                                          pytest.approx(r3)]


def test_a_sibling_left_unexpanded_by_the_cap_takes_its_siblings_mean_continuation():
    root = _scored([[1.0, 0.0, 0.5]])
    child = _scored([[2.0, 4.0]], parents=[1], turn=2)          # only node 1 expanded (max_branches=1)
    root.children = [child]
    R = tree_returns(root, 1.0)[0].flatten().tolist()
    assert R == pytest.approx([1.0 + 3.0, 0.0 + 3.0, 0.5 + 3.0])


def test_early_termination_prunes_sets_that_reach_the_threshold():
    level = _scored([[1.0, 0.8], [0.1, 0.3], [0.5, 0.5]])
    stats = TreeStats()
    nodes = choose_expansions(level, TurnSpec(num_turns=2, threshold=0.5), stats)
    assert nodes == [2, 3]                      # set 0 (mean 0.9) and set 2 (mean 0.5, reaches it) stop
    assert stats.terminated[1] == 2 and stats.expanded[1] == 2
    assert choose_expansions(level, TurnSpec(num_turns=2), TreeStats()) == list(range(6))


def test_early_termination_in_a_grown_tree(seeded_team):
    agents, task = seeded_team
    items = task.load("train")[:2]
    fb = build_feedback({"mode": "plain"}, task)
    root, stats = grow_tree(agents, task, fb, items, Sampling(2, 3), TurnSpec(num_turns=3, threshold=0.0))
    assert root.children == [] and stats.terminated[1] == 2          # rewards >= 0: every set stops
    R = tree_returns(root, 0.5)
    assert torch.equal(R[0], root.rewards)                           # a pruned node's return is its reward
    root, _ = grow_tree(agents, task, fb, items, Sampling(2, 3), TurnSpec(num_turns=3, threshold=1e9))
    assert len(root.levels()) == 3


def test_long_histories_are_cut_from_the_left_and_counted(seeded_team):
    agents, task = seeded_team
    items = task.load("train")[:2]
    fb = build_feedback({"mode": "plain"}, task)
    root, stats = grow_tree(agents, task, fb, items, Sampling(2, 8, max_prompt_length=30), TurnSpec(num_turns=2))
    child = root.children[0]
    assert stats.truncated >= len(child.samples[0].prompts)          # every turn-2 prompt outgrew 30 tokens
    assert child.samples[0].prompt_ids.shape[1] == 30
    # the end of the prompt survives: the revise instruction is the last thing the agent reads
    tail = agents[0].tokenizer.decode(child.samples[0].prompt_ids[0])
    assert tail.rstrip().endswith("format asked for above.")


# --- training end to end --------------------------------------------------------------------------


def _evals(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if "eval/reward_mean" in json.loads(line)]


@pytest.mark.parametrize("overrides", [
    ["task=humaneval", "feedback=diagnostics", "algo.num_generations=2"],
    ["task=humaneval", "feedback=passed", "algo.joint_mode=cross", "algo.num_generations=2"],
    ["task=tldr", "feedback=diagnostics"],
    ["algo=grpo", "feedback=plain"],
    ["algo=ippo", "feedback=plain", "algo.discount=0.5"],
    ["algo=mappo", "feedback=none", "algo.max_branches=1"],
    ["algo=ppo", "feedback=plain", "algo.num_generations=2"],
])
def test_two_turn_training_smoke(make_cfg, tmp_path, overrides):
    # Histories cut to their last 128 tokens: the long tldr posts, repeated in the turn-2 history,
    # made that case cost five times the others (the cut itself is checked above).
    out = tmp_path / "run"
    result = run(make_cfg(["debug=smoke", "algo.num_turns=2", "save_final=false", *FAST, "algo.max_prompt_length=128",
                           *overrides], out=str(out)))
    assert result["steps"] == 2
    row = train_rows(out)[2]
    for key in ("train/turn_1/reward_mean", "train/turn_2/reward_mean", "train/turn_1/nodes", "train/turn_2/nodes",
                "train/prompt_truncated", "train/agent_1/loss", "time/feedback_s"):
        assert key in row, key
    assert row["train/turn_2/nodes"] > 0
    final = result["final_eval"]
    assert {"turn_1/reward_mean", "turn_2/reward_mean", "reward_mean"} <= set(final)
    assert final["reward_mean"] == final["turn_2/reward_mean"]     # the team's answer is its last turn's
    components = [k for k in row if k.startswith("train/turn_2/reward/")]
    assert components, "per-turn reward components"
    if "task=humaneval" in overrides:
        assert "turn_1/pass@1" in final and "turn_2/pass@1" in final


def test_resume_in_the_middle_of_a_multi_turn_run_matches_an_uninterrupted_one(make_cfg, tmp_path):
    common = ["max_steps=4", "save_every=2", "eval.every=2", "algo.num_turns=2", "feedback=plain",
              "algo.max_branches=1", "algo.joint_mode=cross", "algo.num_generations=2", *FAST]
    a, b = run_and_resume(make_cfg, tmp_path, common)
    assert sorted(b) == [3, 4]
    keys = [k for k in a[3] if k.startswith("train/") and "time" not in k]
    assert "train/turn_2/reward_mean" in keys
    for step in (3, 4):
        for key in keys:
            assert a[step][key] == b[step][key], (step, key)
    untimed = lambda m: {k: v for k, v in m.items() if not k.endswith("time_s")}  # noqa: E731
    assert untimed(_evals(tmp_path / "full")[-1]) == untimed(_evals(tmp_path / "resumed")[-1])
