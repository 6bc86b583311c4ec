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


# -- every key honoured or refused ----------------------------------------------------------------------
@pytest.mark.parametrize("args, kwargs, shown", [
    (("hydra.sweep.dir=/tmp/sweep",), {}, "hydra.sweep.dir='/tmp/sweep'"),
    (("hydra/launcher=basic",), {}, "hydra/launcher='basic'"),
    (("hydra.callbacks.mine._target_=pkg.Callback",), {}, "hydra.callbacks.mine._target_='pkg.Callback'"),
    (("hydra.searchpath=[file:///tmp/conf]",), {}, "hydra.searchpath='[file:///tmp/conf]'"),
    (("hydra.job.name=mine",), {}, "hydra.job.name='mine'"),
    (("~hydra.run.dir",), {}, "~hydra.run.dir"),
    ((), {"hydra.verbose": True}, "hydra.verbose='true'"),
])
def test_a_hydra_key_other_than_the_run_directory_is_refused_in_one_line(args, kwargs, shown):
    with pytest.raises(ConfigError) as info:
        Experiment(*args, **kwargs)
    msg = str(info.value)
    assert shown in msg and "hydra.run.dir=DIR" in msg and "\n" not in msg
    if "searchpath" in shown:
        assert "MAGRPO_CONF_DIR" in msg


@pytest.mark.parametrize("line, needle", [
    ("-m", "is a flag"), ("--multirun", "is a flag"), ("--cfg", "is a flag"),
    ("seed=range(0,3)", "gives several values"), ("seed=choice(1,2)", "gives several values"),
])
def test_flags_and_sweeps_are_refused_in_one_line(line, needle):
    with pytest.raises(ConfigError) as info:
        Experiment(line)
    assert needle in str(info.value) and repr(line) in str(info.value) and "\n" not in str(info.value)


def test_hydra_run_dir_is_the_run_directory_as_on_the_command_line(tmp_path):
    exp = Experiment(f"hydra.run.dir={tmp_path}/h/${{task.name}}_s${{seed}}", "seed=3")
    assert exp.run_dir == tmp_path / "h" / "length_ratio_s3"
    assert exp.config.output_dir == str(tmp_path / "h" / "length_ratio_s3")
    both = Experiment(output_dir=str(tmp_path / "out"), **{"hydra.run.dir": str(tmp_path / "hydra")})
    assert both.run_dir == tmp_path / "out" and both.config.output_dir == str(tmp_path / "out")
    assert both._record_dirs() == [tmp_path / "out", tmp_path / "hydra"]     # Hydra's directory keeps a copy
    with pytest.raises(ConfigError, match="names no directory"):
        Experiment("hydra.run.dir=")


def test_a_plugins_config_directory_still_joins_the_search_path(tmp_path, monkeypatch):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "exp_plugin_mine.yaml").write_text("# @package _global_\nmax_steps: 5\n")
    (tmp_path / "exp_conf_plugin.py").write_text(f"MAGRPO_CONF_DIR = {str(tmp_path / 'conf')!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    exp = Experiment("plugins=[exp_conf_plugin]", "experiment=exp_plugin_mine")
    assert exp.config.max_steps == 5


# -- string values verbatim ----------------------------------------------------------------------------
NASTY = ["a\\b", "end\\", "end\\\\", "\\", "it's", 'say "hi"', "'\\", "\\'", "\\\"", "${oc.env:HOME}", "${x}",
         "\\${x}", "\\\\${", "${", "$", "}", "ü ß 日本 🙂", "a,b", "a=b", "with spaces ", " lead", "[x]{y}:(z)",
         "", "null", "NULL", "true", "False", "10", "-3", "1e5", "inf", "nan", ".5", "a\nb", "tab\there", "x:y"]


def read_back(value):
    """What composing `label=<hydra_value(value)>` stores and gives back: Hydra's override grammar,
    then the string in an OmegaConf node (interpolations resolved on access)."""
    from omegaconf import OmegaConf

    from magrpo.core.overrides import parse_override

    parsed = parse_override(f"label={hydra_value(value)}").value()
    return OmegaConf.create({"v": parsed}).v


@pytest.mark.parametrize("value", NASTY)
def test_a_string_reads_back_exactly(value):
    got = read_back(value)
    assert type(got) is str and got == value


def test_generated_strings_read_back_exactly():
    import random

    rng = random.Random(1234)
    alphabet = ["\\", "'", '"', "$", "{", "}", "${", "[", "]", ",", "=", ":", " ", "\t", "a", "Z", "0", "9", ".", "-",
                "+", "@", "/", "é", "日", "(", ")", "~", "#", "%", "*", "?", "|", "\n", "null", "true", "1e3"]
    for _ in range(600):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if value == "???":
            continue
        assert read_back(value) == value, (value, hydra_value(value))


def test_nested_values_keep_their_strings():
    from magrpo.core.overrides import parse_override

    value = {"a": ["x,y", "${z}", "10", None, 1.5], "b": {"c": "q'\\"}}
    text = hydra_value(value)
    assert parse_override(f"k={text}").value() == {"a": ["x,y", "\\${z}", "10", None, 1.5], "b": {"c": "q'\\"}}
    for bad in ({"a b": 1}, {1: 2}, {"null": 1}):
        with pytest.raises(ConfigError, match="dict key"):
            hydra_value(bad)
    with pytest.raises(ConfigError, match="missing value"):
        hydra_value("???")


def test_strings_come_back_in_the_config_exactly():
    plain = [s for s in NASTY if "${" not in s]
    exp = Experiment(label="a\\b 'c' \"d\"\\", **{"logger.tags": plain})
    assert exp.config.label == "a\\b 'c' \"d\"\\"
    assert list(exp.config.logger.tags) == plain


def test_a_literal_interpolation_comes_back_in_the_validated_config():
    for text in ("${oc.env:HOME}", "a\\${x}", "${", "$${x}"):
        assert Experiment(label=text).config.label == text


# -- objects that cannot be recorded by name are refused ------------------------------------------------
def module_level_reward(prompts, completions, **columns):
    return [0.0] * len(completions)


class CallableReward:
    def __call__(self, prompts, completions, **columns):
        return [0.0] * len(completions)

    def method(self, prompts, completions, **columns):
        return [0.0] * len(completions)


def _defined_in_main(source: str, name: str):
    """An object defined as a notebook cell or a script run as `python x.py` defines it: in __main__."""
    namespace: dict = {"__name__": "__main__", "Task": Task}
    exec(source, namespace)
    return namespace[name]


def _nested_reward():
    def inner(prompts, completions, **columns):
        return [0.0] * len(completions)
    return inner


@pytest.mark.parametrize("make, why", [
    (lambda: (lambda prompts, completions, **columns: [0.0] * len(completions)), "is a lambda"),
    (_nested_reward, "is defined inside the function _nested_reward()"),
    (lambda: __import__("functools").partial(module_level_reward), "is a functools.partial"),
    (CallableReward, "is a callable CallableReward object"),
    (lambda: CallableReward().method, "is a method bound to a CallableReward object"),
    (lambda: _defined_in_main("def brevity(prompts, completions, **columns):\n    return [0.0]\n", "brevity"),
     "is defined in __main__"),
])
def test_a_reward_fn_without_an_importable_name_is_refused_in_one_line(make, why):
    with pytest.raises(ConfigError) as info:
        Experiment(reward_fn=make())
    msg = str(info.value)
    assert msg.startswith("reward_fn=") and why in msg and "define it with def at module level" in msg
    assert "\n" not in msg


def test_a_task_class_without_an_importable_name_is_refused_in_one_line():
    class LocalGame(EchoGame):
        name = "local_game"

    main_game = _defined_in_main("class MainGame(Task):\n    name = 'main_game'\n", "MainGame")
    for task, why in ((LocalGame, "inside the function"), (main_game, "defined in __main__")):
        with pytest.raises(ConfigError) as info:
            Experiment(task=task)
        assert why in str(info.value) and "\n" not in str(info.value)
    from magrpo.tasks import TASKS

    assert "local_game" not in TASKS and "main_game" not in TASKS      # refused before it is registered


def test_a_module_level_reward_fn_is_recorded_by_name(tmp_path):
    exp = Experiment(reward_fn=module_level_reward, output_dir=str(tmp_path / "r"), plugins=["tests.reward_fns_example"])
    assert exp.config.reward.fn == "tests.test_experiment:module_level_reward"
    recorded = [x for x in exp.overrides if x.startswith("plugins=")][-1]     # what overrides.yaml keeps
    assert recorded == "plugins=[tests.reward_fns_example,tests.test_experiment]"   # joined, not dropped
    with pytest.raises(ConfigError, match="both name the reward function"):
        Experiment("reward.fn=tests.test_experiment:module_level_reward", reward_fn=module_level_reward)
    with pytest.raises(ConfigError, match="both choose the task"):
        Experiment("task=length_ratio", task=EchoGame)


# -- one run: hydra.run.dir decides its directory; its record keeps the strings --------------------------
def test_a_run_lands_in_hydra_run_dir_and_its_record_keeps_strings_verbatim(tmp_path, monkeypatch):
    import yaml
    from omegaconf import OmegaConf

    from magrpo.core.overrides import parse_override

    monkeypatch.chdir(tmp_path)
    label = "${oc.env:HOME} a\\b 'q'"
    exp = Experiment("debug=smoke", label=label, **TINY, **{"hydra.run.dir": str(tmp_path / "run")})
    summary = exp.run()
    assert summary["status"] == "finished" and exp.run_dir == tmp_path / "run"
    assert (tmp_path / "run" / "summary.json").is_file() and not (tmp_path / "outputs").exists()
    saved = yaml.safe_load((tmp_path / "run" / ".hydra" / "overrides.yaml").read_text())
    line = next(x for x in saved if x.startswith("label="))
    assert OmegaConf.create({"v": parse_override(line).value()}).v == label
    assert not any(x.startswith("hydra.") for x in saved)
    assert OmegaConf.load(tmp_path / "run" / ".hydra" / "config.yaml").label == label


def test_a_resume_from_python_continues_the_run_in_place(tmp_path):
    """Experiment(resume=RUN) writes into RUN, as `magrpo-train resume=RUN` does."""
    small = {**TINY, "debug": "smoke", "save_every": 1}
    first = Experiment("task=cover", output_dir=str(tmp_path / "r"), **small)
    first.run()
    again = Experiment("task=cover", resume=str(tmp_path / "r" / "checkpoints" / "step_2"), max_steps=3, **small)
    assert again.run_dir == tmp_path / "r"
    assert again.run()["steps"] == 3
    steps = [json.loads(x)["step"] for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
             if "train/reward_mean" in x]
    assert steps == [1, 2, 3]
