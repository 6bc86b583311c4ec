"""`magrpo-score` for every task: coophumaneval and mbpp from local data in each layout they come
in, and every kind of bad input refused with one line on stderr, exit 2 and nothing on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magrpo.cli.score import SCORERS, main

# -- small data sets, in each source's own column layout -------------------------------------------

# CoopHumanEval is HumanEval-shaped: a stub to continue, a `check(candidate)` test module.
COOP = [
    {"task_id": "CoopHumanEval/0", "entry_point": "add_squares",
     "prompt": 'def add_squares(a: int, b: int) -> int:\n    """Return a*a + b*b.\n    >>> add_squares(1, 2)\n'
               '    5\n    """\n',
     "canonical_solution": "    return a * a + b * b\n",
     "test": "def check(candidate):\n    assert candidate(1, 2) == 5\n    assert candidate(0, 0) == 0\n"
             "    assert candidate(-3, 4) == 25\n"},
    # A helper given in the prompt, and a check whose asserts share a loop (judged as one test).
    {"task_id": "CoopHumanEval/1", "entry_point": "count_squares",
     "prompt": "import math\n\n\ndef is_square(n):\n    return math.isqrt(n) ** 2 == n\n\n\n"
               'def count_squares(xs: list) -> int:\n    """How many of xs are perfect squares."""\n',
     "canonical_solution": "    return sum(1 for x in xs if is_square(x))\n",
     "test": "def check(candidate):\n    for xs, want in [([1, 2, 4], 2), ([], 0), ([9, 10, 16, 25], 3)]:\n"
             "        assert candidate(xs) == want\n"},
]

# MBPP "sanitized" (the task's default): `prompt`, `code`, `test_list`, `test_imports`.
MBPP = [
    {"source_file": "t.py", "task_id": 101, "prompt": "Write a function that returns the largest of three numbers.",
     "code": "def max_of_three(a, b, c):\n    return max(a, b, c)\n", "test_imports": [],
     "test_list": ["assert max_of_three(1, 2, 3) == 3", "assert max_of_three(5, -1, 0) == 5",
                   "assert max_of_three(2, 2, 1) == 2"]},
    {"source_file": "t.py", "task_id": 102, "prompt": "Write a function for the hypotenuse of a right triangle.",
     "code": "import math\ndef hypotenuse(a, b):\n    return math.sqrt(a * a + b * b)\n",
     "test_imports": ["import math"],
     "test_list": ["assert math.isclose(hypotenuse(3, 4), 5.0)", "assert math.isclose(hypotenuse(5, 12), 13.0)"]},
]
# MBPP "full": `text` instead of `prompt`, `test_setup_code`, `challenge_test_list`, no `test_imports`
# (so its tests import nothing).
FULL_TESTS = {101: MBPP[0]["test_list"],
              102: ["assert abs(hypotenuse(3, 4) - 5.0) < 1e-9", "assert abs(hypotenuse(5, 12) - 13.0) < 1e-9"]}
MBPP_FULL = [{"task_id": r["task_id"], "text": r["prompt"], "code": r["code"], "test_list": FULL_TESTS[r["task_id"]],
              "test_setup_code": "", "challenge_test_list": []} for r in MBPP]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    import datasets

    d = tmp_path_factory.mktemp("data")
    out = {"coophumaneval": jsonl(d / "coop.jsonl", COOP), "mbpp": jsonl(d / "mbpp.jsonl", MBPP)}
    datasets.Dataset.from_list(MBPP_FULL).to_parquet(str(d / "mbpp_full.parquet"))
    out["mbpp_full"] = d / "mbpp_full.parquet"
    # A saved DatasetDict: read by split name; the few-shot `prompt` split is not a problem to score.
    few_shot = {**MBPP[0], "task_id": 103, "code": "def seven():\n    return 7\n", "test_list": ["assert seven() == 7"]}
    datasets.DatasetDict({"train": datasets.Dataset.from_list(MBPP[:1]), "test": datasets.Dataset.from_list(MBPP[1:]),
                          "prompt": datasets.Dataset.from_list([few_shot])}).save_to_disk(str(d / "mbpp_saved"))
    out["mbpp_saved"] = d / "mbpp_saved"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(COOP)}).save_to_disk(str(d / "coop_saved"))
    out["coop_saved"] = d / "coop_saved"
    return out


def score(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


LOOPS = "    while True:\n        pass\n"


# -- correct code passes, wrong code fails ----------------------------------------------------------


@pytest.mark.parametrize("source", ["coophumaneval", "coop_saved"])
def test_coophumaneval_passes_correct_code_and_fails_wrong_code(tmp_path, capsys, data, source):
    samples = [
        {"task_id": "CoopHumanEval/0", "completion": COOP[0]["canonical_solution"]},
        {"task_id": "CoopHumanEval/0", "completion": "    return a + b\n"},
        {"task_id": "CoopHumanEval/0",   # a whole function instead of the stub's body
         "completion": "def add_squares(a, b):\n    return a ** 2 + b ** 2\n"},
        {"task_id": "CoopHumanEval/1", "completion": COOP[1]["canonical_solution"]},
        {"task_id": "CoopHumanEval/1", "completion": "    return len(xs)\n"},
    ]
    results = tmp_path / "new" / "dir" / "results.jsonl"   # --results creates its folders
    rc, out, err = score(capsys, "coophumaneval", jsonl(tmp_path / "s.jsonl", samples), "--data", data[source],
                         "--timeout", "2", "--workers", "2", "--k", "1,2,3", "--results", results)
    assert rc == 0, err
    got = json.loads(out)
    assert got["pass@1"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert got["pass@2"] == pytest.approx((1 + 1) / 2) and "pass@3" not in got   # k <= the fewest samples
    assert (got["problems"], got["problems_in_file"], got["samples"], got["passed"]) == (2, 2, 5, 3)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["passed"] for r in rows] == [True, False, True, True, False]
    assert rows[1]["result"].startswith("failed: AssertionError")


@pytest.mark.parametrize("source", ["mbpp", "mbpp_full", "mbpp_saved"])
def test_mbpp_passes_correct_code_and_fails_wrong_code(tmp_path, capsys, data, source):
    samples = [
        {"task_id": 101, "completion": MBPP[0]["code"]},               # MBPP's own id, a whole program
        {"task_id": "MBPP/101", "completion": "    return a\n"},         # the item id, a wrong body
        {"task_id": "101", "completion": LOOPS},
        {"task_id": "MBPP/102", "completion": "    return (a * a + b * b) ** 0.5\n"},
        {"task_id": 102, "completion": "    return a + b\n"},
    ]
    results = tmp_path / "results.jsonl"
    rc, out, err = score(capsys, "mbpp", jsonl(tmp_path / "s.jsonl", samples), "--data", data[source],
                         "--timeout", "1", "--workers", "2", "--results", results)
    assert rc == 0, err
    got = json.loads(out)
    assert got["pass@1"] == pytest.approx((1 / 3 + 1 / 2) / 2) and "pass@3" not in got
    assert (got["problems"], got["problems_in_file"], got["samples"], got["passed"]) == (2, 2, 5, 2)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["passed"] for r in rows] == [True, False, False, True, False]
    assert rows[2]["result"] == "timed out"


def test_a_saved_datasets_few_shot_split_is_not_scored(tmp_path, capsys, data):
    rc, out, err = score(capsys, "mbpp", jsonl(tmp_path / "s.jsonl", [{"task_id": 103, "completion": "x"}]),
                         "--data", data["mbpp_saved"])
    assert (rc, out) == (2, "") and "line 1: task_id 103 is not in" in err


# -- bad input, for every task ---------------------------------------------------------------------

GOOD = {"humaneval": {"task_id": "HumanEval/23", "completion": "    return len(string)\n"},
        "coophumaneval": {"task_id": "CoopHumanEval/0", "completion": COOP[0]["canonical_solution"]},
        "mbpp": {"task_id": 101, "completion": MBPP[0]["code"]},
        "tldr": {"a1": "A short summary.", "a2": "A longer one."},
        "arxiv": {"a1": "Background.", "a2": "Method."}}
CODING = ("humaneval", "coophumaneval", "mbpp")


def _without_last_field(task: str) -> dict:
    row = dict(GOOD[task])
    row.pop(list(row)[-1])
    return row


def _last_field_a_number(task: str) -> dict:
    return {**GOOD[task], list(GOOD[task])[-1]: 5}


def _good(task: str) -> bytes:
    return (json.dumps(GOOD[task]) + "\n").encode()


# (name, file contents, what stderr says); every bad line follows a good one where it can, so
# the test also shows that a file is refused whole, never scored in part.
BAD_INPUTS = {
    "empty": (lambda t: b"", "holds no"),
    "blank lines only": (lambda t: b"\n  \n\n", "holds no"),
    "undecodable": (lambda t: _good(t) + b'{"a1": "\xff\xfe"}\n', "line 2 is not UTF-8 text"),
    "not json": (lambda t: _good(t) + b"{broken\n", "line 2 is not valid JSON"),
    "not an object": (lambda t: _good(t) + b"\n[1, 2]\n", "line 3 is not a JSON object"),
    "missing field": (lambda t: _good(t) + json.dumps(_without_last_field(t)).encode() + b"\n",
                      "line 2 needs fields"),
    "field of the wrong type": (lambda t: _good(t) + json.dumps(_last_field_a_number(t)).encode() + b"\n",
                                "is 5, not a string"),
    "unknown task id": (lambda t: _good(t) + json.dumps({**GOOD[t], "task_id": "Nope/7"}).encode() + b"\n",
                        "line 2: task_id 'Nope/7' is not in"),
}
CASES = [(task, kind) for task in GOOD for kind in BAD_INPUTS if kind != "unknown task id" or task in CODING]


def _argv(task: str, path: Path, data: dict[str, Path]) -> list:
    return [task, path, *(["--data", data[task]] if task in ("coophumaneval", "mbpp") else [])]


@pytest.mark.parametrize("task,kind", CASES, ids=[f"{t}-{k.replace(' ', '_')}" for t, k in CASES])
def test_every_scorer_refuses_bad_input(tmp_path, capsys, data, task, kind):
    make, message = BAD_INPUTS[kind]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(make(task))
    rc, out, err = score(capsys, *_argv(task, path, data))
    assert rc == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert str(path) in err and message in err, err


@pytest.mark.parametrize("task", list(GOOD))
def test_every_scorer_refuses_a_compressed_file_that_is_not(tmp_path, capsys, data, task):
    path = tmp_path / "samples.jsonl.gz"
    path.write_bytes(_good(task))
    rc, out, err = score(capsys, *_argv(task, path, data))
    assert (rc, out) == (2, "") and err.count("\n") == 1 and "cannot read" in err and str(path) in err


def test_every_task_the_project_trains_on_has_a_scorer_and_an_unknown_one_lists_them(tmp_path, capsys):
    assert {"humaneval", "coophumaneval", "mbpp", "tldr", "arxiv"} <= set(SCORERS)
    rc, out, err = score(capsys, "mpbb", jsonl(tmp_path / "s.jsonl", [GOOD["mbpp"]]))
    assert rc == 2 and "invalid choice: 'mpbb'" in err
    assert all(f"'{name}'" in err for name in SCORERS)


# -- the data source of coophumaneval and mbpp -----------------------------------------------------


@pytest.mark.parametrize("task", ["coophumaneval", "mbpp"])
def test_without_data_and_without_the_hub_the_error_says_to_pass_data(tmp_path, capsys, task, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # conftest's setting, made explicit: the hub is unreachable
    rc, out, err = score(capsys, task, jsonl(tmp_path / "s.jsonl", [GOOD[task]]))
    assert (rc, out) == (2, "") and err.count("\n") == 1, err
    assert "no --data given" in err and "pass --data FILE" in err


def test_bad_data_sources_are_named(tmp_path, capsys, data):
    samples = jsonl(tmp_path / "s.jsonl", [GOOD["mbpp"]])
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"task_id": 1, "code": "x"\n')
    neither = jsonl(tmp_path / "neither.jsonl", [{"question": "what?", "answer": "42"}])
    no_function = jsonl(tmp_path / "nofn.jsonl", [{**MBPP[0], "code": "x = 1\n"}])
    text = tmp_path / "problems.txt"
    text.write_text("hello\n")
    empty_tests = jsonl(tmp_path / "notests.jsonl", [{**MBPP[0], "test_list": []}])
    import datasets

    datasets.DatasetDict({"other": datasets.Dataset.from_list(MBPP)}).save_to_disk(str(tmp_path / "saved"))
    for source, message in [
        (tmp_path / "nope.jsonl", "nope.jsonl: not found"),
        (broken, "cannot read --data"),
        (text, "unsupported file type '.txt'"),
        (neither, "problem 1 cannot be read as a mbpp problem"),
        (no_function, "problem 1 cannot be read as a mbpp problem"),
        (empty_tests, "problem MBPP/101 of"),
        (tmp_path / "saved", "none of train, validation, test"),
    ]:
        rc, out, err = score(capsys, "mbpp", samples, "--data", source)
        assert (rc, out) == (2, ""), (source, err)
        assert err.count("\n") == 1 and message in err and str(source) in err, (source, err)
