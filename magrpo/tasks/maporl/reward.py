"""The MAPoRL reward: a verifier's score of each agent's answer plus discussion incentives.

MAPoRL (Park et al., 2025, "MAPoRL: Multi-Agent Post-Co-Training for Collaborative LLMs with
Reinforcement Learning") rewards each agent for a verified answer and shapes the discussion:

    r_i = correct * v_i                                              verifier score of agent i's answer
        + persuasion * (share of the other agents that gave another answer at the previous turn
                        and now give agent i's previous answer, when that answer was right)
        + correction * [agent i was wrong, saw a right peer, and is now right]
        - regression * [agent i was right and is now wrong]

The incentive terms need the previous turn: they read the joint answer the node grew from
(`item["turn_history"][-1]`, magrpo.rollout.turns) and are 0 at turn 1. The team reward is the mean over
agents, mean_i(r_i) * scale + shift (as the reference composes shift and scale); each agent's
share (`algo.reward=individual`) is (r_i * scale + shift) / N, so the shares add up to it.

Verifier: `exact` (default) parses the final number of an answer (the last "Answer: X", else the
last number) and compares it with the reference; `model` scores (question, answer) with a local
reward model loaded by AutoModelForSequenceClassification (sigmoid of a one-logit head, else the
probability of the last class); an answer counts as right when its score is at least 0.5.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from magrpo.config.groups import RewardConfig
from magrpo.core.schema import ConfigError, at_least, option
from magrpo.models import hub
from magrpo.tasks.base import Scores

COMPONENTS = ("verifier", "persuasion", "correction", "regression")

_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*\$?\s*(-?[\d,]*\.?\d+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*|-?\.\d+")


@dataclass
class MaporlRewardConfig(RewardConfig):
    name: str = option("maporl_qa", help="the reward variant (its task's name)")
    verifier: str = option("exact", choices=["exact", "model"],
                           help="exact = compare the final number; model = a local reward model")
    verifier_model: str | None = option(None,
                                        help="verifier=model: a local AutoModelForSequenceClassification")
    tolerance: float = at_least(0, 1e-6, help="relative tolerance of the exact numeric match")
    correct: float = option(1.0, help="weight of the verifier score")
    persuasion: float = option(0.5, help="weight of moving peers to one's right answer")
    correction: float = option(0.5, help="weight of turning wrong to right after a right peer")
    regression: float = option(0.5, help="penalty for right -> wrong")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        if node.verifier == "model" and not node.verifier_model:
            raise ConfigError(f"{prefix}verifier='model' needs {prefix}verifier_model (a local reward model path)")


def parse_answer(text: str) -> str | None:
    """The final number of an answer: the last "Answer: X", else the last number; None if none."""
    found = _ANSWER.findall(text or "")
    if not found:
        found = _NUMBER.findall(text or "")
    if not found:
        return None
    s = found[-1].replace(",", "").rstrip(".")
    try:
        value = Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def same_number(a: str | None, b: str | None, tol: float = 1e-6) -> bool:
    if a is None or b is None:
        return False
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return abs(x - y) <= tol * max(1.0, abs(y))


@functools.lru_cache(maxsize=2)
def _load_verifier(path: str):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: PLC0415  start-up: transformers loads only where a model does

    from magrpo.models.agents import resolve_model_path  # noqa: PLC0415  start-up: torch loads only where a model does; the tasks and feedback modes load without it

    where = resolve_model_path(path)
    tok = AutoTokenizer.from_pretrained(where)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with hub.quiet_bars("transformers"):
        model = AutoModelForSequenceClassification.from_pretrained(where).eval()
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id
    return model, tok


def model_scores(path: str, questions: Sequence[str], answers: Sequence[str], batch: int = 32) -> list[float]:
    """Reward-model scores in [0, 1] of (question, answer) pairs."""
    import torch  # noqa: PLC0415  start-up: torch loads only where a model does; the tasks and feedback modes load without it

    model, tok = _load_verifier(path)
    out: list[float] = []
    for s in range(0, len(answers), batch):
        texts = [f"Question: {q}\nAnswer: {a}" for q, a in zip(questions[s:s + batch], answers[s:s + batch])]
        enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=1024)
        with torch.no_grad():
            logits = model(**enc).logits.float()
        probs = torch.sigmoid(logits[:, 0]) if logits.shape[-1] == 1 else logits.softmax(-1)[:, -1]
        out += probs.tolist()
    return out


def verify(answers: list[list[str]], questions: Sequence[str], golds: Sequence[str],
           cfg: MaporlRewardConfig) -> list[list[float]]:
    """[k][agent] verifier score of every answer of every joint action (all in one model batch)."""
    if cfg.verifier == "model":
        if cfg.verifier_model is None:      # the config check refuses it (MaporlRewardConfig.check_node)
            raise ConfigError("reward.verifier='model' needs reward.verifier_model (a local reward model path)")
        flat_q = [q for q, joint in zip(questions, answers) for _ in joint]
        flat_a = [a for joint in answers for a in joint]
        flat = iter(model_scores(cfg.verifier_model, flat_q, flat_a))
        return [[next(flat) for _ in joint] for joint in answers]
    return [[float(same_number(parse_answer(a), str(g), cfg.tolerance)) for a in joint]
            for joint, g in zip(answers, golds)]


def incentives(now: list[str | None], before: list[str | None], right_now: list[bool],
               right_before: list[bool]) -> list[dict[str, float]]:
    """Per agent: persuasion (share of peers won over to its previously right answer), correction
    (wrong -> right after seeing a right peer), regression (right -> wrong); all 0 or in [0, 1]."""
    n = len(now)
    out = []
    for i in range(n):
        peers = [j for j in range(n) if j != i]
        won = sum(1 for j in peers if before[j] != before[i] and now[j] is not None and now[j] == before[i])
        out.append({
            "persuasion": won / len(peers) if right_before[i] and peers and before[i] is not None else 0.0,
            "correction": float(not right_before[i] and right_now[i] and any(right_before[j] for j in peers)),
            "regression": float(right_before[i] and not right_now[i]),
        })
    return out


def majority(parsed: list[str | None]) -> str | None:
    """The most common parsed answer (ties: the one an earlier agent gave); None if no agent gave one."""
    votes = Counter(p for p in parsed if p is not None)
    return votes.most_common(1)[0][0] if votes else None


def maporl_reward(completions: list[list[str]], questions: Sequence[str], golds: Sequence[str],
                  histories: Sequence[list[list[str]] | None], cfg: MaporlRewardConfig) -> Scores:
    """Score joint answers; returns Scores with the components above and per-agent extras."""
    v_now = verify(completions, questions, golds, cfg)
    # the joint answer of the previous turn, where there was one
    prev = {k: h[-1] for k, h in enumerate(histories) if h}
    v_prev = dict(zip(prev, verify(list(prev.values()), [questions[k] for k in prev],
                                   [golds[k] for k in prev], cfg))) if prev else {}
    totals, shares = [], []
    comps: dict[str, list[float]] = {c: [] for c in COMPONENTS}
    extras: dict[str, list[Any]] = {k: [] for k in ("agent_answers", "agent_correct", "passed", "majority",
                                                    "majority_correct", "agreement", "individual")}
    for k, joint in enumerate(completions):
        n = len(joint)
        parsed = [parse_answer(a) for a in joint]
        right = [v >= 0.5 for v in v_now[k]]
        per_agent = [cfg.correct * v for v in v_now[k]]
        terms = {c: [0.0] * n for c in COMPONENTS}
        terms["verifier"] = list(per_agent)
        if k in v_prev:
            before = [parse_answer(a) for a in prev[k]]
            bonus = incentives(parsed, before, right, [v >= 0.5 for v in v_prev[k]])
            for i, b in enumerate(bonus):
                terms["persuasion"][i] = cfg.persuasion * b["persuasion"]
                terms["correction"][i] = cfg.correction * b["correction"]
                terms["regression"][i] = -cfg.regression * b["regression"]
                per_agent[i] += terms["persuasion"][i] + terms["correction"][i] + terms["regression"][i]
        for c in COMPONENTS:
            comps[c].append(sum(terms[c]) / n)
        totals.append(sum(per_agent) / n * cfg.scale + cfg.shift)
        shares.append([(r * cfg.scale + cfg.shift) / n for r in per_agent])
        vote = majority(parsed)
        extras["agent_answers"].append(parsed)
        extras["agent_correct"].append(right)
        extras["passed"].append(all(right))
        extras["majority"].append(vote)
        extras["majority_correct"].append(same_number(vote, str(golds[k]), cfg.tolerance))
        extras["agreement"].append(len(set(parsed)) == 1 and parsed[0] is not None)
        extras["individual"].append(shares[-1])
    return Scores(totals, comps, extras)
