"""magrpo-paper after Ctrl-C or a crash: the second call with the same --out keeps the finished jobs,
runs the rest, renders the whole table; progress lines; Ctrl-C is one line with the command to continue."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from magrpo.cli import paper

ARGS = ["coordination", "--tasks", "agree", "--rows", "magrpo", "--seeds", "0,1", "--only", "train",
        "--launcher", "basic", "--jobs", "1", "max_steps=2", "eval.num_items=2", "eval.num_samples=1",
        "algo.batch_size=2", "algo.num_generations=2"]


def _paper(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "magrpo.cli.paper", *ARGS, "--out", str(out)], capture_output=True,
                          text=True, timeout=900)


def _summaries(sweep: Path) -> dict[str, dict]:
    return {f.parent.name: json.loads(f.read_text()) for f in sweep.glob("*/summary.json")}


@pytest.mark.slow      # 30-35 s: three magrpo-paper processes; the fast suite plans a continuation in-process (below)
def test_an_interrupted_table_continues_to_a_complete_table(tmp_path):
    out = tmp_path / "paper"
    first = _paper(out)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "1/2 jobs done" in first.stdout and "2/2 jobs done" in first.stdout        # a progress line per job
    jobs = _summaries(out / "train")
    assert sorted(s["status"] for s in jobs.values()) == ["finished", "finished"]
    # as a Ctrl-C or a crash leaves it: one job unfinished, no table yet
    lost, kept = sorted(jobs)
    summary = out / "train" / lost / "summary.json"
    summary.write_text(json.dumps({**jobs[lost], "status": "interrupted"}))
    kept_mtime = (out / "train" / kept / "summary.json").stat().st_mtime_ns
    for f in (out / "table").iterdir():
        f.unlink()

    second = _paper(out)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "continuing the train sweep: 1 job(s) left" in second.stdout
    assert (out / "train" / kept / "summary.json").stat().st_mtime_ns == kept_mtime     # kept, not run again
    assert json.loads(summary.read_text())["status"] == "finished"                        # its cell ran again
    assert (out / "train" / ".superseded" / lost / "summary.json").is_file()              # the old attempt kept
    table = (out / "table" / "table.md").read_text()
    assert "| MAGRPO" in table and "(n=2)" not in table and "left out" not in table.lower()
    rows = list((out / "table").glob("table.csv"))
    assert rows and "magrpo" in rows[0].read_text()

    third = _paper(out)                          # everything there: nothing runs
    assert third.returncode == 0 and "already done" in third.stdout


def test_ctrl_c_is_one_line_naming_what_finished_and_the_command_to_continue(tmp_path, monkeypatch, capsys):
    class Interrupted:
        def __init__(self, cmd, **kwargs):
            self.returncode = None

        def wait(self, timeout=None):
            raise KeyboardInterrupt

        def kill(self):
            pass

    monkeypatch.setattr(paper.subprocess, "Popen", Interrupted)
    out = tmp_path / "paper"
    assert paper.main([*ARGS, "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "interrupted: 0 of 2 jobs finished" in err[0] and f"--out {out}" in err[0]


def test_a_job_is_rerun_as_a_single_run_of_its_cell():
    cmd = paper.sweep_command("train", ["recipe=agree,cover", "method=magrpo,ippo"], "0,1", "tiny", "g",
                              Path("/s"), "joblib", 2, ["max_steps=5"])
    single = paper.cell_command(cmd, "cover", "ippo", "1", Path("/s/3_cover_ippo_s1"))
    assert single[1:3] == ["-m", "magrpo.cli.train"]
    assert "recipe=cover" in single and "method=ippo" in single and "seed=1" in single
    assert "hydra.run.dir=/s/3_cover_ippo_s1" in single and "++max_steps=5" in single
    assert not any(a.startswith(("hydra.sweep.", "hydra/launcher=", "hydra.launcher.")) for a in single)
    assert single.count("-m") == 1                       # python -m magrpo.cli.train, no multirun


def _waiter(marks: Path, me: str, other: str, patience: float) -> list[str]:
    """A job that marks its start, then waits up to `patience` s for `other` to start: exit 0 if it did."""
    code = (f"import pathlib, sys, time; d = pathlib.Path({str(marks)!r}); (d / {me!r}).touch(); "
            f"end = time.time() + {patience}\n"
            f"while time.time() < end:\n    if (d / {other!r}).exists(): sys.exit(0)\n    time.sleep(0.05)\n"
            f"sys.exit(1)")
    return [sys.executable, "-c", code]


def test_a_continued_sweep_runs_as_many_jobs_at_once_as_asked(tmp_path, capsys):
    together, alone = tmp_path / "together", tmp_path / "alone"
    together.mkdir()
    alone.mkdir()
    progress = paper.SweepProgress([])
    # two at a time: each job sees the other start
    assert progress.run_all([_waiter(together, "a", "b", 60), _waiter(together, "b", "a", 60)], 2) == [0, 0]
    # one at a time: the first gives up waiting for the second, which then finds the first's mark
    assert progress.run_all([_waiter(alone, "a", "b", 1), _waiter(alone, "b", "a", 1)], 1) == [1, 0]


def test_a_stop_reaches_jobs_the_ctrl_c_did_not(tmp_path):
    mark = tmp_path / "stopped"
    code = (f"import pathlib, signal, sys, time\n"
            f"def bye(*a):\n    pathlib.Path({str(mark)!r}).write_text('interrupted'); sys.exit(130)\n"
            f"signal.signal(signal.SIGINT, bye)\nprint('ready', flush=True)\ntime.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    paper.stop([proc], grace=0.2, patience=30)
    assert proc.returncode == 130 and mark.read_text() == "interrupted"     # sent a SIGINT, recorded itself


@pytest.mark.slow      # 18 s; the fast suite stops jobs through the Ctrl-C path (the tests above)
def test_a_sigterm_stops_the_table_as_a_ctrl_c_does(tmp_path):
    # started as a script's background job (`make paper ... &` in it) is: SIGINT ignored, inherited by
    # what it starts unless magrpo-paper gives its jobs the default back (else they ignore `stop`'s SIGINT)
    out = tmp_path / "paper"
    proc = subprocess.Popen([sys.executable, "-m", "magrpo.cli.paper", *ARGS, "max_steps=5000", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.time() + 300
        # polled, not slept: the job is training once it has logged a step (its stop is then recorded)
        while not list((out / "train").glob("*/metrics.jsonl")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        proc.terminate()                                  # to magrpo-paper alone, as a scheduler sends it
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]                 # 128 + SIGTERM
    assert "Traceback" not in err, err[-3000:]
    assert "stopped by SIGTERM: 0 of 2 jobs finished" in err and f"--out {out}" in err, err[-3000:]
    statuses = [s["status"] for s in _summaries(out / "train").values()]
    assert statuses == ["interrupted"]                    # the job got the stop and recorded it


def test_damaged_or_missing_summaries_are_set_aside_and_their_cells_run_again(tmp_path):
    """A job directory is someone else's file: a cut-short, edited or binary summary.json, or none
    at all, never stops the continuing call; the cell is read from the job's .hydra/config.yaml."""
    sweep = tmp_path / "train"
    cmd = paper.sweep_command("train", ["recipe=agree", "method=magrpo"], "0,1,2,3,4", "tiny", "g", sweep,
                              "basic", 1, [])

    def job(name: str, seed: int, summary: bytes | None, hydra: bool = True) -> None:
        d = sweep / name
        (d / ".hydra").mkdir(parents=True)
        if hydra:
            (d / ".hydra" / "config.yaml").write_text(f"seed: {seed}\nlabel: magrpo\ntask:\n  name: agree\n")
        if summary is not None:
            (d / "summary.json").write_bytes(summary)

    finished = {"status": "finished", "config": {"task": "agree", "label": "magrpo", "seed": 0}}
    job("0_agree_magrpo_s0", 0, json.dumps(finished).encode())
    job("1_agree_magrpo_s1", 1, b"{not json")
    job("2_agree_magrpo_s2", 2, b"[1, 2]")
    job("3_agree_magrpo_s3", 3, None)
    job("4_agree_magrpo_s4", 4, bytes(range(256)))
    job("stray", 9, b"{}", hydra=False)                  # says nothing of its cell: left where it is
    job("odd", 7, json.dumps({"status": "finished", "config": {"task": ["agree"], "label": {"a": 1},
                                                                 "seed": [7]}}).encode())   # not a cell asked for
    (sweep / "multirun.yaml").write_text("x: 1\n")

    found = paper.cell_jobs(sweep)
    assert {cell: [s for _, s in jobs] for cell, jobs in found.items()} == {
        ("agree", "magrpo", "0"): ["finished"], ("agree", "magrpo", "1"): ["unreadable"],
        ("agree", "magrpo", "2"): ["unreadable"], ("agree", "magrpo", "3"): ["missing"],
        ("agree", "magrpo", "4"): ["unreadable"], ("['agree']", "{'a': 1}", "[7]"): ["finished"]}
    assert paper.finished_cells(sweep) == {("agree", "magrpo", "0"), ("['agree']", "{'a': 1}", "[7]")}
    assert not paper.sweep_done(cmd)

    commands, notes = paper.continue_sweep(cmd)
    assert sorted(next(a for a in c if a.startswith("seed=")) for c in commands) == ["seed=1", "seed=2", "seed=3",
                                                                                      "seed=4"]
    assert sorted(n.split(" set aside")[0] for n in notes) == [
        "1_agree_magrpo_s1 (unreadable)", "2_agree_magrpo_s2 (unreadable)", "3_agree_magrpo_s3 (missing)",
        "4_agree_magrpo_s4 (unreadable)"]
    assert sorted(p.name for p in (sweep / paper.SUPERSEDED).iterdir()) == [
        "1_agree_magrpo_s1", "2_agree_magrpo_s2", "3_agree_magrpo_s3", "4_agree_magrpo_s4"]
    assert (sweep / "0_agree_magrpo_s0" / "summary.json").is_file() and (sweep / "stray").is_dir()
    assert (sweep / "odd").is_dir()
    # each cell reruns into the directory its damaged job had
    assert sorted(next(a for a in c if a.startswith("hydra.run.dir=")) for c in commands) == [
        f"hydra.run.dir={sweep / n}" for n in ("1_agree_magrpo_s1", "2_agree_magrpo_s2", "3_agree_magrpo_s3",
                                                "4_agree_magrpo_s4")]


def test_the_tuning_readers_take_damaged_summaries_as_missing(tmp_path):
    sweep = tmp_path / "tune"
    for n, body in enumerate([b"[1]", b"{bad", json.dumps({"status": "finished", "final_eval": [0.5]}).encode(),
                              json.dumps({"status": "finished", "final_eval": {paper.OBJECTIVE: 0.75}}).encode()]):
        (sweep / str(n) / ".hydra").mkdir(parents=True)
        (sweep / str(n) / ".hydra" / "overrides.yaml").write_text("- algo.ent_coef=0.01\n" if n != 1 else "{: [")
        (sweep / str(n) / "summary.json").write_bytes(body)
    trials = paper.read_trials(sweep, {"algo.ent_coef": "interval(0, 0.05)"})
    assert [(t["status"], t["value"]) for t in trials] == [("missing", None), ("missing", None), ("finished", None),
                                                          ("finished", 0.75)]
    assert [t["params"] for t in trials] == [{"algo.ent_coef": 0.01}, {}, {"algo.ent_coef": 0.01},
                                             {"algo.ent_coef": 0.01}]
