"""The credit-assignment methods on one rollout record: hand-computed math, equalities with MAGRPO
where the README claims them, exact resume, end-to-end runs and config errors.

Methods: iac / maac (CoLLM-DC / CC), at_grpo, dr_mas, c3, and MAGRPO's GSPO / DAPO options.
"""

import functools
import json
import math

import pytest
import torch

from magrpo.algos.c3 import counterfactual_rollouts
from magrpo.algos.core import advantages, clipped_surrogate, keyed_advantages, sequence_log_ratio
from magrpo.algos.magrpo import MAGRPO, overlong_penalty
from magrpo.config import ConfigError, validate
from magrpo.rollout import Rollout, Sampling
from magrpo.tasks import Scores
from magrpo.train import run
from magrpo.trainer import seed_everything
from magrpo.turns import TreeStats, TurnSpec, choose_expansions, select_prompts
from tests.conftest import build_algorithm, run_and_resume, run_cli, train_rows

FAST = ["algo.max_new_tokens=8", "eval.num_items=2", "eval.num_samples=2", "algo.batch_size=2",
        "algo.num_generations=2"]




# --- GSPO -----------------------------------------------------------------------------------------


def test_gspo_sequence_ratio_is_the_geometric_mean_of_token_ratios():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    old = torch.tensor([[-1.5, -2.0, -2.0], [-1.0, -0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])      # row 2: its last token is padding
    log_s = sequence_log_ratio(logp, old, mask)
    # row 1: ratios e^0.5, e^0, e^-1 -> geometric mean e^(-0.5/3); row 2: e^0.5, e^0 -> e^0.25
    assert torch.exp(log_s).tolist() == pytest.approx([math.exp(-0.5 / 3), math.exp(0.25)])
    # sequence-level clipping: s = e^0.25 = 1.284 > 1.2 with A = 2 is clipped to 1.2 * 2
    loss, clipped = clipped_surrogate(log_s, torch.zeros(2), torch.tensor([1.0, 2.0]), 0.2, 0.2)
    assert loss.tolist() == pytest.approx([-math.exp(-0.5 / 3), -2.4])
    assert clipped.tolist() == [0.0, 1.0]


def test_gspo_on_policy_gradient_weights_each_token_by_one_over_the_length(make_cfg):
    """At ratio 1 with seq_mean_token_mean, GSPO's gradient is A * (1/|y|) sum_t grad log pi: the
    same as MAGRPO's token ratio with that aggregation; with seq_sum it is the plain sum."""
    grads = {}
    for level in ("token", "sequence"):
        cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=magrpo", f"algo.ratio_level={level}",
                                                    "algo.loss_agg=seq_mean_token_mean", *FAST])
        seed_everything(0)
        ep = algo.collect(task.load("train")[:2])
        batch = next(algo.policy_batches(ep, functools.partial(algo.role_advantages, ep=ep)))
        algo._update(0, batch[2], batch[3])
        grads[level] = [p.detach().clone() for p in agents[0].model.parameters()]
    for a, b in zip(grads["token"], grads["sequence"]):
        assert torch.allclose(a, b, atol=1e-6)


# --- DAPO -----------------------------------------------------------------------------------------


def test_dapo_overlong_penalty_ramps_over_the_buffer():
    lengths = torch.tensor([3.0, 6.0, 7.0, 8.0, 10.0])
    # L_max = 10, buffer 4: nothing up to 6, then (6 - L) / 4, -1 at the cap; factor 0.5 scales it
    assert overlong_penalty(lengths, 10, 4, 1.0).tolist() == pytest.approx([0, 0, -0.25, -0.5, -1.0])
    assert overlong_penalty(lengths, 10, 4, 0.5).tolist() == pytest.approx([0, 0, -0.125, -0.25, -0.5])


def _scored(rewards: list[list[float]]) -> Rollout:
    B, J = len(rewards), len(rewards[0])
    r = Rollout(items=[{} for _ in range(B)], samples=[], joint=torch.zeros(J, 2, dtype=torch.long))
    r.scores = Scores([x for row in rewards for x in row])
    return r


def test_dynamic_sampling_keeps_only_items_whose_rewards_differ():
    root = _scored([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5], [0.2, 0.3, 0.2]])
    assert MAGRPO.informative_items(root) == [1, 3]


def test_dynamic_sampling_drops_flat_groups_and_refills(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=magrpo", "algo.dynamic_sampling=true",
                                                "algo.dynamic_sampling_rounds=3", *FAST])
    calls = []

    def score(items, prompts, completions):     # round 0 flat (no signal), later rounds varied
        calls.append(len(items))
        flat = len(calls) == 1
        return Scores([0.5 if flat else float(len(c[0]) % 3) + 0.1 * k for k, c in enumerate(completions)])

    task.score = score
    m = algo.step(task.load("train")[:2])
    assert m["train/dynamic_sampling/rounds"] == 1.0 and m["train/dynamic_sampling/items_drawn"] == 4.0
    assert m["train/dynamic_sampling/items_kept"] == 2.0
    assert m["train/dynamic_sampling/dropped_groups"] == 2 * 2        # round 0: 2 agents x 2 items
    assert m["train/sequences_per_item"] == 2 * (2 * 2)                # two rounds of N G per item
    assert m["train/reward_mean"] == pytest.approx(0.5)                # the batch as drawn

    calls.clear()
    task.score = lambda items, prompts, completions: Scores([1.0] * len(completions))   # never any signal
    m = algo.step(task.load("train")[:2])
    assert m["train/dynamic_sampling/rounds"] == 3.0 and m["train/dynamic_sampling/items_kept"] == 0.0
    assert m["train/agent_1/grad_norm"] == 0.0            # nothing to learn from: every advantage is 0


def test_select_prompts_keeps_whole_groups(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=magrpo", *FAST])
    ep = algo.collect(task.load("train")[:2])
    gen = ep.generation(agents[0])
    sub = select_prompts(gen, torch.tensor([False, False, True, True]))
    assert sub.texts == gen.texts[2:] and torch.equal(sub.prompt_ids, gen.prompt_ids[1:])
    with pytest.raises(ValueError, match="whole groups"):
        select_prompts(gen, torch.tensor([True, False, True, True]))


# --- Dr. MAS -------------------------------------------------------------------------------------


def test_dr_mas_normalizes_each_agent_by_its_own_statistics():
    # one item, two agents with different reward scales (individual shares)
    a1, a2 = torch.tensor([1.0, 3.0]), torch.tensor([10.0, 30.0])
    key = torch.zeros(2, dtype=torch.long)
    eps = 1e-4
    # agent-wise: mu_1 = 2, sigma_1 = 1; mu_2 = 20, sigma_2 = 10
    assert keyed_advantages(a1, key, "mean", "group").tolist() == pytest.approx([-1 / (1 + eps), 1 / (1 + eps)])
    assert keyed_advantages(a2, key, "mean", "group").tolist() == pytest.approx([-10 / (10 + eps), 10 / (10 + eps)])
    # global (pooled over both agents): mu = 11, sigma = sqrt(((10^2 + 8^2 + 1^2 + 19^2) / 4)) = sqrt(131.5)
    pooled = keyed_advantages(torch.cat([a1, a2]), torch.zeros(4, dtype=torch.long), "mean", "group")
    s = math.sqrt(131.5) + eps
    assert pooled.tolist() == pytest.approx([-10 / s, -8 / s, -1 / s, 19 / s])


@pytest.mark.parametrize("shared", [False, True])
def test_dr_mas_equals_magrpo_with_group_scale_under_the_team_reward(make_cfg, tmp_path, shared):
    common = ["max_steps=2", "algo.eval_every=0", "save_final=false", "task=agree", *FAST,
              f"agents.share_policy={str(shared).lower()}"]
    run(make_cfg(["algo=dr_mas", *common], out=str(tmp_path / "dr")))
    run(make_cfg(["algo=magrpo", "algo.scale=group", *common], out=str(tmp_path / "ma")))
    a, b = train_rows(tmp_path / "dr"), train_rows(tmp_path / "ma")
    who = "policy" if shared else "agent_1"
    for step in (1, 2):
        for key in ("train/reward_mean", f"train/{who}/loss", f"train/{who}/grad_norm"):
            assert a[step][key] == b[step][key], (step, key)


def test_dr_mas_agent_and_global_statistics_on_a_real_episode(make_cfg, monkeypatch):
    """Individual shares of different scales: agent-wise normalization gives each agent (R - mu_i) /
    (sigma_i + eps) over its own samples of an item; global pools both agents' samples."""
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=dr_mas", "task=cover", "algo.reward=individual", *FAST])
    task.score = lambda items, prompts, completions: Scores([float(k + 1) for k in range(len(completions))])
    monkeypatch.setattr(type(task), "individual_rewards",
                        lambda self, scores, n: [[0.1 * r, 10.0 * r] for r in scores])
    ep = algo.collect(task.load("train")[:2])
    r = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(2, 2)            # item-major joint rewards
    own = {0: 0.1 * r, 1: 10.0 * r}
    eps = 1e-4
    for i in (0, 1):
        want = (own[i] - own[i].mean(-1, keepdim=True)) / (own[i].std(-1, unbiased=False, keepdim=True) + eps)
        assert algo.role_advantages(agents[i], ep).tolist() == pytest.approx(want.flatten().tolist(), rel=1e-5)
    algo.algo.normalization = "global"
    pooled = torch.cat([own[0], own[1]], dim=1)                     # per item, both agents' samples
    mu, sd = pooled.mean(-1, keepdim=True), pooled.std(-1, unbiased=False, keepdim=True) + eps
    for i in (0, 1):
        assert algo.role_advantages(agents[i], ep).tolist() == pytest.approx(((own[i] - mu) / sd).flatten().tolist(),
                                                                            rel=1e-5)


# --- AT-GRPO -------------------------------------------------------------------------------------


def test_at_grpo_best_branch_expands_each_sets_best_node():
    root = _scored([[0.1, 0.9, 0.3], [0.5, 0.5, 0.2]])
    nodes = choose_expansions(root, TurnSpec(num_turns=2, branch="best"), TreeStats())
    assert nodes == [1, 3]        # item 0: node 1; item 1: the first of the equal best (node 0 -> index 3)


def test_at_grpo_groups_by_item_agent_and_turn():
    # two sibling sets of one item at turn 2 merge into one group; a second item stays apart
    R = torch.tensor([1.0, 3.0, 5.0, 7.0, 2.0, 4.0])
    items = torch.tensor([0, 0, 0, 0, 1, 1])
    assert keyed_advantages(R, items, "mean").tolist() == pytest.approx([-3, -1, 1, 3, -1, 1])


def test_at_grpo_with_one_turn_is_magrpo(make_cfg, tmp_path):
    common = ["max_steps=2", "algo.eval_every=0", "save_final=false", *FAST]
    run(make_cfg(["algo=at_grpo", *common], out=str(tmp_path / "at")))
    run(make_cfg(["algo=magrpo", *common], out=str(tmp_path / "ma")))
    a, b = train_rows(tmp_path / "at"), train_rows(tmp_path / "ma")
    for step in (1, 2):
        for key in ("train/reward_mean", "train/agent_1/loss", "train/agent_2/grad_norm"):
            assert a[step][key] == b[step][key], (step, key)


def test_at_grpo_two_turns_expand_one_node_per_set(make_cfg, tmp_path):
    out = tmp_path / "at2"
    run(make_cfg(["algo=at_grpo", "algo.num_turns=2", "feedback=plain", "max_steps=1", "algo.eval_every=0",
                  "save_final=false", *FAST], out=str(out)))
    row = train_rows(out)[1]
    assert row["train/turn_1/expanded"] == 2.0 and row["train/turn_2/nodes"] == 2 * 2


# --- C3 ------------------------------------------------------------------------------------------


def test_c3_leave_one_out_on_three_alternatives():
    R = torch.tensor([[1.0, 2.0, 6.0]])
    # A_k = R_k - mean of the other two: 1 - 4, 2 - 3.5, 6 - 1.5
    assert advantages(R, "rloo").tolist() == [[-3.0, -1.5, 4.5]]


def test_c3_freezes_the_context_and_replays_a_fixed_continuation(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=c3", "task=agree", "agents.num_agents=3", *FAST,
                                                "algo.num_generations=3"])
    items = task.load("train")[:2]
    decisions, generated = counterfactual_rollouts(agents, task, items, Sampling(3, 4))
    assert [d.joint.tolist() for d in decisions] == [[[0, 0, 0], [1, 1, 1], [2, 2, 2]],
                                                      [[0, 0, 0], [0, 1, 1], [0, 2, 2]],
                                                      [[0, 0, 0], [0, 0, 1], [0, 0, 2]]]
    # cost: K * N (N + 1) / 2 = 3 * 6 = 18 sequences per item
    assert sum(len(g.texts) for g in generated) == 18 * len(items)
    for i in (1, 2):       # decision i's context: every earlier agent's first alternative
        for j in range(i):
            first = decisions[j].samples[j].texts[::3]
            assert decisions[i].samples[j].texts == first
            for b, prompt in enumerate(decisions[i].samples[i].prompts):
                assert first[b].strip() in prompt
    # a fixed continuation: greedy, so the same context and alternative give the same answer
    again = counterfactual_rollouts(agents, task, items, Sampling(3, 4, do_sample=False))[0][0]
    assert again.samples[0].texts[0] == again.samples[0].texts[1]      # identical alternatives...
    assert again.samples[1].texts[0] == again.samples[1].texts[1]      # ...are continued identically
    assert decisions[0].samples[2].num_generations == 1


def test_c3_logs_its_cost(make_cfg, tmp_path):
    out = tmp_path / "c3"
    run(make_cfg(["algo=c3", "task=agree", "max_steps=1", "algo.eval_every=0", "save_final=false", *FAST],
                 out=str(out)))
    row = train_rows(out)[1]
    assert row["train/sequences_per_item"] == 2 * 3            # K N (N + 1) / 2 with K = N = 2
    assert "train/c3/decision_2/reward_mean" in row


# --- CoLLM-CC / DC: turn-level TD(0) --------------------------------------------------------------


@pytest.mark.parametrize("algo", ["iac", "maac"])
def test_td_targets_on_a_two_turn_tree(make_cfg, monkeypatch, algo):
    """With every value V = 0.5: turn 2 (last) y = r2, delta = r2 - 0.5; turn 1: y = r1 + gamma * 0.5
    (the child's V), delta = y - 0.5; the critic of a prompt regresses on its samples' mean y."""
    gamma = 0.9
    cfg, agents, task, method = build_algorithm(make_cfg, [f"algo={algo}", "algo.num_turns=2", "feedback=plain",
                                                  f"algo.discount={gamma}", *FAST])
    monkeypatch.setattr(type(method), "evaluate", lambda self, c, texts: torch.full((len(texts),), 0.5))
    ep = method.collect(task.load("train")[:2])
    deltas, batches = method.td_errors(ep)
    t1, t2 = ep.levels()
    r1, r2 = t1.rewards.flatten(), t2.rewards.flatten()        # aligned: sample k of each agent is joint k
    for i in range(2):
        assert deltas[i].tolist() == pytest.approx([*(r1 + gamma * 0.5 - 0.5).tolist(), *(r2 - 0.5).tolist()])
    y = torch.cat([r1 + gamma * 0.5, r2]).view(-1, 2).mean(-1)      # per prompt (iac) / per group (maac)
    assert batches[0].targets.tolist() == pytest.approx(y.tolist())
    if algo == "iac":
        assert len(batches) == 2 and batches[1].targets.tolist() == pytest.approx(y.tolist())
    else:
        assert len(batches) == 1 and "[Agent 2] task:" in batches[0].texts[0]


def test_q_critic_baseline_is_the_mean_q_of_the_answers_to_a_prompt(make_cfg, monkeypatch):
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=iac", "algo.critic_type=q", *FAST])
    q = iter([torch.tensor([1.0, 3.0, 2.0, 2.0]), torch.tensor([0.0, 0.0, 0.0, 0.0])])
    monkeypatch.setattr(type(method), "evaluate", lambda self, c, texts: next(q))
    ep = method.collect(task.load("train")[:2])
    deltas, batches = method.td_errors(ep)
    r = ep.root.rewards.flatten()
    # agent 1: V(h) of item 1 = mean(1, 3) = 2, of item 2 = 2
    assert deltas[0].tolist() == pytest.approx((r - 2.0).tolist())
    assert batches[0].targets.tolist() == pytest.approx(r.tolist())   # Q regresses on its own sample's y


def test_the_critic_learns_and_the_actor_moves(make_cfg):
    cfg, agents, task, method = build_algorithm(make_cfg, ["algo=maac", "algo.critic=head", *FAST, "optimizer.lr=1e-2"])
    head = method.critics[0].head.v.weight
    before, actor = head.detach().clone(), [p.detach().clone() for p in agents[1].model.parameters()]
    metrics = method.step(task.load("train")[:2])
    assert not torch.equal(before, head.detach())
    assert any(not torch.equal(a, p) for a, p in zip(actor, agents[1].model.parameters()))
    assert "train/agent_1/value_loss" in metrics and "train/agent_2/value_loss" not in metrics


# --- every method: end to end, resume, config errors ---------------------------------------------

METHODS = {
    "iac": ["algo=iac"], "iac_q_model": ["algo=iac", "algo.critic_type=q", "algo.critic=model"],
    "maac": ["algo=maac"], "maac_head_q": ["algo=maac", "algo.critic=head", "algo.critic_type=q"],
    "at_grpo_2turn": ["algo=at_grpo", "algo.num_turns=2", "feedback=plain"],
    "dr_mas": ["algo=dr_mas", "task=cover", "algo.reward=individual"],
    "dr_mas_global": ["algo=dr_mas", "task=cover", "algo.reward=individual", "algo.normalization=global",
                      "agents.share_policy=true"],
    "c3": ["algo=c3", "task=agree"],
    "gspo": ["algo=magrpo", "algo.ratio_level=sequence", "algo.num_iterations=2"],
    "dapo": ["algo=magrpo", "algo.dynamic_sampling=true", "algo.overlong_penalty=1.0", "algo.loss_agg=token_mean",
             "algo.epsilon_high=0.28", "algo.num_iterations=2"],
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


GSPO = ["algo.ratio_level=sequence", "algo.num_iterations=2"]
DAPO = ["algo.dynamic_sampling=true", "algo.overlong_penalty=1.0", "algo.loss_agg=token_mean"]


@pytest.mark.parametrize("algo,topology,extra", [
    ("iac", "simultaneous", []), ("iac", "sequential", []), ("maac", "simultaneous", []),
    ("at_grpo", "simultaneous", []), ("at_grpo", "sequential", []), ("dr_mas", "simultaneous", []),
    ("dr_mas", "sequential", []), ("c3", "sequential", []), ("magrpo", "simultaneous", GSPO),
    ("magrpo", "sequential", GSPO), ("magrpo", "simultaneous", DAPO), ("magrpo", "sequential", DAPO)])
@pytest.mark.parametrize("task", ["signal", "tldr"])
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
    (["algo=magrpo", "algo.ratio_level=seq"], ["algo.ratio_level", "sequence", "token"]),
    (["algo=at_grpo", "algo.branch=top"], ["algo.branch", "best", "all"]),
    (["algo=iac", "algo.critic_type=w"], ["algo.critic_type", "q", "v"]),
])
def test_a_method_that_does_not_apply_is_a_config_error_that_says_why(make_cfg, overrides, needles):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(overrides))
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


def test_c3_has_no_key_of_magrpos_it_does_not_use(tmp_path, capsys):
    """C3 draws its own alternatives: MAGRPO's dynamic sampling, overlong penalty and cross credit are
    not keys of algo=c3, so setting one is an unknown key that lists C3's keys."""
    from magrpo.train import main

    code = run_cli(main, "magrpo-train", ["algo=c3", "algo.dynamic_sampling=true", f"hydra.run.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown config key 'algo.dynamic_sampling'" in err, err
    allowed = set(err.split("keys allowed in algo: ")[1].strip().split(", "))
    assert {"advantage", "num_iterations", "epsilon_high", "ratio_level", "loss", "topology"} <= allowed, err
    assert not {"dynamic_sampling", "overlong_penalty", "cross_credit"} & allowed, err
