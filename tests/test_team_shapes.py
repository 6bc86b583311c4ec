"""Team shapes: one policy for several roles (`agents.share_policy`), with full fine-tuning and
LoRA, under every algorithm: one model, one optimizer step per update, one checkpoint, exact resume."""

from __future__ import annotations

import json

import pytest

from magrpo.algos import ALGOS
from magrpo.algos.base import StepInput
from magrpo.cli.train import run
from magrpo.core.schema import ConfigError
from magrpo.models.agents import load_agents
from magrpo.tasks import build_task
from magrpo.validation.checks import validate
from tests.conftest import run_and_resume

SHARED = ["agents.share_policy=true", "debug=smoke", "algo.max_new_tokens=8", "algo.num_generations=2"]
LORA = ["agents=tiny_lora", "agents.share_base=false"]


def _algo(make_cfg, overrides):
    cfg = validate(make_cfg(overrides))
    team = ALGOS[cfg.algo.name].team(cfg)
    agents = load_agents(cfg.agents, cfg.hardware, team.num_agents, need_reference=team.reference)
    task = build_task(cfg.task, cfg.reward)
    return ALGOS[cfg.algo.name](cfg, agents, task), agents, task


@pytest.mark.parametrize("algo", ["magrpo", "ippo", "mappo"])
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_shared_policy_takes_one_optimizer_step_per_update_over_every_roles_samples(make_cfg, algo, lora):
    trainer, agents, task = _algo(make_cfg, [*SHARED, f"algo={algo}", "task=agree", "agents.num_agents=3",
                                             *(LORA if lora else [])])
    assert len({id(a.model) for a in agents}) == 1 and [a.policy_name for a in agents] == ["policy"] * 3
    assert len(trainer.optimizers) == 1
    steps, rows = [], []
    trainer.optimizers[0].register_step_post_hook(lambda *_: steps.append(1))
    update = trainer._update
    trainer._update = lambda i, b, *rest: (rows.append((i, (b if algo == "magrpo" else b.gen).completion_ids.shape[0])),
                                           update(i, b, *rest))[1]
    metrics = trainer.step(StepInput(task.load("train")[:2]))
    a = trainer.algo
    per_update = 1 if algo == "magrpo" else a.ppo_epochs * a.num_mini_batches
    assert len(steps) == per_update            # the same count as one agent's: not once per role
    # The one update saw every role's samples: 3 roles x 2 items x G = 2.
    assert rows == [(0, 3 * 2 * 2)]
    assert "train/policy/loss" in metrics and "train/agent_1/loss" not in metrics
    assert all(f"train/agent_{i}/return_mean" in metrics for i in (1, 2, 3))   # each role's own returns


@pytest.mark.parametrize("algo", ["magrpo", "grpo", "ippo", "mappo", "ppo"])
def test_a_shared_policy_trains_and_saves_once_under_every_algorithm(make_cfg, tmp_path, algo):
    out = tmp_path / "run"
    run(make_cfg([*SHARED, f"algo={algo}", "task=agree", "agents.num_agents=3", "save_final=true"], out=str(out)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished"
    single = algo in ("grpo", "ppo")
    assert (summary["config"]["team"], summary["config"]["num_policies"]) == (("single", 1) if single
                                                                              else ("shared_policy", 1))
    held = sorted(p.name for p in (out / "checkpoints" / "step_2").iterdir() if p.is_dir())
    # one checkpoint per policy: the team's one policy, or the single-model form's one agent
    assert held == (["agent_1"] if single else ["policy"])


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_shared_policy_resumes_exactly(make_cfg, tmp_path, lora):
    common = [*SHARED, "max_steps=3", "save_every=1", *(LORA if lora else [])]
    full, resumed = run_and_resume(make_cfg, tmp_path, common, at=2)
    for key in ("train/reward_mean", "train/policy/loss", "train/policy/entropy", "train/agent_2/return_mean"):
        assert resumed[3][key] == full[3][key], key


def test_a_shared_policy_checkpoint_is_evaluated_with_the_same_team_shape(make_cfg, tmp_path):
    from magrpo.cli.evaluate import main as eval_main
    from tests.conftest import run_cli

    out = tmp_path / "run"
    run(make_cfg([*SHARED, "save_final=true"], out=str(out)))
    ok = run_cli(eval_main, "magrpo-eval", [f"checkpoint={out}", "agents.share_policy=true", "eval.num_items=2",
                                            "algo.max_new_tokens=8", f"hydra.run.dir={tmp_path / 'eval'}"])
    assert ok == 0 and json.loads((tmp_path / "eval" / "eval.json").read_text())
    # Loading a shared policy into separate agents is refused, naming the difference.
    assert run_cli(eval_main, "magrpo-eval", [f"checkpoint={out}", "eval.num_items=2",
                                              f"hydra.run.dir={tmp_path / 'eval2'}"]) != 0


@pytest.mark.parametrize("extra,message", [
    (["agents=tiny_lora"], "choose one: share_policy"),
    (['agents.models=[{name_or_path: "builtin:tiny"}, {name_or_path: "builtin:tiny"}]'], "give a single entry"),
])
def test_a_shared_policy_with_two_models_or_adapters_is_a_config_error(make_cfg, extra, message):
    with pytest.raises(ConfigError, match=message):
        validate(make_cfg(["agents.share_policy=true", *extra]))


# --- sequential teams -----------------------------------------------------------------------------

SEQ = ["algo.topology=sequential", "debug=smoke", "algo.max_new_tokens=6", "algo.num_generations=2", "task=agree"]


def test_a_chain_maps_each_leaf_to_its_ancestors():
    from magrpo.rollout.record import chain_joint

    # G_1 = 2, G_2 = 3: leaf l uses agent 1's sample l // 3 and agent 2's sample l
    assert chain_joint([2, 3]).tolist() == [[0, 0], [0, 1], [0, 2], [1, 3], [1, 4], [1, 5]]
    assert chain_joint([2, 1, 2]).tolist() == [[0, 0, 0], [0, 0, 1], [1, 1, 2], [1, 1, 3]]


def test_sequences_per_item_of_a_chain():
    from magrpo.rollout.turns import sequences_per_item, tree_size

    # G = 2, 2, 1: agent 1 writes 2, agent 2 writes 2 per prefix (4), agent 3 one per prefix (4)
    assert sequences_per_item(3, 2, "aligned", 1, topology="sequential", branching=[2, 2, 1]) == 2 + 4 + 4
    assert tree_size(3, 2, "aligned", 1, topology="sequential", branching=[2, 2, 1]) == 4
    # default branching = G at each level; two turns expand every one of the 2^3 leaves into a new chain
    assert sequences_per_item(3, 2, "aligned", 2, topology="sequential") == (2 + 4 + 8) * (1 + 8)


def test_a_chain_shows_each_agent_its_predecessors_and_groups_never_mix_prefixes(make_cfg, monkeypatch):
    """Agent 2 answers each of agent 1's samples G_2 times, its prompt holding that sample; the
    reward depends on agent 1's answer alone, so every group of agent 2 (one prefix) has equal
    returns and a zero advantage: a baseline that mixed prefixes would not."""
    trainer, agents, task = _algo(make_cfg, [*SEQ, "algo.branching=[3,2]", "algo.batch_size=2"])
    monkeypatch.setattr(type(task), "reward", lambda self, prompts, completions, **cols: __import__(
        "magrpo.tasks", fromlist=["Scores"]).Scores([float(len(c[0])) for c in completions]))
    seen = []
    update = trainer._update
    trainer._update = lambda i, gen, adv: (seen.append((gen, adv)), update(i, gen, adv))[1]
    trainer.step(StepInput(task.load("train")[:2]))
    (g1, a1), (g2, a2) = seen
    assert g1.completion_ids.shape[0] == 2 * 3 and g2.completion_ids.shape[0] == 2 * 3 * 2
    for r in range(len(g2.texts)):       # row r of agent 2 answers prefix r // 2 = agent 1's row r // 2
        assert g1.texts[r // 2].strip() in g2.prompts[r // 2]
    assert a2.abs().max().item() == 0.0 and a1.abs().max().item() > 0.0


@pytest.mark.parametrize("algo", ["magrpo", "grpo", "ippo", "mappo", "ppo"])
def test_a_sequential_team_trains_under_every_algorithm(make_cfg, tmp_path, algo):
    out = tmp_path / "run"
    run(make_cfg([*SEQ, f"algo={algo}", "agents.num_agents=3", "algo.branching=[2,2,1]"], out=str(out)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["config"]["topology"] == "sequential"


@pytest.mark.parametrize("n", [3, 4])
def test_a_sequential_team_over_two_turns_resumes_exactly(make_cfg, tmp_path, n):
    common = [*SEQ, f"agents.num_agents={n}", "max_steps=3", "save_every=1", "algo.num_turns=2",
              "algo.max_branches=1", "feedback=discussion", "algo.branching=[2" + ",1" * (n - 1) + "]"]
    full, resumed = run_and_resume(make_cfg, tmp_path, common, at=2)
    assert full[3]["train/turn_1/nodes"] == 2 * 2 and full[3]["train/turn_2/nodes"] == 2 * 2
    for key in ("train/reward_mean", *(f"train/agent_{i}/loss" for i in range(1, n + 1))):
        assert resumed[3][key] == full[3][key], key


@pytest.mark.parametrize("extra,message", [
    (["algo.joint_mode=cross"], "set algo.joint_mode=aligned"),
    (["algo.branching=[2,2,2]"], "3 level"),
    (["algo.branching=[2,0]"], "at least 1"),
    (["algo.topology=simultaneous", "algo.branching=[2,2]"], "set algo.topology=sequential"),
    (["algo.topology=chain"], "simultaneous, sequential"),
])
def test_a_bad_chain_is_a_config_error_naming_the_key(make_cfg, extra, message):
    with pytest.raises(ConfigError, match=message):
        validate(make_cfg([*SEQ, *extra]))


@pytest.mark.parametrize("algo", ["magrpo", "ippo"])
def test_a_shared_policy_plays_every_level_of_a_chain(make_cfg, algo):
    """The roles sample different G per prefix (branching 2, 3): one update still takes them all."""
    trainer, agents, task = _algo(make_cfg, [*SEQ, *SHARED, f"algo={algo}", "algo.branching=[2,3]"])
    steps, rows = [], []
    trainer.optimizers[0].register_step_post_hook(lambda *_: steps.append(1))
    update = trainer._update
    trainer._update = lambda i, b, *rest: (rows.append((b if algo == "magrpo" else b.gen).completion_ids.shape[0]),
                                           update(i, b, *rest))[1]
    trainer.step(StepInput(task.load("train")[:2]))
    assert rows == [2 * 2 + 2 * 2 * 3]          # agent 1: 2 per item; agent 2: 3 per each of them
    a = trainer.algo
    assert len(steps) == (1 if algo == "magrpo" else a.ppo_epochs * a.num_mini_batches)


@pytest.mark.parametrize("algo", ["magrpo", "grpo", "ippo", "mappo", "ppo"])
def test_a_team_of_four_agrees_under_every_algorithm(make_cfg, tmp_path, algo):
    out = tmp_path / "run"
    run(make_cfg(["task=agree", "agents.num_agents=4", "debug=smoke", "algo.max_new_tokens=4",
                  f"algo={algo}"], out=str(out)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and 0.0 <= summary["final_eval"]["normalized_return"] <= 1.0
    assert summary["config"]["num_agents"] == (1 if algo in ("grpo", "ppo") else 4)


def test_a_team_of_four_agrees_and_resumes_exactly(make_cfg, tmp_path):
    common = ["task=agree", "agents.num_agents=4", "debug=smoke", "algo.max_new_tokens=4", "max_steps=3",
              "save_every=1"]
    full, resumed = run_and_resume(make_cfg, tmp_path, common, at=2)
    for key in ("train/reward_mean", *(f"train/agent_{i}/loss" for i in range(1, 5))):
        assert resumed[3][key] == full[3][key], key
