"""The harder coordination games (magrpo/tasks/coordination/games.py): rewards on hand-computed cases."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from magrpo.tasks import TASKS
from magrpo.tasks.check import check_task
from magrpo.tasks.coordination.games import WORDS, mutual_information, pair_agreement


def make(name: str, **task):
    cls = TASKS[name]
    cfg = OmegaConf.merge(OmegaConf.structured(cls.config_schema), task)
    reward = OmegaConf.structured(cls.reward_schema)
    return cls(cfg, reward)


@pytest.mark.parametrize("name", ["convention", "stag_hunt", "budget_signal", "invest", "crowd"])
def test_each_game_keeps_the_task_contract(name):
    check_task(name).raise_if_failed()


def test_pair_agreement_counts_ordered_pairs():
    total, shares = pair_agreement(["r", "r", "b"])
    assert total == pytest.approx(2 / 6) and shares == pytest.approx([1 / 6, 1 / 6, 0.0])
    assert pair_agreement(["r", None]) == (0.0, [0.0, 0.0])
    assert pair_agreement(["r"]) == (1.0, [1.0])


def test_convention_pays_for_the_same_colour_not_the_same_letter():
    task = make("convention")
    item = task.load("train")[0]
    orders = [task.order(item, i) for i in range(2)]
    assert sorted(orders[0]) == sorted(WORDS[:4])
    red = [chr(97 + o.index("red")) for o in orders]
    scores = task.score([item], task.prompts(item, 2), [red])
    assert scores[0] == 1.0 and scores.extras["passed"] == [True]
    # each agent answers with the other's letter for red: the same colour only if both lists agree there
    swapped = [red[1], red[0]]
    same = orders[0][ord(swapped[0]) - 97] == orders[1][ord(swapped[1]) - 97]
    assert task.score([item], task.prompts(item, 2), [swapped])[0] == float(same)
    # a fixed letter names different colours in different items: over many items it is near chance
    items = task.load("train")
    fixed = task.score(items, [task.prompts(it, 2) for it in items], [["a", "a"]] * len(items))
    assert 0.0 < sum(fixed) / len(items) < 0.6


@pytest.mark.parametrize("order", ["rotation", "shuffle"])
def test_convention_deals_every_colour_under_every_letter(order):
    task = make("convention", order=order)
    items = task.load("train")
    firsts = {task.order(it, agent)[0] for it in items for agent in range(2)}
    assert firsts == set(WORDS[:4])               # letter a names every colour: no focal letter
    for it in items[:20]:
        listed = task.order(it, 0)
        assert sorted(listed) == sorted(WORDS[:4])
        if order == "rotation":                   # the wheel turned: red's neighbours stay its neighbours
            k = WORDS.index(listed[0])
            assert listed == WORDS[k:4] + WORDS[:k]
    if order == "shuffle":                        # any order: some listings are no rotation of the wheel
        rotations = [WORDS[k:4] + WORDS[:k] for k in range(4)]
        assert any(task.order(it, 0) not in rotations for it in items)


def test_stag_hunt_pays_the_stag_only_together_and_splits_per_hunter():
    task = make("stag_hunt")
    item = task.load("train")[0]
    s = task.score([item] * 3, [task.prompts(item, 2)] * 3, [["stag", "stag"], ["stag", "hare"], ["hare", "hare"]])
    assert list(s) == pytest.approx([1.0, 0.3, 0.6])
    shares = task.individual_rewards(s, 2)
    assert shares[1] == pytest.approx([0.0, 0.3]) and sum(shares[2]) == pytest.approx(0.6)
    # normalized from the hare (0.6): all hare and anything below it 0, all stag 1,
    # a mean pay of 0.8 half-way: (0.8 - 0.6) / (1 - 0.6)
    assert task.normalized_return(0.6, 2) == 0.0 and task.normalized_return(0.3, 2) == 0.0
    assert task.normalized_return(1.0, 2) == 1.0 and task.normalized_return(0.8, 2) == pytest.approx(0.5)
    # another hare: 0.5 -> (0.75 - 0.5) / 0.5
    assert make("stag_hunt", hare=0.5).normalized_return(0.75, 2) == pytest.approx(0.5)


def test_budget_signal_charges_characters_past_the_budget():
    task = make("budget_signal")                      # K = 4: runs a-f, g-m, n-s, t-z; budget 2, cost 0.1
    item = {"id": "x", "target": 1, "scene": ""}
    prompts = task.prompts(item, 2)
    s = task.score([item] * 3, [prompts] * 3, [["ab", "hello"], ["abcd", "hello"], ["ab", "apple"]])
    assert list(s) == pytest.approx([1.0, 0.8, 0.0])
    assert s.components["message_chars"] == [2.0, 4.0, 2.0]
    m = task.metrics([item] * 3, [["ab", "hello"], ["abcd", "hello"], ["ab", "apple"]], s)
    assert m["message_chars"] == pytest.approx(8 / 3)


def test_mutual_information_in_bits():
    assert mutual_information([(0, 0), (1, 1)]) == pytest.approx(1.0)
    assert mutual_information([(0, 0), (1, 0)]) == pytest.approx(0.0)
    four = [(k, k) for k in range(4)]
    assert mutual_information(four) == pytest.approx(math.log2(4))


def test_invest_pays_nothing_first_and_caps_later_turns_by_the_first_move():
    task = make("invest")
    item = task.load("train")[0]
    prompts = task.prompts(item, 2)
    first = task.score([item], [prompts], [["c", "c"]])
    assert first[0] == 0.0
    later = [{**item, "turn_history": [["a", "x"]]}, {**item, "turn_history": [["e", "x"]]}]
    s = task.score(later, [prompts] * 2, [["c", "c"], ["c", "c"]])
    assert list(s) == pytest.approx([1.0, 0.25])
    assert s.extras["passed"] == [True, False]


def test_crowd_needs_every_agent():
    task = make("crowd")
    item = task.load("train")[0]
    prompts = task.prompts(item, 8)
    s = task.score([item] * 2, [prompts] * 2, [list("bdfhjlnp"), ["b"] * 8])
    assert list(s) == pytest.approx([1.0, 1 / 8])
