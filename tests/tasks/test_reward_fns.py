"""Reward functions (magrpo.rollout.rewards): a callable replaces any task's reward, for any algorithm.

The functions live in tests/reward_fns_example.py and are named as module:function."""

from __future__ import annotations

import json
import logging
import re

import pytest

from magrpo.config.groups import RewardConfig
from magrpo.core.schema import ConfigError
from magrpo.rollout.rewards import REWARD_FNS, RewardFunctionError, register_reward
from magrpo.tasks import Task, build_task, reward_schema_of
from magrpo.validation.checks import validate
from tests import reward_fns_example
from tests.conftest import compose_cfg, run_cli, train_rows

FN = "tests.reward_fns_example"
SMOKE = ["debug=smoke", "algo.max_new_tokens=8"]


def _task(tmp_path, overrides: list[str]):
    cfg = validate(compose_cfg([f"output_dir={tmp_path / 'run'}", *overrides]))
    return cfg, build_task(cfg.task, cfg.reward)


def _run(tmp_path, overrides: list[str]) -> dict:
    from magrpo.cli.train import run

    return run(compose_cfg([f"output_dir={tmp_path / 'run'}", *SMOKE, *overrides]))


def _train_cli(tmp_path, args: list[str], capsys) -> tuple[int, str]:
    from magrpo.cli.train import main

    capsys.readouterr()
    code = run_cli(main, "magrpo-train", [*SMOKE, *args, f"hydra.run.dir={tmp_path / 'run'}"])
    return code, capsys.readouterr().err


# -- the total, by hand --------------------------------------------------------------------------


def test_weighted_total_shift_scale_components_and_shares_by_hand(tmp_path):
    _, task = _task(tmp_path, [f"reward.fns=[{FN}:brevity,{FN}:per_agent_letters]", "reward.weights=[2,0.5]",
                               "reward.shift=-1", "reward.scale=3", "reward.max=2"])
    items = task.load("eval")[:2]
    answers = [["ab", "xyz"], ["", "Aa a"]]
    scores = task.score(items, [task.prompts(it, 2) for it in items], answers)
    # brevity: 1 / (1 + chars of the agents' texts joined by a space / 10): "ab xyz" 6, " Aa a" 5
    brevity = [1 / 1.6, 1 / 1.5]
    letters = [[1.0, 0.0], [0.0, 1.0]]
    raw = [2 * b + 0.5 * sum(a) for b, a in zip(brevity, letters)]      # 1.75, 1.8333
    assert list(scores) == pytest.approx([r * 3 - 1 for r in raw])      # raw * scale + shift
    assert scores.components == {"brevity": pytest.approx(brevity), "per_agent_letters": [1.0, 1.0]}
    # normalized_return undoes shift and scale, over reward.max (not length_ratio's own maximum 1.0)
    assert task.reward_max(2) == 2.0
    assert task.normalized_return(scores[0], 2) == pytest.approx(raw[0] / 2)
    # brevity gives one float per joint answer: no per-agent share, and saying so is an error
    with pytest.raises(RewardFunctionError, match=r"algo.reward='individual'.*brevity.*'length_ratio/eval/0'"):
        task.individual_rewards(scores, 2)

    _, split = _task(tmp_path, [f"reward.fn={FN}:per_agent_letters", "reward.shift=-1", "reward.scale=3"])
    totals = split.score(items, [split.prompts(it, 2) for it in items], answers)
    shares = split.individual_rewards(totals, 2)
    assert shares == [pytest.approx([1 * 3 - 0.5, 0 * 3 - 0.5]), pytest.approx([0 * 3 - 0.5, 1 * 3 - 0.5])]
    assert [sum(s) for s in shares] == pytest.approx(list(totals))     # the shares add up to the team's reward


def test_the_function_gets_trl_arguments_and_scores_components(tmp_path):
    reward_fns_example.SEEN.clear()
    _, task = _task(tmp_path, [f"reward.fns=[{FN}:record,{FN}:scored]"])
    items = task.load("eval")[:2]
    prompts = [task.prompts(it, 2) for it in items]
    scores = task.score(items, prompts, [["a", "bb"], ["cc", ""]])
    seen = reward_fns_example.SEEN[-1]
    assert seen["prompts"] == prompts and seen["completions"] == [["a", "bb"], ["cc", ""]]
    assert seen["columns"]["id"] == [it["id"] for it in items]
    assert seen["columns"]["topic"] == [it["topic"] for it in items]
    # a returned Scores: its totals are the function's value, its components logged under its name
    assert scores.components == {"record": [0.5, 0.5], "scored": [0.4, 0.3], "scored/chars": [4.0, 3.0]}
    assert list(scores) == pytest.approx([0.9, 0.8])


def test_the_task_keeps_its_prompts_data_and_metrics(tmp_path):
    _, own = _task(tmp_path, ["task=agree"])
    _, task = _task(tmp_path, ["task=agree", f"reward.fn={FN}:brevity"])
    items = task.load("eval")[:2]
    assert items == own.load("eval")[:2]
    assert [task.prompts(it, 2) for it in items] == [own.prompts(it, 2) for it in items]
    answers = [["a", "a"], ["a", "b"]]
    scores = task.score(items, [task.prompts(it, 2) for it in items], answers)
    assert task.metrics(items, answers, scores) == {"all_agree": 0.5}     # agree's metric, on agree's game
    assert task.name == "agree" and isinstance(task, type(own))


# -- real runs: every algorithm family, every kind of return -------------------------------------


def test_weighted_functions_are_logged_as_components_in_metrics_jsonl(tmp_path, capsys):
    code, err = _train_cli(tmp_path, [f"reward.fns=[{FN}:brevity,{FN}:per_agent_letters]", "reward.weights=[2,0.5]"],
                           capsys)
    assert code == 0, err[-2000:]
    run_dir = tmp_path / "run"
    for row in train_rows(run_dir).values():
        assert {"train/reward/brevity", "train/reward/per_agent_letters"} <= set(row)
        assert row["train/reward_mean"] == pytest.approx(2 * row["train/reward/brevity"]
                                                         + 0.5 * row["train/reward/per_agent_letters"])
    evals = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if "eval/reward_mean" in r]
    assert len(evals) == 2
    for row in evals:
        assert row["eval/reward_mean"] == pytest.approx(2 * row["eval/reward/brevity"]
                                                        + 0.5 * row["eval/reward/per_agent_letters"])
        assert "eval/reward/length_ratio" not in row and "eval/normalized_return" not in row


def test_ppo_family_learns_from_per_agent_shares_and_reward_max_normalizes(tmp_path):
    """A coordination task, IPPO with each agent's own share (algo.reward=individual), a function
    returning per-agent lists, and reward.max: normalized_return = raw / max."""
    result = _run(tmp_path, ["task=agree", "algo=ippo", "algo.reward=individual", f"reward.fn={FN}:per_agent_letters",
                             "reward.max=2", "reward.shift=0.5", "reward.scale=2"])
    final = result["final_eval"]
    assert final["normalized_return"] == pytest.approx((final["reward_mean"] - 0.5) / 2 / 2)
    assert final["reward/per_agent_letters"] == pytest.approx((final["reward_mean"] - 0.5) / 2)
    assert "all_agree" in final                      # the task's own metric stays
    assert result["primary_metric"] == "normalized_return" and result["sweep_value"] == final["normalized_return"]


def test_without_reward_max_no_normalized_return_and_one_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        result = _run(tmp_path, ["task=agree", f"reward.fn={FN}:brevity"])
    final = result["final_eval"]
    assert "normalized_return" not in final and "all_agree" in final
    assert result["primary_metric"] == "reward_mean" and result["sweep_value"] == final["reward_mean"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best"]["metric"] == "reward_mean"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "reward.max" in r.getMessage()]
    assert len(warnings) == 1
    assert "normalized_return" in warnings[0] and "reward_mean" in warnings[0] and "'agree'" in warnings[0]


def test_single_model_algorithm_gets_plain_strings(tmp_path):
    reward_fns_example.SEEN.clear()
    result = _run(tmp_path, ["algo=grpo", f"reward.fns=[{FN}:record,{FN}:per_agent_letters]"])
    assert reward_fns_example.SEEN
    for seen in reward_fns_example.SEEN:
        assert all(isinstance(p, str) for p in seen["prompts"])
        assert all(isinstance(c, str) for c in seen["completions"])
    final = result["final_eval"]
    assert final["reward_mean"] == pytest.approx(0.5 + final["reward/per_agent_letters"])
    assert train_rows(tmp_path / "run")[2]["train/reward/record"] == 0.5


def test_magrpo_eval_with_a_reward_function(tmp_path, capsys):
    from magrpo.cli.evaluate import main

    out = tmp_path / "eval"
    code = run_cli(main, "magrpo-eval", [f"reward.fn={FN}:brevity", "methods=[single,naive_concat]",
                                         "eval.num_items=2", "algo.max_new_tokens=8", f"hydra.run.dir={out}"])
    assert code == 0, capsys.readouterr().err[-2000:]
    results = json.loads((out / "eval.json").read_text())["results"]
    for metrics in results.values():
        assert metrics["reward_mean"] == pytest.approx(metrics["reward/brevity"])
        assert 0 < metrics["reward_mean"] <= 1 and "reward/length_ratio" not in metrics
    assert "reward/brevity" in (out / "eval.md").read_text()


# -- reward.completions: what a function written for strings gets ---------------------------------


def trl_reward_len(completions, **kwargs):
    """TRL's documented example reward, unchanged: prefers completions of 20 characters."""
    return [-abs(20 - len(completion)) for completion in completions]


TRL = "tests.tasks.test_reward_fns:trl_reward_len"


def test_trl_reward_len_gets_the_joint_answer_as_one_string_with_completions_text(tmp_path):
    reward_fns_example.SEEN.clear()
    _, task = _task(tmp_path, [f"reward.fns=[{TRL},{FN}:record]", "reward.completions=text"])
    items = task.load("eval")[:2]
    prompts = [task.prompts(it, 2) for it in items]
    answers = [["ab ", "xyz"], ["a long first part", ""]]
    scores = task.score(items, prompts, answers)
    joint = [task.assemble(it, a) for it, a in zip(items, answers)]        # "ab\n\nxyz", "a long first part\n\n"
    assert joint == ["ab\n\nxyz", "a long first part\n\n"]
    assert scores.components["trl_reward_len"] == [-abs(20 - len(j)) for j in joint]        # -13, -1
    seen = reward_fns_example.SEEN[-1]
    assert seen["completions"] == joint
    assert seen["prompts"] == ["\n\n".join(p) for p in prompts]
    assert seen["columns"]["id"] == [it["id"] for it in items]
    # the default, parts: each completion is the list of the agents' texts, and len() is the team size
    _, parts = _task(tmp_path, [f"reward.fn={TRL}"])
    assert list(parts.score(items, prompts, answers)) == [-18.0, -18.0]


def test_completions_text_under_a_one_model_algorithm_is_the_assembled_string(tmp_path):
    reward_fns_example.SEEN.clear()
    _run(tmp_path, ["algo=grpo", f"reward.fn={FN}:record", "reward.completions=text"])
    cfg, task = _task(tmp_path, [f"reward.fn={FN}:record"])
    assert reward_fns_example.SEEN
    for seen in reward_fns_example.SEEN:
        assert all(isinstance(c, str) for c in seen["completions"])
        assert all(isinstance(p, str) for p in seen["prompts"])
        items = [dict(zip(seen["columns"], row)) for row in zip(*seen["columns"].values())]
        assert all(task.assemble(it, [c]) == c for it, c in zip(items, seen["completions"]))   # stripped once


# -- failures: one line, the function and the item; never a reward of 0 ---------------------------


@pytest.mark.parametrize("fn,needle", [
    ("boom", "raised ZeroDivisionError on item 'length_ratio/eval/0': no answers to divide"),
    ("one_too_many", "returned 3 value(s) for 2 joint answer(s) (item 'length_ratio/eval/0')"),
    ("not_a_number", "returned nan for item 'length_ratio/eval/0'"),
    ("a_string", "returned 'high' for item 'length_ratio/eval/0'"),
    ("three_agents", "returned 3 per-agent value(s) for item 'length_ratio/eval/0', whose joint answer has 2"),
])
def test_a_failing_function_stops_the_run_in_one_line(tmp_path, capsys, fn, needle):
    code, err = _train_cli(tmp_path, [f"reward.fn={FN}:{fn}"], capsys)
    assert code == 2, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("magrpo-train:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert f"reward function '{FN}:{fn}' (reward.fn) {needle}" in lines[0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and needle in summary["reason"]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()     # stopped before any training


def test_plain_floats_with_individual_reward_is_one_config_line(tmp_path, capsys):
    code, err = _train_cli(tmp_path, ["task=agree", "algo=ippo", "algo.reward=individual", f"reward.fn={FN}:brevity"],
                           capsys)
    assert code == 2 and "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("magrpo-train:"))
    assert "algo.reward='individual'" in line and f"'{FN}:brevity'" in line and "'agree/eval/0'" in line


def test_the_failing_item_of_a_batch_is_named(tmp_path):
    _, task = _task(tmp_path, [f"reward.fn={FN}:boom_on_second"])
    items = task.load("eval")[:3]
    with pytest.raises(RewardFunctionError, match=r"raised KeyError on item 'length_ratio/eval/1': 'topic'"):
        task.score(items, [task.prompts(it, 2) for it in items], [["a", "b"]] * 3)


# -- the config ------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides,needle", [
    (["reward.fn=a", "reward.fns=[b]"], "reward.fn='a' and reward.fns=['b'] both name the reward functions"),
    ([f"reward.fns=[{FN}:brevity]", "reward.weights=[1,2]"], "reward.weights=[1.0, 2.0] has 2 weight(s) for 1"),
    (["reward.fn=no_such_fn"], "reward.fn='no_such_fn' is not a registered reward function"),
    ([f"reward.fn={FN}.brevity"], f"did you mean {FN}:brevity?"),
    (["reward.fn=tests.no_such_module:f"], "the module 'tests.no_such_module' cannot be found"),
    ([f"reward.fn={FN}:no_such_fn"], f"'{FN}' has no attribute 'no_such_fn'"),
    ([f"reward.fn={FN}:NOT_CALLABLE"], "is not a function f(prompts, completions, **columns)"),
    (["reward.fns=[]"], "reward.fns=[] names no reward function"),
    (["reward.max=2"], "reward.max=2.0 applies to reward functions"),
    ([f"reward.fn={FN}:brevity", "reward.max=0"], "reward.max=0.0 is out of range; it must be > 0, or null"),
    (["+reward.fnn=x"], "unknown config key 'reward.fnn'; keys allowed in reward: completions, fn, fns, max"),
    ([f"reward.fn={FN}:brevity", "reward.completions=strings"],
     "reward.completions='strings' is not allowed; choose one of: parts, text"),
    (["reward.completions=text"], "reward.completions='text' applies to reward functions, and neither reward.fn "
                                  "nor reward.fns names one"),
    ([f"reward.fns=[{FN}:brevity,{FN}:brevity]"], "would both be logged as reward/brevity"),
])
def test_bad_reward_keys_are_one_config_line(tmp_path, overrides, needle):
    with pytest.raises(ConfigError) as e:
        _task(tmp_path, overrides)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_name_lists_the_registered_ones_and_the_module_form(tmp_path):
    register_reward("test_brevity")(reward_fns_example.brevity)
    try:
        with pytest.raises(ConfigError, match=r"\(test_brevity\) nor module:function") as e:
            _task(tmp_path, ["reward.fn=test_brevit"])
        assert "my_pkg.rewards:brevity" in str(e.value) and "did you mean 'test_brevity'?" in str(e.value)
        _, task = _task(tmp_path, ["reward.fn=test_brevity"])        # a registered name works
        items = task.load("eval")[:1]
        scores = task.score(items, [task.prompts(items[0], 2)], [["", ""]])
        assert list(scores) == [pytest.approx(1 / 1.1)]                # " ": the two empty answers joined
        assert scores.components == {"test_brevity": [pytest.approx(1 / 1.1)]}
    finally:
        REWARD_FNS.unregister("test_brevity")


def test_a_typo_on_the_command_line_is_one_config_line(tmp_path, capsys):
    code, err = _train_cli(tmp_path, [f"reward.fnn={FN}:brevity"], capsys)
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("magrpo-train:")]
    assert len(lines) == 1 and "reward.fnn" in lines[0]


def test_every_task_accepts_the_keys():
    from magrpo.tasks import TASKS

    for name in TASKS:
        fields = set(RewardConfig.__dataclass_fields__)
        assert fields <= set(reward_schema_of(TASKS[name]).__dataclass_fields__), name


def test_a_reward_schema_without_the_keys_is_given_them():
    """A plugin's task whose reward schema predates the keys still validates them, and keeps its own check."""
    from dataclasses import dataclass, fields

    @dataclass
    class OldReward:
        name: str = "old"
        bonus: float = 1.0

        @staticmethod
        def check_node(node, prefix):
            raise ConfigError("own check ran")

    class OldTask(Task):
        reward_schema = OldReward

    schema = reward_schema_of(OldTask)
    assert [f.name for f in fields(schema)] == ["name", "bonus", "fn", "fns", "weights", "max", "completions",
                                                 "shift", "scale"]
    with pytest.raises(ConfigError, match="own check ran"):
        schema.check_node(None, "reward.")


def test_a_task_without_a_reward_schema_has_its_reward_keys_checked_and_keeps_its_own(tmp_path):
    """A plugin's task with no reward schema: RewardConfig's keys are typed and range-checked at
    validation (a bad scale or shift is a config error naming the key, not a crash mid-run), and a
    key of its own (`+reward.bonus=2`) stays in its node."""
    from magrpo.tasks import TASKS, register_task

    @register_task("no_reward_schema")
    class Free(Task):
        def load(self, split):
            return [{"id": f"{split}/0"}]

        def prompts(self, item, num_agents):
            return ["say"] * num_agents

        def reward(self, prompts, completions, **cols):
            return [0.0] * len(completions)

    try:
        assert Free.reward_schema is None and reward_schema_of(Free) is None
        out = f"output_dir={tmp_path / 'run'}"
        cfg = validate(compose_cfg([out, "task=no_reward_schema", "+reward.bonus=2", "reward.shift=0.5"]))
        assert (cfg.reward.bonus, cfg.reward.shift, cfg.reward.scale) == (2, 0.5, 1.0)
        for bad, says in (("reward.scale=-1", "reward.scale=-1.0 is out of range"),
                          ("reward.shift=abc", "reward.shift='abc' has the wrong type"),
                          ("reward.completions=lines", "reward.completions='lines'")):
            with pytest.raises(ConfigError, match=re.escape(says)):
                validate(compose_cfg([out, "task=no_reward_schema", bad]))
    finally:
        TASKS.unregister("no_reward_schema")


def test_a_reward_modules_missing_dependency_is_named_not_called_missing_itself(tmp_path, monkeypatch):
    """A dependency whose name is a prefix of the module's (`prefixdep` of `prefixdep_rewards`) is a failed
    import of an installed module, not a module that cannot be found."""
    from magrpo.core.schema import ConfigError
    from magrpo.rollout.rewards import resolve

    (tmp_path / "prefixdep_rewards.py").write_text("import prefixdep\n\n\ndef f(prompts, completions, **c):\n"
                                                   "    return [0.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="failed to import .*No module named 'prefixdep'"):
        resolve("prefixdep_rewards:f")


def test_reward_keys_read_every_form_of_a_reward_node():
    """`reward_keys`: the RewardConfig keys of a typed node, a schema instance, a dict or None, as
    attributes; what is not given takes the schema's default (a plugin task's free-form node too)."""
    from omegaconf import OmegaConf

    from magrpo.config.groups import RewardConfig
    from magrpo.tasks import reward_keys
    from magrpo.tasks.coding.reward import CodingRewardConfig

    assert reward_keys(None) == RewardConfig()
    assert reward_keys({"shift": -1.0, "mine": 3}).shift == -1.0
    free = reward_keys(OmegaConf.create({"scale": 2.0, "fn": "f", "level_weight": 7}))
    assert (free.scale, free.fn, free.shift, free.completions) == (2.0, "f", 0.0, "parts")
    typed = OmegaConf.merge(OmegaConf.structured(CodingRewardConfig), {"fns": ["a", "b"], "weights": [1.0, 0.5]})
    assert (reward_keys(typed).fns, reward_keys(typed).weights) == (["a", "b"], [1.0, 0.5])
    instance = CodingRewardConfig(max=4.0)
    assert reward_keys(instance) is instance and reward_keys(instance).max == 4.0
