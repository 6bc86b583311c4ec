"""Collaboration diagnostics (magrpo.evaluation.collaboration): hand-computed contributions and lazy agents,
similarity, influence on real tiny chains, the config keys, the training run's files, the
dashboard section and the table's --columns.

The tasks below wrap the real length_ratio task and replace only its reward (or the context a
chain shows), so the tiny agents generate for real and every expected number follows from the
answers they wrote."""

from __future__ import annotations

import json

import pytest

from magrpo.config.schemas import ConfigError
from magrpo.evaluation.collaboration import (
    CollaborationConfig,
    answer_similarity,
    collaboration_metrics,
    similarity,
)
from magrpo.evaluation.loop import eval_sampling, evaluate
from magrpo.models.agents import load_agents
from magrpo.rollout.answers import collect_answers
from magrpo.rollout.feedback import build_feedback
from magrpo.rollout.turns import TurnSpec
from magrpo.tasks import Scores, build_task
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg

SMALL = ["algo.max_new_tokens=6", "eval.num_items=2", "eval.num_samples=2"]
DIAG_KEYS = {"diagnostics_time_s", "diagnostics/reward_calls", "diagnostics/score_calls", "diagnostics/generations"}


class Wrapped:
    """The real task with its reward (and, optionally, a chain's context) replaced; counts score calls."""

    def __init__(self, task, reward=None, ignore_context: bool = False):
        self.task, self.reward, self.ignore_context, self.calls = task, reward, ignore_context, 0

    def __getattr__(self, name):
        return getattr(self.task, name)

    def score(self, items, prompts, completions):
        self.calls += 1
        if self.reward is None:
            return self.task.score(items, prompts, completions)
        return Scores([self.reward(c) for c in completions])

    def context_prompt(self, item, agent, prompt, own, others):
        return prompt if self.ignore_context else self.task.context_prompt(item, agent, prompt, own, others)


@pytest.fixture(scope="module")
def tiny():
    """(cfg, agents, task) of the default tiny team, loaded once for the module."""
    cfg = validate(compose_cfg(["output_dir=/tmp/unused", *SMALL]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    return cfg, agents, build_task(cfg.task, cfg.reward)


def diagnose(cfg, agents, task, config=None, scheme="team", turns=None, seed=3):
    sampling = eval_sampling(cfg)
    items = task.load("eval")[:cfg.eval.num_items]
    feedback = build_feedback(cfg.feedback, task)
    answers = collect_answers(agents, task, items, sampling, 8, seed, scheme, turns, feedback)
    metrics = collaboration_metrics(agents, task, answers, sampling, seed, config or CollaborationConfig(), scheme, turns,
                                    feedback)
    return answers, metrics


def test_contribution_of_a_sum_reward_is_each_agents_own_term(tiny):
    cfg, agents, base = tiny
    weights = [0.5, -2.0]       # R(a) = sum_k w_k len(a_k); an empty answer's term is 0
    task = Wrapped(base, lambda c: sum(w * len(a) for w, a in zip(weights, c)))
    answers, m = diagnose(cfg, agents, task)
    final = answers.final[2]
    P = len(final)
    for k, w in enumerate(weights):
        assert m[f"agent_{k + 1}/contribution"] == pytest.approx(sum(w * len(c[k]) for c in final) / P)
    lazy = sum(any(len(a) == 0 for a in c) for c in final) / P     # a term is 0 only for an empty answer
    assert m["lazy_agent_rate"] == pytest.approx(lazy)
    # empty ablation: N reward evaluations per joint answer, in one batched score call per agent
    assert (m["diagnostics/reward_calls"], m["diagnostics/score_calls"], m["diagnostics/generations"]) == (2 * P, 2, 0)
    assert "agent_1/influence" not in m, "a one-turn simultaneous team has no followers"


def test_an_agent_the_reward_never_reads_contributes_nothing_and_is_always_lazy(tiny):
    cfg, agents, base = tiny
    task = Wrapped(base, lambda c: 1.0 + len(c[0]) / 10)
    answers, m = diagnose(cfg, agents, task)
    assert m["agent_2/contribution"] == 0.0 and m["lazy_agent_rate"] == 1.0
    final = answers.final[2]
    assert m["agent_1/contribution"] == pytest.approx(sum(len(c[0]) / 10 for c in final) / len(final))


def test_lazy_threshold_is_an_absolute_reward_tolerance(tiny):
    cfg, agents, base = tiny
    task = Wrapped(base, lambda c: 1e-3 * len(c[1]) + 5.0 * len(c[0]))    # agent 2 barely matters
    _, strict = diagnose(cfg, agents, task, CollaborationConfig(lazy_threshold=0.0))
    _, loose = diagnose(cfg, agents, task, CollaborationConfig(lazy_threshold=1.0))
    assert loose["lazy_agent_rate"] == 1.0 and strict["lazy_agent_rate"] < 1.0


def test_answer_similarity_by_hand():
    assert answer_similarity(["the cat sat", "the cat sat"]) == 1.0
    assert answer_similarity(["", ""]) == 1.0              # identical, though rouge_score scores it 0
    # "the cat" vs "the cat sat": LCS 2, precision 1, recall 2/3 -> F = 0.8; three pairs: 0.8, 0.8, 1
    assert answer_similarity(["the cat sat", "the cat", "the cat"]) == pytest.approx((0.8 + 0.8 + 1.0) / 3)
    assert similarity("alpha beta", "gamma delta") == 0.0
    assert answer_similarity(["only one agent"]) is None


def test_influence_is_zero_when_the_follower_ignores_the_earlier_agent(tiny):
    _, agents, base = tiny
    # Longer answers: the random tiny model's next-token distribution barely depends on its context,
    # so under common random numbers a follower's first few tokens often come out the same.
    cfg = validate(compose_cfg(["output_dir=/tmp/unused", *SMALL, "algo.max_new_tokens=16"]))
    chain = TurnSpec(topology="sequential")
    _, real = diagnose(cfg, agents, Wrapped(base), turns=chain)
    _, deaf = diagnose(cfg, agents, Wrapped(base, ignore_context=True), turns=chain)
    # the real tiny listener reads agent 1's answer in its prompt, so a new answer changes what it writes
    assert real["agent_1/influence"] > 0
    # common random numbers: a follower whose prompt does not change writes the same answer
    assert deaf["agent_1/influence"] == 0.0
    assert "agent_2/influence" not in real, "the last agent of a one-turn chain has no followers"
    P = 4
    # per joint answer: agent 1 resampled once, the follower generated after each of its two answers
    assert real["diagnostics/generations"] == 3 * P


def test_multi_turn_influence_covers_every_agent_and_the_same_seed_repeats(tiny):
    cfg, agents, base = tiny
    turns = TurnSpec(num_turns=2)
    _, m = diagnose(cfg, agents, Wrapped(base), turns=turns)
    _, again = diagnose(cfg, agents, Wrapped(base), turns=turns)
    assert {"agent_1/influence", "agent_2/influence"} <= set(m)
    assert {k: v for k, v in m.items() if k != "diagnostics_time_s"} == \
        {k: v for k, v in again.items() if k != "diagnostics_time_s"}


def test_base_ablation_generates_with_the_base_model_and_off_adds_nothing(tiny):
    cfg, agents, base = tiny
    sampling, items = eval_sampling(cfg), base.load("eval")[:2]
    plain_task = Wrapped(base)
    plain, _ = evaluate(agents, plain_task, items, sampling, 8, seed=5)
    task = Wrapped(base)
    with_diag, _ = evaluate(agents, task, items, sampling, 8, seed=5,
                            diagnostics=CollaborationConfig("base", load_base=lambda: agents))
    assert set(with_diag) - set(plain) == {"agent_1/contribution", "agent_2/contribution", "lazy_agent_rate",
                                           "answer_similarity"} | DIAG_KEYS
    assert {k: with_diag[k] for k in plain if "time" not in k} == {k: v for k, v in plain.items() if "time" not in k}
    assert task.calls - plain_task.calls == 2, "one extra score call per agent, none without diagnostics"
    assert with_diag["diagnostics/generations"] == 2 * 4     # one base answer per agent and joint answer
    with pytest.raises(RuntimeError, match="eval.ablation=base: agent_1 has neither an adapter nor a reference"):
        evaluate(agents, base, items, sampling, 8, seed=5, diagnostics=CollaborationConfig("base"))


def test_base_ablation_switches_a_lora_adapter_off():
    cfg = validate(compose_cfg(["output_dir=/tmp/unused", "agents=tiny_lora", *SMALL]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    task = build_task(cfg.task, cfg.reward)
    _, m = diagnose(cfg, agents, task, CollaborationConfig("base"))     # no loader needed: the adapter is off
    assert m["diagnostics/generations"] == 8 and "agent_2/contribution" in m


@pytest.mark.parametrize("override, needle", [
    ("eval.ablation=zero", "eval.ablation='zero' is not allowed; choose one of: empty, base"),
    ("eval.lazy_threshold=-0.1", "eval.lazy_threshold=-0.1 is out of range; it must be >= 0"),
])
def test_bad_diagnostics_values_are_refused_in_one_line(override, needle):
    for name in ("train", "eval"):
        with pytest.raises(ConfigError) as e:
            validate(compose_cfg(["output_dir=/tmp/unused", override], config_name=name),
                     *([] if name == "train" else [__import__("magrpo.config.schemas").config.schemas.EvalRunSchema]))
        assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_training_run_logs_the_diagnostics_in_metrics_and_summary(tmp_path):
    from magrpo.cli.train import run

    out = tmp_path / "run"
    run(compose_cfg([f"output_dir={out}", "max_steps=1", "algo.batch_size=2", "eval.every=0", "save_final=false",
                     "eval.diagnostics=true", "eval.ablation=base", *SMALL]))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/reward_mean" in r]
    assert len(evals) == 2, "the initial and the final evaluation"
    for r in evals:
        assert {"eval/agent_1/contribution", "eval/agent_2/contribution", "eval/lazy_agent_rate",
                "eval/answer_similarity", "eval/diagnostics/generations"} <= set(r)
    final = json.loads((out / "summary.json").read_text())["final_eval"]
    assert final["lazy_agent_rate"] == evals[-1]["eval/lazy_agent_rate"]
    assert final["diagnostics/generations"] == 8       # base ablation: fresh copies of the untrained models


def test_magrpo_eval_logs_diagnostics_per_method(tmp_path):
    from magrpo.cli.evaluate import run_eval

    report = run_eval(compose_cfg([f"output_dir={tmp_path / 'eval'}", *SMALL, "methods=[sequential,naive_concat]",
                                   "eval.diagnostics=true"], config_name="eval"))
    assert "agent_1/influence" in report["results"]["sequential"]
    assert "agent_1/influence" not in report["results"]["naive_concat"]
    rows = [json.loads(line) for line in (tmp_path / "eval" / "metrics.jsonl").read_text().splitlines()]
    keys = {k for r in rows for k in r}
    assert {"eval/sequential/agent_1/influence", "eval/naive_concat/lazy_agent_rate"} <= keys


def test_dashboard_has_a_collaboration_section(tmp_path, monkeypatch, capsys):
    from magrpo.cli.dashboard import main, panels_of

    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "dash.json"
    assert main(["--project", "magrpo", "--group", "g", "--out", str(out)]) == 0
    panels = [p for p in panels_of(json.loads(out.read_text())) if p["section"] == "Collaboration"]
    shown = {p["regex"] or p["metrics"][0] for p in panels}
    assert {r"eval/agent_\d+/contribution$", "eval/lazy_agent_rate", "eval/answer_similarity",
            r"eval/agent_\d+/influence$", r"train/[^/]+/grad_norm$", r"train/[^/]+/kl$",
            r"train/[^/]+/entropy$"} == shown
    assert "[Collaboration] lazy-agent rate (eval): eval/lazy_agent_rate" in capsys.readouterr().out


@pytest.mark.parametrize("layout", ["paper", "generic"])
def test_table_columns_add_diagnostics_and_leave_missing_cells_empty(tmp_path, capsys, layout):
    from magrpo.table import main as table_main
    from tests.test_table import md_header, md_rows, read_csv, write_run

    root = tmp_path / "runs"
    base = {"reward_mean": 0.5, "reward/length_ratio": 1.0}
    write_run(root / "a", seed=0, algo="magrpo", final={**base, "lazy_agent_rate": 0.25, "agent_1/contribution": 0.5},
              initial={"reward_mean": 0.1})
    write_run(root / "b", seed=0, algo="ippo", final=dict(base), initial={"reward_mean": 0.1})   # diagnostics off
    out = tmp_path / "table"
    rc = table_main([str(root), "--out", str(out), "--no-plots", "--layout", layout,
                     "--columns", "lazy_agent_rate,answer_similarity,eval/agent_1/contribution"])
    assert rc == 0, capsys.readouterr().err
    header = md_header(out / "table.md")
    rows = md_rows(out / "table.md")
    names = {"paper": ["lazy-agent rate", "answer similarity (ROUGE-L)", "agent 1 contribution"],
             "generic": ["lazy_agent_rate", "answer_similarity", "agent_1/contribution"]}[layout]
    assert set(names) <= set(header)     # (generic: metrics the runs report are default columns already)
    at = [header.index(n) - 1 for n in names]
    magrpo = next(v for k, v in rows.items() if "MAGRPO" in k or k.startswith("magrpo"))
    ippo = next(v for k, v in rows.items() if "IPPO" in k or k.startswith("ippo"))
    assert [magrpo[i] for i in at][0].startswith("0.250") and [magrpo[i] for i in at][2].startswith("0.500")
    assert {ippo[i] for i in at} <= {"", "–"}, "a run without diagnostics has empty cells"
    csv_rows = read_csv(out / "table.csv")
    ippo_csv = next(v for k, v in csv_rows.items() if "IPPO" in k or k.startswith("ippo"))
    assert ippo_csv.get("lazy_agent_rate_mean", ippo_csv.get("lazy_agent_rate", "")) == ""
    capsys.readouterr()


def test_every_algorithm_logs_grad_norm_kl_and_entropy_per_policy(tmp_path):
    """The per-policy training diagnostics: every algorithm logs them for every policy it trains
    (kl is 0 where algo.beta = 0 loads no reference: the KL to nothing)."""
    from magrpo.algos import ALGOS
    from magrpo.cli.train import run
    from tests.conftest import train_rows

    for algo in sorted(ALGOS):
        out = tmp_path / algo
        run(compose_cfg([f"output_dir={out}", f"algo={algo}", "max_steps=1", "algo.batch_size=1", "eval.every=0",
                         "save_final=false", "algo.max_new_tokens=4", "eval.num_items=1", "eval.num_samples=1"]))
        row = train_rows(out)[1]
        policies = ["agent_1"] if ALGOS[algo].team(compose_cfg([f"algo={algo}"])).num_agents == 1 \
            else ["agent_1", "agent_2"]
        for policy in policies:
            assert {f"train/{policy}/{k}" for k in ("grad_norm", "kl", "entropy")} <= set(row), (algo, policy)
            assert row[f"train/{policy}/kl"] == 0.0, (algo, "beta = 0: no reference, no KL")
