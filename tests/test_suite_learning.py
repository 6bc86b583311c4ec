"""The coordination suite's bounds (README, "The coordination suite"), for seeds 0, 1, 2: each
task's default run takes the untrained team from at most 0.3 to a normalized return of at least
0.8 with the method the README names. Slow (about 30 s per agree/cover run, 200 s per signal
run on 2 CPUs): `make test-slow`."""

from __future__ import annotations

import json

import pytest

from magrpo.train import run

RUNS = [(task, method) for task in ("agree", "cover") for method in ("magrpo", "ippo_individual")] + [("signal", "ippo")]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("task,method", RUNS, ids=[f"{t}-{m}" for t, m in RUNS])
def test_the_default_run_learns_the_game(make_cfg, tmp_path, task, method, seed):
    out = tmp_path / "run"
    run(make_cfg([f"recipe={task}", f"method={method}", f"seed={seed}", "save_final=false"], out=str(out)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["initial_eval"]["normalized_return"] <= 0.3
    assert summary["final_eval"]["normalized_return"] >= 0.8, summary["final_eval"]
