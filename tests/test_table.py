"""`magrpo-table`: hand-computed mean ± std in every format, grouping, skipped runs, curves, errors.

Fake run directories are written here file by file (summary.json, metrics.jsonl, .hydra/config.yaml)
in the layout magrpo-train produces, so every expected number is known in advance; one real smoke
run checks that the layout really is what the trainer writes.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from magrpo.table import aggregate, main, mean_std, tex_escape
from magrpo.tasks.metrics import codebleu
from tests.conftest import tree_digest

# Two methods x three seeds. Final reward_mean: [0.5, 0.6, 0.7] -> 0.6 ± 0.1 (sample std);
# [1, 2, 4] -> 7/3 ± sqrt(((4/3)^2 + (1/3)^2 + (5/3)^2) / 2) = sqrt(7/3).
FINAL = {"mean": [0.5, 0.6, 0.7], "rloo": [1.0, 2.0, 4.0]}
COMPONENT = {"mean": [1.0, 1.5, 2.0], "rloo": [3.0, 3.0, 3.0]}
INITIAL = {"mean": [0.1, 0.2, 0.3], "rloo": [0.3, 0.3, 0.6]}


def write_run(path: Path, *, seed: int, final: dict | None, initial: dict, algo: str = "magrpo",
              advantage: str = "mean", joint_mode: str = "aligned", task: str = "length_ratio",
              status: str = "finished", evals: dict[int, float] | None = None, hydra: bool = True) -> Path:
    """A run directory as magrpo-train leaves it (only the files magrpo-table reads)."""
    path.mkdir(parents=True)
    config = {"task": task, "algo": algo, "seed": seed, "num_agents": 1 if algo == "grpo" else 2,
              "models": ["builtin:tiny"], "num_generations": 4, "joint_mode": joint_mode, "advantage": advantage,
              "loss_agg": "seq_sum", "lr": 0.001}
    summary = {"status": status, "initial_eval": initial, "final_eval": final, "best": None, "steps": 4,
               "wall_seconds": 1.0, "config": config}
    (path / "summary.json").write_text(json.dumps(summary))
    evals = evals or {0: initial["reward_mean"], 4: (final or {}).get("reward_mean", 0.0)}
    rows = [{"step": s, "eval/reward_mean": v, "eval/reward/length_ratio": 2 * v} for s, v in evals.items()]
    rows += [{"step": s, "train/reward_mean": 0.1 * s + seed, "train/agent_1/loss": 0.5} for s in range(1, 5)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["step"])))
    if hydra:
        (path / ".hydra").mkdir()
        cfg = {"seed": seed, "max_steps": 4, "output_dir": "${hydra:runtime.output_dir}",
               "eval": {"temperature": "${algo.temperature}", "num_samples": 2},
               "agents": {"num_agents": config["num_agents"], "models": [{"name_or_path": "builtin:tiny"}]},
               "task": {"name": task, "num_train": 32},
               "algo": {"name": algo, "single_agent": algo == "grpo", "advantage": advantage,
                        "joint_mode": joint_mode, "temperature": 1.0, "loss_agg": "seq_sum"},
               # differs per seed, yet says nothing about the method: must not split the rows
               "logger": {"name": "none", "run_name": f"run_s{seed}"}}
        (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}", f"algo.advantage={advantage}"]))
    return path


def final_eval(reward: float, component: float) -> dict:
    # Bookkeeping entries (reward_std, num_items, timings, turn_1/...) must not become default columns.
    return {"reward_mean": reward, "reward_std": 0.05, "reward/length_ratio": component,
            "turn_1/reward_mean": reward, "pass@10": 0.9, "pass@1": 0.25, "pass@3": 0.5, "rouge_l": 0.3,
            "output_tokens_mean": 48.0, "response_time_s": 1.2, "reward_time_s": 0.001, "num_items": 2.0}


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A multirun directory: 2 advantage estimators x 3 seeds, numbered as Hydra numbers jobs."""
    root = tmp_path / "multirun"
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra: {}\n")
    job = 0
    for seed in range(3):
        for adv in ("mean", "rloo"):
            write_run(root / f"{job}_algo.advantage={adv},seed={seed}", seed=seed, advantage=adv,
                      final=final_eval(FINAL[adv][seed], COMPONENT[adv][seed]),
                      initial={"reward_mean": INITIAL[adv][seed]})
            job += 1
    return root


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {row["method"]: row for row in csv.DictReader(f)}


def md_rows(path: Path) -> dict[str, list[str]]:
    """method -> its cells, from the markdown table lines."""
    rows = {}
    for line in path.read_text().splitlines():
        if line.startswith("| ") and not line.startswith("| method"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def md_header(path: Path) -> list[str]:
    line = next(x for x in path.read_text().splitlines() if x.startswith("| method"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_mean_std_match_hand_computed_values_in_md_csv_and_tex(sweep, capsys):
    assert main([str(sweep)]) == 0
    out = sweep / "table"
    stdout = capsys.readouterr().out
    assert f"wrote {out / 'table.md'}" in stdout and f"wrote {out / 'table.csv'}" in stdout

    # Default columns: reward_mean, components, pass@k by k, other task metrics, then the reference.
    assert md_header(out / "table.md") == ["method", "n", "reward_mean", "reward/length_ratio", "pass@1", "pass@3",
                                           "pass@10", "rouge_l", "initial reward_mean"]
    md = md_rows(out / "table.md")
    assert list(md) == ["magrpo advantage=mean", "magrpo advantage=rloo"]   # sweep order
    assert md["magrpo advantage=mean"][:3] == ["3", "0.600 ± 0.100", "1.500 ± 0.500"]
    assert md["magrpo advantage=mean"][-1] == "0.200 ± 0.100"
    assert md["magrpo advantage=rloo"][:3] == ["3", "2.333 ± 1.528", "3.000 ± 0.000"]
    assert md["magrpo advantage=rloo"][-1] == "0.400 ± 0.173"
    assert "sample standard deviation" in (out / "table.md").read_text()

    rows = read_csv(out / "table.csv")
    a, b = rows["magrpo advantage=mean"], rows["magrpo advantage=rloo"]
    assert a["task"] == "length_ratio" and a["n"] == "3" and a["seeds"] == "0;1;2"
    assert float(a["reward_mean_mean"]) == pytest.approx(0.6, abs=1e-12)
    assert float(a["reward_mean_std"]) == pytest.approx(0.1, abs=1e-12)
    assert float(b["reward_mean_mean"]) == pytest.approx(7 / 3, abs=1e-12)
    assert float(b["reward_mean_std"]) == pytest.approx(math.sqrt(7 / 3), abs=1e-12)
    assert float(b["reward/length_ratio_std"]) == 0.0
    assert float(b["initial/reward_mean_std"]) == pytest.approx(math.sqrt(0.03), abs=1e-12)
    assert "reward_std_mean" not in a and "num_items_mean" not in a and "turn_1/reward_mean_mean" not in a

    tex = (out / "table.tex").read_text()
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    assert "magrpo advantage=mean & 3 & 0.600 $\\pm$ 0.100 & 1.500 $\\pm$ 0.500" in tex
    assert "reward\\_mean & reward/length\\_ratio" in tex


def test_metrics_option_selects_columns_and_single_seed_shows_no_std_as_n_a(sweep, tmp_path, capsys):
    out = tmp_path / "sel"
    assert main([str(sweep), "--out", str(out), "--metrics", "eval/pass@1,reward_mean", "--digits", "2"]) == 0
    assert md_header(out / "table.md") == ["method", "n", "pass@1", "reward_mean", "initial reward_mean"]
    assert md_rows(out / "table.md")["magrpo advantage=rloo"] == ["3", "0.25 ± 0.00", "2.33 ± 1.53", "0.40 ± 0.17"]

    one = tmp_path / "one"
    write_run(one / "run", seed=5, final=final_eval(0.42, 1.0), initial={"reward_mean": 0.1})
    assert main([str(one)]) == 0
    assert md_rows(one / "table" / "table.md")["magrpo"][:2] == ["1", "0.420 ± n/a"]
    assert "one seed shows ± n/a (one value has no spread)" in (one / "table" / "table.md").read_text()
    assert "$\\pm$ n/a" in (one / "table" / "table.tex").read_text()
    row = read_csv(one / "table" / "table.csv")["magrpo"]
    assert row["reward_mean_mean"] == "0.42" and row["reward_mean_std"] == ""


def test_multi_turn_runs_get_turn_1_and_final_turn_columns(tmp_path, capsys):
    root = tmp_path / "turns"
    for seed, (t1, t3) in enumerate([(0.2, 0.5), (0.4, 0.9)]):
        final = {**final_eval(t3, 1.0), "turn_1/reward_mean": t1, "turn_2/reward_mean": (t1 + t3) / 2,
                 "turn_3/reward_mean": t3, "turn_3/reward/length_ratio": 1.0, "feedback/degraded": 0.0}
        write_run(root / f"s{seed}", seed=seed, final=final, initial={"reward_mean": 0.1})
    assert main([str(root)]) == 0
    header = md_header(root / "table" / "table.md")
    assert header[:5] == ["method", "n", "reward_mean", "turn_1/reward_mean", "turn_3/reward_mean"]
    assert "turn_2/reward_mean" not in header and "feedback/degraded" not in header
    row = md_rows(root / "table" / "table.md")["magrpo"]
    assert row[2:4] == ["0.300 ± 0.141", "0.700 ± 0.283"]


def test_grouping_default_labels_and_group_by(tmp_path, capsys):
    root = tmp_path / "runs"
    # magrpo with two joint modes x two advantages, and grpo (single_agent is fixed by the algo).
    for seed in range(2):
        for jm in ("aligned", "cross"):
            for adv in ("mean", "rloo"):
                write_run(root / f"{jm}_{adv}_s{seed}", seed=seed, joint_mode=jm, advantage=adv,
                          final={"reward_mean": seed + (jm == "cross") * 10.0 + (adv == "rloo") * 100.0},
                          initial={"reward_mean": 0.0})
        write_run(root / f"grpo_s{seed}", seed=seed, algo="grpo", final={"reward_mean": 1000.0 + seed},
                  initial={"reward_mean": 0.0})
    assert main([str(root), "--out", str(tmp_path / "t1")]) == 0
    md = md_rows(tmp_path / "t1" / "table.md")
    assert set(md) == {"magrpo advantage=mean joint_mode=aligned", "magrpo advantage=mean joint_mode=cross",
                       "magrpo advantage=rloo joint_mode=aligned", "magrpo advantage=rloo joint_mode=cross",
                       "grpo advantage=mean joint_mode=aligned"}
    assert md["magrpo advantage=rloo joint_mode=cross"][:2] == ["2", "110.500 ± 0.707"]
    assert md["grpo advantage=mean joint_mode=aligned"][:2] == ["2", "1000.500 ± 0.707"]

    # Explicit keys: the rows merge over everything else (4 runs per joint mode among magrpo + grpo).
    assert main([str(root), "--out", str(tmp_path / "t2"), "--group-by", "algo.name,algo.joint_mode"]) == 0
    md = md_rows(tmp_path / "t2" / "table.md")
    assert set(md) == {"magrpo joint_mode=aligned", "magrpo joint_mode=cross", "grpo joint_mode=aligned"}
    assert md["magrpo joint_mode=cross"][:2] == ["4", "60.500 ± 57.738"]   # [10, 11, 110, 111]: sqrt(10001 / 3)

    # Summary-only runs (no .hydra/) group by the summary's config; short keys work for --group-by.
    flat = tmp_path / "flat"
    for seed in range(2):
        for adv in ("mean", "max"):
            write_run(flat / f"{adv}_{seed}", seed=seed, advantage=adv, final={"reward_mean": float(seed)},
                      initial={"reward_mean": 0.0}, hydra=False)
    assert main([str(flat), "--out", str(tmp_path / "t3")]) == 0
    assert set(md_rows(tmp_path / "t3" / "table.md")) == {"magrpo advantage=mean", "magrpo advantage=max"}
    assert main([str(flat), "--out", str(tmp_path / "t4"), "--group-by", "algo"]) == 0
    assert md_rows(tmp_path / "t4" / "table.md")["magrpo"][0] == "4"


def test_the_compute_matched_view_is_the_auc_over_wall_time_and_flops(tmp_path, capsys):
    """Two methods whose eval reward climbs 0 -> 1 over 4 steps: `mean` in 1 s and 1e9 FLOPs a step,
    `rloo` in 0.25 s and 3e9. Wall time: B = 1 s (rloo's 4 steps); mean is at 0.25 there, AUC 0.125;
    rloo 0.5. FLOPs: B = 4e9 (mean's 4 steps); mean 0.5; rloo reaches 1/3 at 4e9, AUC 1/6. Tokens:
    none logged, no column."""
    root = tmp_path / "runs"
    root.mkdir()
    for adv, seconds, flops in (("mean", 1.0, 1e9), ("rloo", 0.25, 3e9)):
        for seed in range(2):
            path = write_run(root / f"{adv}_{seed}", seed=seed, advantage=adv, final=final_eval(1.0, 1.0),
                             initial={"reward_mean": 0.0}, evals={0: 0.0, 4: 1.0})
            with open(path / "metrics.jsonl", "a") as f:
                for step in range(1, 5):
                    f.write(json.dumps({"step": step, "time/step_s": seconds, "train/flops": flops}) + "\n")
    out = tmp_path / "table"
    assert main([str(root), "--out", str(out), "--no-plots"]) == 0
    text = (out / "table.md").read_text()
    lines = text.splitlines()
    start = lines.index("### Task: length_ratio, against what training spent (eval reward_mean)")
    assert lines[start + 2] == "| method | n | final reward_mean | AUC over wall time | AUC over FLOPs |"
    rows = {cells[0]: cells[1:] for line in lines[start + 4:start + 6]
            for cells in [[c.strip() for c in line.strip("|").split(" | ")]]}
    assert rows["magrpo advantage=mean"] == ["2", "1.000 ± 0.000", "0.125 ± 0.000", "0.500 ± 0.000"]
    assert rows["magrpo advantage=rloo"] == ["2", "1.000 ± 0.000", "0.500 ± 0.000", "0.167 ± 0.000"]
    assert "B: AUC over wall time 1 s, AUC over FLOPs 4e+09 FLOPs." in text


def test_runs_without_a_per_step_budget_get_no_compute_matched_section(sweep, capsys):
    assert main([str(sweep), "--no-plots"]) == 0
    assert "against what training spent" not in (sweep / "table" / "table.md").read_text()


def test_several_tasks_get_separate_tables(tmp_path, capsys):
    root = tmp_path / "runs"
    for seed in range(2):
        write_run(root / f"tldr_{seed}", seed=seed, task="tldr", final={"reward_mean": 1.0 + seed, "rouge_l": 0.2},
                  initial={"reward_mean": 0.0})
        write_run(root / f"he_{seed}", seed=seed, task="humaneval", final={"reward_mean": 3.0, "pass@1": 0.5},
                  initial={"reward_mean": 0.0})
    assert main([str(root)]) == 0
    md = (root / "table" / "table.md").read_text()
    assert "### Task: humaneval" in md and "### Task: tldr" in md
    with open(root / "table" / "table.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["task"], r["method"], r["reward_mean_mean"]) for r in rows) == [
        ("humaneval", "magrpo", "3.0"), ("tldr", "magrpo", "1.5")]
    assert {r["task"]: r["pass@1_mean"] for r in rows} == {"humaneval": "0.5", "tldr": ""}
    assert (root / "table.tex").exists() is False and (root / "table" / "table.tex").read_text().count("\\toprule") == 2
    assert (root / "table" / "tldr_eval_reward_mean.png").exists()
    assert (root / "table" / "humaneval_eval_reward_mean.png").exists()


def test_unfinished_runs_are_skipped_with_a_warning_or_included(sweep, tmp_path, capsys):
    running = write_run(sweep / "9_algo.advantage=mean,seed=3", seed=3, final=None, status="running",
                        initial={"reward_mean": 0.2}, evals={0: 0.2, 2: 0.9})
    failed = write_run(sweep / "10_algo.advantage=mean,seed=4", seed=4, final=None, status="failed",
                       initial={"reward_mean": 0.2}, evals={0: 0.2})
    assert main([str(sweep), "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert str(running) in err and "'running'" in err and str(failed) in err and "'failed'" in err
    assert md_rows(tmp_path / "a" / "table.md")["magrpo advantage=mean"][:2] == ["3", "0.600 ± 0.100"]

    # Included: the running run's latest eval (0.9 at step 2) stands in; the failed one only has
    # its initial eval (0.2 at step 0), which is all it ever measured.
    assert main([str(sweep), "--out", str(tmp_path / "b"), "--include-unfinished"]) == 0
    row = read_csv(tmp_path / "b" / "table.csv")["magrpo advantage=mean"]
    assert row["n"] == "5" and row["seeds"] == "0;1;2;3;4"
    assert float(row["reward_mean_mean"]) == pytest.approx((0.5 + 0.6 + 0.7 + 0.9 + 0.2) / 5, abs=1e-12)
    assert "unfinished" in (tmp_path / "b" / "table.md").read_text()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_learning_curves_are_valid_pngs(sweep, capsys):
    assert main([str(sweep)]) == 0
    out = sweep / "table"
    for name in ("length_ratio_eval_reward_mean.png", "length_ratio_train_reward_mean.png",
                 "length_ratio_eval_reward_length_ratio.png"):
        path = out / name
        assert path.stat().st_size > 10_000, name     # axes, two lines, bands, legend: not an empty canvas
        w, h = png_size(path)
        assert w >= 400 and h >= 300
    assert not (out / "length_ratio_eval_pass@1.png").exists()   # not in metrics.jsonl: no empty plot


def test_curve_aggregation_over_seeds():
    # Seeds that did not log a step are left out of that step's mean rather than counted as 0.
    steps, means, stds, counts = aggregate([{0: 1.0, 2: 3.0}, {0: 3.0, 2: 5.0}, {0: 2.0}])
    assert steps == [0, 2] and means == [2.0, 4.0] and counts == [3, 2]
    assert stds == pytest.approx([1.0, math.sqrt(2)])
    cell = mean_std([2.0])
    assert cell.mean == 2.0 and cell.std is None and cell.count == 1


def test_confidence_interval_is_students_t_on_hand_computed_values():
    from magrpo.table.stats import t_quantile_975

    # [0.6, 0.7, 0.8]: mean 0.7, s = 0.1, t_{0.975, 2} = 4.302653 -> 4.302653 * 0.1 / sqrt(3) = 0.248414
    cell = mean_std([0.6, 0.7, 0.8])
    assert cell.mean == pytest.approx(0.7) and cell.std == pytest.approx(0.1)
    assert cell.ci95 == pytest.approx(0.248414, abs=1e-6)
    # [1, 2]: s = 1/sqrt(2), t_{0.975, 1} = 12.706205 -> 12.706205 * (1/sqrt(2)) / sqrt(2) = 6.353102
    assert mean_std([1.0, 2.0]).ci95 == pytest.approx(6.353102, abs=1e-6)
    assert mean_std([0.5]).ci95 is None          # one seed: the mean alone
    # the quantiles of a printed t table, odd and even degrees of freedom
    table = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 9: 2.2622, 10: 2.2281, 30: 2.0423, 120: 1.9799}
    for df, t in table.items():
        assert t_quantile_975(df) == pytest.approx(t, abs=1e-4), df
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile_975(0)


def test_aggregates_over_tasks_against_a_hand_computed_score_matrix():
    """The rliable aggregates (magrpo.table.stats) of two methods' eight runs each, over two tasks."""
    from magrpo.table import stats

    # Method A: 4 runs on each of two tasks. Pooled and sorted: 0.1 0.2 0.3 0.4 0.6 0.7 0.8 1.0; the IQM cuts
    # 8 / 4 = 2 at each end: (0.3 + 0.4 + 0.6 + 0.7) / 4 = 0.5. The mean: 4.1 / 8 = 0.5125. The optimality gap:
    # 1 - 4.1 / 8 = 0.4875 (nothing above 1 to cap).
    a = {"t1": [0.1, 0.4, 0.7, 1.0], "t2": [0.2, 0.3, 0.6, 0.8]}
    got = stats.aggregate_intervals(a)
    assert list(got) == ["iqm", "mean", "optimality_gap"]
    assert got["iqm"].point == pytest.approx(0.5)
    assert got["mean"].point == pytest.approx(0.5125) and got["optimality_gap"].point == pytest.approx(0.4875)
    for iv in got.values():
        assert iv.low <= iv.point <= iv.high and iv.low < iv.high
    assert 0.1 <= got["iqm"].low and got["iqm"].high <= 1.0
    # the bootstrap is seeded: the same intervals on every call, others with another seed
    assert stats.aggregate_intervals(a) == got and stats.aggregate_intervals(a, seed=1) != got
    # every resample's IQM is the one scipy (rliable's aggregate_iqm) computes, for even and odd run counts
    import numpy as np
    from scipy.stats import trim_mean
    for n in (8, 9):
        boot = np.random.default_rng(n).random((50, n))
        assert stats._trimmed_rows(boot) == pytest.approx(trim_mean(boot, 0.25, axis=1))
    # a score above 1 earns no less optimality gap than 1 itself
    assert stats.aggregate_intervals({"t": [1.5, 0.5]})["optimality_gap"].point == pytest.approx(0.25)

    # P(A > B): on t1, A's 4 runs against B's 0.5 0.5 0.5 0.5: A wins 2 of 4 (0.7, 1.0) -> 0.5; on t2 against
    # 0.3 0.3 0.3 0.3: A wins 2 (0.6, 0.8), ties 1 (0.3) -> (2 + 0.5) / 4 = 0.625; averaged: 0.5625.
    b = {"t1": [0.5] * 4, "t2": [0.3] * 4}
    p = stats.probability_of_improvement(a, b)
    assert p.point == pytest.approx(0.5625) and p.low <= p.point <= p.high
    assert stats.probability_of_improvement(a, a).point == pytest.approx(0.5)
    assert stats.probability_of_improvement(a, {"other": [0.5]}) is None

    # The performance profile: the fraction of the 8 runs above each tau.
    point, low, high = stats.performance_profile(a, [0.0, 0.5, 1.0])
    assert point == pytest.approx([1.0, 0.5, 0.0])
    assert all(lo <= x <= hi for lo, x, hi in zip(low, point, high))


def test_table_help_loads_neither_rliable_nor_matplotlib():
    # (scipy and numpy load with the task registry magrpo.table reads: no cost of the aggregates')
    code = ("import sys\nfrom magrpo.table import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', *[m for m in ('rliable', 'arch', 'matplotlib') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().splitlines()[-1] == "LOADED", done.stdout[-2000:] + done.stderr[-2000:]


def test_ranks_share_tied_places_and_skip_missing_values():
    from magrpo.table.stats import ranks

    assert ranks([0.5, 0.9, None, 0.5, 0.1]) == [2.5, 1.0, None, 2.5, 4.0]
    assert ranks([3.0, 1.0, 2.0], higher_is_better=False) == [3.0, 1.0, 2.0]
    assert ranks([0.7, 0.7, 0.7]) == [2.0, 2.0, 2.0] and ranks([]) == []


def test_tex_escape_handles_every_special_character():
    assert tex_escape("a_b & 50% $x #1 {y} ~ ^ \\") == \
        "a\\_b \\& 50\\% \\$x \\#1 \\{y\\} \\textasciitilde{} \\textasciicircum{} \\textbackslash{}"


def test_errors_exit_2_naming_the_path(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err

    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    assert main([str(empty)]) == 2
    assert str(empty) in capsys.readouterr().err

    # Runs linked into a folder are not followed (a run someone sent may link anywhere, a loop
    # included); the error names the links and says what to pass instead.
    done_elsewhere = write_run(tmp_path / "elsewhere" / "r", seed=0, final={"reward_mean": 1.0},
                               initial={"reward_mean": 0.0})
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "r").symlink_to(done_elsewhere, target_is_directory=True)
    (linked / "loop").symlink_to(linked, target_is_directory=True)
    assert main([str(linked)]) == 2
    err = capsys.readouterr().err
    assert "2 symlinked directories were not followed" in err and str(linked / "r") in err
    assert main([str(linked / "r"), "--out", str(tmp_path / "t")]) == 0    # the run itself is read
    capsys.readouterr()

    only_running = tmp_path / "running"
    write_run(only_running / "r", seed=0, final=None, status="running", initial={"reward_mean": 0.0}, evals={0: 0.0})
    assert main([str(only_running)]) == 2
    assert str(only_running) in capsys.readouterr().err

    done = tmp_path / "done"
    write_run(done / "r", seed=0, final={"reward_mean": 1.0}, initial={"reward_mean": 0.0})
    assert main([str(done), "--metrics", "pass@7"]) == 2
    assert "pass@7" in capsys.readouterr().err
    assert main([str(done), "--group-by", "algo.no_such_key"]) == 2
    assert "algo.no_such_key" in capsys.readouterr().err
    assert main([str(done), str(done)]) == 2     # several DIRs: --out is required
    assert "--out" in capsys.readouterr().err

    # A FIFO (or a device) under a run file's name is skipped, never read: the read would block.
    fifo = tmp_path / "fifo_run"
    fifo.mkdir()
    os.mkfifo(fifo / "summary.json")
    capsys.readouterr()
    assert main([str(fifo), str(done), "--out", str(tmp_path / "t_fifo")]) == 0
    assert "summary.json: not a regular file" in capsys.readouterr().err
    write_run(tmp_path / "fifo_curves" / "r", seed=1, final={"reward_mean": 1.0}, initial={"reward_mean": 0.0})
    (tmp_path / "fifo_curves" / "r" / "metrics.jsonl").unlink()
    os.mkfifo(tmp_path / "fifo_curves" / "r" / "metrics.jsonl")
    assert main([str(tmp_path / "fifo_curves"), str(done), "--out", str(tmp_path / "t_fifo2")]) == 0
    assert "metrics.jsonl: not a regular file" in capsys.readouterr().err

    # The installed entry point: one line on stderr, no traceback.
    proc = subprocess.run([sys.executable, "-m", "magrpo.table", str(missing)], capture_output=True, text=True)
    assert proc.returncode == 2 and str(missing) in proc.stderr and "Traceback" not in proc.stderr


def test_real_smoke_run_is_read(make_cfg, tmp_path, capsys):
    import torch
    from omegaconf import OmegaConf

    from magrpo.cli.train import run

    out = tmp_path / "sweep" / "0_seed_0"
    # As small as a real run gets: a few seconds even on 2 busy cores.
    cfg = make_cfg(["debug=smoke", "algo.max_new_tokens=8", "algo.num_generations=2", "eval.num_items=1",
                    "save_final=false", "hardware.num_threads=1"], out=str(out))
    threads = torch.get_num_threads()
    try:
        run(cfg)
    finally:
        torch.set_num_threads(threads)   # the trainer sets it process-wide; later tests keep theirs
    (out / ".hydra").mkdir()
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")   # what the Hydra app would have written
    summary = json.loads((out / "summary.json").read_text())
    assert main([str(tmp_path / "sweep")]) == 0
    row = read_csv(tmp_path / "sweep" / "table" / "table.csv")["magrpo"]
    assert row["n"] == "1" and float(row["reward_mean_mean"]) == summary["final_eval"]["reward_mean"]
    assert float(row["reward/length_ratio_mean"]) == summary["final_eval"]["reward/length_ratio"]
    assert png_size(tmp_path / "sweep" / "table" / "length_ratio_train_reward_mean.png")[0] >= 400


# -- table.tex, checked as LaTeX reads it -------------------------------------------------------------

TEX_RULES = {"toprule", "midrule", "bottomrule", "hline"}


def _tex_tokens(tex: str) -> list[tuple[str, str, int]]:
    """(kind, text, line): kind 'cmd' (the name after a backslash: `\\\\` is the command '\\\\',
    `\\{` the command '{', so escaped characters are never braces), '{', '}', '&' or 'text';
    comments dropped."""
    out, i = [], 0
    while i < len(tex):
        c, line = tex[i], tex.count("\n", 0, i) + 1
        if c == "%":
            i = tex.find("\n", i) if "\n" in tex[i:] else len(tex)
        elif c == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", tex[i:], re.S)
            out.append(("cmd", m.group(1), line))
            i += m.end()
        elif c in "{}&":
            out.append((c, c, line))
            i += 1
        else:
            j = i
            while j < len(tex) and tex[j] not in "\\{}&%":
                j += 1
            out.append(("text", tex[i:j], line))
            i = j
    return out


def _group(tokens: list[tuple[str, str, int]], k: int) -> tuple[str | None, int]:
    """The text of the brace group starting at tokens[k], and the index after it."""
    if k >= len(tokens) or tokens[k][0] != "{":
        return None, k
    depth, text = 0, []
    for j in range(k, len(tokens)):
        kind, val, _ = tokens[j]
        depth += {"{": 1, "}": -1}.get(kind, 0)
        if depth == 0:
            return "".join(text[1:]), j + 1
        text.append("\\" + val if kind == "cmd" else val)
    return None, len(tokens)


def _spec_columns(spec: str) -> int:
    spec = re.sub(r"[@!<>]\{[^}]*\}", "", spec)          # inter-column material holds no column
    spec = re.sub(r"[pmb]\{[^}]*\}", "l", spec)           # a paragraph column is one column
    return sum(ch in "lcrX" for ch in spec)


def tex_problems(tex: str) -> list[str]:
    """What LaTeX would stop at in a table.tex, found without a LaTeX engine: unbalanced braces, a
    \\begin without its \\end (or the other way round), and a tabular row whose cells
    (\\multicolumn{k} counting k) are not as many as the column spec's columns. Empty when none."""
    tokens = _tex_tokens(tex)
    problems: list[str] = []
    depth, envs, k = 0, [], 0
    while k < len(tokens):
        kind, val, line = tokens[k]
        if kind == "cmd" and val in ("begin", "end"):
            name, k = _group(tokens, k + 1)
            if name is None:
                problems.append(f"\\{val} without an environment name")
                continue
            if val == "begin":
                env = {"name": name, "depth": depth, "cols": None, "cells": 1, "open": False, "rows": 0}
                if name == "tabular":
                    spec, k = _group(tokens, k)
                    env["cols"] = _spec_columns(spec or "")
                envs.append(env)
            elif not envs or envs[-1]["name"] != name:
                problems.append(f"\\end{{{name}}} closes " + (f"\\begin{{{envs[-1]['name']}}}" if envs else "nothing"))
            else:
                env = envs.pop()
                if env["open"]:
                    problems.append(f"the last row of a {name} does not end with \\\\")
            continue
        if kind == "{":
            depth += 1
        elif kind == "}":
            depth -= 1
            if depth < 0:
                problems.append(f"line {line}: a '}}' closes nothing")
                depth = 0
        elif envs and envs[-1]["cols"] is not None and depth == envs[-1]["depth"]:
            env = envs[-1]
            if kind == "&":
                env["cells"] += 1
                env["open"] = True
            elif kind == "cmd" and val == "\\":
                env["rows"] += 1
                if env["cells"] != env["cols"]:
                    problems.append(f"line {line}: a row of {env['cells']} cells in a tabular of {env['cols']} columns")
                env["cells"], env["open"] = 1, False
            elif kind == "cmd" and val == "multicolumn":
                span, k = _group(tokens, k + 1)
                env["cells"] += int(span) - 1
                env["open"] = True
                continue
            elif (kind == "text" and val.strip()) or (kind == "cmd" and val not in TEX_RULES):
                env["open"] = True
        k += 1
    if depth:
        problems.append(f"{depth} '{{' never closed")
    problems += [f"\\begin{{{e['name']}}} never ended" for e in envs]
    return problems


def test_tex_checker_finds_what_latex_would_stop_at():
    good = "% a comment with { and }\n\\begin{tabular}{lr}\n\\toprule\na\\_\\{ & 1 \\\\\n\\midrule\n" \
           "\\multicolumn{2}{l}{\\footnotesize x \\& y} \\\\\n\\bottomrule\n\\end{tabular}\n"
    assert tex_problems(good) == []
    # The note row the paper layout used to write: one '}' too many per table.
    assert tex_problems(good.replace("x \\& y}", "x \\& y}}")) == ["line 6: a '}' closes nothing"]
    assert tex_problems(good.replace("a\\_\\{ & 1", "a & 1 & 2")) == ["line 4: a row of 3 cells in a tabular of 2 columns"]
    assert tex_problems(good.replace("\\multicolumn{2}", "\\multicolumn{3}")) == [
        "line 6: a row of 3 cells in a tabular of 2 columns"]
    assert tex_problems(good.replace("\\end{tabular}", "")) == ["\\begin{tabular} never ended"]
    assert tex_problems(good.replace("\\end{tabular}", "\\end{table}")) == [
        "\\end{table} closes \\begin{tabular}", "\\begin{tabular} never ended"]
    assert tex_problems(good + "{") == ["1 '{' never closed"]


def test_generic_tex_is_well_formed_with_special_characters_notes_and_codebleu(sweep, tmp_path, capsys):
    # A label full of LaTeX specials, an unfinished run (its note), a second task with a CodeBLEU column.
    write_run(sweep / "odd", seed=0, advantage="a_b{c}%&#$~^\\x", final=final_eval(0.1, 0.2),
              initial={"reward_mean": 0.0})
    write_run(sweep / "running", seed=1, final=None, status="running", initial={"reward_mean": 0.2},
              evals={0: 0.2, 2: 0.3})
    for seed in range(2):
        write_run(sweep / f"he_{seed}", seed=seed, task="humaneval",
                  final={"reward_mean": 3.0, "pass@1": 0.5, "codebleu": 0.26 + 0.01 * seed},
                  initial={"reward_mean": 0.0})
    out = tmp_path / "t"
    assert main([str(sweep), "--out", str(out), "--include-unfinished", "--no-plots"]) == 0
    tex = (out / "table.tex").read_text()
    assert tex.count("\\begin{tabular}") == 2 and tex_problems(tex) == []
    assert "a\\_b\\{c\\}\\%\\&\\#\\$\\textasciitilde{}\\textasciicircum{}\\textbackslash{}x" in tex


def test_codebleu_column_reports_the_packages_floor(tmp_path, capsys):
    reference = "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n"
    floor = codebleu([""], [reference])["codebleu"]
    # The floor is the package's value for any code without data flow in common with the reference.
    assert floor > 0 and codebleu(["this is ( not python"], [reference])["codebleu"] == pytest.approx(floor)
    root = tmp_path / "runs"
    write_run(root / "he", seed=0, task="humaneval", final={"reward_mean": 1.0, "codebleu": floor + 0.02},
              initial={"reward_mean": 0.0})
    assert main([str(root), "--no-plots"]) == 0
    md = (root / "table" / "table.md").read_text()
    assert f"codebleu (floor {floor:.3f})" in md_header(root / "table" / "table.md")
    assert f"empty or unparsable code already scores {floor:.3f}" in md and "parity with the paper" in md
    assert f"empty code scores {floor:.3f}" in (root / "table" / "table.tex").read_text()
    assert read_csv(root / "table" / "table.csv")["magrpo"]["codebleu_mean"] == repr(floor + 0.02)
    # A table without CodeBLEU says nothing about it.
    plain = tmp_path / "plain"
    write_run(plain / "lr", seed=0, final={"reward_mean": 1.0}, initial={"reward_mean": 0.0})
    assert main([str(plain), "--no-plots"]) == 0
    assert "CodeBLEU" not in (plain / "table" / "table.md").read_text()


def _one_error_line(code: int, capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "warning:" not in line]
    assert code == 2 and len(err) == 1 and err[0].startswith("magrpo-table: error: "), err
    return err[0]


def test_the_table_is_never_written_into_a_run(sweep, tmp_path, capsys):
    run = sweep / "0_algo.advantage=mean,seed=0"
    other = write_run(tmp_path / "other", seed=7, final=final_eval(0.1, 1.0), initial={"reward_mean": 0.0})
    before = {d: tree_digest(d) for d in (sweep, other)}
    # inside a run it reads
    line = _one_error_line(main([str(sweep), "--out", str(run / "table")]), capsys)
    assert f"--out {str(run / 'table')!r} is inside the run directory {str(run)!r}" in line
    # a single run as DIR: the default DIR/table would be inside it
    line = _one_error_line(main([str(run)]), capsys)
    assert f"{str(run / 'table')!r} (the default for one DIR: DIR/table; give --out) is inside the run" in line
    # inside a run it does not read
    line = _one_error_line(main([str(sweep), "--out", str(other / "t")]), capsys)
    assert f"is inside the run directory {str(other)!r}" in line
    assert {d: tree_digest(d) for d in (sweep, other)} == before
    # the same run, tabled from outside
    assert main([str(run), "--out", str(tmp_path / "t"), "--no-plots"]) == 0
    assert md_rows(tmp_path / "t" / "table.md")["magrpo"][:2] == ["1", "0.500 ± n/a"]


def test_an_out_holding_a_file_the_table_writes_is_refused_unless_force(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("my notes\n")
    (out / "table.md").write_text("my own table\n")
    before = tree_digest(out)
    line = _one_error_line(main([str(sweep), "--out", str(out)]), capsys)
    assert "already holds table.md" in line and "--force" in line
    assert tree_digest(out) == before
    # a file only known once the curves are drawn: refused as well, after writing aside, nothing changed
    (out / "table.md").unlink()
    (out / "length_ratio_eval_reward_mean.png").write_bytes(b"my plot")
    before = tree_digest(out)
    line = _one_error_line(main([str(sweep), "--out", str(out)]), capsys)
    assert "already holds length_ratio_eval_reward_mean.png" in line
    assert tree_digest(out) == before
    # a directory where a file goes: refused even with --force
    (out / "table.csv").mkdir()
    before = tree_digest(out)
    line = _one_error_line(main([str(sweep), "--out", str(out), "--force"]), capsys)
    assert "holds a directory 'table.csv'" in line and tree_digest(out) == before
    (out / "table.csv").rmdir()
    # --force replaces the files the table writes, and nothing else
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--force"]) == 0
    stdout = capsys.readouterr().out
    assert (out / "notes.md").read_text() == "my notes\n"
    assert (out / "length_ratio_eval_reward_mean.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert md_rows(out / "table.md")["magrpo advantage=mean"][:2] == ["3", "0.600 ± 0.100"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "nothing written aside is left"
    from magrpo.table import build_parser

    assert "--force" in build_parser().format_help()
    wrote = [line.removeprefix("wrote ") for line in stdout.splitlines() if line.startswith("wrote ")]
    assert wrote[:3] == [str(out / "table.md"), str(out / "table.csv"), str(out / "table.tex")]
    assert set(wrote) == {str(p) for p in out.iterdir() if p.name != "notes.md"}



def test_a_table_that_fails_while_writing_leaves_out_as_it_was(sweep, tmp_path, monkeypatch):
    import magrpo.table.generic as generic

    def broken(*args, **kwargs):
        raise RuntimeError("the curves failed")

    monkeypatch.setattr(generic, "plot_curves", broken)      # after table.md/.csv/.tex are written aside
    fresh = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError, match="the curves failed"):
        main([str(sweep), "--out", str(fresh)])
    assert not (tmp_path / "a").exists(), "the directories made for OUT go too"
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    before = tree_digest(out)
    with pytest.raises(RuntimeError):
        main([str(sweep), "--out", str(out)])
    assert tree_digest(out) == before, "no table file, nothing written aside left"


def test_a_full_disk_while_writing_the_table_is_one_line_and_leaves_out_as_it_was(sweep, tmp_path, monkeypatch,
                                                                                   capsys):
    import errno
    import os

    import magrpo.table.generic as generic

    def full(tables, out, smooth_window):
        (out / "length_ratio_eval_reward_mean.png").write_bytes(b"\x89PNG")     # cut short
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "length_ratio_eval_reward_mean.png"))

    monkeypatch.setattr(generic, "plot_curves", full)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    before = tree_digest(out)
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"magrpo-table: setup error: the disk is full at {out}: "), err
    assert tree_digest(out) == before


def test_plot_styles_tell_thirteen_and_more_methods_apart_and_labels_stay_short():
    from magrpo.table.render import line_style, short_label

    styles = [line_style(k) for k in range(40)]
    keys = {(s["color"], s["marker"], s["linestyle"]) for s in styles}
    assert len(keys) == 40                                  # no two lines share colour, marker and style
    assert len({s["color"] for s in styles[:13]}) == 13      # a 13-method table: 13 colours
    long = "algo=magrpo " + "algo.advantage=rloo " * 20
    assert len(short_label(long)) == 40 and short_label(long).endswith("…")
    assert short_label("MAGRPO") == "MAGRPO"


def test_kendalls_w_against_hand_computed_cases():
    from magrpo.table.stats import kendall_w

    # three seeds rank three methods (1, 2, 3), (1, 3, 2), (2, 1, 3): R = (4, 6, 8), mean 6, S = 8,
    # W = 12 * 8 / (3^2 * (27 - 3)) = 96 / 216
    assert kendall_w([[0.9, 0.5, 0.1], [0.9, 0.1, 0.5], [0.5, 0.9, 0.1]]) == pytest.approx(96 / 216)
    assert kendall_w([[3, 2, 1]] * 4) == pytest.approx(1.0)
    # two seeds in opposite orders of two methods: R = (3, 3), S = 0
    assert kendall_w([[1, 0], [0, 1]]) == 0.0
    # lower is better: the same places as the negated scores
    assert kendall_w([[1, 2, 3], [1, 3, 2]], higher_is_better=False) == kendall_w([[-1, -2, -3], [-1, -3, -2]])
    assert kendall_w([[1.0, 1.0]] * 3) is None and kendall_w([[1, 2]]) is None
    with pytest.raises(ValueError):
        kendall_w([[1, 2], [1]])


def test_area_under_a_curve_and_the_first_reach_of_a_level():
    from magrpo.table.stats import area_under, first_reach

    pts = [(0, 0.2), (100, 0.6), (300, 1.0)]
    # trapezoids: 100 * 0.4 + 200 * 0.8 = 200 over 300 tokens
    assert area_under(pts, 300) == pytest.approx(200 / 300)
    # cut at 200: y(200) = 0.8, 100 * 0.4 + 100 * 0.7 = 110
    assert area_under(pts, 200) == pytest.approx(110 / 200)
    # held: the first value back to 0, the last on to the budget
    assert area_under([(100, 0.5), (200, 1.0)], 400) == pytest.approx((50 + 75 + 200) / 400)
    assert area_under([], 10) is None and area_under(pts, 0) is None
    # 0.9 is crossed between (100, 0.6) and (300, 1.0): 100 + 200 * 0.3 / 0.4 = 250
    assert first_reach(pts, 0.9) == pytest.approx(250) and first_reach(pts, 0.1) == 0
    assert first_reach(pts, 1.01) is None


@pytest.mark.parametrize("edit", [
    {"config": "a string"}, {"config": [1, 2]}, {"results": [1, 2]}, {"results": "x"},
    {"config_seed": [1]}, {"config_seed": {"a": 1}}, {"config_task": 5},
])
def test_a_summary_edited_into_other_shapes_is_skipped_or_read_never_a_traceback(tmp_path, capsys, edit):
    """A run directory is someone else's file: summary.json fields of the wrong JSON type are a
    warning (that run skipped) or read as far as they make sense, beside a good run."""
    write_run(tmp_path / "runs" / "good", seed=0, final={"reward_mean": 1.0}, initial={"reward_mean": 0.0})
    bad = write_run(tmp_path / "runs" / "bad", seed=1, final={"reward_mean": 0.5}, initial={"reward_mean": 0.0})
    summary = json.loads((bad / "summary.json").read_text())
    for key, value in edit.items():
        if key.startswith("config_"):
            summary["config"][key[len("config_"):]] = value
        else:
            summary[key] = value
    (bad / "summary.json").write_text(json.dumps(summary))
    code = main([str(tmp_path / "runs"), "--out", str(tmp_path / "t")])
    out = capsys.readouterr()
    assert code == 0 and "Traceback" not in out.err, out.err
    tables = "".join(p.read_text() for p in (tmp_path / "t").glob("*.md"))
    if "config" in edit:        # the bad run is skipped, the good one is the table
        assert f"skipping {bad}" in out.err and "config is not a JSON object" in out.err
        assert "| magrpo | 1 |" in tables
    elif "config_task" in edit:  # a table of its own, under the task it names
        assert tables.count("| magrpo | 1 |") == 2 and "### Task: 5" in tables
    else:                       # both seeds in the one row
        assert "| magrpo | 2 |" in tables
