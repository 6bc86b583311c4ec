"""Every credit-assignment method (iac / maac, at_grpo, dr_mas, c3, MAGRPO's GSPO / DAPO options):
exact resume, end-to-end runs on the suite and a paper task, and config errors that say why."""

import json

import pytest

from magrpo.cli.train import run
from magrpo.config.schemas import ConfigError
from magrpo.validation.checks import validate
from tests.algos import FAST
from tests.conftest import run_and_resume

# --- every method: end to end, resume, config errors ---------------------------------------------

METHODS = {
    "iac": ["algo=iac"], "iac_q_model": ["algo=iac", "algo.critic_type=q", "algo.critic=model"],
    "maac": ["algo=maac"], "maac_head_q": ["algo=maac", "algo.critic=head", "algo.critic_type=q"],
    "at_grpo_2turn": ["algo=at_grpo", "algo.num_turns=2", "feedback=plain"],
    "dr_mas": ["algo=dr_mas", "task=cover", "algo.reward=individual"],
    "dr_mas_global": ["algo=dr_mas", "task=cover", "algo.reward=individual", "algo.normalization=global",
                      "agents.share_policy=true"],
    "c3": ["algo=c3", "task=agree"],
    "gspo": ["algo=magrpo", "algo.loss=gspo", "algo.num_iterations=2"],
    "dapo": ["algo=magrpo", "algo.dynamic_sampling=true", "algo.overlong_penalty=1.0", "algo.loss_agg=token_mean",
             "algo.epsilon_high=0.28", "algo.loss=clip", "algo.num_iterations=2"],
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_resumes_exactly(make_cfg, tmp_path, method):
    common = [*METHODS[method], "max_steps=4", "save_every=2", "eval.every=2", *FAST]
    a, b = run_and_resume(make_cfg, tmp_path, common)
    assert sorted(b) == [3, 4]
    for step in (3, 4):
        for key in a[step]:
            if key.startswith("train/") and not key.startswith(("time/", "speed/")):
                assert a[step][key] == b[step][key], (method, step, key)


GSPO = ["algo.loss=gspo", "algo.num_iterations=2"]
DAPO = ["algo.dynamic_sampling=true", "algo.overlong_penalty=1.0", "algo.loss_agg=token_mean"]


SUITE_METHODS = [("iac", "simultaneous", []), ("iac", "sequential", []), ("maac", "simultaneous", []),
           ("at_grpo", "simultaneous", []), ("at_grpo", "sequential", []), ("dr_mas", "simultaneous", []),
           ("dr_mas", "sequential", []), ("c3", "sequential", []), ("magrpo", "simultaneous", GSPO),
           ("magrpo", "sequential", GSPO), ("magrpo", "simultaneous", DAPO), ("magrpo", "sequential", DAPO)]


# Every method and topology on the suite's game; on the paper task each method once in the fast suite
# (its other topology in the slow one: the topology is the task's business no more than the game's).
@pytest.mark.parametrize("algo,topology,extra,task", [
    pytest.param(algo, topology, extra, task, id=f"{task}-{algo}-{topology}-{'-'.join(extra) or 'plain'}",
                 marks=[pytest.mark.slow] if task == "tldr" and topology == "sequential" and algo != "c3" else [])
    for task in ("signal", "tldr") for algo, topology, extra in SUITE_METHODS])
def test_every_method_runs_on_the_suite_and_a_paper_task(make_cfg, tmp_path, algo, topology, extra, task):
    out = tmp_path / "run"
    run(make_cfg([f"algo={algo}", f"task={task}", f"algo.topology={topology}", "debug=smoke", *extra,
                  "algo.max_new_tokens=8", "algo.num_generations=2", "algo.max_prompt_length=64"], out=str(out)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["config"]["algo"] == algo


@pytest.mark.parametrize("overrides,needles", [
    (["algo=maac", "algo.topology=sequential"], ["algo.topology='sequential'", "algo=maac", "algo=iac"]),
    (["algo=c3", "algo.topology=simultaneous"], ["algo.topology", "sequential"]),
    (["algo=c3", "algo.num_turns=2"], ["algo.num_turns=2", "algo=c3"]),
    (["algo=iac", "algo.beta=0.1"], ["algo.beta=0.1", "algo=iac"]),
    (["algo=dr_mas", "algo.reward=individual"], ["algo.reward='individual'", "length_ratio"]),
    (["algo=maac", "algo.reward=individual"], ["algo.reward", "team"]),
    (["algo=magrpo", "algo.loss=gspo_"], ["algo.loss", "gspo", "reinforce"]),
    (["algo=at_grpo", "algo.branch=top"], ["algo.branch", "best", "all"]),
    (["algo=iac", "algo.critic_type=w"], ["algo.critic_type", "q", "v"]),
])
def test_a_method_that_does_not_apply_is_a_config_error_that_says_why(make_cfg, overrides, needles):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(overrides))
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))
