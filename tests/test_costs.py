"""magrpo.launch.costs: what each cell of a table costs, longest first, and the wall time it predicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magrpo.launch.costs import (
    SECONDS_PER_TOKEN,
    Cost,
    Recorded,
    cell_costs,
    composed_tokens,
    longest_first,
    makespan,
    recorded_costs,
    token_updates,
)


def run(path: Path, task: str, label: str, seconds, status: str = "finished", **config) -> Path:
    path.mkdir(parents=True)
    flat = {"task": task, "label": label, "max_steps": 10, "batch_size": 2, "num_generations": 4, "num_agents": 2,
            "num_turns": 1, "max_new_tokens": 3, **config}
    (path / "summary.json").write_text(json.dumps({"status": status, "wall_seconds": seconds, "config": flat}))
    return path


def test_makespan_is_list_scheduling_and_longest_first_is_never_later_here():
    # by hand: 2 workers, jobs 3, 3, 2, 2, 2 in that order: w1 3+2+2 = 7, w2 3+2 = 5 -> 7; the
    # order 2, 2, 2, 3, 3: w1 2+2+3 = 7, w2 2+3 = 5 -> 7; 1, 1, 4 on 2: w1 1+4 = 5, w2 1 -> 5, and
    # longest first: 4 | 1+1 -> 4
    assert makespan([3, 3, 2, 2, 2], 2) == 7
    assert makespan([1, 1, 4], 2) == 5 and makespan([4, 1, 1], 2) == 4
    assert makespan([5, 1], 1) == 6 and makespan([], 3) == 0
    assert makespan([2, 2], 0) == 4         # fewer than one worker: one


def test_token_updates_is_the_product_of_the_budget_keys_and_none_when_one_is_not_a_positive_number():
    flat = {"max_steps": 10, "batch_size": 2, "num_generations": 4, "num_agents": 2, "num_turns": 2, "max_new_tokens": 3}
    assert token_updates(flat) == 10 * 2 * 4 * 2 * 2 * 3
    assert token_updates({**flat, "num_turns": None}) is None
    assert token_updates({k: v for k, v in flat.items() if k != "num_turns"}) == 10 * 2 * 4 * 2 * 3   # one turn
    for bad in (0, -1, float("nan"), float("inf"), "10", True):
        assert token_updates({**flat, "max_steps": bad}) is None, bad


def test_recorded_costs_read_finished_runs_and_skip_anything_else(tmp_path):
    run(tmp_path / "t1" / "train" / "0_agree_magrpo_s0", "agree", "magrpo", 30.0)
    run(tmp_path / "t1" / "train" / "1_agree_magrpo_s1", "agree", "magrpo", 50.0)
    run(tmp_path / "t2" / "train" / "0_agree_ippo_s0", "agree", "ippo", 90)
    run(tmp_path / "t2" / "train" / "1_agree_ippo_s1", "agree", "ippo", 10, status="failed")     # not finished
    for i, bad in enumerate((float("nan"), -3, "12", True, 0)):                                  # not a wall time
        (tmp_path / "t3" / str(i)).mkdir(parents=True)
        (tmp_path / "t3" / str(i) / "summary.json").write_text(
            json.dumps({"status": "finished", "wall_seconds": bad, "config": {"task": "cover", "label": "x"}}))
    (tmp_path / "t3" / "deep").mkdir()
    (tmp_path / "t3" / "deep" / "summary.json").write_text("[" * 5000 + "]" * 5000)   # refused by the bounded reader
    (tmp_path / "t3" / "text").mkdir()
    (tmp_path / "t3" / "text" / "summary.json").write_text("not json")
    got = recorded_costs([tmp_path, tmp_path / "t1", tmp_path / "missing"])     # a run listed twice counts once
    assert sorted(got) == [("agree", "ippo"), ("agree", "magrpo")]
    assert sorted(r.seconds for r in got[("agree", "magrpo")]) == [30.0, 50.0]
    assert got[("agree", "ippo")] == [Recorded(90.0, 10 * 2 * 4 * 2 * 3)]


def test_cell_costs_prefer_the_record_then_the_rows_rate_then_the_constant():
    recorded = {("agree", "magrpo"): [Recorded(30.0, 1000.0), Recorded(50.0, 1000.0)],
                ("cover", "ippo"): [Recorded(10.0, 500.0)]}
    tokens = {("agree", "magrpo"): 999.0, ("invest", "magrpo"): 4000.0, ("invest", "ippo"): 4000.0,
              ("invest", "mappo"): 4000.0, ("crowd", "mappo"): None}
    costs = cell_costs(list(tokens), recorded, tokens)
    assert costs[("agree", "magrpo")] == Cost(40.0, "recorded")               # the median of its runs
    assert costs[("invest", "magrpo")] == Cost(4000 * 0.04, "estimated")      # magrpo's rate: 40 s / 1000
    assert costs[("invest", "ippo")] == Cost(4000 * 0.02, "estimated")        # ippo's: 10 s / 500
    assert costs[("invest", "mappo")] == Cost(pytest.approx(4000 * SECONDS_PER_TOKEN), "estimated")
    known = sorted(c.seconds for cell, c in costs.items() if cell != ("crowd", "mappo"))
    assert costs[("crowd", "mappo")].seconds == pytest.approx((known[1] + known[2]) / 2)   # the others' median
    assert longest_first(costs)[0] == ("invest", "magrpo")
    assert longest_first(costs)[-1] == ("invest", "mappo")


def test_a_tasks_first_cell_composes_for_every_row_of_it():
    got = composed_tokens([("agree", "magrpo"), ("agree", "ippo"), ("invest", "mappo")], [])
    # agree's default run (conf/default_run/agree.yaml): 40 steps x B 8 x G 8 x 2 agents x 1 turn x 4 tokens;
    # invest: 150 steps, 2 turns
    assert got[("agree", "magrpo")] == got[("agree", "ippo")] == 40 * 8 * 8 * 2 * 1 * 4
    assert got[("invest", "mappo")] == 150 * 8 * 8 * 2 * 2 * 4
    assert composed_tokens([("agree", "magrpo")], ["max_steps=4"])[("agree", "magrpo")] == 4 * 8 * 8 * 2 * 4
    assert composed_tokens([("agree", "nope")], [])[("agree", "nope")] is None     # its job will say why


def test_the_paper_plan_runs_recorded_long_cells_first_and_says_its_estimate(tmp_path, capsys):
    from magrpo.cli.paper import main as paper_main

    earlier = tmp_path / "earlier"
    run(earlier / "train" / "a", "agree", "magrpo", 500.0)
    run(earlier / "train" / "b", "cover", "ippo", 400.0)
    root = tmp_path / "new"
    argv = ["coordination", "--tasks", "agree,cover", "--rows", "magrpo,ippo", "--seeds", "0,1", "--jobs", "2",
            "--out", str(root), "--costs", str(earlier), "--dry-run"]
    assert paper_main(argv) == 0
    out = capsys.readouterr().out
    order = next(w for line in out.splitlines() for w in line.split() if w.startswith("experiment="))
    listed = order.split("=", 1)[1].split(",")
    # the two unrecorded cells: 40 x 8 x 8 x 2 x 4 tokens at the recorded rows' rates (500 s and 400 s
    # for 10 x 2 x 4 x 2 x 3 = 480 tokens) = 20480/480 x 500 and x 400 s; then the recorded ones
    assert listed == ["cell/cover/magrpo", "cell/agree/ippo", "cell/agree/magrpo", "cell/cover/ippo"]
    # 8 jobs (4 cells x 2 seeds, seeds inner) on 2 workers, longest first
    tok = 20480 / 480
    jobs = sorted([500.0, 500.0, 400.0, 400.0, tok * 400, tok * 400, tok * 500, tok * 500], reverse=True)
    assert "estimated wall time of the train sweep: " in out.splitlines()[0]
    assert "8 job(s), 2 at a time, longest first (cost per job: 2 of 4 cell(s) from earlier runs, 2 from tokens" in out
    from magrpo.cli.paper import _clock
    assert _clock(makespan(jobs, 2)) in out.splitlines()[0]
