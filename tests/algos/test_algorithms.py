"""The algorithm contract: every algorithm by name, golden numbers, resume of critics, bad values.

Regenerate the golden numbers after a deliberate change of the math with
    GOLDEN_REGEN=1 .venv/bin/python -m pytest tests/algos/test_algorithms.py -k golden
"""

import json
import os
from pathlib import Path

import pytest
import torch

from magrpo.algos import ALGOS
from magrpo.algos.base import StepInput
from magrpo.cli.train import run
from magrpo.config.schemas import ConfigError
from magrpo.rollout.record import team_rollout
from magrpo.tasks import build_task
from magrpo.validation.checks import validate
from tests.conftest import build_algorithm, run_and_resume, train_rows

GOLDEN = Path(__file__).parents[1] / "data" / "golden_algos.json"
FAST = ["algo.max_new_tokens=12", "eval.num_items=2", "eval.num_samples=2", "algo.batch_size=2"]
GOLDEN_KEYS = ["train/reward_mean", "train/agent_1/loss", "train/agent_1/grad_norm"]
EPS32 = torch.finfo(torch.float32).eps      # 2^-23, float32's relative spacing


def golden_tolerance(key: str, row: dict) -> float:
    """How far another x86-64 CPU may move golden metric `key` of a logged training row.

    Each metric is a float32 mean over the step's per-token terms (of the loss, of the gradient,
    of the rewards), computed from float32 forwards and backwards. Another CPU's kernels (another
    vector width, AVX512 against AVX2; or ATEN_CPU_CAPABILITY=default) add the same terms in another
    order. Reordering a float32 mean of N terms of magnitude <= M moves it by at most
    (N - 1) * EPS32 / 2 * M < N * EPS32 * M (each addition rounds by <= EPS32 / 2 of a partial sum
    <= N * M; the mean divides by N). N: the step's completion tokens, the longest such sum here.
    M is the size of the terms, not of the result. A loss near 0 is a difference of per-token
    terms A * ratio (ratio near 1 within the clip range; A * log p in the actor-critic REINFORCE
    losses, which are then of that size themselves) plus value and KL terms: its M is the largest
    of |loss|, |policy_loss|, value_loss and the mean |advantage|. A gradient's per-token parts
    largely add up, so grad_norm's M is its own size. Rewards are functions of the sampled text
    (the same tokens on any CPU): M is their mean plus their spread. A real change (a flipped sign,
    another estimator, another sampled token) moves a metric by the size of its terms, about
    1 / (N * EPS32) ~ 4e4 times this tolerance for N = 192."""
    agent = key.rsplit("/", 1)[0] + "/"
    if key.endswith("/loss"):
        scale = max(abs(row[key]), abs(row[agent + "policy_loss"]), row.get(agent + "value_loss", 0.0),
                    row[agent + "advantage_abs_mean"])
    elif key == "train/reward_mean":
        scale = abs(row[key]) + row["train/reward_std"]
    else:                                   # grad_norm: the norm of sums of per-token gradients
        scale = abs(row[key])
    return row["train/completions/tokens"] * EPS32 * scale




def test_every_algorithm_is_registered_with_its_own_schema():
    assert set(ALGOS) == {"magrpo", "grpo", "ippo", "mappo", "ppo", "iac", "maac", "at_grpo", "dr_mas", "c3"}
    for name, cls in ALGOS.items():
        assert cls.config_schema.__dataclass_fields__["name"].default == name


# Named variants of an algorithm that the golden numbers pin too: MAGRPO's GSPO and DAPO options.
VARIANTS = {"gspo": ["algo=magrpo", "algo.loss=gspo", "algo.loss_agg=seq_mean_token_mean",
                     "algo.num_iterations=2"],
            "dapo": ["algo=magrpo", "algo.dynamic_sampling=true", "algo.overlong_penalty=1.0",
                     "algo.overlong_buffer=4", "algo.loss_agg=token_mean", "algo.epsilon_high=0.28",
                     "algo.loss=clip", "algo.num_iterations=2"],
            # MAPPO's team critic: one critic model reads each joint action once (algos/mappo.py)
            "mappo_joint": ["algo=mappo", "algo.critic_view=joint", "algo.critic=model"]}


def test_golden_numbers_of_two_steps_of_each_algorithm(make_cfg, tmp_path):
    got, rows = {}, {}
    runs = {**{algo: [f"algo={algo}"] for algo in ALGOS}, **VARIANTS}
    for name, overrides in sorted(runs.items()):
        out = tmp_path / name
        run(make_cfg([*overrides, "max_steps=2", "eval.every=0", "save_final=false", *FAST], out=str(out)))
        rows[name] = train_rows(out)
        got[name] = {f"{step}:{k}": rows[name][step][k] for step in (1, 2) for k in GOLDEN_KEYS}
    if os.environ.get("GOLDEN_REGEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert set(want) == set(runs)
    for algo in want:
        for key, value in want[algo].items():
            step, metric = key.split(":", 1)
            tol = golden_tolerance(metric, rows[algo][int(step)])
            assert abs(got[algo][key] - value) <= tol, (algo, key, got[algo][key], value, tol)


def test_grpo_equals_magrpo_with_one_agent(make_cfg, tmp_path):
    common = ["max_steps=2", "eval.every=0", "save_final=false", *FAST]
    run(make_cfg(["algo=grpo", *common], out=str(tmp_path / "grpo")))
    run(make_cfg(["algo=magrpo", "agents.num_agents=1", *common], out=str(tmp_path / "magrpo1")))
    a, b = train_rows(tmp_path / "grpo"), train_rows(tmp_path / "magrpo1")
    for step in (1, 2):
        for key in ("train/reward_mean", "train/agent_1/loss", "train/agent_1/grad_norm", "train/agent_1/entropy"):
            assert a[step][key] == b[step][key], (step, key)


@pytest.mark.parametrize("algo,extra", [("ippo", ["algo.critic=model"]), ("ppo", ["algo.beta=0.05", "algo.kl_target=0.001"]),
                                        ("mappo", []), ("mappo", ["algo.critic_view=joint", "algo.critic=model"])])
def test_critics_optimizers_and_kl_controller_resume_exactly(make_cfg, tmp_path, algo, extra):
    common = [f"algo={algo}", "max_steps=4", "save_every=2", "eval.every=2", *FAST, *extra]
    a, b = run_and_resume(make_cfg, tmp_path, common)
    assert sorted(b) == [3, 4]
    keys = ["train/reward_mean", "train/agent_1/loss", "train/agent_1/value_loss", "train/agent_1/value_mean",
            "train/kl_coef"]
    for step in (3, 4):
        for key in keys:
            assert a[step][key] == b[step][key], (step, key)
    if algo == "ppo":   # the adaptive coefficient moved, and the resumed run continued from where it was
        assert a[4]["train/kl_coef"] != 0.05


def test_the_centralized_critic_reads_every_agents_text(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=mappo", *FAST])
    items = task.load("train")[:2]
    rollout = team_rollout(agents, task, items, algo.sampling)
    for i in range(2):
        texts = algo.critic_prompts(rollout, i)
        assert len(texts) == len(rollout.samples[i].texts)
        for r, (shared, pieces) in enumerate(texts):
            own = "".join(p if isinstance(p, str) else agents[i].tokenizer.decode(p) for p in pieces)
            b, k = divmod(r, cfg.algo.num_generations)
            for j in range(2):
                assert task.prompts(items[b], 2)[j].strip() in shared
            assert shared == texts[b * cfg.algo.num_generations][0]     # one prefix per item: it runs once
            other = 1 - i
            assert rollout.samples[other].texts[r].strip() in own   # the other agent's answer
            assert own.rstrip().endswith(f"[Agent {i + 1}] answer:")   # then its own completion follows


def test_in_a_chain_the_centralized_critic_reads_each_samples_own_joint_action(make_cfg):
    """Sequential: agent 1's sample s is read with the answers of the first leaf of its subtree
    (one critic input per completion row, each row's own answer in it)."""
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=mappo", "algo.topology=sequential", *FAST])
    items = task.load("train")[:2]
    rollout = team_rollout(agents, task, items, algo.sampling, topology="sequential")
    G = cfg.algo.num_generations
    for i in range(2):
        texts = algo.critic_prompts(rollout, i)
        assert len(texts) == len(rollout.samples[i].texts)
    for r, (_, pieces) in enumerate(algo.critic_prompts(rollout, 0)):
        b, s = divmod(r, G)
        node = b * rollout.num_joint + s * G                   # the first leaf under agent 1's sample s
        other = rollout.samples[1]
        row = rollout.row(1, node)
        assert other.completion_ids[row, :int(other.completion_mask[row].sum())].tolist() in pieces


def test_the_centralized_critic_values_each_token_after_the_joint_context(make_cfg):
    """Values read from the split input (shared prompts, then the answers) equal those of the whole
    text run as one sequence."""
    from magrpo.algos.ippo import CriticInput, critic_values
    from magrpo.algos.logprobs import RowBatch

    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=mappo", *FAST])
    rollout = team_rollout(agents, task, task.load("train")[:2], algo.sampling)
    gen, tok = rollout.samples[0], agents[0].tokenizer
    texts = algo.critic_prompts(rollout, 0)
    inputs = CriticInput.encode(tok, texts, gen, 4096)
    with torch.no_grad():
        got = critic_values(algo.critics[0], agents[0], gen, inputs, slice(None), "cpu", True)
        algo.critics[0].head.v.weight.normal_()      # a non-zero head, so values differ by position
        got = critic_values(algo.critics[0], agents[0], gen, inputs, slice(None), "cpu", True)
        for r in range(len(texts)):
            ids = tok(texts[r][0], add_special_tokens=False).input_ids
            for piece in texts[r][1]:
                ids += tok(piece, add_special_tokens=False).input_ids if isinstance(piece, str) else piece
            n = int(gen.completion_mask[r].sum())
            one = RowBatch(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), None,
                           gen.completion_ids[r:r + 1, :n], gen.completion_mask[r:r + 1, :n])
            want = algo.critics[0].values(agents[0], one, False)[0]
            assert torch.allclose(got[r, :n], want, atol=1e-5)


def test_ippo_value_head_and_policy_both_move(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=ippo", "optimizer.lr=1e-2", *FAST])
    head = algo.critics[0].head.v.weight.detach().clone()
    params = [p.detach().clone() for p in agents[0].trainable_parameters()]
    metrics = algo.step(StepInput(task.load("train")[:2]))
    assert not torch.equal(head, algo.critics[0].head.v.weight)
    assert any(not torch.equal(p, q) for p, q in zip(params, agents[0].trainable_parameters()))
    for key in ("loss", "policy_loss", "value_loss", "clip_frac", "approx_kl", "kl", "entropy",
                "explained_variance", "value_mean", "return_mean", "advantage_abs_mean", "grad_norm", "lr"):
        assert f"train/agent_1/{key}" in metrics, key
    assert "train/frac_reward_zero_std" in metrics and "train/kl_coef" in metrics


def test_ippo_whitening_floor_keeps_the_advantages_of_a_solved_batch_small(make_cfg):
    """Every return equal (a solved game): the advantages are the critic's errors R - V. Plain
    whitening scales them to unit size; algo.whiten_min_std=10 divides them by 10 instead."""
    out = {}
    for floor in (0.0, 10.0):
        cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=ippo", f"algo.whiten_min_std={floor}", *FAST])
        torch.manual_seed(0)
        with torch.no_grad():
            algo.critics[0].head.v.weight.normal_(std=0.01)   # values: small noise around 0
        rollout = team_rollout(agents, task, task.load("train")[:2], algo.sampling)
        gen = rollout.samples[0]
        R = torch.ones(gen.completion_mask.shape[0])
        batch, _ = algo._prepare(0, gen, R, None)
        m = batch.mask.bool()
        raw = (batch.returns - batch.old_values)[m]                # A = R - V (gamma = lam = 1)
        out[floor] = (batch.advantages[m], raw)
    plain, raw = out[0.0]
    assert plain.pow(2).mean().item() == pytest.approx(1.0, rel=1e-3)
    floored, raw = out[10.0]
    assert raw.std().item() < 10.0                                 # the floor is above the spread
    assert torch.allclose(floored, (raw - raw.mean()) / 10.0, atol=1e-6)


def test_individual_rewards_split_the_coding_reward(make_cfg):
    cfg = validate(make_cfg(["task=humaneval", "algo=ippo", "algo.reward=individual"]))
    task = build_task(cfg.task, cfg.reward)
    item = task.load("eval")[0]
    helper = "```python\ndef aux(x):\n    return x\n```"
    scores = task.score([item], [["", ""]], [[helper, "no code here"]])
    shares = task.individual_rewards(scores, 2)
    assert sum(shares[0]) == pytest.approx(scores[0])


@pytest.mark.parametrize("overrides,needles", [
    (["algo=ippo", "algo.lam=2"], ["algo.lam", "2", "[0, 1]"]),
    (["algo=ippo", "algo.critic=foo"], ["algo.critic", "'foo'", "head", "model"]),
    (["algo=ippo", "algo.reward=individual"], ["algo.reward", "individual", "length_ratio", "team"]),
    (["algo=ippo", "+algo.advantage=rloo"], ["algo.advantage", "allowed"]),
    (["algo=mappo", "algo.joint_mode=cross"], ["algo.joint_mode", "cross", "aligned"]),
    (["algo=ppo", "algo.kl_horizon=0"], ["algo.kl_horizon", ">= 1"]),
    (["algo.num_turns=0"], ["algo.num_turns", ">= 1"]),
    (["algo.discount=1.5"], ["algo.discount", "[0, 1]"]),
    (["algo.max_branches=0"], ["algo.max_branches", ">= 1"]),
    (["algo.early_termination_threshold=nan"], ["algo.early_termination_threshold", "finite"]),
    (["algo=banana"], None),
])
def test_bad_algorithm_values_fail_at_start(make_cfg, overrides, needles):
    if needles is None:   # an unknown algo file is Hydra's own error, naming the choices
        from hydra.errors import MissingConfigException

        with pytest.raises(MissingConfigException, match="banana"):
            make_cfg(overrides)
        return
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(overrides))
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


def test_multi_turn_values_are_accepted_by_every_algorithm(make_cfg):
    for algo in sorted(set(ALGOS) - {"c3"}):      # c3 replays one turn of a chain (tests/algos/test_c3.py)
        cfg = validate(make_cfg([f"algo={algo}", "algo.num_turns=2", "algo.discount=0.9", "feedback=plain",
                                 "algo.early_termination_threshold=0.5", "algo.max_branches=2"]))
        assert cfg.algo.num_turns == 2 and cfg.algo.discount == 0.9


def test_the_yaml_holds_no_default_twice():
    """Each conf/algo file starts from its schema and overrides nothing but what differs."""
    from magrpo.cli.train import CONF_DIR

    for path in Path(CONF_DIR, "algo").glob("*.yaml"):
        lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
        assert lines[:3] == ["defaults:", f"  - /schema/algo@_here_: {path.stem}", "  - _self_"], path


def test_the_update_phase_is_counted_on_the_clock_of_the_algorithm_that_ran_it(monkeypatch):
    """@update_phase adds a method's time to its own object's UpdateClock (no state shared between
    algorithms); a step's metrics take it and start over."""
    from types import SimpleNamespace

    from magrpo.algos import step_metrics
    from magrpo.algos.step_metrics import UpdateClock, update_phase

    ticks = iter([10.0, 12.5, 20.0, 21.0])          # a clock that reads these times, in turn
    monkeypatch.setattr(step_metrics, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))

    class Learner:
        def __init__(self):
            self.update_clock = UpdateClock()

        @update_phase
        def update(self, x):
            return x + 1

    a, b = Learner(), Learner()
    assert a.update(1) == 2 and a.update(2) == 3
    assert a.update_clock.seconds == 3.5 and b.update_clock.seconds == 0.0
    assert a.update_clock.take() == 3.5 and a.update_clock.seconds == 0.0


def test_the_scaffold_builds_an_algorithms_critics_through_its_hook(make_cfg):
    """TeamAlgorithm calls build_critics() once the policies are known and before the optimizers
    (a head's parameters train with its policy); each critic comes back with what steps it (a
    separate critic model: its own optimizer and schedule); the checkpoint state carries them. None
    by default."""
    from magrpo.algos.scaffold import CriticParts, TeamAlgorithm

    cfg, agents, task, plain = build_algorithm(make_cfg, ["algo=magrpo", *FAST])
    assert plain.critics == [] and "critics" not in plain.state_dict()

    class WithHead(TeamAlgorithm):
        def build_critics(self):
            return [CriticParts(torch.nn.Linear(len(self.policies), 1))]

        def extra_parameters(self, policy):
            return list(self.critics[0].parameters())

    algo = WithHead(cfg, agents, task)
    head = algo.critics[0]
    assert any(p is head.weight for group in algo.optimizers[0].param_groups for p in group["params"])
    assert algo.critic_optimizers == [None] and algo.critic_schedulers == [None]
    state = algo.state_dict()
    assert torch.equal(state["critics"][0]["weight"], head.weight)

    _, _, _, ippo = build_algorithm(make_cfg, ["algo=ippo", "algo.critic=model", "algo.critic_lr=0.5", *FAST])
    for critic, opt, sch in zip(ippo.critics, ippo.critic_optimizers, ippo.critic_schedulers):
        assert critic.kind == "model" and sch.optimizer is opt
        assert [p for g in opt.param_groups for p in g["params"]] == list(critic.parameters())
        assert opt.param_groups[0]["initial_lr"] == 0.5


def test_every_algo_key_is_declared_once():
    # A key several algorithms read is declared in one place (magrpo/algos/keys.py, or a shared
    # base) and composed in; a subclass may set another default for a key it inherits, but two
    # unrelated schemas never declare the same key (each with its own default, check and words).
    import dataclasses

    schemas = {k for cls in ALGOS.values() for k in cls.config_schema.__mro__ if dataclasses.is_dataclass(k)}
    declared: dict[str, list[type]] = {}
    for k in schemas:
        for name in k.__dict__.get("__annotations__", {}):
            declared.setdefault(name, []).append(k)
    # a declaration is a root when no base class of its own declares the key; more than one root
    # means unrelated declarations
    roots = {name: sorted(k.__name__ for k in owners if not any(o is not k and issubclass(k, o) for o in owners))
             for name, owners in declared.items()}
    twice = {name: r for name, r in roots.items() if len(r) > 1}
    assert twice == {}, twice
    assert roots["cross_credit"] == ["CrossCreditKeys"] and roots["ent_coef"] == ["EntropyKeys"]
