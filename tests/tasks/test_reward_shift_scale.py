"""Every task's reward composes shift and scale as the reference does: raw * scale + shift
(not (raw + shift) * scale, which agrees only when scale is 1)."""

from __future__ import annotations

import pytest

from magrpo.tasks import build_task
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg

SHIFT, SCALE = -1.5, 2.0


def _answers(task_name: str, items: list[dict]) -> list[list[str]]:
    """Two-agent answers that earn different, non-zero raw rewards."""
    if task_name == "length_ratio":
        return [["a short one", "a second part that is a good deal longer than the first"], ["x" * 10, "y" * 25]]
    if task_name == "tldr":
        return [["too short", "also short"], ["word " * 12, "other words here " * 10 + "however, for example"]]
    if task_name == "arxiv":   # 128..256 tokens each passes level 1
        return [["too short", "also short"],
                [" ".join(f"w{i}" for i in range(150)), " ".join(f"v{i} then" for i in range(100))]]
    if task_name == "maporl_qa":
        return [[f"Answer: {it['answer']}", "Answer: 0"] for it in items]
    # coding: a helper and a main that uses it; a program whose main does not parse
    it = items[0]
    main = it["canonical_solution"]
    return [["def aux(x):\n    return x\n", main], ["def aux(x):\n    return x\n", f"def {it['entry_point']}(:\n"]]


@pytest.mark.parametrize("task_name", ["length_ratio", "tldr", "arxiv", "humaneval", "maporl_qa"])
def test_total_is_raw_times_scale_plus_shift(task_name):
    def scores(overrides):
        cfg = validate(compose_cfg(["output_dir=/tmp/unused", f"task={task_name}", *overrides]))
        task = build_task(cfg.task, cfg.reward)
        items = task.load("eval")[:2]
        answers = _answers(task_name, items)
        items = (items * 2)[:len(answers)]
        prompts = [task.prompts(it, 2) for it in items]
        return task, task.score(items, prompts, answers)

    _, raw = scores([])
    task, moved = scores([f"reward.shift={SHIFT}", f"reward.scale={SCALE}"])
    assert len(set(raw)) > 1 or task_name == "maporl_qa"   # the answers are scored differently
    assert list(moved) == pytest.approx([r * SCALE + SHIFT for r in raw])
    if task.splits_reward:   # per-agent shares still add up to the team's reward
        shares = task.individual_rewards(moved, 2)
        assert [sum(s) for s in shares] == pytest.approx(list(moved))
