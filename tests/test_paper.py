"""Reproducing the paper: every row's config at both scales, the paper layout of magrpo-table on
hand-made run directories, eval runs in the run-directory layout, the sweep value, and the
normalized return and per-level accuracies that the paper's columns read."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from magrpo.algos import ALGOS
from magrpo.cli.paper import cells, choices, row_algo, sweep_command, tune_space
from magrpo.config.schemas import CONF_DIR, ConfigError, EvalRunSchema, TrainSchema
from magrpo.core.instances import select
from magrpo.launch.paper_grid import HARDER_GAMES, METHODS, TABLES
from magrpo.table import main as table_main
from magrpo.tasks.metrics import codebleu
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg
from tests.test_table import tex_problems

PAPER_ROWS = [(table, task, row) for table, t in TABLES.items() for task, row in t.cells()]
PAPER_MODELS = {"tldr": "Qwen/Qwen3-1.7B", "arxiv": "Qwen/Qwen3-1.7B", "maporl_qa": "Qwen/Qwen3-1.7B",
                "humaneval": "Qwen/Qwen2.5-Coder-3B-Instruct", "coophumaneval": "Qwen/Qwen2.5-Coder-3B-Instruct",
                "mbpp": "Qwen/Qwen2.5-Coder-3B-Instruct"}


def default_run(task: str) -> dict:
    """The coordination game's default run, conf/default_run/<task>.yaml, which its recipe runs."""
    return yaml.safe_load((Path(CONF_DIR) / "default_run" / f"{task}.yaml").read_text())


def budget(task: str) -> tuple[int, int, int, int]:
    """A coordination recipe's matched budget: every row draws batch_size x num_generations answers of at
    most max_new_tokens per agent, for max_steps updates."""
    run = default_run(task)
    return (run["algo"]["batch_size"], run["algo"]["num_generations"], run["algo"]["max_new_tokens"], run["max_steps"])


def test_the_coordination_budgets_are_the_measured_ones():
    # agree, cover, stag_hunt and crowd: where the fastest method has just solved them (docs/tasks.md)
    assert {t: budget(t) for t in ("agree", "cover", "stag_hunt", "crowd", "signal")} == {
        "agree": (8, 8, 4, 40), "cover": (8, 8, 4, 40), "stag_hunt": (8, 8, 4, 40), "crowd": (8, 8, 4, 80),
        "signal": (8, 8, 2, 100)}
    # the area under the curve needs points on it: an evaluation every 10 updates
    assert {default_run(t)["eval"]["every"] for t in ("agree", "cover", "stag_hunt", "crowd")} == {10}


def sweeps(table: str, entry: str) -> list[list[str]]:
    """The `recipe=... method=...` choices of the table's sweeps through `entry` (eval or train)."""
    return choices(cells(table, entry))


# -- every row of every table composes and validates at both scales ---------------------------------


# Each row at both scales; the coordination suite's recipes are tiny already (magrpo-paper runs them
# as they are), so its rows compose once.
SCALED_ROWS = [(t, task, r, s) for t, task, r in PAPER_ROWS for s in (("paper", "tiny") if TABLES[t].scaled else ("paper",))]
# The harder coordination games compose with three rows here and with every row in the slow suite.
FAST_GAME_ROWS = {"untrained", "magrpo", "ippo"}


def scaled_row_params() -> list:
    """Every row of every table at both scales; in the fast suite, each table's every row on its first
    task at the tiny scale, its later tasks and the paper scale with FAST_GAME_ROWS (the paper scale on
    the first task only): a row's keys come from the scale group and its method file, the same on
    each task of the table; the recipe is the task's. The slow suite composes them all."""
    def slow(t: str, task: str, r: str, s: str) -> bool:
        later_task = task != TABLES[t].tasks[0]
        return ((task in HARDER_GAMES and r not in FAST_GAME_ROWS)
                or (s == "paper" and TABLES[t].scaled and (later_task or r not in FAST_GAME_ROWS))
                or (later_task and r not in FAST_GAME_ROWS))

    return [pytest.param(t, task, r, s, id=f"{t}-{task}-{r}-{s}", marks=[pytest.mark.slow] if slow(t, task, r, s) else [])
            for t, task, r, s in SCALED_ROWS]


@pytest.mark.parametrize("table,task,row,scale", scaled_row_params())
def test_every_paper_config_composes_at_both_scales(table, task, row, scale, tmp_path):
    entry = METHODS[row].entry
    algo = row_algo(row) if entry == "train" else None
    config_name = "eval" if entry == "eval" else "train"
    cfg = compose_cfg([f"recipe={task}", f"method={row}", f"scale={scale}", f"output_dir={tmp_path}"],
                      config_name=config_name)
    if scale == "paper" and TABLES[table].scaled and not torch.cuda.is_available():
        # The paper's recipes run on a GPU; here every other key is still checked.
        assert cfg.hardware.device == "cuda"
        cfg.hardware.device = "auto"
    cfg = validate(cfg, EvalRunSchema if entry == "eval" else TrainSchema)
    assert cfg.task.name == task and cfg.label == row
    if entry == "eval":
        assert list(cfg.methods) == (["team"] if row.startswith("untrained") else [row])
    else:
        assert cfg.algo.name == algo
        if algo == "ppo":     # the paper's PPO baseline carries a KL penalty to its reference
            assert cfg.algo.beta > 0
        if row.startswith("magrpo_2turn_"):
            assert cfg.algo.num_turns == 2 and cfg.feedback.mode == row.removeprefix("magrpo_2turn_")
        if row == "gspo":
            assert (cfg.algo.loss, cfg.algo.loss_agg) == ("gspo", "seq_mean_token_mean")
        if row == "dapo":
            assert cfg.algo.dynamic_sampling and cfg.algo.overlong_penalty == 1.0 and cfg.algo.overlong_buffer == 1
            assert cfg.algo.loss_agg == "token_mean" and cfg.algo.epsilon_high == 0.28 and cfg.algo.num_iterations == 1
    if table == "maporl":
        assert cfg.algo.num_turns == 2 and cfg.feedback.mode == "discussion"
    if table == "coordination":
        assert cfg.agents.models[0].name_or_path == "builtin:tiny"
        # matched budgets by construction: no row changes the recipe's sizes, nor the evaluation's sampling
        a = cfg.algo
        assert (a.batch_size, a.num_generations, a.max_new_tokens, cfg.max_steps) == budget(task)
        assert cfg.eval.temperature == 1.0 and cfg.eval.num_samples == 8
        run = default_run(task)
        assert a.num_turns == run["algo"].get("num_turns", 1)
        assert cfg.agents.num_agents == run.get("agents", {}).get("num_agents", 2)
        # signal's games are chains; c3 needs one, so its rows of the other games are chains too
        assert (a.topology == "sequential") is (run["algo"].get("topology") == "sequential" or row == "c3")
        signal_like = task in ("signal", "budget_signal")       # one team reward: no individual shares
        individual = row == "ippo_individual" or (row == "dr_mas" and not signal_like)
        assert getattr(a, "reward", "team") == ("individual" if individual else "team")
        # the same tuning budget: every trained row searches its learning rate and one key of its own
        space = tune_space(task, row)
        if entry == "eval":
            assert space == {}
        else:
            assert list(space)[0] == "optimizer.lr" and len(space) == 2, space
            assert select(cfg, list(space)[1], default="absent") != "absent", space
    elif entry == "train" and table != "maporl":
        assert tune_space(task, row) == {}     # tuning is the coordination table's (--tune-trials)
    elif scale == "paper":
        assert cfg.agents.models[0].name_or_path == PAPER_MODELS[task] and cfg.hardware.name == "gpu"
        assert cfg.max_steps >= 100 and cfg.algo.max_new_tokens == 256
    else:
        assert cfg.agents.models[0].name_or_path == "builtin:tiny" and cfg.hardware.device == "cpu"
        assert cfg.max_steps <= 10 and cfg.eval.num_items <= 8
    if task in ("tldr", "arxiv"):   # the hub set at the paper's scale, the built-in one offline
        assert cfg.task.data.builtin is (scale == "tiny")
    if table == "coding":
        assert cfg.optimized_metric == "pass@1" and cfg.eval.num_samples == 10
    if table == "writing":
        assert cfg.optimized_metric == "normalized_return"



def test_every_paper_row_is_a_recipe_and_a_method_and_nothing_else_is_there():
    from magrpo.cli.train import CONF_DIR

    conf = Path(CONF_DIR)
    listed = {cell for table in TABLES for entry in ("eval", "train") for cell in cells(table, entry)}
    # writing: 9 rows + 6 newer methods; coding: 13 + 6; maporl: 3; coordination: untrained + 13 trained
    # rows (MAPPO twice: its own-last critics and its team critic) on 8 games, on signal and budget_signal
    # neither individual-reward IPPO nor MAAC (a sequential team), on invest and crowd no C3 (its tree
    # does not fit)
    assert len(listed) == 2 * 15 + 3 * 19 + 3 + (8 * 14 - 2 * 2 - 2)
    # one method file per row of any table, one recipe per task; no row files per task any more
    assert {p.stem for p in (conf / "method").glob("*.yaml")} == {row for _, row in listed} == set(METHODS)
    assert {task for task, _ in listed} <= {p.stem for p in (conf / "recipe").glob("*.yaml")}
    assert not (conf / "experiment" / "paper").exists()
    # a trained row runs a registered algorithm (magrpo-paper runs every row of a table)
    assert all(row_algo(row) in ALGOS for _, row in listed if METHODS[row].entry == "train")


def test_the_rows_are_listed_once_for_the_driver_and_the_renderer():
    """magrpo-paper (what runs) and magrpo-table --layout paper (names, order, families) read one grid."""
    import magrpo.cli.paper as driver
    import magrpo.launch.paper_grid as grid
    import magrpo.table.paper as renderer

    assert driver.TABLES is grid.TABLES and renderer.FAMILY is grid.FAMILY
    assert renderer.ROW_ORDER == list(grid.METHODS)
    assert all(renderer.row_name(m.name) == m.title for m in grid.METHODS.values())
    assert renderer.row_name("my_label") == "my_label"        # a label the paper does not name is shown as is
    # every row of every table is a known method, every method a row of some table, every task in one table
    rows = [row for t in grid.TABLES.values() for row in t.rows]
    assert set(rows) == set(grid.METHODS) and all(len(set(t.rows)) == len(t.rows) for t in grid.TABLES.values())
    assert sorted(grid.FAMILY) == sorted(task for t in grid.TABLES.values() for task in t.tasks)
    for t in grid.TABLES.values():
        assert t.skip <= {(task, row) for task in t.tasks for row in t.rows}


def test_the_paper_rows_do_not_flood_help():
    """--help lists the recipes and the methods once each, not the deprecated per-task paths."""
    from magrpo.launch import help_groups

    for config_name in ("train", "eval"):
        groups = help_groups(config_name)
        assert "paper/" not in groups and "family" not in groups
        (methods,) = [line for line in groups.splitlines() if line.startswith("method: ")]
        assert methods.removeprefix("method: ").split(", ") == sorted(METHODS)
        assert any(line.startswith("recipe: ") and "tldr" in line for line in groups.splitlines())


def test_sweep_commands_name_one_group_and_one_dir_per_entry(tmp_path):
    (rows,) = sweeps("writing", "eval")
    cmd = sweep_command("eval", rows, "0,1", "tiny", "grp", tmp_path / "eval", "joblib", 2, ["logger=wandb"])
    assert cmd[1:6] == ["-m", "magrpo.cli.evaluate", "-m", "recipe=tldr,arxiv", "method=single,naive_concat,sequential,discussion"]
    assert {"seed=0,1", "scale=tiny", "logger.group=grp", f"hydra.sweep.dir={tmp_path / 'eval'}",
            "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "logger=wandb"} <= set(cmd)
    assert "hydra.launcher.n_jobs=2" not in sweep_command("train", ["recipe=tldr", "method=magrpo"], "0", "tiny", "g",
                                                         tmp_path, "basic", 2, [])


def test_a_table_whose_tasks_lack_some_rows_sweeps_them_in_blocks_of_exactly_its_cells():
    """Hydra sweeps recipe x method as a product: the signalling games, without two of the coordination
    rows, are a sweep of their own, invest and crowd (no C3) another, and the blocks together run each
    cell once."""
    from magrpo.cli.paper import sweep_rows

    blocks = sweeps("coordination", "train")
    assert [b[0] for b in blocks] == ["recipe=agree,cover,convention,stag_hunt", "recipe=signal,budget_signal",
                                      "recipe=invest,crowd"]
    ran = [cell for b in blocks for cell in sweep_rows(sweep_command("train", b, "0", "paper", "g", Path("x"), "basic",
                                                                      1, []))]
    assert sorted(ran) == sorted(cells("coordination", "train")) and len(ran) == len(set(ran))


# -- the paper layout on hand-made run directories -------------------------------------------------


def write_job(path: Path, *, task: str, label: str, seed: int, final: dict | None, job_type: str = "train",
              status: str = "finished", curve: dict[int, float] | None = None) -> Path:
    """A job directory as magrpo-train / magrpo-eval leave it (the files magrpo-table reads)."""
    path.mkdir(parents=True)
    algo = label.split("_")[0] if job_type == "train" else label
    config = {"label": label, "algo": algo, "task": task, "seed": seed, "job_type": job_type}
    summary = {"status": status, "job_type": job_type, "initial_eval": None, "final_eval": final, "steps": 4,
               "config": config}
    if job_type == "eval" and final is not None:
        summary["results"] = {label: final}
    (path / "summary.json").write_text(json.dumps(summary))
    rows = [{"step": s, "eval/normalized_return": v, "train/reward_mean": v} for s, v in (curve or {}).items()]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / ".hydra").mkdir()
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "label": label, "task": {"name": task}}))
    return path


def writing_final(norm: float, rouge: float | None = 0.2, time_s: float = 1.0) -> dict:
    out = {"reward_mean": 3 * norm, "normalized_return": norm, "reward/structure": 2 * norm, "reward/style": 0.1,
           "reward/coherence": 0.3, "response_time_s": time_s, "turn_1/reward_mean": 3 * norm}
    if rouge is not None:
        out["rouge_l"] = rouge
    return out


def md_table(path: Path, title: str) -> tuple[list[str], dict[str, list[str]]]:
    lines = path.read_text().splitlines()
    start = lines.index(title)
    header = [c.strip() for c in lines[start + 2].strip("|").split(" | ")]
    rows = {}
    for line in lines[start + 4:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells[1:]
    return header, rows


@pytest.fixture
def paper_runs(tmp_path) -> Path:
    root = tmp_path / "sweep"
    # tldr: a prompting row (eval jobs), MAGRPO and GRPO (train jobs), two seeds each.
    norm = {"single": [0.1, 0.3], "magrpo": [0.6, 0.8], "grpo": [0.5, 0.5]}
    times = {"single": [0.5, 0.7], "magrpo": [2.0, 2.0], "grpo": [0.2, 0.4]}
    n = 0
    for label, values in norm.items():
        entry = "eval" if label == "single" else "train"
        for seed, v in enumerate(values):
            rouge = None if (label == "grpo" and seed == 1) else 0.1 * (seed + 1)
            write_job(root / entry / f"{n}_tldr_{label}_s{seed}", task="tldr", label=label, seed=seed,
                      job_type=entry, final=writing_final(v, rouge, times[label][seed]),
                      curve=None if entry == "eval" else {0: v / 2, 4: v})
            n += 1
    # A failed job and one that died before its first evaluation (a config, no summary.json).
    write_job(root / "train" / f"{n}_tldr_magrpo_s2", task="tldr", label="magrpo", seed=2, final=None,
              status="failed")
    dead = root / "train" / f"{n + 1}_tldr_ippo_s0"
    (dead / ".hydra").mkdir(parents=True)
    (dead / ".hydra" / "config.yaml").write_text("seed: 0\n")
    # humaneval: one-turn and two-turn MAGRPO, the second with turn-1 and turn-2 returns.
    for seed in range(2):
        base = {"reward_mean": 2.0, "normalized_return": 0.5, "pass@1": 0.25 + 0.25 * seed, "codebleu": 0.3,
                "acc/level_1_main_defined": 1.0, "acc/level_2_parses": 0.9, "acc/level_3_test_passed": 0.5,
                "acc/level_4_cooperates": 0.1, "response_time_s": 1.0, "turn_1/normalized_return": 0.5,
                "turn_1/reward_mean": 2.0}
        write_job(root / "train" / f"he1_{seed}", task="humaneval", label="magrpo", seed=seed, final=base)
        two = {**base, "pass@1": 0.75, "turn_2/reward_mean": 3.0, "turn_2/normalized_return": 0.75,
               "turn_1/normalized_return": 0.4 + 0.1 * seed}
        write_job(root / "train" / f"he2_{seed}", task="humaneval", label="magrpo_2turn_plain", seed=seed, final=two)
    return root


def test_paper_layout_rows_columns_bold_cells_and_listed_runs(paper_runs, capsys):
    out = paper_runs / "table"
    assert table_main([str(paper_runs), "--layout", "paper", "--out", str(out)]) == 0
    md = out / "table.md"
    header, rows = md_table(md, "### tldr (writing)")
    assert header == ["method", "n", "norm. return", "structure (levels 1-3)", "style (Jaccard term)",
                      "coherence (transitions)", "ROUGE-L", "response time (s/item)"]
    # The paper's order: prompting, single-model, multi-agent; each row's mean ± sample std.
    assert list(rows) == ["Single model (prompting)", "GRPO (single model)", "MAGRPO"]
    assert rows["Single model (prompting)"][:2] == ["2", "0.200 ± 0.141"]          # [0.1, 0.3]
    assert rows["MAGRPO"][:3] == ["2", "**0.700 ± 0.141**", "**1.400 ± 0.283**"]   # best norm. return, structure
    assert rows["GRPO (single model)"][1] == "0.500 ± 0.000"
    # Response time: lower is better; GRPO's mean 0.3 is the best. Style ties in every row: no bold.
    assert rows["GRPO (single model)"][-1] == "**0.300 ± 0.141**"
    assert all("**" not in r[3] for r in rows.values())
    # A metric one run lacks: the cell counts it, and the note names the run.
    assert rows["GRPO (single model)"][5] == "0.100 ± n/a (n=1)"
    text = md.read_text()
    assert "`GRPO (single model)`: no `rouge_l` in 1 of 2 run(s): " in text and "5_tldr_grpo_s1`" in text
    # Runs left out are named, with the reason.
    assert "Not in the table (2 run(s))" in text
    assert "6_tldr_magrpo_s2`: status 'failed'" in text and "7_tldr_ippo_s0`: no summary.json" in text

    header, rows = md_table(md, "### humaneval (coding)")
    floor = codebleu([""], ["def f(x):\n    y = x * 2\n    return y\n"])["codebleu"]   # the package's, for empty code
    assert header[2:8] == ["norm. return", "pass@1", "pass@3", "pass@5", "pass@10", f"CodeBLEU (floor {floor:.3f})"]
    assert header[8:] == ["L1 acc (main defined)", "L2 acc (parses)", "L3 acc (a test passes)",
                          "L4 acc (main uses helper)", "turn 1 norm. return", "final turn norm. return",
                          "response time (s/item)"]
    assert list(rows) == ["MAGRPO", "MAGRPO, 2 turns, plain feedback"]
    turn1, final = header.index("turn 1 norm. return") - 1, header.index("final turn norm. return") - 1
    assert rows["MAGRPO"][turn1] == "**0.500 ± 0.000**" and rows["MAGRPO"][final] == "0.500 ± 0.000"
    assert rows["MAGRPO, 2 turns, plain feedback"][turn1] == "0.450 ± 0.071"
    assert rows["MAGRPO, 2 turns, plain feedback"][final] == "**0.750 ± 0.000**"
    assert rows["MAGRPO"][header.index("pass@3") - 1] == "–"
    assert "`pass@3` (pass@3): no run reports it" in text

    with open(out / "table.csv", newline="") as f:
        csv_rows = {(r["task"], r["label"]): r for r in csv.DictReader(f)}
    m = csv_rows[("tldr", "magrpo")]
    assert m["n"] == "2" and m["seeds"] == "0;1" and float(m["normalized_return_mean"]) == pytest.approx(0.7)
    assert float(m["normalized_return_std"]) == pytest.approx(math.sqrt(0.02))
    assert "normalized_return" in m["best_in"].split(";")
    tex = (out / "table.tex").read_text()
    assert "MAGRPO & 2 & \\textbf{0.700 $\\pm$ 0.141}" in tex and "\\toprule" in tex
    # Learning curves of the trained rows, with the prompting row as a level.
    assert (out / "tldr_eval_normalized_return.png").stat().st_size > 10_000


def test_eval_runs_write_the_run_directory_layout_and_split_into_rows(make_cfg, tmp_path, capsys):
    from magrpo.cli.evaluate import run_eval

    out = tmp_path / "sweep" / "0_eval"
    cfg = compose_cfg([f"output_dir={out}", "methods=[single,naive_concat]", "eval.num_items=2",
                       "algo.max_new_tokens=6", "label=null"], config_name="eval")
    report = run_eval(cfg)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["job_type"] == "eval" and summary["steps"] == 0
    assert summary["final_eval"] == report["results"]["single"] and summary["results"] == report["results"]
    assert summary["config"]["algo"] == "single,naive_concat" and summary["config"]["task"] == "length_ratio"
    assert (out / "eval.json").exists() and (out / "eval.md").exists()
    assert table_main([str(tmp_path / "sweep"), "--layout", "paper", "--no-plots"]) == 0
    _, rows = md_table(tmp_path / "sweep" / "table" / "table.md", "### length_ratio")
    assert list(rows) == ["Single model (prompting)", "Naive concatenation (prompting)"]
    norm = report["results"]["naive_concat"]["normalized_return"]
    assert rows["Naive concatenation (prompting)"][1].strip("*") == f"{norm:.3f} ± n/a"   # one seed: no spread
    header, _ = md_table(tmp_path / "sweep" / "table" / "table.md", "### length_ratio")
    # The component holds a length ratio, not a reward: labelled so, and never bold (no better direction).
    assert header[3] == "length ratio a2/a1 (a ratio, not a reward)"
    assert not any("**" in r[2] for r in rows.values())


def read_paper_csv(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(path, newline="") as f:
        return {(r["task"], r["label"]): r for r in csv.DictReader(f)}


def test_paper_tex_of_every_table_is_well_formed(paper_runs, capsys):
    # Besides tldr and humaneval (one- and two-turn rows): arxiv, so both writing tasks are there,
    # a maporl_qa table, and a row whose label is full of LaTeX specials.
    for seed in range(2):
        write_job(paper_runs / "train" / f"ax_{seed}", task="arxiv", label="magrpo", seed=seed,
                  final=writing_final(0.4 + 0.1 * seed))
        write_job(paper_runs / "train" / f"odd_{seed}", task="arxiv", label="my_row{1}%&#$", seed=seed,
                  final=writing_final(0.3, rouge=None))
        write_job(paper_runs / "train" / f"qa_{seed}", task="maporl_qa", label="magrpo", seed=seed,
                  final={"reward_mean": 0.5, "normalized_return": 0.5, "accuracy": 0.4, "response_time_s": 1.0})
    out = paper_runs / "table"
    assert table_main([str(paper_runs), "--layout", "paper", "--out", str(out), "--no-plots"]) == 0
    tex = (out / "table.tex").read_text()
    assert tex.count("\\begin{tabular}") == 4 and tex_problems(tex) == []
    assert "my\\_row\\{1\\}\\%\\&\\#\\$ & 2" in tex


def test_a_column_where_every_row_ties_has_no_bold_in_md_csv_and_tex(tmp_path, capsys):
    # One row alone: it ties with itself in every column.
    one = tmp_path / "one"
    for seed in range(2):
        write_job(one / f"m{seed}", task="tldr", label="magrpo", seed=seed, final=writing_final(0.5 + 0.1 * seed))
    assert table_main([str(one), "--layout", "paper", "--no-plots"]) == 0
    _, rows = md_table(one / "table" / "table.md", "### tldr (writing)")
    assert list(rows) == ["MAGRPO"] and not any("**" in c for c in rows["MAGRPO"])
    assert read_paper_csv(one / "table" / "table.csv")[("tldr", "magrpo")]["best_in"] == ""
    tex = (one / "table" / "table.tex").read_text()
    assert "\\textbf" not in tex and tex_problems(tex) == []

    # Two rows that tie everywhere but in response time: only that column has a best.
    tie = tmp_path / "tie"
    for label, time_s in (("magrpo", 1.0), ("grpo", 2.0)):
        for seed in range(2):
            write_job(tie / f"{label}{seed}", task="tldr", label=label, seed=seed,
                      final=writing_final(0.5 + 0.1 * seed, time_s=time_s))
    assert table_main([str(tie), "--layout", "paper", "--no-plots"]) == 0
    header, rows = md_table(tie / "table" / "table.md", "### tldr (writing)")
    time_col = header.index("response time (s/item)") - 1
    assert rows["MAGRPO"][time_col] == "**1.000 ± 0.000**"
    assert [c for r in rows.values() for i, c in enumerate(r) if "**" in c and i != time_col] == []
    csv_rows = read_paper_csv(tie / "table" / "table.csv")
    assert csv_rows[("tldr", "magrpo")]["best_in"] == "response_time_s" and csv_rows[("tldr", "grpo")]["best_in"] == ""
    tex = (tie / "table" / "table.tex").read_text()
    assert tex.count("\\textbf") == 1 and "\\textbf{1.000 $\\pm$ 0.000}" in tex and tex_problems(tex) == []


def coordination_job(root: Path, task: str, label: str, seed: int, norm: float, entry: str = "train",
                     tokens: float = 100.0, seqs: float = 16.0, flops: float = 1e9) -> Path:
    """A coordination job: its final eval, an eval at steps 0 and 2, and two logged training steps
    that each generated `tokens` tokens in 0.5 s and `seqs` sequences per item, and cost `flops` FLOPs."""
    final = {"reward_mean": norm, "normalized_return": norm, "reward/agreement": norm, "response_time_s": 0.1}
    path = write_job(root / entry / f"{task}_{label}_s{seed}", task=task, label=label, seed=seed, job_type=entry,
                     final=final, curve=None if entry == "eval" else {0: norm / 2, 2: norm})
    if entry == "train":
        with open(path / "metrics.jsonl", "a") as f:
            for step in (1, 2):
                f.write(json.dumps({"step": step, "train/completions/tokens": tokens, "time/step_s": 0.5,
                                    "train/sequences_per_item": seqs, "train/flops": flops}) + "\n")
    return path


def test_coordination_cells_are_95_percent_intervals_with_a_rank_row_cost_and_budget_curves(tmp_path, capsys):
    from magrpo.table import collect
    from magrpo.table.paper import budget_series, build

    root = tmp_path / "sweep"
    # Final norm. return per seed. Ranks by mean, ties sharing their places:
    #   agree:  ippo 0.9 (1), magrpo 0.7 and ippo_individual 0.7 (2.5 each), untrained 0.1 (4)
    #   cover:  magrpo 1.0 (1), ippo 0.5 (2), ippo_individual 0.4 (3), untrained 0.2 (4)
    #   signal: ippo 0.9 (1), magrpo 0.3 (2), untrained 0.0 (3); no ippo_individual there
    # Mean rank: ippo 4/3, magrpo 5.5/3, ippo_individual 5.5/2 (2 of 3 tasks), untrained 11/3.
    values = {"agree": {"magrpo": [0.6, 0.7, 0.8], "ippo": [0.9] * 3, "ippo_individual": [0.7] * 3},
              "cover": {"magrpo": [1.0] * 3, "ippo": [0.4, 0.5, 0.6], "ippo_individual": [0.4] * 3},
              "signal": {"magrpo": [0.3] * 3, "ippo": [0.9] * 3}}
    untrained = {"agree": 0.1, "cover": 0.2, "signal": 0.0}
    for task, rows in values.items():
        coordination_job(root, task, "untrained", 0, untrained[task], entry="eval")   # one seed: the mean alone
        for label, seeds in rows.items():
            for seed, v in enumerate(seeds):
                # magrpo's seeds spend 100, 200, 300 tokens per step; dapo-like cost: 24 sequences per item
                # magrpo's steps cost twice the FLOPs of the others'
                coordination_job(root, task, label, seed, v, tokens=100.0 * (seed + 1) if label == "magrpo" else 100.0,
                                 seqs=24.0 if label == "ippo" else 16.0, flops=2e9 if label == "magrpo" else 1e9)
    out = root / "table"
    assert table_main([str(root), "--layout", "paper", "--out", str(out)]) == 0
    md = out / "table.md"
    header, rows = md_table(md, "### agree (coordination)")
    assert header == ["method", "n", "norm. return", "AUC over tokens (0-1)", "k tokens to 90%",
                      "AUC over wall time (0-1)", "AUC over FLOPs (0-1)", "agreement (pairs)",
                      "cost (sequences/item/update)", "response time (s/item)"]
    # [0.6, 0.7, 0.8]: mean 0.7, s = 0.1, t_{0.975, 2} = 4.3027 -> 4.3027 * 0.1 / sqrt(3) = 0.248
    assert rows["MAGRPO"][:2] == ["3", "0.700 ± 0.248"]
    assert rows["Untrained team"][:2] == ["1", "0.100 ± n/a"] and rows["Untrained team"][2:6] == ["–"] * 4 \
        and rows["Untrained team"][7] == "–"
    assert rows["IPPO"][1] == "**0.900 ± 0.000**" and rows["IPPO"][7] == "24.000 ± 0.000"   # cost: never bold
    # AUC over B = 200 tokens (the fewest any run spent: 2 steps x 100). IPPO: (0, 0.45) -> (200, 0.9),
    # mean height 0.675. MAGRPO's seeds (0.6, 0.7, 0.8 over 200, 400, 600 tokens), cut at 200:
    # (0.3 + 0.6) / 2 = 0.45, (0.35 + 0.525) / 2 = 0.4375, (0.4 + 0.5333) / 2 = 0.4667 -> 0.4514
    assert rows["IPPO"][2] == "**0.675 ± 0.000**"
    assert rows["MAGRPO"][2].startswith("0.451 ± ")
    # 90% of the optimum: IPPO reaches 0.9 at its second eval, 200 tokens; MAGRPO never does
    assert rows["IPPO"][3] == "0.200 ± 0.000" and rows["MAGRPO"][3] == "–"
    # The compute-matched view. Wall time: every run's steps take 0.5 s, B = 1 s, every curve ends there:
    # MAGRPO (v/2 + v) / 2 = 0.75 v -> 0.525, IPPO 0.675. FLOPs: B = 2e9 (IPPO's two steps of 1e9); MAGRPO's
    # seeds spent 4e9 by their last eval, cut at 2e9 (0.75 v there): (0.5 v + 0.75 v) / 2 = 0.625 v -> 0.4375.
    assert rows["IPPO"][4:6] == ["**0.675 ± 0.000**"] * 2
    assert rows["MAGRPO"][4].startswith("0.525 ± ") and rows["MAGRPO"][5].startswith("0.438 ± ")
    assert "B (AUC over wall time): agree 1.0 s, cover 1.0 s, signal 1.0 s." in md.read_text()
    assert "B (AUC over FLOPs): agree 2e+09 FLOPs, cover 2e+09 FLOPs, signal 2e+09 FLOPs." in md.read_text()
    assert "AUC over tokens = the mean eval norm. return over the first B generated tokens" in md.read_text()
    assert "B: agree 200, cover 200, signal 200." in md.read_text()
    text = md.read_text()
    assert "95% confidence interval of the mean" in text and "mean ± sample standard deviation" not in text
    assert "no `sequences_per_item`" not in text     # an evaluation spends no training budget: no gap to report
    _, rows = md_table(md, "### cover (coordination)")
    # [0.4, 0.5, 0.6]: the same s = 0.1 -> the same half-width
    assert rows["IPPO"][1] == "0.500 ± 0.248"

    # The overview: every method on every task, then the mean rank (1 = best); bold = best per line.
    header, rows = md_table(md, "### coordination: norm. return on every task, and each method's mean rank")
    assert header == ["task", "Untrained team", "IPPO", "IPPO, individual reward", "MAGRPO"]
    assert rows["agree"] == ["0.100 ± n/a", "**0.900 ± 0.000**", "0.700 ± 0.000", "0.700 ± 0.248"]
    assert rows["signal"][2] == "–"
    assert rows["mean rank (1 = best)"] == ["3.67", "**1.33**", "2.75 (2/3)", "1.83"]
    # Does each task separate the methods? agree: IPPO 0.9 ± 0 is apart from IPPO-individual 0.7 ± 0 (MAGRPO's
    # 0.7 ± 0.248 reaches 0.9); on AUC every pair is apart (0.675, 0.525, 0.451 ± 0.017). Kendall's W over
    # seeds 0-2 of (ippo, individual, magrpo): places (1, 2, 3), (1, 2.5, 2.5), (1, 3, 2) -> R = (3, 7.5, 7.5),
    # S = 9 + 2.25 + 2.25 = 13.5, one tie of 2 (T = 6): W = 12 * 13.5 / (9 * 24 - 3 * 6) = 0.818
    header, rows = md_table(md, "### Does each task separate the methods?")
    assert rows["agree"] == ["3", "no", "no", "1", "3", "IPPO > IPPO, individual reward", "0.82 (3)", "yes"]
    assert rows["signal"] == ["2", "no", "no", "1", "1", "IPPO > MAGRPO", "1.00 (3)", "yes"]
    checks = {c["task"]: c for c in json.loads((out / "discrimination.json").read_text())}
    assert checks["agree"]["kendall_w"] == pytest.approx(162 / 198) and checks["agree"]["separates"] is True
    assert checks["agree"]["apart"]["auc_tokens"] == [["ippo", "ippo_individual"], ["ippo", "magrpo"],
                                                      ["ippo_individual", "magrpo"]]
    with open(out / "table.csv", newline="") as f:
        csv_rows = {(r["task"], r["label"]): r for r in csv.DictReader(f)}
    assert float(csv_rows[("agree", "magrpo")]["auc_tokens_mean"]) == pytest.approx((0.45 + 0.4375 + 0.7 / 1.5) / 3)
    m = csv_rows[("agree", "magrpo")]
    assert float(m["normalized_return_ci95"]) == pytest.approx(4.302652729749464 * 0.1 / math.sqrt(3))
    assert float(m["rank"]) == 2.5 and float(m["mean_rank"]) == pytest.approx(5.5 / 3)
    assert float(csv_rows[("agree", "ippo")]["sequences_per_item_mean"]) == 24.0
    tex = (out / "table.tex").read_text()
    assert tex.count("\\begin{tabular}") == 5 and tex_problems(tex) == []     # 3 games, the overview, the aggregates
    assert "mean rank (1 = best) & 3.67 & \\textbf{1.33} & 2.75 (2/3) & 1.83" in tex

    # Budget curves: norm. return against the seeds' mean cumulative tokens and update time.
    (agree,) = [t for t in build(collect([root], out, False)[0]) if t.task == "agree"]
    magrpo = next(r for r in agree.rows if r.label == "magrpo")
    xs, ys, used = budget_series(magrpo, "train/completions/tokens")
    assert used == 3 and xs == [0.0, 400.0] and ys == pytest.approx([0.35, 0.7])   # (200 + 400 + 600) / 3
    assert budget_series(magrpo, "time/step_s")[0] == [0.0, 1.0]
    for task in values:
        for budget in ("tokens", "wall_time", "flops"):
            assert (out / f"{task}_normalized_return_vs_{budget}.png").stat().st_size > 10_000

    # Aggregates over the games (rliable): the rows that ran all three. MAGRPO's nine scores, sorted:
    # 0.3 0.3 0.3 0.6 0.7 0.8 1 1 1; the IQM cuts int(9 / 4) = 2 at each end: (0.3 + 0.6 + 0.7 + 0.8 + 1) / 5
    # = 0.68; the mean 6 / 9; the optimality gap 1 - 6 / 9. P(MAGRPO > IPPO): 0 on agree (0.6-0.8 < 0.9),
    # 1 on cover (1 > 0.4-0.6), 0 on signal -> 1/3; over the untrained team: 1 on every game.
    header, rows = md_table(md, "### coordination: aggregates over 3 games (IQM, mean, optimality gap, "
                                "probability of improvement)")
    assert header == ["method", "runs", "IQM", "mean", "optimality gap (lower is better)", "P(MAGRPO > method)"]
    assert list(rows) == ["Untrained team", "IPPO", "MAGRPO"]
    assert rows["MAGRPO"][0] == "9" and rows["MAGRPO"][1].startswith("0.680 [") and rows["MAGRPO"][4] == "(base)"
    assert rows["MAGRPO"][2].startswith("0.667 [") and rows["MAGRPO"][3].startswith("0.333 [")
    assert rows["IPPO"][4].startswith("0.333 [") and rows["Untrained team"][4] == "1.000 [1.000, 1.000]"
    assert "Not aggregated (ran only some of the games): IPPO, individual reward (2/3)." in md.read_text()
    (agg,) = json.loads((out / "aggregates.json").read_text())
    iqm = agg["aggregates"]["magrpo"]["iqm"]
    assert iqm["point"] == pytest.approx(0.68) and iqm["low"] <= 0.68 <= iqm["high"]
    assert agg["probability_of_improvement"]["ippo"]["point"] == pytest.approx(1 / 3)
    assert agg["left_out"] == {"ippo_individual": 2} and agg["min_max_games"] == []
    assert (out / "coordination_performance_profile.png").stat().st_size > 10_000
    assert "aggregates over the games (rliable)" in tex


def test_paper_layout_derives_normalized_return_from_each_runs_own_reward(tmp_path, capsys):
    """Runs whose evaluation did not report normalized_return: the table inverts total = raw * scale +
    shift with the run's own reward config, over the task's maximum for the run's number of answers."""
    root = tmp_path / "sweep"

    def job(name, overrides, final, label="magrpo", summary_config=None, hydra=True):
        path = write_job(root / name, task=final.pop("task"), label=label, seed=0, final=final)
        if hydra:
            cfg = compose_cfg([*overrides, f"output_dir={path}"])
            OmegaConf.save(cfg, path / ".hydra" / "config.yaml")
        else:
            (path / ".hydra" / "config.yaml").unlink()
        if summary_config:
            summary = json.loads((path / "summary.json").read_text())
            summary["config"].update(summary_config)
            (path / "summary.json").write_text(json.dumps(summary))

    # The case: an optimal length_ratio answer under scale 0.5, shift 3 totals 1 * 0.5 + 3 = 3.5 (the
    # old formula, (3.5 / 0.5 - 3) / 1, read 4.0); turn 1 paid half: 0.5 * 0.5 + 3 = 3.25.
    job("lr", ["task=length_ratio", "reward.scale=0.5", "reward.shift=3"],
        {"task": "length_ratio", "reward_mean": 3.5, "turn_1/reward_mean": 3.25, "turn_2/reward_mean": 3.5})
    # humaneval, scale 2, shift -4: two agents, raw 3.0 of 4.0 -> total 2.0; grpo's one answer, raw 2.1
    # of 2.1 -> total 0.2 (summary.json says one policy answered).
    job("he", ["task=humaneval", "reward.scale=2", "reward.shift=-4"], {"task": "humaneval", "reward_mean": 2.0})
    job("he_grpo", ["task=humaneval", "algo=grpo", "reward.scale=2", "reward.shift=-4"],
        {"task": "humaneval", "reward_mean": 0.2}, label="grpo", summary_config={"num_agents": 1})
    # An older summary.json without num_agents: ppo's single-model form says one answer.
    job("he_ppo", ["task=humaneval", "algo=ppo", "reward.scale=2", "reward.shift=-4"],
        {"task": "humaneval", "reward_mean": 0.2}, label="ppo")
    # tldr with its reward's weights halved (maximum 1.5), scale 1, shift 0: 0.75 is half.
    weights = ["reward.structure_reward=0.25", "reward.length_reward=0.5", "reward.unique_reward=0.25",
               "reward.transition_weight=0.2", "reward.jaccard_weight=0.3"]
    job("tldr", ["task=tldr", *weights], {"task": "tldr", "reward_mean": 0.75})
    # No saved config: the task's default reward (maximum 3.0), said under the table.
    job("tldr_bare", [], {"task": "tldr", "reward_mean": 1.5}, label="grpo", hydra=False)
    # A saved reward this version cannot read: no value, and the note says why.
    job("tldr_old", [], {"task": "tldr", "reward_mean": 1.5}, label="ippo", hydra=False)
    (root / "tldr_old" / ".hydra" / "config.yaml").write_text("task: {name: tldr}\nreward: {retired_key: 1.0}\n")
    assert table_main([str(root), "--layout", "paper", "--no-plots"]) == 0
    rows = read_paper_csv(root / "table" / "table.csv")
    assert float(rows[("length_ratio", "magrpo")]["normalized_return_mean"]) == pytest.approx(1.0)
    assert float(rows[("length_ratio", "magrpo")]["turn_1/normalized_return_mean"]) == pytest.approx(0.5)
    assert float(rows[("length_ratio", "magrpo")]["final_turn/normalized_return_mean"]) == pytest.approx(1.0)
    assert float(rows[("humaneval", "magrpo")]["normalized_return_mean"]) == pytest.approx(0.75)
    assert float(rows[("humaneval", "grpo")]["normalized_return_mean"]) == pytest.approx(1.0)
    assert float(rows[("humaneval", "ppo")]["normalized_return_mean"]) == pytest.approx(1.0)
    assert float(rows[("tldr", "magrpo")]["normalized_return_mean"]) == pytest.approx(0.5)
    assert float(rows[("tldr", "grpo")]["normalized_return_mean"]) == pytest.approx(0.5)
    md = (root / "table" / "table.md").read_text()
    assert f"`{root / 'tldr_bare'}`: norm. return derived from reward_mean with the tldr task's default reward" in md
    assert rows[("tldr", "ippo")]["normalized_return_mean"] == ""
    (why,) = [line for line in md.splitlines() if line.startswith(f"- `{root / 'tldr_old'}`: no norm. return")]
    assert f"cannot rebuild its tldr reward from {root / 'tldr_old' / '.hydra' / 'config.yaml'}: " in why
    assert "retired_key" in why


# -- the value a sweeper optimises, the normalized return and the per-level accuracies -----------------


def test_sweep_value_is_the_named_metric_or_the_tasks_primary_one():
    from magrpo.cli.train import sweep_value

    final = {"reward_mean": 2.0, "normalized_return": 0.5, "pass@1": 0.25}
    assert sweep_value(compose_cfg(["task=humaneval"]), final) == 0.25
    assert sweep_value(compose_cfg(["task=tldr"]), final) == 0.5
    assert sweep_value(compose_cfg(["task=humaneval", "optimized_metric=reward_mean"]), final) == 2.0
    with pytest.raises(ConfigError, match="optimized_metric='pass@7' is not in the final evaluation"):
        sweep_value(compose_cfg(["optimized_metric=pass@7"]), final)


def test_normalized_return_divides_out_shift_and_scale_and_uses_each_forms_maximum():
    from magrpo.tasks import build_task

    def task(name, *over):
        cfg = validate(compose_cfg([f"task={name}", "output_dir=/tmp/x", *over]))
        return build_task(cfg.task, cfg.reward)

    assert task("tldr").normalized_return(1.5, 2) == pytest.approx(0.5)
    assert task("arxiv").normalized_return(3.0, 1) == pytest.approx(1.0)
    he = task("humaneval")
    assert he.normalized_return(2.0, 2) == pytest.approx(0.5) and he.normalized_return(2.1, 1) == pytest.approx(1.0)
    # total = raw * scale + shift: raw 3.0 of 4.0 -> 3 * 2 - 4 = 2
    assert task("humaneval", "reward.shift=-4", "reward.scale=2").normalized_return(2.0, 2) == pytest.approx(0.75)
    # the case: an optimal length_ratio answer under scale 0.5, shift 3 totals 3.5 and is 1.0
    assert task("length_ratio", "reward.scale=0.5", "reward.shift=3").normalized_return(3.5, 2) == pytest.approx(1.0)
    assert task("length_ratio").normalized_return(0.25, 2) == pytest.approx(0.25)


def test_level_accuracies_count_the_samples_that_reached_each_level():
    from magrpo.tasks import Scores
    from magrpo.tasks.coding import level_accuracies

    # four samples: nothing; main only; parses, no test; a test passes and main calls the helper
    scores = Scores([0.0, 0.6, 1.1, 3.6],
                    {"structure": [0.4, 0.6, 1.0, 1.0], "syntax": [0, 0, 0.5, 0.5], "tests": [0, 0, 0, 0.6],
                     "cooperation": [0, 0, 0, 1.5]},
                    {"main_defined": [False, True, True, True]})
    assert level_accuracies(scores) == {"acc/level_1_main_defined": 0.75, "acc/level_2_parses": 0.5,
                                        "acc/level_3_test_passed": 0.25, "acc/level_4_cooperates": 0.25}


# -- magrpo-paper --dry-run prints commands a shell runs as they are ---------------------------------


def _unquoted_dollars(line: str) -> list[int]:
    """Positions of `$` that a POSIX shell would expand: outside single quotes (double quotes
    expand `$`; a backslash escapes one character outside quotes)."""
    out, single, double, i = [], False, False, 0
    while i < len(line):
        c = line[i]
        if c == "\\" and not single:
            i += 2
            continue
        if c == "'" and not double:
            single = not single
        elif c == '"' and not single:
            double = not double
        elif c == "$" and not single:
            out.append(i)
        i += 1
    return out


def _bash_words(line: str) -> list[str]:
    """The argv bash would run for `line`, without running it."""
    import subprocess

    proc = subprocess.run(["bash", "-c", f'set -- {line}\nprintf "%s\\0" "$@"'], capture_output=True, check=True)
    return proc.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_dry_run_prints_commands_a_shell_runs_as_they_are(table, tmp_path, capsys):
    import shlex
    import sys

    from magrpo.cli.paper import main as paper_main
    from magrpo.cli.paper import table_command

    root = tmp_path / "sweep dir"   # a space, which must be quoted too
    overrides = ["label=${task.name}_x", "hydra.job.name=a b", "logger.tags=[it's]"]
    # overrides after the options, as `make paper ... $(ARGS)` passes them
    assert paper_main([table, "--scale", "tiny", "--seeds", "0,1", "--out", str(root), "--dry-run", *overrides]) == 0
    out, err = capsys.readouterr()
    assert not root.exists()            # a dry run makes nothing
    # a table with one scale says so, where --scale tiny used to be dropped without a word
    assert err == ("" if TABLES[table].scaled else f"magrpo-paper: the {table} table has one scale: its recipes "
                   "are written for the tiny agents, so --scale tiny runs them as they are\n")
    commands = [line for line in out.splitlines() if not line.startswith("#")]
    scale = "tiny" if TABLES[table].scaled else "paper"     # the coordination recipes run as they are
    argv = [table, "--scale", "tiny", "--seeds", "0,1", "--out", str(root), *overrides]
    expected = [sweep_command("eval", rows, "0,1", scale, root.name, root / "eval", "joblib", 2, overrides)
                for rows in sweeps(table, "eval")] + trained_steps(argv, root, "0,1", scale, overrides) \
        + [table_command(root)]
    assert len(commands) == len(expected) == 4       # eval, the cell configs, the train sweep, the table
    for line, argv in zip(commands, expected):
        assert argv[0] == sys.executable and argv[1] == "-m"
        assert shlex.split(line) == argv
        assert _unquoted_dollars(line) == [], line
        assert _bash_words(line) == argv
    # the whole output is a script: the comments are comments to a shell too
    assert shlex.split(out, comments=True) == [w for argv in expected for w in argv]
    assert "${hydra.job.num}" in commands[0] and "${task.name}_x" in commands[-2]
    assert out.startswith("# magrpo-paper: estimated wall time of the train sweep: ")
    assert f"for {len(cells(table, 'train')) * 2} job(s), 2 at a time, longest first" in out.splitlines()[0]


def trained_steps(argv: list[str], root: Path, seeds: str, scale: str, overrides: list[str]) -> list[list[str]]:
    """The two commands a table's trained rows take: the cell configs, then one sweep of them, the
    longest first by the costs magrpo-paper reads or estimates."""
    from magrpo.cli.paper import build_parser, cells_command, cells_conf_dir, costs_of, hydra_quoted
    from magrpo.launch.costs import longest_first

    args = build_parser().parse_intermixed_args(argv)
    order = longest_first(costs_of(args, root, cells(args.table, "train")))
    search = f"hydra.searchpath=[{hydra_quoted('file://' + str(cells_conf_dir(root).resolve()))}]"
    return [cells_command(args, root),
            sweep_command("train", [f"experiment={','.join(f'cell/{t}/{r}' for t, r in order)}"], seeds, scale,
                          root.name, root / "train", "joblib", 2, overrides, [search])]


def test_a_sweep_directory_in_new_folders_is_made_and_each_printed_command_is_what_runs(tmp_path, capsys,
                                                                                        monkeypatch):
    import shlex

    import magrpo.cli.paper as paper
    import magrpo.table as table

    ran = []
    class Done:                                   # a sweep's process that finished at once
        returncode = 0

        def __init__(self, cmd, **kwargs):
            ran.append(cmd)

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(paper.subprocess, "Popen", Done)
    monkeypatch.setattr(table, "main", lambda argv: ran.append(argv) or 0)
    root = tmp_path / "new" / "nested" / "sweep"
    assert paper.main(["maporl", "--scale", "tiny", "--out", str(root), "--only", "train"]) == 0
    assert root.is_dir()   # made before any job runs
    printed = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    # the cell configs are written in this process, before the sweep that reads them
    assert printed[0][2:] == ["magrpo.cli.paper", "maporl", "--out", str(root), "--write-cells"]
    assert sorted(p.relative_to(root).as_posix() for p in root.glob("cells/conf/experiment/cell/*/*.yaml")) == \
        [f"cells/conf/experiment/cell/{t}/{r}.yaml" for t, r in sorted(cells("maporl", "train"))]
    assert printed[1] == ran[0] and printed[2][3:] == ran[1]
    assert ran[0][2] == "magrpo.cli.train" and ran[1] == [str(root), "--layout", "paper", "--out", str(root / "table"), "--force"]
    # a sweep directory that cannot be made stops it before any job, in one line
    (tmp_path / "file").write_text("")
    ran.clear()
    assert paper.main(["maporl", "--out", str(tmp_path / "file" / "sweep")]) == 2
    err = capsys.readouterr().err
    assert ran == [] and err.count("\n") == 1 and "cannot create the sweep directory" in err


# -- the tuning budget: --tune-trials K -------------------------------------------------------------


def test_dry_run_prints_the_tuning_plan_before_the_seeds(tmp_path, capsys):
    import shlex

    from magrpo.cli.paper import main as paper_main

    root = tmp_path / "sweep dir"
    assert paper_main(["coordination", "--tune-trials", "4", "--seeds", "0,1", "--out", str(root), "--dry-run",
                       "max_steps=3"]) == 0
    out = capsys.readouterr().out
    assert not root.exists()
    commands = [shlex.split(line) for line in out.splitlines() if not line.startswith("#")]
    trained = cells("coordination", "train")
    assert {row for _, row in trained} >= {"magrpo", "gspo", "dapo", "at_grpo", "dr_mas", "ippo", "mappo"}
    # 1. one Optuna sweep per trained (task, row): K trials on seed 0 over the row's own space
    tunes = commands[:len(trained)]
    for (task, row), cmd in zip(trained, tunes):
        assert cmd[1:6] == ["-m", "magrpo.cli.train", "-m", f"recipe={task}", f"method={row}"]
        assert {"seed=0", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.seed=0",
                "hydra.sweeper.direction=maximize", "optimized_metric=normalized_return", "++max_steps=3",
                f"hydra.sweep.dir={root / 'tuning' / f'{task}_{row}'}", f"hydra.sweeper.study_name={task}_{row}"} <= set(cmd)
        assert cmd[-2:] == [f"{k}={v}" for k, v in tune_space(task, row).items()]
    # (one Optuna sweep per row, then the rows at their own values: one sweep per block of choices())
    assert out.count("# magrpo-paper: tune: ") == len(trained) + len(sweeps("coordination", "train"))
    assert "4 Optuna trial(s) on seed 0" in out
    # 2. every row at its own values on seed 0 (a candidate of its tuning; signal's rows a block of
    # their own), 3. the record, 4. the untrained rows, 5. the seeds at the tuned values, 6. the table
    # with tuning.md
    *own, record, evals, seeds, table = commands[len(trained):]
    assert [cmd[4:6] for cmd in own] == sweeps("coordination", "train")
    assert all("seed=0" in cmd and f"hydra.sweep.dir={root / 'tuning' / 'defaults'}" in cmd for cmd in own)
    assert record[1:4] == ["-m", "magrpo.cli.paper", "coordination"] and record[-1] == "--record-tuning"
    assert evals[4:6] == ["recipe=agree,cover,signal,convention,stag_hunt,budget_signal,invest,crowd",
                          "method=untrained"]
    listed = next(c for c in seeds if c.startswith("experiment=")).split("=", 1)[1].split(",")
    assert sorted(listed) == sorted(f"tuned/{task}/{row}" for task, row in trained)     # longest first
    assert f"hydra.searchpath=['file://{(root / 'tuning' / 'conf').resolve()}']" in seeds and "seed=1" in seeds      # seed 0 is the tuning's best run, reused
    assert table[-2:] == ["--tuning", str(root / "tuning")]
    # without --tune-trials (the default 0), nothing is tuned
    assert paper_main(["coordination", "--out", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "optuna" not in out and "--record-tuning" not in out and "tuned/" not in out and "cell/" in out


@pytest.mark.parametrize("argv,message", [
    (["--tune-trials", "-1"], "argument --tune-trials: -1: give 0 (no tuning, the default) or more trials"),
    (["--tune-trials", "two"], "argument --tune-trials: 'two' is not a whole number; give 0"),
    (["--jobs", "0"], "argument --jobs: 0: give 1 or more parallel jobs"),
    (["--seeds", ","], "argument --seeds: ',': give one or more seeds, comma-separated"),
    (["--seeds", "0,x"], "argument --seeds: '0,x': 'x' is not a whole number >= 0"),
    (["--seeds=-1,²"], "'-1', '²' are not whole numbers >= 0"),
    (["--seeds", "0,1,0"], "argument --seeds: '0,1,0': seed 0 is given twice"),
    (["--tasks", "agree,chess"], "--tasks chess: not in the coordination table; it has: agree, cover, signal"),
    (["--rows", "magrpo,ppo"], "--rows ppo: not in the coordination table; it has: untrained, magrpo, ippo,"),
    (["--tune-trials", "2", "optimizer.lr=1e-3"], "optimizer.lr=1e-3: optimizer.lr is what --tune-trials 2 tunes"),
    (["--record-tuning"], "--record-tuning records the tuning sweeps of a table run: give its --out and its"),
    (["--crossplay", "--crossplay-partners", "ippo,ppo"], "--crossplay-partners ppo: not in the coordination table"),
    (["--crossplay-partners", "ippo"], "--crossplay-partners names the held-out partners of --crossplay: give"),
    (["--record-crossplay"], "--record-crossplay pairs the seeds of a table run: give its --out"),
    (["--record-crossplay", "--record-tuning", "--tune-trials", "1", "--out", "x"],
     "--record-crossplay, --record-tuning and --write-cells are steps of a table run: give one at a time"),
    (["--write-cells"], "--write-cells writes the cell configs of a table run: give its --out"),
])
def test_bad_paper_options_exit_2_naming_the_value_and_what_is_allowed(argv, message, capsys):
    from magrpo.cli.paper import main as paper_main

    with pytest.raises(SystemExit) as e:
        paper_main(["coordination", *argv, "--dry-run"])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_crossplay_is_a_step_between_the_trained_rows_and_the_table(tmp_path, capsys):
    from magrpo.cli.paper import main as paper_main

    argv = ["coordination", "--tasks", "agree", "--rows", "magrpo,ippo", "--out", str(tmp_path), "--dry-run"]
    assert paper_main([*argv, "--crossplay", "--crossplay-partners", "ippo"]) == 0
    steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# magrpo-paper:")]
    assert [s.split(":")[1].strip() for s in steps] == ["estimated wall time of the train sweep", "cells", "train",
                                                         "crossplay", "table"]
    assert "held-out partners: the runs of ippo" in steps[3]
    assert paper_main([*argv, "--crossplay", "--only", "eval"]) == 0     # no trained row: nothing to pair
    assert "--record-crossplay" not in capsys.readouterr().out


def test_seeds_with_spaces_are_given_to_the_sweep_as_hydra_reads_them(tmp_path, capsys):
    from magrpo.cli.paper import main as paper_main

    assert paper_main(["coordination", "--tasks", "agree", "--seeds", " 3, 4 ", "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "seed=3,4 " in out and "x seeds 3,4:" in out


def test_a_table_whose_rows_have_no_search_space_is_not_tuned(capsys):
    from magrpo.cli.paper import main as paper_main

    with pytest.raises(SystemExit) as e:
        paper_main(["writing", "--tune-trials", "2", "--dry-run"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "recipe=tldr method=magrpo" in err and "tables whose rows all have one: coordination" in err


def test_a_tuning_that_did_not_finish_is_recorded_and_its_row_runs_at_its_own_values(tmp_path, capsys):
    """A failed trial stops hydra-optuna-sweeper before optimization_results.yaml: the record says so,
    keeps the trials that finished, and the tuned config adds nothing to the row."""
    from magrpo.cli.paper import main as paper_main

    root = tmp_path / "sweep"
    trial = write_job(root / "tuning" / "agree_magrpo" / "0", task="agree", label="magrpo", seed=0,
                      final={"normalized_return": 0.5})
    (trial / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
        ["optimizer.lr=0.002", "algo.temperature=1.1", "recipe=agree", "method=magrpo", "seed=0"]))
    argv = ["coordination", "--out", str(root), "--tune-trials", "3", "--tasks", "agree", "--rows", "magrpo"]
    assert paper_main([*argv, "--record-tuning"]) == 1
    assert "the tuning sweep did not finish" in capsys.readouterr().err
    record = json.loads((root / "tuning" / "agree_magrpo.json").read_text())
    assert record["best"] is None and "optimization_results.yaml" in record["error"]
    assert record["trials"] == [{"number": 0, "params": {"optimizer.lr": 0.002, "algo.temperature": 1.1},
                                 "value": 0.5, "status": "finished", "dir": "0"}]
    tuned = yaml.safe_load((root / "tuning" / "conf" / "experiment" / "tuned" / "agree" / "magrpo.yaml").read_text())
    assert tuned == {"defaults": [{"override /recipe": "agree"}, {"override /method": "magrpo"}, "_self_"]}
    # with the sweeper's result there, its best values are the row's
    (root / "tuning" / "agree_magrpo" / "optimization_results.yaml").write_text(
        "name: optuna\nbest_params:\n  optimizer.lr: 0.002\n  algo.temperature: 1.1\nbest_value: 0.5\n")
    assert paper_main([*argv, "--record-tuning"]) == 0
    tuned = yaml.safe_load((root / "tuning" / "conf" / "experiment" / "tuned" / "agree" / "magrpo.yaml").read_text())
    assert tuned["optimizer"] == {"lr": 0.002} and tuned["algo"] == {"temperature": 1.1}


@pytest.mark.slow
def test_tuning_runs_trials_records_the_best_and_runs_the_seeds_at_it(tmp_path, capsys):
    """One task, one row, two trials, end to end (tiny: 2 steps, 2 eval items). The row is IPPO, whose search
    space differs from the group-relative rows' (algo.ent_coef beside optimizer.lr)."""
    from magrpo.cli.paper import main as paper_main

    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")     # the `optuna` extra (in `dev`)

    root = tmp_path / "sweep"
    rc = paper_main(["coordination", "--tasks", "agree", "--rows", "ippo", "--tune-trials", "2",
                     "--seeds", "0,1", "--launcher", "basic", "--out", str(root),
                     "max_steps=2", "eval.num_items=2", "eval.num_samples=2", "eval.log_completions=0"])
    assert rc == 0, capsys.readouterr().err
    for row, key in (("ippo", "algo.ent_coef"),):
        record = json.loads((root / "tuning" / f"agree_{row}.json").read_text())
        assert record["space"] == tune_space("agree", row) and record["n_trials"] == 2 and record["error"] is None
        assert [t["number"] for t in record["trials"]] == [0, 1]
        assert all(set(t["params"]) == {"optimizer.lr", key} and t["status"] == "finished" for t in record["trials"])
        # the best candidate: the sweeper's best trial, or the row's own values when they did as well
        best, own = record["best"], record["own_values_value"]
        assert own is not None
        assert best["value"] == max(own, *(t["value"] for t in record["trials"]))
        (run,) = (root / "train-seed0").glob(f"*_agree_{row}_s0")
        cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        assert cfg["label"] == row and cfg["max_steps"] == 2
        if best.get("own_values"):
            assert best["params"] == {} and best["value"] == own
            assert cfg["optimizer"]["lr"] == 3e-3             # the seed ran at the recipe's values
        else:
            assert best["params"] in [t["params"] for t in record["trials"] if t["value"] == best["value"]]
            assert 1e-4 <= best["params"]["optimizer.lr"] <= 3e-2
            # the seed ran with the best values
            assert cfg["optimizer"]["lr"] == best["params"]["optimizer.lr"]
            assert cfg["algo"][key.split(".")[1]] == best["params"][key]
        assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    # the table: the seeds' rows only (not the trials), and tuning.md with what each row searched and chose
    _, rows = md_table(root / "table" / "table.md", "### agree (coordination)")
    assert list(rows) == ["IPPO"] and all(r[0] == "2" for r in rows.values())
    # seed 0 is the best candidate's own run, copied (not run again); a second call with the same
    # --out finds every tuning done and runs none of it again
    assert sorted(p.name for p in (root / "train-seed0").iterdir()) == ["tuning-best_agree_ippo_s0"]
    assert sorted(p.name.split("_", 1)[1] for p in (root / "train").iterdir() if p.is_dir()) == ["agree_ippo_s1"]
    capsys.readouterr()
    assert paper_main(["coordination", "--tasks", "agree", "--rows", "ippo", "--tune-trials", "2",
                       "--seeds", "0,1", "--launcher", "basic", "--out", str(root),
                       "max_steps=2", "eval.num_items=2", "eval.num_samples=2", "eval.log_completions=0"]) == 0
    # the Optuna sweep, the own-values run and the seeds' sweep
    assert capsys.readouterr().out.count("already done") == 3
    tuning_md = (root / "table" / "tuning.md").read_text()
    assert "| agree | IPPO | 2/2 | `optimizer.lr`: tag(log, interval(1e-4, 3e-2)); `algo.ent_coef`" in tuning_md
    assert "Tuned: each trained row" in (root / "table" / "table.md").read_text()


def test_a_dry_run_piped_into_head_stops_quietly(tmp_path):
    """`magrpo-paper ... --dry-run | head`: the reader closes the pipe early; no traceback, exit 0.
    The reader takes one line and closes before the writer is done (the plan is ~80 KB, more than
    a pipe's 64 KB buffer), so the writer meets the closed pipe."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "magrpo.cli.paper", "coordination", "--tune-trials", "2", "--dry-run",
                             "--out", str(tmp_path / "sweep")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert first.startswith(b"# magrpo-paper: estimated wall time") and "Traceback" not in err and err == ""
