"""One evaluation path for one turn and many, one normalization for every reward composition, and
the metric a sweeper reads checked before any work."""

from __future__ import annotations

import json

import pytest

from magrpo.cli.train import run
from magrpo.core.schema import ConfigError
from magrpo.tasks import build_task, raw_reward
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg

COMPOSITIONS = [(1.0, 0.0), (0.5, 3.0), (2.0, -4.0), (1 / 2.1, -1.0)]     # (scale, shift); scale > 0


def task_at(name: str, scale: float, shift: float):
    cfg = validate(compose_cfg([f"task={name}", "output_dir=/tmp/unused", f"reward.scale={scale}",
                                f"reward.shift={shift}"]))
    return build_task(cfg.task, cfg.reward, cfg.sandbox)


def answers_for(task) -> tuple[list[dict], list[list[str]], list[list[str]]]:
    item = task.load("eval")[0]
    text = [("Cats sleep a lot. However, they also hunt at night, and therefore they need rest. " * 3).strip(),
            ("Cats sleep for most of the day because hunting takes energy. Moreover, their ancestors hunted at "
             "dawn and dusk; consequently, modern cats keep that rhythm. In addition, warmth matters. " * 4).strip()]
    if task.uses_sandbox:
        entry = item.get("entry_point", "f")
        text = ["def aux(x):\n    return x\n", f"def {entry}(*args):\n    return aux(args[0]) if args else None\n"]
    return [item], [task.prompts(item, 2)], [text]


@pytest.mark.parametrize("name", ["length_ratio", "tldr", "arxiv", "humaneval", "maporl_qa"])
def test_every_reward_composes_and_inverts_as_raw_times_scale_plus_shift(name):
    base = task_at(name, 1.0, 0.0)
    items, prompts, completions = answers_for(base)
    raw = base.score(items, prompts, completions)[0]
    top = base.reward_max(2)
    for scale, shift in COMPOSITIONS[1:]:
        task = task_at(name, scale, shift)
        total = task.score(items, prompts, completions)[0]
        assert total == pytest.approx(raw * scale + shift)
        assert raw_reward(total, shift, scale) == pytest.approx(raw)
        if top:
            assert task.normalized_return(total, 2) == pytest.approx(raw / top)


def test_raw_reward_refuses_scale_zero():
    with pytest.raises(ValueError, match="scale=0"):
        raw_reward(1.0, 0.0, 0.0)


@pytest.fixture(scope="module")
def tiny_agents():
    from magrpo.models.agents import load_agents

    cfg = validate(compose_cfg(["output_dir=/tmp/unused"]))
    return load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)


def evaluate_at(agents, turns: int, scale: float = 1.0, shift: float = 0.0):
    from magrpo.evaluation.loop import eval_sampling, evaluate
    from magrpo.rollout.feedback import build_feedback
    from magrpo.rollout.turns import TurnSpec

    over = ["output_dir=/tmp/unused", f"reward.scale={scale}", f"reward.shift={shift}", f"algo.num_turns={turns}",
            "eval.num_items=4", "eval.num_samples=2", "algo.max_new_tokens=12"]
    if turns > 1:
        over.append("feedback=plain")
    cfg = validate(compose_cfg(over))
    task = build_task(cfg.task, cfg.reward)
    items = task.load("eval")[:4]
    metrics, _ = evaluate(agents, task, items, eval_sampling(cfg), 4, seed=11, turns=TurnSpec.from_algo(cfg.algo),
                          feedback=build_feedback(cfg.feedback, task))
    return metrics, task, items, cfg


@pytest.mark.parametrize("turns", [1, 2])
def test_normalized_return_is_the_same_under_any_scale_and_shift(tiny_agents, turns):
    reference, *_ = evaluate_at(tiny_agents, turns)
    for scale, shift in COMPOSITIONS[1:]:
        metrics, *_ = evaluate_at(tiny_agents, turns, scale, shift)
        assert metrics["reward_mean"] == pytest.approx(reference["reward_mean"] * scale + shift)
        for t in range(1, turns + 1):
            key = f"turn_{t}/normalized_return"
            assert metrics[key] == pytest.approx(reference[key])
        assert metrics["normalized_return"] == pytest.approx(reference["normalized_return"])


def test_one_turn_and_multi_turn_report_the_same_metrics_and_the_prediction_matches(tiny_agents):
    from magrpo.evaluation.loop import metric_names

    one, task, items, cfg = evaluate_at(tiny_agents, 1)
    two, *_ = evaluate_at(tiny_agents, 2)
    answer_names = {k for k in one if not k.startswith("turn_")} - {"output_tokens_mean", "response_time_s",
                                                                       "reward_time_s", "num_items"}
    assert {"reward_mean", "reward_std", "normalized_return"} <= answer_names
    for name in answer_names:
        assert name in two
        if name != "reward_std":
            assert f"turn_1/{name}" in one and f"turn_1/{name}" in two and f"turn_2/{name}" in two
    assert set(one) - set(two) == set()
    assert sorted(one) == metric_names(task, items[0], 2, 2, 1)
    assert sorted(two) == metric_names(task, items[0], 2, 2, 2)


@pytest.mark.parametrize("turns", [1, 2])
def test_a_metric_the_run_cannot_report_is_refused_before_any_work(tmp_path, turns):
    out = tmp_path / "run"
    over = [f"output_dir={out}", "debug=smoke", f"algo.num_turns={turns}", "optimized_metric=normalised_return"]
    with pytest.raises(ConfigError, match=r"optimized_metric='normalised_return' is not a metric .*"
                                          r"did you mean 'normalized_return'\?"):
        run(compose_cfg(over))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["phase"] == "setup"
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()


def test_a_multi_turn_run_optimizes_normalized_return(tmp_path):
    out = tmp_path / "run"
    result = run(compose_cfg([f"output_dir={out}", "debug=smoke", "algo.num_turns=2", "eval.num_items=2",
                              "optimized_metric=normalized_return"]))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert result["sweep_value"] == summary["final_eval"]["normalized_return"]
    assert "turn_2/normalized_return" in summary["final_eval"]


def test_offline_hub_fails_in_one_line_naming_the_fix(tmp_path, monkeypatch):
    from magrpo.core.schema import SetupError
    from magrpo.models import hub

    monkeypatch.setattr(hub, "_state", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SetupError) as e:
        run(compose_cfg([f"output_dir={tmp_path / 'run'}", "debug=smoke",
                         "agents.models.0.name_or_path=magrpo-tests/no-such-model"]))
    msg = str(e.value)
    assert "\n" not in msg and "not in the local cache" in msg and "HF_HUB_OFFLINE is set" in msg
    assert "hf download magrpo-tests/no-such-model" in msg and "agents.models.0.name_or_path=DIR" in msg


def test_the_hub_probe_names_why_it_failed():
    import socket

    from magrpo.models import hub

    with socket.socket() as s:          # a port nobody listens on: bound, never accepting
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        why = hub._probe(f"http://127.0.0.1:{port}", timeout=2.0)
    assert why is not None and "Connection" in why


def test_the_offline_hint_for_a_dataset_fetches_the_subset_the_config_uses(monkeypatch):
    # mbpp reads the "sanitized" subset: the command the hint gives must save that one, not the full set.
    from magrpo.models import hub
    from magrpo.tasks.data import DataUnavailableError, load_hub

    monkeypatch.setattr(hub, "_state", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataUnavailableError) as e:
        load_hub("magrpo-tests/no-such-set", "test", "sanitized")
    msg = str(e.value)
    assert "load_dataset('magrpo-tests/no-such-set', 'sanitized').save_to_disk('DIR')" in msg, msg
    assert "task.data.path=DIR" in msg and "\n" not in msg
    with pytest.raises(DataUnavailableError) as e:
        load_hub("magrpo-tests/no-such-set", "test")
    assert "load_dataset('magrpo-tests/no-such-set').save_to_disk('DIR')" in str(e.value)
