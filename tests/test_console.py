"""What the console shows in the first hour: no progress bars from the libraries underneath for a
model load or a small data file, and the same progress and log from Python as from the command line."""

from __future__ import annotations

import json

from tests.conftest import compose_cfg


def test_loading_a_team_draws_no_library_progress_bars(tmp_path, capfd):
    from magrpo.cli.train import run
    from magrpo.team.team import Team

    run(compose_cfg([f"output_dir={tmp_path / 'r'}", "debug=smoke", "task=agree"]))
    capfd.readouterr()
    team = Team.from_run(tmp_path / "r")
    out, err = capfd.readouterr()
    assert team.num_agents == 2
    assert "Loading weights" not in err + out and "it/s" not in err + out, err


def test_saving_a_sharded_model_draws_no_writing_bar(tmp_path, capfd):
    """A model of several shards draws "Writing model shards" on every save_pretrained (a checkpoint,
    an export, from the Python API too); the package's saves draw none."""
    import functools
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from magrpo.models.agents import resolve_model_path, save_agent

    path = resolve_model_path("builtin:tiny")
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()        # as in a fresh Python session (a command run here turned them off)
    try:
        capfd.readouterr()
        model.save_pretrained(tmp_path / "theirs", max_shard_size="200KB")          # transformers' own bar
        assert "Writing model shards" in capfd.readouterr().err
        model.save_pretrained = functools.partial(model.save_pretrained, max_shard_size="200KB")
        save_agent(SimpleNamespace(model=model, tokenizer=tok, adapter=None), tmp_path / "ours")
        assert hf_logging.is_progress_bar_enabled()         # the user's setting is put back after the save
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
    out, err = capfd.readouterr()
    assert len(list((tmp_path / "ours").glob("model-*.safetensors"))) >= 2     # several shards were written
    assert "Writing model shards" not in err + out and "it/s" not in err + out, err


def test_the_writing_reward_logs_no_absl_line(caplog):
    """rouge_score logs "Using default tokenizer." through absl when a scorer is built (each tldr run)."""
    import logging

    from magrpo.tasks.metrics import _rouge_scorer

    with caplog.at_level(logging.INFO):
        _rouge_scorer.__wrapped__()
    assert [r.getMessage() for r in caplog.records if r.name == "absl"] == []


def test_a_tasks_data_file_loads_without_a_progress_bar(tmp_path, capfd):
    """What task.data.path names (tldr, arxiv, your own file) is read by `datasets`, quietly."""
    rows = [{"prompt": f"Text number {k} about the sea and the sky.", "completion": "A summary."} for k in range(4)]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from magrpo.tasks.data import load_local

    capfd.readouterr()
    got = load_local(path, "train")
    out, err = capfd.readouterr()
    assert len(got) == 4
    assert "Generating" not in err + out and "%|" not in err, err


def test_an_experiment_from_python_logs_to_train_log_and_shows_progress(tmp_path, monkeypatch, capfd):
    """As the command line: train.log in the run directory, and progress lines on stderr when the
    program has not set up logging (here: no handler on the root logger); quiet=True keeps stderr quiet."""
    import logging

    from magrpo import Experiment

    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    exp = Experiment("task=agree", "debug=smoke", output_dir=str(tmp_path / "r"), **{"logger.log_every": 1})
    exp.run()
    err = capfd.readouterr().err
    log_text = (tmp_path / "r" / "train.log").read_text()
    for line in ("step 1/2 reward", "eval @ step 2", "finished: 2 steps"):
        assert line in log_text and line in err, line
    assert "[magrpo.training.trainer][INFO]" in log_text
    quiet = Experiment("task=agree", "debug=smoke", output_dir=str(tmp_path / "q"))
    quiet.run(quiet=True)
    assert "finished: 2 steps" not in capfd.readouterr().err
    assert "finished: 2 steps" in (tmp_path / "q" / "train.log").read_text()
    assert not logging.getLogger("magrpo").handlers          # put back as it was


def test_a_data_file_without_the_tasks_columns_is_one_line_naming_both(tmp_path):
    """task.data.path with none of a task's columns: the columns found and the ones expected."""
    import pytest

    from magrpo.tasks import build_task
    from magrpo.tasks.data import DataUnavailableError
    from magrpo.validation.checks import validate

    path = tmp_path / "rows.jsonl"
    path.write_text('{"q": "one", "a": 1}\n{"q": "two", "a": 2}\n')
    expected = {"tldr": "prompt, post, content, text", "arxiv": "abstract_text, abstract, text, prompt",
                "humaneval": "(prompt, test, entry_point) or (code, test_list)",
                "mbpp": "(prompt, test, entry_point) or (code, test_list)", "maporl_qa": "(question, answer)"}
    for task, needs in expected.items():
        cfg = validate(compose_cfg([f"output_dir={tmp_path / task}", f"task={task}", f"task.data.path={path}",
                                    "task.data.train_split='train[:1]'", "task.data.eval_split='train[1:]'"]))
        with pytest.raises(DataUnavailableError) as info:
            build_task(cfg.task, cfg.reward).load("eval")
        msg = str(info.value)
        assert "\n" not in msg and needs in msg and ("q, a" in msg or "a, q" in msg), (task, msg)


def test_run_and_job_folder_names_are_typed_in_a_shell_as_they_are():
    """No `=`, `,`, `.` or microseconds; unique within one second; in time order."""
    import re

    import yaml

    from magrpo.launch import CONF_DIR, stamp

    names = [stamp() for _ in range(5)]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d-p\d+(-\d+)?", n) for n in names), names
    assert len(set(names)) == 5
    for entry in ("train", "eval"):
        conf = yaml.safe_load(open(f"{CONF_DIR}/{entry}.yaml"))
        assert str(conf["hydra"]["sweep"]["subdir"]) == "${hydra.job.num}"
