"""A run's directory is never mixed, a bad override is one line of ours, and Ctrl-C says how to
resume: the command line as a user meets it."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from magrpo.cli.train import run
from magrpo.core.schema import ConfigError
from tests import preloaded
from tests.conftest import compose_cfg

SMOKE = ["debug=smoke", "eval.num_items=2"]


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def cli(module: str, args: list[str], monkeypatch=None, capsys=None) -> tuple[int, str]:
    """Run an entry point as `python -m` would, in its own process (Hydra configures the process's
    logging, which must not leak into the test runner), forked with its libraries imported (tests.preloaded)."""
    done = preloaded.run(module, args, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("finished") / "run"
    run(compose_cfg([f"output_dir={d}", *SMOKE]))
    return d


# -- a mistyped key or group option: our message, exit 2 -------------------------------------------


@pytest.mark.parametrize("override, expected", [
    ("algo.num_generation=8", ["unknown config key 'algo.num_generation'", "num_generations",
                               "did you mean 'num_generations'?"]),
    ("debug=true", ["debug='true' is not an option of the config group 'debug'", "choose one of: smoke"]),
    ("task=tldx", ["task='tldx'", "humaneval", "did you mean 'tldr'?"]),
    # a sweep value without -m, on the command line as in a saved overrides.yaml
    ("save_every=1,2", ["'save_every=1,2' gives several values", "-m save_every=1,2", "save_every=[1,2]"]),
    ("seed=0,1", ["'seed=0,1' gives several values", "sweep"]),
    # a paper row's recipe and method
    ("recipe=covr", ["recipe='covr' is not an option of the config group 'recipe'", "did you mean 'cover'?"]),
    ("method=magrp", ["method='magrp' is not an option of the config group 'method'", "did you mean 'magrpo'?"]),
    # a name of another group, a key of another node
    ("algo=gspo", ["algo='gspo' is not an option of the config group 'algo'",
                   "'gspo' is an option of the group 'method': did you mean method=gspo?"]),
    ("algo.lr=0.1", ["unknown config key 'algo.lr'", "'lr' is a key of optimizer: did you mean 'optimizer.lr'?"]),
    # the GROUP=OPTION form of a nested option
    ("experiment/compare=tldr", ["'experiment/compare' is no config group", "experiment=compare/"]),
    # a typo in a nested experiment: the options of its folder and the nearest path, not the top level's
    ("experiment=compare/tldrx", ["experiment='compare/tldrx' is not an option", "choose one of: compare/{",
                                  "did you mean 'compare/tldr'?"]),
    ("experiment=comapre/tldr", ["experiment='comapre/tldr'", "did you mean 'compare/tldr'?"]),
    ("experiment=compare/tdlr", ["compare/{arxiv", "did you mean 'compare/tldr'?"]),
])
def test_a_bad_override_gets_one_line_of_ours_and_exit_2(override, expected, tmp_path, monkeypatch, capsys):
    code, err = cli("magrpo.cli.train", [override, f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip() and "arning" not in ln]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("magrpo-train: config error: "), err
    for text in expected:
        assert text in lines[0]


def test_eval_gets_the_same_messages(tmp_path, monkeypatch, capsys):
    code, err = cli("magrpo.cli.evaluate", ["eval.num_sample=3", f"hydra.run.dir={tmp_path / 'e'}"], monkeypatch, capsys)
    assert code == 2 and err.startswith("magrpo-eval: config error: unknown config key 'eval.num_sample'")
    assert "did you mean 'num_samples'?" in err


# -- one run per directory -------------------------------------------------------------------------


def test_a_second_run_aimed_at_a_finished_run_changes_nothing_there(finished_run, monkeypatch, capsys):
    before = tree_digest(finished_run)
    assert "metrics.jsonl" in before and "summary.json" in before
    code, err = cli("magrpo.cli.train", [*SMOKE, f"hydra.run.dir={finished_run}"], monkeypatch, capsys)
    assert code == 2
    assert f"hydra.run.dir='{finished_run}' already holds a finished run of 2 step(s)" in err
    assert "resume=" in err and "another directory" in err
    with pytest.raises(ConfigError, match="already holds a finished run"):       # without Hydra, too
        run(compose_cfg([f"output_dir={finished_run}", *SMOKE]))
    assert tree_digest(finished_run) == before


def test_eval_refuses_a_run_directory(finished_run, monkeypatch, capsys):
    before = tree_digest(finished_run)
    code, err = cli("magrpo.cli.evaluate", [f"checkpoint={finished_run}", "eval.num_items=2",
                                        f"hydra.run.dir={finished_run}"], monkeypatch, capsys)
    assert code == 2 and "already holds a finished run" in err
    assert tree_digest(finished_run) == before


def test_a_directory_whose_run_recorded_nothing_is_reused(tmp_path):
    d = tmp_path / "run"
    with pytest.raises(ConfigError):
        run(compose_cfg([f"output_dir={d}", *SMOKE, "optimized_metric=nope"]))
    assert json.loads((d / "summary.json").read_text())["status"] == "failed"
    run(compose_cfg([f"output_dir={d}", *SMOKE]))
    assert json.loads((d / "summary.json").read_text())["status"] == "finished"


def test_resuming_in_place_keeps_one_history_and_reports_the_resumed_runs_status(tmp_path):
    d = tmp_path / "run"
    run(compose_cfg([f"output_dir={d}", *SMOKE, "max_steps=4", "save_every=2"]))
    # As if the first attempt had been interrupted after step 2: resume from step_2 in place.
    summary = json.loads((d / "summary.json").read_text())
    (d / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    run(compose_cfg([f"output_dir={d}", *SMOKE, "max_steps=4", "save_every=2", f"resume={d}/checkpoints/step_2"]))
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["resumed_from"]["run_status"] == "interrupted"
    train_steps = [r["step"] for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())
                   if "train/reward_mean" in r]
    assert train_steps == [1, 2, 3, 4]                   # the first attempt's 3 and 4 are set aside
    aside = [json.loads(x)["step"] for x in (d / "metrics.after_step_2.jsonl").read_text().splitlines()]
    assert aside and min(aside) == 3


# -- Ctrl-C ----------------------------------------------------------------------------------------


def test_ctrl_c_prints_one_line_with_the_resume_command_and_the_resume_works(tmp_path):
    d = tmp_path / "run"
    args = ["max_steps=400", "save_every=2", "eval.num_items=2", "logger.log_every=1", "algo.batch_size=2",
            "algo.max_new_tokens=8"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # SIGINT as a terminal delivers it: a test run launched in the background of a non-interactive
    # shell (`cmd &`) inherits SIGINT ignored, and so would its child.
    proc = subprocess.Popen([sys.executable, "-m", "magrpo.cli.train", *args, f"hydra.run.dir={d}"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while not (d / "checkpoints" / "step_2").is_dir() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.startswith("magrpo-train:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert f"interrupted at step {summary['steps']}" in lines[0] and "says interrupted" in lines[0]
    # The console had progress lines without a TTY.
    assert "step 1/400 reward" in out and "eta" in out
    cmd = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert cmd[0] == "magrpo-train" and f"resume={d}" in cmd and f"hydra.run.dir={d}" in cmd
    assert all(a in cmd for a in args)
    # The printed command resumes the run in place (only max_steps shortened, which a resume may change).
    over = [a if not a.startswith("max_steps=") else "max_steps=" + str(summary["steps"] + 1) for a in cmd[1:]]
    done = preloaded.run("magrpo.cli.train", over, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    final = json.loads((d / "summary.json").read_text())
    assert final["status"] == "finished" and final["resumed_from"]["run_status"] == "interrupted"
    assert "finished: " in done.stdout and str(d) in done.stdout


def test_output_dir_is_the_whole_run_and_nothing_is_left_elsewhere(tmp_path):
    """output_dir=DIR holds the run's .hydra/ and log; no outputs/train/<stamp>/ appears beside it."""
    out = tmp_path / "mine"
    done = preloaded.run("magrpo.cli.train", [*SMOKE, f"output_dir={out}"], cwd=tmp_path,
                      env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / ".hydra" / "overrides.yaml").is_file() and (out / "train.log").is_file()
    assert "finished" in (out / "train.log").read_text()
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("module, prog", [("magrpo.cli.train", "magrpo-train"), ("magrpo.cli.evaluate", "magrpo-eval")])
def test_help_lists_the_users_groups_not_the_internal_ones(module, prog, tmp_path):
    done = preloaded.run(module, ["--help"], cwd=tmp_path, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-2000:]
    groups = done.stdout.split("Config groups", 1)[1].split("Composed config", 1)[0]
    assert "schema/" not in groups and "hydra/" not in groups
    for algo in ("magrpo", "ippo", "c3", "dr_mas", "at_grpo"):     # every registered algorithm
        assert algo in groups.split("\nalgo: ", 1)[1].splitlines()[0]
    assert "compare/{" in groups and "experiment/compare:" not in groups
    # a paper row is recipe=<task> method=<row>: each listed once, not a path per task and row
    assert "\nrecipe: " in groups and "\nmethod: " in groups and "paper/" not in groups
    if prog == "magrpo-train":
        assert "(or GRPO)" not in done.stdout
