"""No silent wrong result at the extension edge: a task's own reward is checked as a reward
function's is (one value per joint answer, every value finite), and an error in the user's code
(a task's reward or load(), a reward function) is one line naming the user's file and line."""

from __future__ import annotations

import importlib
import json
import logging
import sys
import textwrap
from pathlib import Path

import pytest

from magrpo.cli.train import main as train_main
from magrpo.rollout.rewards import ZERO_SPREAD_STEPS, ZeroSpread
from magrpo.tasks import TASKS, build_task
from magrpo.tasks.base import RewardError
from tests.conftest import compose_cfg, run_cli

SMOKE = ["debug=smoke", "algo.max_new_tokens=8"]

# A plugin's task, written to a folder of its own: `task.mode` picks how its reward goes wrong.
PLUGIN = '''
import json
from dataclasses import dataclass

from magrpo import Scores, Task, register_task


@dataclass
class EdgeConfig:
    name: str = "edge_game"
    mode: str = "ok"


@register_task("edge_game")
class EdgeGame(Task):
    num_agents = 2
    config_schema = EdgeConfig

    def load(self, split):
        if self.cfg.mode == "load_raises":
            raise FileNotFoundError("edge_data.jsonl: no such file")  # LOAD RAISES
        return [{"id": f"{split}/{k}", "target": k} for k in range(6)]

    def agent_prompts(self, item):
        return ["Say a digit.", "Say another digit."]

    def single_prompt(self, item):
        return "Say two digits."

    def reward(self, prompts, completions, target, **columns):
        mode, n = self.cfg.mode, len(completions)
        if mode == "nan":
            return Scores([float("nan")] * n)
        if mode == "nan_on_answers":      # empty answers (the set-up's) score 0; a real answer NaN
            return Scores([float("nan") if any(p.strip() for p in parts) else 0.0 for parts in completions])
        if mode == "short":
            return Scores([0.0] * (n - 1))
        if mode == "inf_component":
            return Scores([0.0] * n, {"bonus": [float("inf")] * n})
        if mode == "raises_on_3":
            return Scores([1.0 / (t - 3) for t in target])  # RAISES ON 3
        if mode == "json":                # raised inside the standard library, called from here
            return Scores([json.loads(parts[0] or "{") for parts in completions])  # JSON LINE
        return Scores([float(len(parts[0]) % 3) for parts in completions])
'''


@pytest.fixture
def edge(tmp_path_factory, monkeypatch):
    """The plugin module (imported, its task registered): its file."""
    folder = tmp_path_factory.mktemp("edge_plugin")
    path = folder / "edge_plugin.py"
    path.write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("edge_plugin", None)
    TASKS.unregister("edge_game")
    importlib.import_module("edge_plugin")
    yield path
    TASKS.unregister("edge_game")
    sys.modules.pop("edge_plugin", None)


def _line(path: Path, marker: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


def _def_line(path: Path) -> int:
    return _line(path, "def reward(")


def _train(tmp_path, capsys, overrides: list[str]) -> tuple[int, list[str], dict]:
    capsys.readouterr()
    code = run_cli(train_main, "magrpo-train", [*SMOKE, "task=edge_game", *overrides,
                                                f"hydra.run.dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("magrpo-train:")]
    summary_file = tmp_path / "run" / "summary.json"
    return code, lines, json.loads(summary_file.read_text()) if summary_file.exists() else {}


def _task(tmp_path, mode: str):
    from magrpo.validation.checks import validate

    cfg = validate(compose_cfg([f"output_dir={tmp_path / 'run'}", "task=edge_game", f"task.mode={mode}"]))
    return build_task(cfg.task, cfg.reward)


# -- a task's own reward, checked ----------------------------------------------------------------------


@pytest.mark.parametrize("mode,phase,needle", [
    ("nan", "setup", "returned nan for item 'eval/0'; every value must be a finite number"),
    ("nan_on_answers", "training", "returned nan for item 'eval/0'; every value must be a finite number"),
    ("short", "setup", "returned 1 value(s) for 2 joint answer(s) (item 'eval/0'); it must return one per joint answer"),
    ("inf_component", "setup", "returned inf as component 'bonus' for item 'eval/0'; every value must be a finite "
                                 "number"),
])
def test_a_bad_task_reward_is_one_reward_error_line(edge, tmp_path, capsys, mode, phase, needle):
    code, lines, summary = _train(tmp_path, capsys, [f"task.mode={mode}"])
    assert code == 2 and len(lines) == 1, lines
    where = f"its reward EdgeGame.reward ({edge}:{_def_line(edge)})"
    assert lines[0] == f"magrpo-train: reward error: task 'edge_game': {where} {needle}"
    assert "config error" not in lines[0]
    assert summary["status"] == "failed" and summary["phase"] == phase and summary["error"] == "RewardError"
    assert needle in summary["reason"]


def test_a_task_reward_that_raises_names_the_item_and_the_users_line(edge, tmp_path):
    task = _task(tmp_path, "raises_on_3")
    items = task.load("train")
    with pytest.raises(RewardError) as info:
        task.score(items, [task.prompts(it, 2) for it in items], [["1", "2"]] * len(items))
    assert str(info.value) == (f"task 'edge_game': its reward raised ZeroDivisionError on item 'train/3': "
                               f"float division by zero (at {edge}:{_line(edge, 'RAISES ON 3')})")


def test_a_raise_inside_a_library_is_placed_at_the_users_call(edge, tmp_path):
    task = _task(tmp_path, "json")
    items = task.load("eval")[:1]
    with pytest.raises(RewardError, match=r"raised JSONDecodeError on item 'eval/0'") as info:
        task.score(items, [task.prompts(items[0], 2)], [["", ""]])
    assert str(info.value).endswith(f"(at {edge}:{_line(edge, 'JSON LINE')})")


def test_a_good_task_reward_passes_and_a_plain_list_becomes_scores(edge, tmp_path):
    task = _task(tmp_path, "ok")
    items = task.load("eval")[:2]
    scores = task.score(items, [task.prompts(it, 2) for it in items], [["abcd", ""], ["ab", "x"]])
    assert list(scores) == [1.0, 2.0] and scores.components == {}


def test_a_builtin_tasks_own_failure_is_not_relabelled(tmp_path):
    """A failure inside magrpo's own task is magrpo's bug: it keeps its exception and traceback."""
    from magrpo.validation.checks import validate

    cfg = validate(compose_cfg([f"output_dir={tmp_path / 'run'}"]))
    task = build_task(cfg.task, cfg.reward)
    items = task.load("eval")[:1]
    with pytest.raises(IndexError):
        task.score(items, [task.prompts(items[0], 2)], [[]])      # a joint answer of no part


# -- the user's file and line ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode,exit_code,message,marker,expected", [
    # the set-up scores empty answers to eval/0 and the eval has 2 items: item 3 is a training item
    ("raises_on_3", 2, "reward error: task 'edge_game': its reward raised ZeroDivisionError on item 'train/3': "
                       "float division by zero", "RAISES ON 3", {"error": "RewardError", "phase": "training"}),
    ("load_raises", 1, "setup error: FileNotFoundError: edge_data.jsonl: no such file", "LOAD RAISES",
     {"status": "failed", "phase": "setup"}),
])
def test_a_raise_in_the_users_task_is_one_line_with_the_users_line(edge, tmp_path, capsys, mode, exit_code, message,
                                                                   marker, expected):
    """A task's reward raising on the command line (a reward error) and its load raising (a setup
    error): one line, ending at the user's file and line."""
    code, lines, summary = _train(tmp_path, capsys, [f"task.mode={mode}"])
    assert code == exit_code and len(lines) == 1, lines
    assert lines[0] == f"magrpo-train: {message} (at {edge}:{_line(edge, marker)})"
    assert {k: summary.get(k) for k in expected} == expected


def test_a_raising_reward_function_names_the_line_it_raised_on(tmp_path, capsys):
    from tests import reward_fns_example

    source = Path(reward_fns_example.__file__)
    capsys.readouterr()
    code = run_cli(train_main, "magrpo-train", [*SMOKE, "reward.fn=tests.reward_fns_example:boom",
                                                f"hydra.run.dir={tmp_path / 'run'}"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("magrpo-train:")]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("magrpo-train: reward error: reward function 'tests.reward_fns_example:boom' "
                               "(reward.fn) raised ZeroDivisionError on item 'length_ratio/eval/0'")
    raise_line = _line(source, 'raise ZeroDivisionError("no answers to divide")')
    assert lines[0].endswith(f"(at tests/reward_fns_example.py:{raise_line})")


def test_a_reward_function_returning_nan_names_its_definition(tmp_path):
    from magrpo.rollout.rewards import RewardFunctionError
    from magrpo.validation.checks import validate
    from tests import reward_fns_example

    cfg = validate(compose_cfg([f"output_dir={tmp_path / 'run'}", "reward.fn=tests.reward_fns_example:not_a_number"]))
    task = build_task(cfg.task, cfg.reward)
    items = task.load("eval")[:1]
    with pytest.raises(RewardFunctionError) as info:
        task.score(items, [task.prompts(items[0], 2)], [["a", "b"]])
    defined = _line(Path(reward_fns_example.__file__), "def not_a_number(")
    assert str(info.value).endswith(f"(defined at tests/reward_fns_example.py:{defined})")
    assert isinstance(info.value, RewardError) and info.value.label == "reward error"


# -- a reward with zero spread: said once ----------------------------------------------------------------

TRL_LEN = "tests.tasks.test_reward_fns:trl_reward_len"      # TRL's reward_len, unchanged


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.getMessage().startswith("reward has zero spread")]


def _smoke_run(tmp_path, overrides: list[str]) -> dict:
    from magrpo.cli.train import run

    return run(compose_cfg([f"output_dir={tmp_path / 'run'}", *SMOKE, *overrides]))


@pytest.mark.parametrize("algo", ["magrpo", "ippo"])
def test_trl_reward_len_on_a_team_is_said_once_with_its_cause(tmp_path, caplog, algo):
    with caplog.at_level(logging.WARNING):
        _smoke_run(tmp_path, [f"algo={algo}", f"reward.fn={TRL_LEN}"])
    said = _warnings(caplog)
    assert said == [
        "reward has zero spread: at each of the first 2 training step(s) every group of samples got equal rewards "
        "(every reward was -18), so no answer is preferred to another and nothing is learned; the reward is reward "
        f"function '{TRL_LEN}' (reward.fn); likely cause: in a team each completion a reward function gets is the "
        "list of the 2 agents' texts, so len() of one is the team size; a function written for TRL's strings should "
        "set reward.completions=text"]


def test_a_constant_reward_over_more_steps_is_said_once_after_the_first_three(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        _smoke_run(tmp_path, ["max_steps=4", "algo=grpo", "reward.fn=tests.reward_fns_example:record"])
    said = _warnings(caplog)
    assert ZERO_SPREAD_STEPS == 3 and len(said) == 1
    assert said[0].startswith("reward has zero spread: at each of the first 3 training step(s) every group of samples "
                              "got equal rewards (every reward was 0.5)")
    assert said[0].endswith("likely cause: the function gives every answer to an item the same value; check what it "
                            "reads of the completions it gets (reward.completions=parts)")


@pytest.mark.parametrize("overrides", [[], [f"reward.fn={TRL_LEN}", "reward.completions=text"]])
def test_a_reward_that_tells_answers_apart_is_not_flagged(tmp_path, caplog, overrides):
    with caplog.at_level(logging.WARNING):
        _smoke_run(tmp_path, overrides)
    assert _warnings(caplog) == []


def test_one_step_with_spread_ends_the_watch():
    cfg = compose_cfg(["output_dir=/unused"])
    task = build_task(cfg.task, cfg.reward)
    flat = {"train/frac_reward_zero_std": 1.0, "train/reward_mean": 0.0, "train/reward_std": 0.0}
    watch = ZeroSpread(task, 2, steps=3)
    assert watch.see(flat) is None and watch.see({**flat, "train/frac_reward_zero_std": 0.5}) is None
    assert [watch.see(flat) for _ in range(5)] == [None] * 5
    watch = ZeroSpread(task, 2, steps=2)
    varied = {**flat, "train/reward_mean": 1.0, "train/reward_std": 0.3}   # equal within groups, not across items
    assert watch.see(flat) is None
    line = watch.see(varied)
    assert "(equal within each group, differing only between items; mean 0.5)" in line
    assert "task 'length_ratio''s own reward" in line and watch.see(flat) is None
