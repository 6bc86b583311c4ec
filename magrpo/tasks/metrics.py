"""Evaluation metrics, computed through the reference libraries so numbers stay comparable.

pass@k follows Chen et al. (2021); ROUGE-L is `rouge_score` with stemming; CodeBLEU is the
`codebleu` package (which needs `tree-sitter-python==0.21.*` next to `tree-sitter==0.22.*`:
later grammar releases hand tree-sitter 0.22 a capsule where it expects an integer).
The heavy libraries are imported on first use.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

CODEBLEU_KEYS = ("codebleu", "ngram_match_score", "weighted_ngram_match_score", "syntax_match_score",
                 "dataflow_match_score")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with `c` correct among `n` samples.

    pass@k = 1 - C(n-c, k) / C(n, k), evaluated as 1 - prod_{i=n-c+1}^{n} (1 - k/i): the ratio of
    binomials never materialises, so large n cannot overflow.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0  # every draw of k samples contains a correct one
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_table(results: Mapping[str, Sequence[bool]], ks: Iterable[int] = (1, 3, 5, 10)) -> dict[str, float]:
    """{"pass@k": mean over problems} for each k no larger than the smallest problem's sample count.

    `results` maps a problem id to the pass/fail of each of its samples. A k that some problem
    cannot support is left out for all problems, so every reported value averages the same set.
    """
    if not results:
        return {}
    min_n = min(len(v) for v in results.values())
    table = {}
    for k in sorted(set(ks)):
        if 1 <= k <= min_n:
            scores = [pass_at_k(len(v), sum(bool(x) for x in v), k) for v in results.values()]
            table[f"pass@{k}"] = sum(scores) / len(scores)
    return table


def rouge_l(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Mean ROUGE-L F-measure of each prediction against its reference (Porter stemming on)."""
    _same_length(predictions, references)
    if not predictions:
        return 0.0
    return sum(rouge_l_scores(predictions, references)) / len(predictions)


def rouge_l_scores(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """ROUGE-L F-measure of each prediction against its reference (Porter stemming on), one per pair."""
    _same_length(predictions, references)
    scorer = _rouge_scorer()
    # rouge_score's signature is score(target, prediction).
    return [scorer.score(ref, pred)["rougeL"].fmeasure for pred, ref in zip(predictions, references)]


@functools.cache
def _rouge_scorer():
    """One scorer per process: building one costs more than scoring a pair of short answers."""
    from rouge_score.rouge_scorer import RougeScorer  # noqa: PLC0415  start-up: ROUGE loads only for the writing tasks

    # rouge_score logs through absl at INFO when a scorer is built ("Using default tokenizer."): its
    # line, not ours, in every writing run's log
    logging.getLogger("absl").setLevel(logging.WARNING)
    return RougeScorer(["rougeL"], use_stemmer=True)


def codebleu(predictions: Sequence[str], references: Sequence[str], lang: str = "python") -> dict[str, float]:
    """Corpus CodeBLEU and its four parts, as `codebleu.calc_codebleu` returns them."""
    _same_length(predictions, references)
    if not predictions:
        return {key: 0.0 for key in CODEBLEU_KEYS}
    from codebleu import calc_codebleu  # noqa: PLC0415  optional: CodeBLEU, scored only when asked for

    # calc_codebleu takes the references first.
    scores = calc_codebleu(list(references), list(predictions), lang=lang)
    return {key: float(value) for key, value in scores.items()}


def summarize(values: Iterable[float]) -> dict[str, float]:
    """mean, population std, min and max (all 0.0 for no values)."""
    xs = [float(v) for v in values]
    if not xs:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
    mean = math.fsum(xs) / len(xs)
    var = math.fsum((x - mean) ** 2 for x in xs) / len(xs)
    return {"mean": mean, "std": math.sqrt(var), "min": min(xs), "max": max(xs)}


def pointwise_mutual_information(pairs: Sequence[tuple[Hashable, Hashable]]) -> list[float]:
    """pmi(x, y) = log2 [p(x, y) / (p(x) p(y))] in bits of each (x, y) pair, under the empirical
    joint distribution of the pairs (None is a value like any other: a missing move is a move)."""
    n = len(pairs)
    joint, xs, ys = Counter(pairs), Counter(x for x, _ in pairs), Counter(y for _, y in pairs)
    return [math.log2(joint[x, y] * n / (xs[x] * ys[y])) for x, y in pairs]


def mutual_information(pairs: Sequence[tuple[Hashable, Hashable]]) -> float:
    """I(X; Y) in bits of the empirical joint distribution of (x, y) pairs: the mean pointwise
    mutual information (0 for no pairs)."""
    return math.fsum(pointwise_mutual_information(pairs)) / len(pairs) if pairs else 0.0


def _same_length(predictions: Sequence[str], references: Sequence[str]) -> None:
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
