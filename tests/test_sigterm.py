"""A SIGTERM (what `kill`, `timeout`, SLURM and Kubernetes send) stops every command that runs long as
Ctrl-C does: the run's records say interrupted, the last line names the signal and how to go on, and
the exit code is 143 (128 + SIGTERM)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import compose_cfg, run_cli

TRAIN = ["max_steps=400", "save_every=2", "eval.num_items=2", "logger.log_every=1", "algo.batch_size=2",
         "algo.max_new_tokens=8"]


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert proc.poll() is None, f"it ended first: {proc.communicate()[1][-3000:]}"
        assert time.time() < deadline, f"no {path} after {seconds} s"
        time.sleep(0.2)


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


def test_magrpo_train_stopped_by_sigterm_says_so_records_interrupted_and_exits_143(tmp_path):
    d = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "magrpo.cli.train", *TRAIN, f"hydra.run.dir={d}"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(d / "checkpoints" / "step_2", proc)
        proc.send_signal(signal.SIGTERM)           # to the process alone, as `kill PID` and `timeout` send it
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["reason"] == "stopped by SIGTERM"
    last = _last_line(err)
    assert last.startswith(f"magrpo-train: stopped by SIGTERM at step {summary['steps']}; {d}/summary.json says "
                           f"interrupted (checkpoint step_"), last
    cmd = shlex.split(last.split("resume with: ", 1)[1])
    assert cmd[0] == "magrpo-train" and f"resume={d}" in cmd and all(a in cmd for a in TRAIN)


def test_magrpo_population_passes_a_sigterm_to_its_member_and_ends_with_its_line(tmp_path):
    out = tmp_path / "pop"
    member = out / "seed_0"
    proc = subprocess.Popen([sys.executable, "-m", "magrpo.cli.population", "--out", str(out), "--size", "2",
                             "--save-every", "2", *(a for a in TRAIN if not a.startswith("save_every="))], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(member / "checkpoints" / "step_2", proc)
        proc.send_signal(signal.SIGTERM)           # to magrpo-population alone: it passes the signal on
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    last = _last_line(err)
    assert last.startswith(f"magrpo-population: stopped by SIGTERM while member seed 0 trained; {out}/population.json "
                           f"lists the 0 member(s) that finished; the member says: stopped by SIGTERM at step "), last
    assert "resume with: magrpo-train " in last and f"resume={member}" in last
    assert json.loads((member / "summary.json").read_text())["status"] == "interrupted"
    assert json.loads((out / "population.json").read_text())["complete"] is False
    assert not (out / "seed_1").exists()


def _sigterm_to_this_process(*args, **kwargs):
    """A real SIGTERM to this very process, at a point inside the command (its evaluation)."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)                                  # the handler raises before this ends
    raise AssertionError("the SIGTERM did not stop the command")


def test_magrpo_eval_stopped_by_sigterm_records_interrupted_and_gives_the_command_again(tmp_path, monkeypatch,
                                                                                         capsys):
    import magrpo.cli.evaluate as evaluate_cli
    import magrpo.evaluation.loop
    import magrpo.training.trainer  # noqa: F401  (before the patch: the trainer's own name for evaluate stays the real one)

    monkeypatch.setattr(magrpo.evaluation.loop, "evaluate", _sigterm_to_this_process)
    before = signal.getsignal(signal.SIGTERM)
    d = tmp_path / "e"
    code = run_cli(evaluate_cli.main, "magrpo-eval", ["methods=[single]", "eval.num_items=2", f"hydra.run.dir={d}"])
    err = capsys.readouterr().err
    assert code == 143, err[-3000:]
    assert signal.getsignal(signal.SIGTERM) == before          # the command's handler is gone with it
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    last = _last_line(err)
    assert last.startswith(f"magrpo-eval: stopped by SIGTERM; {d}/summary.json says interrupted; run it again "
                           f"with: magrpo-eval "), last
    again = shlex.split(last.split("run it again with: ", 1)[1])
    assert "methods=[single]" in again and not any(a.startswith("hydra.run.dir=") for a in again)


def test_magrpo_crossplay_stopped_by_sigterm_writes_nothing(tmp_path, monkeypatch, capsys):
    import magrpo.evaluation.pairing
    from magrpo.cli.crossplay import main
    from magrpo.cli.train import run

    sources = []
    for seed in (0, 1):
        run(compose_cfg([f"output_dir={tmp_path / f's{seed}'}", "debug=smoke", "task=agree", f"seed={seed}"]))
        sources.append(str(tmp_path / f"s{seed}"))
    monkeypatch.setattr(magrpo.evaluation.pairing, "evaluate_pairing", _sigterm_to_this_process)
    out = tmp_path / "cp"
    assert main([*sources, "--out", str(out), "--num-items", "2"]) == 143
    last = _last_line(capsys.readouterr().err)
    assert last == f"magrpo-crossplay: stopped by SIGTERM; nothing was written; run it again with: magrpo-crossplay " \
                   f"{sources[0]} {sources[1]} --out {out} --num-items 2"
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("raised, words, code", [("Terminated", "stopped by SIGTERM", 143),
                                                 ("KeyboardInterrupt", "interrupted", 130)])
def test_the_words_and_exit_code_of_each_interrupt(raised, words, code):
    from magrpo.launch import Interrupted, Terminated, stopped

    e = Terminated() if raised == "Terminated" else KeyboardInterrupt()
    assert stopped(e) == (words, code)
    assert stopped(Interrupted(None, *stopped(e))) == (words, code)
