"""Sweeps end to end: a real multirun's table matches its runs, a failed job is named and never
loses the others (in this process, and as a process under the joblib launcher), W&B groups and
names the jobs of a sweep and marks a failed run, the dashboard spec built offline, the Optuna
example, and the Ray launcher (slow)."""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from magrpo.table import main as table_main
from tests.conftest import run_cli
from tests.wandb_reader import run_info

SMOKE = ["debug=smoke", "algo.max_new_tokens=8", "eval.num_items=2", "save_final=false", "hardware.num_threads=1"]


def multirun(tmp_path: Path, *overrides: str, timeout: int = 600):
    """`magrpo-train -m SMOKE OVERRIDES` as a fresh process (its output and exit code)."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "magrpo.cli.train", "-m", *SMOKE, *overrides, f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env={**os.environ, "WANDB_SILENT": "true"})
    return proc, sweep


def multirun_here(tmp_path: Path, capsys, *overrides: str):
    """The same sweep run by magrpo-train's main in this process: (exit code, stderr, sweep dir).
    The joblib test below and tests/test_failures.py run sweeps as processes."""
    from magrpo.cli.train import main

    sweep = tmp_path / "sweep"
    capsys.readouterr()
    code = run_cli(main, "magrpo-train", ["-m", *SMOKE, *overrides, f"hydra.sweep.dir={sweep}"])
    return code, capsys.readouterr().err, sweep


def summaries(sweep: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}


def test_two_algos_two_seeds_table_matches_the_runs_own_metrics(tmp_path, capsys):
    code, err, sweep = multirun_here(tmp_path, capsys, "algo=magrpo,grpo", "seed=0,1")
    assert code == 0, err[-2000:]
    runs = summaries(sweep)
    assert len(runs) == 4
    checked = {"generic": ("reward_mean", "normalized_return"), "paper": ("normalized_return", "response_time_s")}
    for layout, label_of in (("generic", {"magrpo": "magrpo", "grpo": "grpo"}),
                             ("paper", {"magrpo": "MAGRPO", "grpo": "GRPO (single model)"})):
        out = tmp_path / layout
        assert table_main([str(sweep), "--layout", layout, "--out", str(out), "--no-plots"]) == 0
        with open(out / "table.csv", newline="") as f:
            rows = {r["method"]: r for r in csv.DictReader(f)}
        for algo, label in label_of.items():
            finals = [s["final_eval"] for s in runs.values() if s["config"]["algo"] == algo]
            assert len(finals) == 2
            for key in checked[layout]:
                values = [f[key] for f in finals]
                assert float(rows[label][f"{key}_mean"]) == pytest.approx(statistics.fmean(values), abs=1e-12)
                assert float(rows[label][f"{key}_std"]) == pytest.approx(statistics.stdev(values), abs=1e-12)
            assert rows[label]["n"] == "2"


def test_a_failing_job_is_named_under_the_table_of_the_others_and_wandb_groups_the_sweep(tmp_path, capsys):
    # task.data.builtin=false asks the hub for TL;DR, which the offline tests cannot reach: that job
    # dies while loading its data; the other one must still run, log and be tabled.
    code, err, sweep = multirun_here(tmp_path, capsys, "task=tldr", "task.data.builtin=true,false", "logger=wandb")
    assert code == 1 and "1 of 2 job(s) failed" in err           # the sweep reports the failure at its end
    runs = summaries(sweep)
    finished = {name: s for name, s in runs.items() if s["status"] == "finished"}
    assert len(finished) == 1 and len(runs) == 2
    # a job's folder is its number; its overrides are in its .hydra/overrides.yaml
    failed_dir = next(p for p in sweep.iterdir() if (p / ".hydra" / "overrides.yaml").is_file()
                      and "task.data.builtin=False" in (p / ".hydra" / "overrides.yaml").read_text())
    assert failed_dir.name.isdigit()
    failed = runs[failed_dir.name]                                # it says why it failed
    assert failed["status"] == "failed" and failed["phase"] == "setup" and "tldr" in failed["reason"].lower()
    assert table_main([str(sweep), "--layout", "paper", "--no-plots"]) == 0
    md = (sweep / "table" / "table.md").read_text()
    assert "| MAGRPO | 1 |" in md
    assert "Not in the table (1 run(s))" in md and f"`{failed_dir}`" in md
    # W&B: the job that ran joined the sweep's group under <algo>-<task>-<seed>, with the key choices on top.
    (ok_dir,) = [sweep / name for name in finished]
    (wb_file,) = (ok_dir / "wandb").glob("offline-run-*/run-*.wandb")
    info = run_info(wb_file)
    assert info["group"] == f"train-{sweep.name}" and info["name"] == "magrpo-tldr-0" and info["job_type"] == "train"
    top = {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in info["config"].items()}
    assert {"algo": "magrpo", "task": "tldr", "seed": 0, "num_agents": 2, "num_turns": 1,
            "feedback": "none"}.items() <= top.items()
    assert top["models"] == ["builtin:tiny"] and top["cfg"]["algo"]["name"] == "magrpo"
    assert info["exit_code"] == 0
    assert info["metrics"]["eval/*"]["step_metric"] == "step" and info["metrics"]["eval/*"]["max"]


@pytest.mark.slow      # 18 s; the fast suite runs a bad job under the basic launcher (test_failures.py) and
# a sweep under joblib (the warm-worker test below)
def test_multirun_sweep_with_the_joblib_launcher_outlives_a_bad_job(tmp_path):
    # Two jobs in the launcher's two worker processes, each into its own directory; seed=-1 is a
    # config error, so that job fails alone (its worker never loads a model), is named at the end,
    # and the command exits 1.
    proc, sweep = multirun(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,-1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "1 of 2 job(s) failed" in proc.stderr and "job 1 (" in proc.stderr
    assert "seed=-1 is out of range" in proc.stderr
    assert "Traceback" not in proc.stderr
    runs = sorted(p.parent for p in Path(sweep).glob("*/summary.json"))
    assert [r.name for r in runs] == ["0", "1"]                      # job folders are the job numbers
    failed_line = next(line for line in proc.stderr.splitlines() if line.startswith("  1 ("))
    assert "seed=-1" in failed_line and "status failed" in failed_line   # named with its overrides
    good, bad = (json.loads((r / "summary.json").read_text()) for r in runs)
    assert good["status"] == "finished" and good["config"]["seed"] == 0 and good["steps"] == 2
    assert bad["status"] == "failed" and "seed=-1" in bad["reason"]
    assert (sweep / "multirun.yaml").exists()


CLOCKS = ("time/", "speed/", "memory/", "_time_s")


def learning(run: Path) -> list[dict]:
    """A run's metrics.jsonl without what a clock or the allocator measures."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not any(c in k for c in CLOCKS)} for r in rows]


def test_a_job_in_a_warm_joblib_worker_learns_what_a_fresh_process_learns(tmp_path):
    # One worker (n_jobs=1) runs MAGRPO, then IPPO, then the same MAGRPO job again: the third reuses
    # the interpreter the first two ran in (imports, torch state, registries, the builtin models'
    # cache), which is what makes a table's later jobs cheap; the first ran in a process that had
    # run nothing. The third must learn exactly what the first did.
    proc, sweep = multirun(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=1", "algo=magrpo,ippo,magrpo",
                           "max_steps=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, between, warm = (Path(sweep) / str(k) for k in range(3))
    assert [json.loads((d / "summary.json").read_text())["config"]["algo"] for d in (first, between, warm)] == \
        ["magrpo", "ippo", "magrpo"]
    got, want = learning(warm), learning(first)
    assert len(want) >= 4 and any(k.startswith("train/") for k in want[1])
    assert got == want


def test_a_run_that_raises_finishes_its_wandb_run_as_failed(make_cfg, tmp_path, monkeypatch):
    from magrpo.algos.magrpo import MAGRPO
    from magrpo.cli.train import run

    calls = {"n": 0}
    real_step = MAGRPO.step

    def step_then_crash(self, items):   # the second optimizer step raises, as a CUDA OOM would
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected failure")
        return real_step(self, items)

    monkeypatch.setattr(MAGRPO, "step", step_then_crash)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected failure"):
        run(make_cfg([*SMOKE, "logger=wandb"], out=str(out)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["initial_eval"]["reward_mean"] >= 0
    (wb_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    assert run_info(wb_file)["exit_code"] == 1


def test_dashboard_spec_built_offline_has_the_panels_and_grouping(tmp_path, monkeypatch, capsys):
    from magrpo.cli.dashboard import main, panels_of

    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "dash.json"
    assert main(["--project", "magrpo", "--group", "paper-writing-tiny-x", "--out", str(out)]) == 0
    spec = json.loads(out.read_text())
    assert spec["project"] == "magrpo" and spec["display_name"] == "magrpo paper-writing-tiny-x"
    run_set = spec["spec"]["section"]["run_sets"][0]
    assert [(g["section"], g["name"]) for g in run_set["grouping"]] == [("config", "algo.value")]
    flt = run_set["filters"]["filters"][0]
    assert (flt["key"]["section"], flt["key"]["name"], flt["op"], flt["value"]) == ("run", "group", "=",
                                                                                     "paper-writing-tiny-x")
    panels = panels_of(spec)
    by_title = {p["title"]: p for p in panels}
    assert by_title["normalized return (eval)"]["metrics"] == ["eval/normalized_return"]
    assert by_title["reward (train)"]["metrics"] == ["train/reward_mean"]
    assert by_title["components (eval)"]["regex"] == r"eval/reward/.*"
    assert by_title["reward per turn (eval)"]["regex"] == r"eval/turn_\d+/reward_mean"
    assert [by_title[f"pass@{k}"]["metrics"] for k in (1, 3, 5, 10)] == [[f"eval/pass@{k}"] for k in (1, 3, 5, 10)]
    assert by_title["ROUGE-L"]["metrics"] == ["eval/rouge_l"] and by_title["CodeBLEU"]["metrics"] == ["eval/codebleu"]
    samples = [p for p in panels if p["section"] == "Samples"]
    assert len(samples) == 1 and "eval/samples" in json.dumps(spec)
    assert "wrote" in capsys.readouterr().out


def test_optuna_example_runs_three_trials(tmp_path, capsys):
    code, err, sweep = multirun_here(tmp_path, capsys, "hparams_search=length_ratio_optuna", "hydra.sweeper.n_trials=3")
    assert code == 0, err[-2000:]
    runs = summaries(sweep)
    assert len(runs) == 3
    import yaml

    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    # The value each trial returned is its normalized return (optimized_metric); the best is their max.
    best = max(s["final_eval"]["normalized_return"] for s in runs.values())
    assert result["best_value"] == pytest.approx(best)
    assert set(result["best_params"]) == {"optimizer.lr", "algo.num_generations"}


@pytest.mark.slow
def test_ray_launcher_runs_a_two_job_sweep_on_a_local_cluster(tmp_path):
    proc, sweep = multirun(tmp_path, "hydra/launcher=ray_local", "hydra.launcher.ray.init.num_cpus=2", "seed=0,1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in proc.stdout + proc.stderr
    seeds = sorted(s["config"]["seed"] for s in summaries(sweep).values())
    assert seeds == [0, 1]
