"""Teams of more than two: a task declares the team sizes it accepts, and the MAPoRL debate
(maporl_qa, any size 1..8) trains with 3 and 4 agents under every algorithm, over turns, in the
`cross` joint mode, and resumes exactly; a size a task does not accept is a config error."""

from __future__ import annotations

import csv
import json

import pytest

from magrpo.cli.train import run
from magrpo.core.schema import ConfigError
from magrpo.tasks import TASKS, available_tasks
from magrpo.validation.checks import validate
from tests.conftest import run_and_resume, train_rows

SMOKE = ["task=maporl_qa", "debug=smoke", "algo.max_new_tokens=8", "algo.num_generations=2", "save_final=true",
         "algo.max_prompt_length=64"]      # MAPPO's critic reads every agent's prompt: 4 long ones cost the most
ALGOS = ["magrpo", "grpo", "ippo", "mappo", "ppo"]
SINGLE = {"grpo", "ppo"}       # one model writes the whole answer, whatever the team size


def _finished(out) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2, summary
    return summary


# Every algorithm with 3 agents; 4 for the team algorithms (grpo and ppo train one model whatever the size).
@pytest.mark.parametrize("algo,n", [(a, 3) for a in ALGOS] + [(a, 4) for a in ALGOS if a not in SINGLE])
def test_every_algorithm_trains_a_team_of_n(make_cfg, tmp_path, algo, n):
    out = tmp_path / "run"
    run(make_cfg([*SMOKE, f"algo={algo}", f"agents.num_agents={n}"], out=str(out)))
    summary = _finished(out)
    policies = 1 if algo in SINGLE else n
    assert summary["config"]["num_agents"] == policies
    saved = sorted(p.name for p in (out / "checkpoints" / "step_2").glob("agent_*"))
    assert saved == [f"agent_{i}" for i in range(1, policies + 1)]
    # Every agent's answers reach the evaluation: a team of n gives n answers per sample.
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert "eval/majority_accuracy" in rows[-1] and "eval/agreement" in rows[-1]
    if algo == "magrpo":      # the tables read the team as the run recorded it
        from magrpo.table import main as table_main

        assert table_main([str(out), "--out", str(tmp_path / "table"), "--no-plots"]) == 0
        (row,) = list(csv.DictReader(open(tmp_path / "table" / "table.csv")))
        assert row["task"] == "maporl_qa" and float(row["agreement_mean"]) == rows[-1]["eval/agreement"]


def test_a_team_of_three_discusses_over_two_turns_in_cross_mode(make_cfg, tmp_path):
    """cross pairs every sample of every agent: 2^3 = 8 joint actions per item at turn 1, and each
    expanded node (max_branches=1) grows 8 more at turn 2."""
    out = tmp_path / "run"
    run(make_cfg([*SMOKE, "agents.num_agents=3", "algo.joint_mode=cross", "algo.num_turns=2",
                  "algo.max_branches=1", "feedback=discussion"], out=str(out)))
    _finished(out)
    rows = train_rows(out)
    assert rows[2]["train/turn_1/nodes"] == 2 * 8      # a batch of 2 items
    assert rows[2]["train/turn_1/expanded"] == 2       # one node per sibling set
    assert rows[2]["train/turn_2/nodes"] == 2 * 8


def test_a_team_of_three_resumes_exactly(make_cfg, tmp_path):
    common = [*SMOKE, "agents.num_agents=3", "max_steps=3", "save_every=1", "algo.num_generations=2"]
    full, resumed = run_and_resume(make_cfg, tmp_path, common, at=2)
    assert sorted(resumed) == [3]
    keys = ["train/reward_mean", *(f"train/agent_{i}/{m}" for i in (1, 2, 3) for m in ("loss", "entropy"))]
    for key in keys:
        assert resumed[3][key] == full[3][key], key
    sa, sb = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("full", "resumed"))
    assert sa["final_eval"]["majority_accuracy"] == sb["final_eval"]["majority_accuracy"]
    assert sa["final_eval"]["reward_mean"] == sb["final_eval"]["reward_mean"]


def test_a_team_size_the_task_does_not_accept_is_a_config_error(make_cfg):
    with pytest.raises(ConfigError, match=r"agents.num_agents=3: task 'length_ratio' accepts 1 or 2 agents"):
        validate(make_cfg(["agents.num_agents=3"]))
    with pytest.raises(ConfigError, match=r"agents.num_agents=9: task 'maporl_qa' accepts 1 to 8 agents"):
        validate(make_cfg(["task=maporl_qa", "agents.num_agents=9"]))


def test_every_task_declares_the_sizes_it_accepts():
    available_tasks()
    for name, cls in TASKS.items():
        counts = cls.accepted_counts()
        assert 1 in counts and cls.num_agents in counts, name
    assert TASKS["maporl_qa"].accepted_counts() == tuple(range(1, 9))
    assert TASKS["maporl_qa"].describe_counts() == "1 to 8" and TASKS["tldr"].describe_counts() == "1 or 2"


def test_a_team_of_three_is_evaluated_under_every_scheme(tmp_path, capsys):
    from magrpo.cli.evaluate import main
    from tests.conftest import run_cli

    out = tmp_path / "eval"
    rc = run_cli(main, "magrpo-eval", ["task=maporl_qa", "agents.num_agents=3", "eval.num_items=2",
                                       "algo.max_new_tokens=8", "methods=[team,sequential,discussion,single]",
                                       f"output_dir={out}"])
    assert rc == 0, capsys.readouterr().err[-3000:]
    results = json.loads((out / "eval.json").read_text())["results"]
    assert list(results) == ["team", "sequential", "discussion", "single"]
    for method, metrics in results.items():
        assert metrics["num_items"] == 2 and 0.0 <= metrics["agreement"] <= 1.0, method
