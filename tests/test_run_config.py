"""`magrpo-eval checkpoint=RUN` and `magrpo-train resume=RUN` take the team from the run's saved
overrides (magrpo.launch.run_config): a key on the command line wins and is recorded with the run's value;
a run without saved overrides has its team checked against the checkpoint instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magrpo.cli.evaluate import main as eval_main
from magrpo.cli.train import main as train_main
from magrpo.cli.train import run
from magrpo.launch.run_config import merge
from tests.conftest import run_cli, train_rows

# The offline tiny settings of tests/tasks/test_tasks_smoke.py.
TINY = ["debug=smoke", "algo.max_new_tokens=12", "algo.num_generations=2", "algo.max_prompt_length=64"]


def _train(args: list[str], run_dir: Path) -> Path:
    assert run_cli(train_main, "magrpo-train", [*args, f"hydra.run.dir={run_dir}"]) == 0
    return run_dir


def _eval(args: list[str], out: Path, capsys=None) -> tuple[int, str]:
    if capsys is not None:
        capsys.readouterr()
    code = run_cli(eval_main, "magrpo-eval", [*args, "eval.num_items=2", f"hydra.run.dir={out}"])
    return code, capsys.readouterr().err if capsys is not None else ""


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def tldr_run(tmp_path_factory) -> Path:
    return _train(["task=tldr", *TINY], tmp_path_factory.mktemp("tldr") / "run")


# -- magrpo-eval checkpoint=RUN ---------------------------------------------------------------------


def test_a_tldr_team_is_evaluated_on_tldr_with_only_the_checkpoint(tldr_run, tmp_path):
    code, _ = _eval([f"checkpoint={tldr_run}"], tmp_path / "eval")
    assert code == 0
    report, summary = _json(tmp_path / "eval" / "eval.json"), _json(tmp_path / "eval" / "summary.json")
    assert report["task"] == "tldr" and "rouge_l" in report["results"]["team"]
    assert summary["config"]["task"] == "tldr" and summary["status"] == "finished"
    # the run's sampling keys came along; its debug=smoke did not (the evaluation's own settings)
    assert report["config"]["algo"]["max_new_tokens"] == 12 and report["config"]["algo"]["max_prompt_length"] == 64
    assert report["num_items"] == 2 and report["num_samples"] == 1
    for record in (report["from_run"], summary["from_run"]):
        assert record["run_dir"] == str(tldr_run)
        assert record["inherited"]["task"] == "tldr" and record["inherited"]["algo.max_new_tokens"] == 12
        assert "debug" not in record["inherited"] and record["overridden"] == {}
    # the eval's own run directory says what it evaluated: its name and its saved overrides
    assert "task=tldr" in (tmp_path / "eval" / ".hydra" / "overrides.yaml").read_text()


def test_a_checkpoint_directory_belongs_to_the_run_two_levels_up(tldr_run, tmp_path):
    code, _ = _eval([f"checkpoint={tldr_run / 'checkpoints' / 'step_2'}"], tmp_path / "eval")
    assert code == 0
    report = _json(tmp_path / "eval" / "eval.json")
    assert report["task"] == "tldr" and report["checkpoint"].endswith("step_2")
    assert report["from_run"]["run_dir"] == str(tldr_run)


def test_a_task_on_the_command_line_wins_and_is_recorded_with_the_runs(tldr_run, tmp_path):
    code, _ = _eval([f"checkpoint={tldr_run}", "task=arxiv"], tmp_path / "eval")
    assert code == 0
    report, summary = _json(tmp_path / "eval" / "eval.json"), _json(tmp_path / "eval" / "summary.json")
    assert report["task"] == "arxiv" and summary["config"]["task"] == "arxiv"
    assert report["config"]["reward"]["name"] == "arxiv"         # the reward follows the task given
    for record in (report["from_run"], summary["from_run"]):
        assert record["overridden"]["task"] == {"run": "tldr", "given": "arxiv"}
        assert "task" not in record["inherited"] and record["inherited"]["algo.max_new_tokens"] == 12


def test_a_ppo_run_is_evaluated_with_only_the_checkpoint(tmp_path):
    trained = _train(["algo=ppo", *TINY], tmp_path / "run")
    code, _ = _eval([f"checkpoint={trained}"], tmp_path / "eval")
    assert code == 0
    report = _json(tmp_path / "eval" / "eval.json")
    assert report["config"]["algo"]["name"] == "ppo" and report["from_run"]["inherited"]["algo"] == "ppo"
    assert list(report["results"]) == ["team"]


def test_a_sweep_over_checkpoints_of_one_run_takes_it_up_in_every_job(tmp_path):
    trained = _train(["task=tldr", *TINY, "save_every=1"], tmp_path / "run")
    ckpts = ",".join(str(trained / "checkpoints" / f"step_{n}") for n in (1, 2))
    code = run_cli(eval_main, "magrpo-eval", ["-m", f"checkpoint={ckpts}", "eval.num_items=2",
                                              f"hydra.sweep.dir={tmp_path / 'sweep'}",
                                              "hydra.sweep.subdir=${hydra.job.num}"])
    assert code == 0
    jobs = sorted((tmp_path / "sweep").glob("*/eval.json"))
    assert len(jobs) == 2 and {_json(j)["task"] for j in jobs} == {"tldr"}


def test_a_sweep_over_runs_of_different_teams_is_refused(tldr_run, tmp_path, capsys):
    other = _train([*TINY], tmp_path / "other")
    capsys.readouterr()
    code = run_cli(eval_main, "magrpo-eval", ["-m", f"checkpoint={tldr_run},{other}",
                                              f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    err = capsys.readouterr().err
    assert code == 2 and "trained with different configs" in err and "Traceback" not in err
    assert not (tmp_path / "sweep").exists()


# -- magrpo-train resume=RUN ------------------------------------------------------------------------

COVER = ["task=cover", "agents.num_agents=3", *TINY, "save_every=1"]


def test_resume_continues_a_run_without_its_overrides_exactly(tmp_path, capsys):
    first = _train(COVER, tmp_path / "first")                       # 2 steps (debug=smoke)
    full = _train([*COVER, "max_steps=3"], tmp_path / "full")       # the same run, uninterrupted to 3
    resumed = tmp_path / "resumed"
    # the resume names neither the task, nor the team size, nor debug=smoke: the run's overrides
    # are taken up; max_steps given here wins over the run's 2
    _train([f"resume={first / 'checkpoints' / 'step_1'}", "max_steps=3"], resumed)
    summary = _json(resumed / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 3
    assert summary["config"]["task"] == "cover" and summary["config"]["num_agents"] == 3
    assert summary["resumed_from"]["step"] == 1
    record = summary["from_run"]
    assert record["run_dir"] == str(first)
    assert {"task": "cover", "agents.num_agents": 3, "debug": "smoke", "save_every": 1}.items() <= \
        record["inherited"].items()
    assert record["overridden"] == {"max_steps": {"run": 2, "given": 3}}
    a, b = train_rows(full), train_rows(resumed)
    assert sorted(b) == [2, 3]
    for step in (2, 3):
        for key in ("train/reward_mean", "train/agent_1/loss", "train/agent_3/return_mean"):
            assert a[step][key] == b[step][key], (step, key)
    # The resumed run saved the overrides it used: resuming it in turn (here in place, where Hydra
    # rewrites its .hydra/ before the run starts) needs nothing either, and is recorded the same way.
    saved = (resumed / ".hydra" / "overrides.yaml").read_text()
    assert "task=cover" in saved and "agents.num_agents=3" in saved
    _train([f"resume={resumed}", "max_steps=4"], resumed)
    summary = _json(resumed / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 4 and sorted(train_rows(resumed)) == [2, 3, 4]
    assert summary["config"]["task"] == "cover" and summary["config"]["num_agents"] == 3
    assert summary["from_run"]["overridden"] == {"max_steps": {"run": 3, "given": 4}}
    assert summary["from_run"]["inherited"]["agents.num_agents"] == 3
    # A mismatch asked for on purpose is still refused by the resume's own check.
    capsys.readouterr()
    code = run_cli(train_main, "magrpo-train", [f"resume={first}", "max_steps=3", "agents.num_agents=2",
                                                f"hydra.run.dir={tmp_path / 'bad'}"])
    err = capsys.readouterr().err
    assert code == 2 and "agents.num_agents: 3 -> 2" in err and "Traceback" not in err



def test_resume_without_a_directory_continues_the_run_in_place(tmp_path, monkeypatch):
    """`resume=RUN` alone writes into RUN (one curve, one metrics.jsonl), from the run directory or
    from one of its checkpoints; a directory the command line gives is still a new run's."""
    monkeypatch.chdir(tmp_path)
    first = _train(COVER, tmp_path / "first")                       # 2 steps (debug=smoke)
    assert run_cli(train_main, "magrpo-train", [f"resume={first}", "max_steps=3"]) == 0
    assert not (tmp_path / "outputs").exists()                       # no second folder was started
    summary = _json(first / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 3 and sorted(train_rows(first)) == [1, 2, 3]
    assert run_cli(train_main, "magrpo-train", [f"resume={first / 'checkpoints' / 'step_3'}", "max_steps=4"]) == 0
    assert sorted(train_rows(first)) == [1, 2, 3, 4] and not (tmp_path / "outputs").exists()
    elsewhere = tmp_path / "elsewhere"
    assert run_cli(train_main, "magrpo-train", [f"resume={first}", "max_steps=5", f"output_dir={elsewhere}"]) == 0
    assert sorted(train_rows(elsewhere)) == [5] and sorted(train_rows(first)) == [1, 2, 3, 4]

# -- runs with no saved overrides -------------------------------------------------------------------


def test_a_run_without_saved_overrides_is_refused_unless_the_command_line_gives_the_team(make_cfg, tmp_path,
                                                                                          capsys):
    trained = tmp_path / "lib"          # trained from Python: no .hydra/
    run(make_cfg(["task=tldr", *TINY], out=str(trained)))
    assert not (trained / ".hydra").exists()
    code, err = _eval([f"checkpoint={trained}"], tmp_path / "eval", capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("magrpo-eval: config error: "), err
    assert "has no saved config (.hydra/overrides.yaml" in err and "task.name='tldr'" in err
    assert not (tmp_path / "eval").exists()     # refused before any work: no eval folder is left
    capsys.readouterr()
    code = run_cli(train_main, "magrpo-train", [f"resume={trained}", "max_steps=3",
                                                f"hydra.run.dir={tmp_path / 'resumed'}"])
    err = capsys.readouterr().err
    assert code == 2 and "has no saved config" in err
    # The command line that gives the team evaluates it (it is checked, not taken up).
    code, err = _eval([f"checkpoint={trained}", "task=tldr", "algo.max_new_tokens=12"], tmp_path / "eval2", capsys)
    assert code == 0, err
    assert _json(tmp_path / "eval2" / "eval.json")["from_run"]["run_dir"] is None


def test_a_directory_that_holds_no_run_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, err = _eval([f"checkpoint={tmp_path / 'empty'}"], tmp_path / "eval", capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "neither a checkpoint" in lines[0], err


# -- the merge itself -------------------------------------------------------------------------------


def test_a_key_on_the_command_line_replaces_the_runs_and_a_group_drops_its_keys():
    run_lines = ["task=tldr", "task.data.eval_split='test[:2]'", "reward.length_band_low=9", "agents.num_agents=3",
                 "algo=ppo"]
    kept, dropped = merge(run_lines, ["task=arxiv", "agents.num_agents=2"])
    assert kept == ["algo=ppo"]
    assert dropped == {"task=tldr": "task=arxiv", "task.data.eval_split='test[:2]'": "task=arxiv",
                       "reward.length_band_low=9": "task=arxiv", "agents.num_agents=3": "agents.num_agents=2"}
    # a key under a group leaves the run's choice of the group standing
    assert merge(run_lines, ["task.data.path=x.jsonl"])[0] == run_lines
