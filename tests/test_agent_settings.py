"""Per-agent optimizer settings (agents.models.K.optimizer.*): each agent's optimizer and schedule
take its own lr, weight decay, schedule and warm-up over the shared `optimizer` group; bad keys and
values name the agent; summary.json records what differs."""

from __future__ import annotations

import json

import pytest

from magrpo.algos import ALGOS
from magrpo.algos.optim import agent_optimizer, agent_overrides
from magrpo.cli.train import run
from magrpo.core.schema import ConfigError
from magrpo.models.agents import load_agents
from magrpo.tasks import build_task
from magrpo.validation.checks import validate

TWO = ('agents.models=[{name_or_path: "builtin:tiny", optimizer: {lr: 0.01, schedule: linear, weight_decay: 0.1}},'
       ' {name_or_path: "builtin:tiny"}]')


def test_each_agent_gets_its_own_settings_over_the_shared_group(make_cfg):
    cfg = validate(make_cfg([TWO, "optimizer.lr=0.002", "optimizer.warmup_steps=1"]))
    first, second = agent_optimizer(cfg, 0), agent_optimizer(cfg, 1)
    assert (first.lr, first.schedule, first.weight_decay, first.warmup_steps) == (0.01, "linear", 0.1, 1)
    assert (second.lr, second.schedule, second.weight_decay, second.warmup_steps) == (0.002, "constant", 0.0, 1)
    # One entry serves every agent: its settings are every agent's.
    shared = validate(make_cfg(['agents.models=[{name_or_path: "builtin:tiny", optimizer: {lr: 0.05}}]']))
    assert agent_optimizer(shared, 0).lr == agent_optimizer(shared, 1).lr == 0.05
    assert agent_overrides(shared) == {"all": {"optimizer": {"lr": 0.05}}}     # what summary.json records
    assert agent_overrides(cfg) == {"agent_1": {"optimizer": {"lr": 0.01, "schedule": "linear", "weight_decay": 0.1}}}


@pytest.mark.parametrize("algo", ["magrpo", "ippo"])
def test_the_algorithms_build_each_agents_optimizer_and_schedule_from_its_settings(make_cfg, algo):
    cfg = validate(make_cfg([TWO, f"algo={algo}", "max_steps=4", "algo.critic=head"] if algo == "ippo"
                            else [TWO, "max_steps=4"]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    trainer = ALGOS[algo](cfg, agents, build_task(cfg.task, cfg.reward))
    (g1,), (g2,) = (opt.param_groups for opt in trainer.optimizers)
    assert (g1["lr"], g1["weight_decay"]) == (0.01, 0.1) and (g2["lr"], g2["weight_decay"]) == (1e-3, 0.0)
    # linear decays agent 1's rate to 0 over the run's optimizer steps; agent 2's stays constant.
    total = cfg.max_steps * (cfg.algo.num_iterations if algo == "magrpo" else cfg.algo.ppo_epochs
                             * cfg.algo.num_mini_batches)
    s1, s2 = trainer.schedulers
    for _ in range(total):
        trainer.optimizers[0].step(), trainer.optimizers[1].step()
        s1.step(), s2.step()
    assert g1["lr"] == pytest.approx(0.0) and g2["lr"] == pytest.approx(1e-3)


def test_summary_records_the_settings_that_differ(make_cfg, tmp_path):
    run(make_cfg([TWO, "debug=smoke", "algo.max_new_tokens=8", "save_final=false"]))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["config"]["agent_settings"] == {"agent_1": {"optimizer": {"lr": 0.01, "schedule": "linear",
                                                                             "weight_decay": 0.1}}}


@pytest.mark.parametrize("entry,message", [
    ("optimizer: {lrr: 0.1}", "unknown config key 'agents.models[1].optimizer.lrr'; keys allowed in "
                              "agents.models[1].optimizer: lr, schedule, warmup_steps, weight_decay; did you mean 'lr'?"),
    ("optimizer: {lr: -1}", "agents.models[1].optimizer.lr=-1.0 is out of range; it must be > 0"),
    ("optimizer: {schedule: cosin}", "agents.models[1].optimizer.schedule='cosin'"),
    ("optimizer: {warmup_steps: -2}", "agents.models[1].optimizer.warmup_steps=-2"),
])
def test_a_bad_per_agent_key_or_value_names_the_agent(make_cfg, entry, message):
    models = f'agents.models=[{{name_or_path: "builtin:tiny"}}, {{name_or_path: "builtin:tiny", {entry}}}]'
    with pytest.raises(ConfigError) as err:
        validate(make_cfg([models]))
    assert message in str(err.value)


# -- per-agent sampling (agents.models.K.sampling) ---------------------------------------------------


def _sampling_models(first: str) -> str:
    return f'agents.models=[{{name_or_path: "builtin:tiny", sampling: {{{first}}}}}, {{name_or_path: "builtin:tiny"}}]'


def test_each_agent_samples_with_its_own_budget(make_cfg):
    from magrpo.rollout.record import Sampling, team_rollout

    cfg = validate(make_cfg([_sampling_models("max_new_tokens: 3"), "algo.max_new_tokens=12"]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    assert agents[0].sampling == {"max_new_tokens": 3} and agents[1].sampling == {}
    task = build_task(cfg.task, cfg.reward)
    rollout = team_rollout(agents, task, task.load("train")[:3], Sampling.from_algo(cfg.algo))
    widths = [g.completion_ids.shape[1] for g in rollout.samples]
    assert widths[0] <= 3 < widths[1] <= 12, widths


def test_an_agents_temperature_is_the_one_its_update_scores_with(make_cfg, tmp_path):
    """The entropy the update reports is the policy's at the agent's own temperature: agent 1's
    is far higher at 2.0 than at 0.05 (the random tiny model's logits are near flat: only a low
    temperature sharpens them)."""
    entropy = {}
    for t in (0.05, 2.0):
        out = tmp_path / f"t{t}"
        run(make_cfg([_sampling_models(f"temperature: {t}"), "debug=smoke", "algo.max_new_tokens=8",
                      "save_final=false"], out=str(out)))
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        first = next(r for r in rows if "train/agent_1/entropy" in r)
        entropy[t] = first["train/agent_1/entropy"]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["config"]["agent_settings"] == {"agent_1": {"sampling": {"temperature": t}}}
    assert entropy[2.0] > entropy[0.05] + 1.0, entropy


def test_a_bad_sampling_value_names_the_agent(make_cfg):
    with pytest.raises(ConfigError, match=r"agents.models\[0\].sampling.top_p=1.5 is out of range"):
        validate(make_cfg([_sampling_models("top_p: 1.5")]))
    with pytest.raises(ConfigError, match=r"unknown config key 'agents.models\[0\].sampling.temprature'.*"
                                          r"did you mean 'temperature'"):
        validate(make_cfg([_sampling_models("temprature: 1.5")]))


MIXED = ('agents.models=[{name_or_path: "builtin:tiny", optimizer: {lr: 0.01, schedule: cosine}, '
         'sampling: {temperature: 0.7, max_new_tokens: 5}}, {name_or_path: "builtin:tiny", sampling: {top_p: 0.9}}]')


@pytest.mark.parametrize("algo", ["magrpo", "grpo", "ippo", "mappo", "ppo"])
def test_per_agent_settings_run_with_every_algorithm(make_cfg, tmp_path, algo):
    run(make_cfg([MIXED, f"algo={algo}", "debug=smoke", "algo.max_new_tokens=8", "save_final=false"]))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert summary["config"]["agent_settings"]["agent_2"] == {"sampling": {"top_p": 0.9}}


def test_per_agent_settings_resume_exactly(make_cfg, tmp_path):
    from tests.conftest import run_and_resume

    full, resumed = run_and_resume(make_cfg, tmp_path, [MIXED, "debug=smoke", "max_steps=3", "save_every=1",
                                                        "algo.max_new_tokens=8"], at=2)
    assert sorted(resumed) == [3]
    for key in ("train/reward_mean", "train/agent_1/loss", "train/agent_1/lr", "train/agent_2/loss", "train/agent_2/lr"):
        assert resumed[3][key] == full[3][key], key
    assert full[3]["train/agent_1/lr"] != full[3]["train/agent_2/lr"]     # cosine from 0.01 vs constant 1e-3
