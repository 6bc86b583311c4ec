"""Per-agent optimizer settings (agents.models.K.optimizer.*): each agent's optimizer and schedule
take its own lr, weight decay, schedule and warm-up over the shared `optimizer` group; bad keys and
values name the agent; summary.json records what differs."""

from __future__ import annotations

import json

import pytest

from magrpo.algos import ALGOS
from magrpo.algos.base import agent_optimizer
from magrpo.config import validate
from magrpo.models import load_agents
from magrpo.schema import ConfigError
from magrpo.tasks import build_task
from magrpo.train import run

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
