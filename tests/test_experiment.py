"""magrpo.Experiment: training from Python with the command line's overrides and errors."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from magrpo import ConfigError, Experiment, Scores, Task
from magrpo.experiment import hydra_value

TINY = {"algo.max_new_tokens": 8, "algo.num_generations": 2, "algo.max_prompt_length": 48}


def test_keys_and_overrides_give_the_command_lines_config(tmp_path):
    exp = Experiment("algo=ippo", "task=cover", max_steps=7, output_dir=str(tmp_path / "r"),
                     **{"algo.num_generations": 3, "eval.do_sample": False, "eval.num_samples": 1})
    cfg = exp.config
    assert cfg.algo.name == "ippo" and cfg.task.name == "cover" and cfg.max_steps == 7
    assert cfg.algo.num_generations == 3 and cfg.eval.do_sample is False
    assert exp.run_dir == tmp_path / "r"


@pytest.mark.parametrize("value, text", [
    (None, "null"), (True, "true"), (3, "3"), (0.5, "0.5"), ("mean", "mean"), ("a b", "'a b'"),
    ("null", "'null'"), ([1, "x"], "[1,x]"), ({"a": 1}, "{a:1}"), ("it's", "'it\\'s'"),
])
def test_python_values_are_written_as_hydra_reads_them(value, text):
    assert hydra_value(value) == text


@pytest.mark.parametrize("args, kwargs, needle", [
    ((), {"max_stepz": 3}, "unknown config key 'max_stepz'"),
    (("algo=nope",), {}, "algo='nope' is not an option of the config group 'algo'"),
    ((), {"algo.num_generations": 1}, "algo.num_generations=1"),
    (("seed=0,1",), {}, "gives several values"),
    ((3,), {}, "overrides are strings"),
])
def test_errors_are_the_command_lines_one_line_config_errors(args, kwargs, needle):
    with pytest.raises(ConfigError) as info:
        Experiment(*args, **kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)


@dataclass
class EchoConfig:
    name: str = "echo_game"
    num_items: int = 4


class EchoGame(Task):
    """Two agents; the team scores 1 when both answers are non-empty (a task defined in a test)."""

    name = "echo_game"
    num_agents = 2
    config_schema = EchoConfig

    def load(self, split):
        return [{"id": f"{split}{k}"} for k in range(self.cfg.num_items)]

    def agent_prompts(self, item):
        return ["Say something.", "Say something else."]

    def single_prompt(self, item):
        return "Say two things."

    def reward(self, prompts, completions, **columns):
        return Scores([float(all(p.strip() for p in parts)) for parts in completions])

    def reward_max(self, num_answers):
        return 1.0


def test_a_task_class_trains_and_the_team_comes_back(tmp_path):
    exp = Experiment(task=EchoGame, max_steps=2, output_dir=str(tmp_path / "r"), **TINY,
                     **{"eval.num_items": 2, "task.num_items": 3})
    assert exp.config.task.name == "echo_game" and exp.config.task.num_items == 3
    assert "tests.test_experiment" in exp.config.plugins       # recorded, so later commands import it
    summary = exp.run()
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert (tmp_path / "r" / ".hydra" / "overrides.yaml").is_file()
    team = exp.team()
    assert team.task.name == "echo_game" and team.num_agents == 2
    stored = json.loads((tmp_path / "r" / "checkpoints" / "step_2" / "config.json").read_text())
    assert "tests.test_experiment" in stored["plugins"]


def test_a_task_instance_brings_its_config(tmp_path):
    from omegaconf import OmegaConf

    game = EchoGame(OmegaConf.structured(EchoConfig(num_items=5)), {})
    exp = Experiment(task=game, max_steps=1, output_dir=str(tmp_path / "r"))
    assert exp.config.task.num_items == 5


def test_team_before_run_says_so(tmp_path):
    exp = Experiment(max_steps=1, output_dir=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="call .run"):
        exp.team()
