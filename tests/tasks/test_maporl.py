"""maporl_qa: the problem generator, answer parsing, the verifier, MAPoRL's incentives on hand-built
discussions, and training and evaluation of a discussing team end to end."""

import json

import pytest

from magrpo.cli.evaluate import run_eval
from magrpo.cli.train import run
from magrpo.config.schemas import ConfigError
from magrpo.tasks import build_task
from magrpo.tasks.maporl.data import builtin_items, gsm8k_answer
from magrpo.tasks.maporl.reward import incentives, majority, parse_answer
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg

# Two samples per agent: a two-turn tree of G + G*G nodes per item, 6 instead of the default 20.
FAST = ["algo.max_new_tokens=8", "algo.num_generations=2", "eval.num_items=2", "eval.num_samples=2", "save_final=false"]


def _task(overrides=()):
    cfg = validate(compose_cfg(["output_dir=/tmp/unused", "task=maporl_qa", *overrides]))
    return build_task(cfg.task, cfg.reward)


def test_generated_problems_are_seeded_exact_and_any_size():
    a, b = builtin_items("train", 500, seed=0, max_steps=3), builtin_items("train", 500, seed=0, max_steps=3)
    assert a == b and len({it["question"] for it in a}) > 450
    assert builtin_items("eval", 5, 0, 3) != a[:5] and builtin_items("train", 5, 1, 3) != a[:5]
    assert all(_solve(it["question"]) == int(it["answer"]) >= 0 for it in a)


def _solve(question: str) -> int:
    """An independent reading of a generated problem, sentence by sentence."""
    import re

    value = None
    for sentence in re.split(r"(?<=[.?])\s+", question):
        nums = [int(n) for n in re.findall(r"\d+", sentence)]
        if value is None:
            value = nums[0]
        elif " more " in sentence:
            value += nums[0]
        elif " gives " in sentence:
            value -= nums[0]
        elif "times as large" in sentence:
            value *= nums[0]
        elif " packs with " in sentence:
            value += nums[0] * nums[1]
        elif "equally into" in sentence:
            assert value % nums[0] == 0
            value //= nums[0]
        else:
            assert sentence.endswith("have now?"), sentence
    return value


@pytest.mark.parametrize("text,want", [
    ("so 3 + 4 = 7\nAnswer: 7", "7"),
    ("Answer: 1,234.", "1234"),
    ("The answer is $-5", "-5"),
    ("first 3 then 12", "12"),                 # no "Answer:" line: the last number
    ("Answer: 2.50", "2.5"),
    ("no number here", None),
])
def test_parse_answer(text, want):
    assert parse_answer(text) == want


def test_gsm8k_answers_and_a_local_file(tmp_path):
    assert gsm8k_answer("Natalia sold 48/2 = 24 clips.\n#### 1,072") == "1072"
    path = tmp_path / "gsm8k.jsonl"
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(6)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    task = _task([f"task.data.path={path}", "task.data.train_split='train[:4]'", "task.data.eval_split='train[4:]'"])
    train, ev = task.load("train"), task.load("eval")
    assert [it["answer"] for it in train] == ["1", "2", "3", "4"] and [it["answer"] for it in ev] == ["5", "6"]
    assert train[0]["question"] == "What is 0 + 1?"


def test_incentives_on_hand_built_discussions():
    # gold 12; before: agent 1 right, agents 2 and 3 wrong; now agent 2 switched to agent 1's answer
    before, now = ["12", "7", "7"], ["12", "12", "7"]
    got = incentives(now, before, [True, True, False], [True, False, False])
    assert got[0] == {"persuasion": 0.5, "correction": 0.0, "regression": 0.0}   # won one of two peers
    assert got[1] == {"persuasion": 0.0, "correction": 1.0, "regression": 0.0}   # wrong -> right, saw a right peer
    assert got[2] == {"persuasion": 0.0, "correction": 0.0, "regression": 0.0}
    # right -> wrong is penalised; a wrong agent that peers copy earns no persuasion
    got = incentives(["7", "7"], ["12", "7"], [False, False], [True, False])
    assert got[0]["regression"] == 1.0 and got[1]["persuasion"] == 0.0
    # correcting without a right peer to learn from is not a correction bonus
    assert incentives(["12", "12"], ["5", "7"], [True, True], [False, False])[0]["correction"] == 0.0


def test_majority_vote_breaks_ties_by_the_earlier_agent():
    assert majority(["3", "4", "4"]) == "4" and majority(["3", "4"]) == "3" and majority([None, None]) is None


def test_maporl_reward_with_the_previous_turn():
    task = _task()
    item = {"id": "x", "question": "q", "answer": "12"}
    first = task.score([item], [["", ""]], [["Answer: 12", "Answer: 7"]])
    assert list(first) == [0.5] and first.components["persuasion"] == [0.0]
    later = {**item, "turn_history": [["Answer: 12", "Answer: 7"]]}
    s = task.score([later], [["", ""]], [["Answer: 12", "so Answer: 12"]])
    # agent 1: right (1) + persuasion 0.5 * 1; agent 2: right (1) + correction 0.5; team = mean
    assert list(s) == [pytest.approx((1.5 + 1.5) / 2)]
    assert s.components == {"verifier": [1.0], "persuasion": [0.25], "correction": [0.25], "regression": [0.0]}
    assert sum(task.individual_rewards(s, 2)[0]) == pytest.approx(s[0])
    assert s.extras["passed"] == [True] and s.extras["majority_correct"] == [True]
    worse = task.score([later], [["", ""]], [["Answer: 7", "Answer: 7"]])
    assert list(worse) == [pytest.approx((0 - 0.5 + 0) / 2)] and worse.components["regression"] == [-0.25]
    m = task.metrics([later] * 2, [[]] * 2, type(s).concat([s, worse]))
    assert m == {"accuracy": 0.5, "majority_accuracy": 0.5, "agreement": 1.0}


def test_a_reward_model_verifier_scores_in_the_unit_interval():
    with pytest.raises(ConfigError, match="verifier_model"):
        _task(["reward.verifier=model"])
    task = _task(["reward.verifier=model", "reward.verifier_model=builtin:tiny"])
    s = task.score([{"id": "x", "question": "What is 2 + 2?", "answer": "4"}], [["", ""]], [["Answer: 4", "5"]])
    assert all(0.0 <= v <= 1.0 for v in s.components["verifier"])
    assert len(s.extras["agent_correct"][0]) == 2


@pytest.mark.parametrize("algo", [["algo=magrpo"], ["algo=ippo", "algo.reward=individual"]])
def test_a_discussing_team_trains_two_turns(make_cfg, tmp_path, algo):
    out = tmp_path / "run"
    result = run(make_cfg(["debug=smoke", "experiment=maporl", *algo, *FAST], out=str(out)))
    assert result["steps"] == 2
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward_mean" in r][-1]
    for key in ("train/turn_2/reward/persuasion", "train/turn_2/reward/correction", "train/turn_1/reward/verifier"):
        assert key in train
    final = result["final_eval"]
    for key in ("turn_1/accuracy", "turn_2/accuracy", "turn_2/majority_accuracy", "majority_accuracy", "accuracy"):
        assert key in final, key


def test_magrpo_eval_reports_accuracy_after_each_turn(tmp_path):
    cfg = compose_cfg([f"output_dir={tmp_path / 'eval'}", "experiment=maporl", "methods=[team,discussion]",
                       "eval.num_items=2", "eval.num_samples=1", "algo.max_new_tokens=6"], config_name="eval")
    report = run_eval(cfg)
    for method in ("team", "discussion"):
        m = report["results"][method]
        assert {"turn_1/accuracy", "turn_2/accuracy", "turn_1/majority_accuracy", "majority_accuracy"} <= set(m)
    md = (tmp_path / "eval" / "eval.md").read_text()
    assert "turn_1/accuracy" in md and "majority_accuracy" in md
