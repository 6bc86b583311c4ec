"""The leveled coding reward on hand-computed cases, canonical HumanEval solutions, and metrics."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magrpo.tasks.base import Scores
from magrpo.tasks.coding import CodingRewardConfig, CodingTaskConfig, HumanEvalTask
from tests.conftest import compose_cfg

ROOT = Path(__file__).resolve().parents[2]

ITEM = {"id": "toy/sum_sq", "entry_point": "sum_sq", "imports": "", "setup": "", "canonical_solution": "",
        "tests": ["assert sum_sq([1, 2]) == 5", "assert sum_sq([]) == 0", "assert sum_sq([3]) == 9",
                  "assert sum_sq([1, 1, 1, 1]) == 4"]}

AUX = "Here is the helper.\n```python\ndef aux(x):\n    return x * x\n```\n"
MAIN_COOP = "```python\ndef sum_sq(xs):\n    total = 0\n    for x in xs:\n        total += aux(x)\n    return total\n```"
MAIN_ALONE = "def sum_sq(xs):\n    return sum(x * x for x in xs)\n"


def make_task(**reward):
    composed = compose_cfg(["task=humaneval"])
    cfg = OmegaConf.merge(OmegaConf.structured(CodingTaskConfig), composed.task)
    rcfg = OmegaConf.merge(OmegaConf.structured(CodingRewardConfig), composed.reward)
    rcfg.per_test_timeout_s = 0.5
    for k, v in reward.items():
        rcfg[k] = v
    return HumanEvalTask(cfg, rcfg)


def score(completions, task=None, item=ITEM) -> Scores:
    task = task or make_task()
    return task.score([item] * len(completions), [["p"]] * len(completions), completions)


def parts(s: Scores, i: int) -> tuple[float, float, float, float]:
    return tuple(round(s.components[k][i], 6) for k in ("structure", "syntax", "tests", "cooperation"))


def test_levels_and_cooperation_hand_computed():
    table = [
        # (agent 1, agent 2), (structure, syntax, tests, cooperation)
        (("Sorry.", "I do not know."), (0.0, 0.0, 0.0, 0.0)),  # nothing defined
        ((AUX, "I do not know."), (0.4, 0.0, 0.0, 0.0)),  # main missing: only the helper pays
        ((AUX, "def sum_sq(xs):\n    print(xs)\n"), (0.4, 0.0, 0.0, 0.0)),  # main without a return: stop
        ((AUX, "def sum_sq(xs):\n    return sum(x * x for x in xs\n"), (1.0, 0.0, 0.0, 0.0)),  # syntax error in main: stop after level 1
        (("def aux(x):\n    return x *\n", MAIN_ALONE), (1.0, 0.0, 0.0, 0.0)),  # syntax error in the helper
        (("No helper from me.", MAIN_ALONE), (0.6, 0.5, 1.0, 0.0)),  # helper missing, tests pass
        (("No helper from me.", MAIN_COOP), (0.6, 0.5, 0.25, 0.0)),  # helper missing: only [] passes
        ((AUX, MAIN_ALONE), (1.0, 0.5, 1.0, 0.0)),  # main ignores the helper
        ((AUX, MAIN_COOP), (1.0, 0.5, 1.0, 1.5)),  # full cooperation: 4.0
        (("def aux(xs):\n    return sum(x * x for x in xs)\n", "def sum_sq(xs):\n    return aux(xs)\n"), (1.0, 0.5, 1.0, 0.5)),  # thin wrapper
        ((AUX, "def sum_sq(xs):\n    total = 0\n    for x in xs[:1]:\n        total += aux(x)\n    return total\n"), (1.0, 0.5, 0.5, 1.5)),  # 2 of 4
        ((AUX, "def sum_sq(xs):\n    return -1 + 0 * aux(0)\n"), (1.0, 0.5, 0.0, 0.0)),  # no test passes: no bonus
    ]
    cases, expected = [c for c, _ in table], [e for _, e in table]
    s = score([list(c) for c in cases])
    for i, exp in enumerate(expected):
        assert parts(s, i) == exp, (i, cases[i])
        assert s[i] == pytest.approx(sum(exp))
    assert s[8] == pytest.approx(4.0)
    assert s.extras["passed"] == [False] * 5 + [True, False, True, True, True, False, False]
    assert s.extras["tests_fraction"][10] == 0.5
    assert s.extras["uses_aux"][8] and not s.extras["uses_aux"][7]
    assert s.extras["main_defined"][:4] == [False, False, False, True]
    assert s.extras["aux_defined"][:2] == [False, True] and not s.extras["aux_defined"][5]
    assert s.extras["syntax_error"][3].startswith("line ")
    assert s.extras["program"][8].startswith("def aux(x):\n    return x * x\n\ndef sum_sq(xs):")
    assert any("NameError" in e for e in s.extras["test_errors"][6])


def test_ignored_result_penalty_quirk_and_fix():
    ignore = "def sum_sq(xs):\n    aux(0)\n    total = 0\n    for x in xs:\n        total += aux(x)\n    return total\n"
    # A helper with no return (no +0.4) still counts as existing, so the bonuses apply.
    side_effect = ("def aux(acc, x):\n    acc.append(x * x)\n",
                   "def sum_sq(xs):\n    acc = []\n    for x in xs:\n        aux(acc, x)\n    return sum(acc)\n")
    batch = [[AUX, ignore], list(side_effect), [AUX, MAIN_COOP]]
    quirk = score(batch)                                     # reference: the penalty never fires
    assert list(quirk) == pytest.approx([4.0, 3.6, 4.0])
    fixed = score(batch, make_task(fix_ignored_result=True))
    assert list(fixed) == pytest.approx([3.5, 3.1, 4.0])
    assert fixed.components["cooperation"] == pytest.approx([1.0, 1.0, 1.5])


def test_single_agent_form_drops_helper_terms():
    both = "```python\ndef aux(x):\n    return x * x\n\ndef sum_sq(xs):\n    return sum(aux(x) for x in xs)\n```"
    half = "def sum_sq(xs):\n    return sum(x * x for x in xs[:1])\n"
    s = score([both, [both], [half], ["def sum_sq(xs):\n    pass\n"]])
    assert list(s) == pytest.approx([2.1, 2.1, 1.6, 0.0])
    assert s.components["cooperation"] == [0.0] * 4 and s.components["structure"][:3] == [0.6] * 3


def test_shift_and_scale():
    s = score([[AUX, MAIN_COOP], [AUX, "def sum_sq(xs):\n    return sum(x * x for x in xs\n"]],
              make_task(shift=-4.0, scale=0.5))
    # raw * scale + shift, as the reference composes them: 4.0 * 0.5 - 4 and 1.0 * 0.5 - 4
    assert list(s) == pytest.approx([-2.0, -3.5])
    assert sum(parts(s, 0)) == pytest.approx(4.0)  # components stay raw


def test_timeouts_stop_after_max_timeouts():
    loop = "def sum_sq(xs):\n    while True:\n        pass\n    return 0\n"
    item = dict(ITEM, tests=ITEM["tests"] * 3)  # 12 tests, each of which would run to its timeout
    s = score([[AUX, loop]], make_task(per_test_timeout_s=0.5, max_timeouts=3), item=item)
    assert list(s) == pytest.approx([1.5]) and s.extras["timeouts"] == [3]
    # Stopped after the third: the other 9 tests were never run.
    errors = s.extras["test_errors"][0]
    assert errors == ["timeout after 0.5s"] * 3 + ["not run: stopped after 3 timeouts"] * 9, errors


def test_canonical_humaneval_solutions_get_full_single_agent_reward():
    task = make_task(per_test_timeout_s=5.0)
    task.cfg.data.train_split = "test[:164]"
    items = task.load("train")
    t0 = time.perf_counter()
    s = task.score(items, [[task.single_prompt(it)] for it in items], [[it["canonical_solution"]] for it in items])
    elapsed = time.perf_counter() - t0
    print(f"\nreward batch of 164 canonical HumanEval programs: {elapsed:.2f} s")
    bad = {it["id"]: (s[i], s.extras["test_errors"][i][:1], s.extras["setup_error"][i])
           for i, it in enumerate(items) if s[i] != pytest.approx(2.1)}
    assert not bad
    assert all(s.extras["passed"])


def test_metrics_pass_at_k_codebleu_and_tests_fraction():
    task = make_task()
    a = dict(ITEM, id="a", canonical_solution="def sum_sq(xs):\n    return sum(x * x for x in xs)\n")
    b = dict(ITEM, id="b", canonical_solution="")
    items = [a, a, a, b, b, b]
    passed = [True, False, False, True, True, True]
    programs = [MAIN_ALONE, "def sum_sq(xs):\n    return 0\n", "", "x", "y", "z"]
    fractions = [1.0, 0.25, 0.0, 1.0, 1.0, 1.0]
    scores = Scores([0.0] * 6, {}, {"passed": passed, "program": programs, "tests_fraction": fractions})
    m = task.metrics(items, [["", ""]] * 6, scores)
    assert m["pass@1"] == pytest.approx((1 / 3 + 1) / 2)
    assert m["pass@3"] == pytest.approx(1.0)
    assert "pass@5" not in m and "pass@10" not in m
    assert m["tests_fraction"] == pytest.approx(4.25 / 6)
    assert 0.0 < m["codebleu"] < 1.0


def test_metrics_score_when_extras_are_missing():
    task = make_task()
    items = [dict(ITEM, id="a", canonical_solution=MAIN_ALONE)] * 2
    m = task.metrics(items, [[AUX, MAIN_COOP], [AUX, "nothing"]], Scores([0.0, 0.0]))
    assert m["pass@1"] == pytest.approx(0.5) and m["tests_fraction"] == pytest.approx(0.5)


def test_mbpp_reference_code_gets_full_single_agent_reward():
    from magrpo.tasks.coding.data import normalize

    rows = [{"task_id": 17, "prompt": "Write a function that returns the perimeter of a square given its side length.",
             "code": "def helper(a):\r\n  return a\r\ndef square_perimeter(a):\r\n  return 4 * helper(a)",
             "test_imports": ["import math"],
             "test_list": ["assert square_perimeter(10)==40", "assert math.isclose(square_perimeter(5), 20)"]}]
    items = [normalize(r) for r in rows]
    s = make_task().score(items, [["p"]], [[it["canonical_solution"]] for it in items])
    assert list(s) == pytest.approx([2.1]) and s.extras["passed"] == [True]


@pytest.mark.parametrize("call", ["aux(s)", "aux (s)", "aux(  s )", "aux\t(s)"])
def test_fixed_ignored_result_check_catches_any_spacing(call):
    """`fix_ignored_result` penalises a bare statement call of aux whatever its spacing, at any
    depth of main's body; a call whose value is used is not penalised."""
    from magrpo.tasks.coding import analysis

    dropped = f"def sum_sq(xs):\n    for s in xs:\n        if s:\n            {call}\n    return sum(aux(x) for x in xs)\n"
    used = f"def sum_sq(xs):\n    total = 0\n    for s in xs:\n        total += {call}\n    return total\n"
    assert analysis.ignored_helper_calls(analysis.find_function(dropped, "sum_sq"), "aux") == [4]
    assert analysis.ignored_helper_calls(analysis.find_function(used, "sum_sq"), "aux") == []
    fixed = score([[AUX, dropped], [AUX, used]], make_task(fix_ignored_result=True))
    assert list(fixed) == pytest.approx([3.5, 4.0])
    assert fixed.components["cooperation"] == pytest.approx([1.0, 1.5])
    assert list(score([[AUX, dropped], [AUX, used]])) == pytest.approx([4.0, 4.0])  # the reference's quirk


def test_a_completions_own_syntax_warnings_are_not_printed(recwarn):
    """`1if xs else 0` parses with a SyntaxWarning ("invalid decimal literal"): the completion's, not
    the user's; scoring it prints nothing (the reward's parses go through sandbox.judge.parse_code)."""
    import ast
    import warnings

    code = "def sum_sq(xs):\n    return 1if xs else 0\n"
    warnings.simplefilter("always")
    ast.parse(code)                                   # the warning is there to be hidden
    assert [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
    recwarn.clear()
    s = score([[AUX, code]])
    assert parts(s, 0)[0] == 1.0                      # both defined, with a return
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
