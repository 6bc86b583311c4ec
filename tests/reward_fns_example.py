"""Reward functions the tests name as `tests.reward_fns_example:<function>` (TRL's signature)."""

from __future__ import annotations

SEEN: list[dict] = []     # what `record` was called with, for the tests to inspect


def _text(answer) -> str:
    """One agent's text, or a one-agent team's whole answer (a plain string)."""
    return answer if isinstance(answer, str) else " ".join(answer)


def brevity(prompts, completions, **columns) -> list[float]:
    """One float per joint answer: 1 for an empty answer, falling with its length."""
    return [1.0 / (1.0 + len(_text(c)) / 10.0) for c in completions]


def per_agent_letters(prompts, completions, **columns) -> list[list[float]]:
    """Per agent: 1 when its answer holds the letter a, else 0 (one share per agent)."""
    return [[float("a" in t.lower()) for t in ([c] if isinstance(c, str) else c)] for c in completions]


def record(prompts, completions, **columns) -> list[float]:
    """0.5 each; keeps what it was given."""
    SEEN.append({"prompts": prompts, "completions": completions, "columns": columns})
    return [0.5] * len(completions)


def boom(prompts, completions, **columns) -> list[float]:
    raise ZeroDivisionError("no answers to divide")


def boom_on_second(prompts, completions, **columns) -> list[float]:
    """Raises only when the batch holds an item whose id ends in /1."""
    for item_id in columns["id"]:
        if item_id.endswith("/1"):
            raise KeyError("topic")
    return [0.0] * len(completions)


def one_too_many(prompts, completions, **columns) -> list[float]:
    return [0.0] * (len(completions) + 1)


def not_a_number(prompts, completions, **columns) -> list[float]:
    return [float("nan")] * len(completions)


def a_string(prompts, completions, **columns) -> list:
    return ["high"] * len(completions)


def three_agents(prompts, completions, **columns) -> list[list[float]]:
    return [[0.0, 0.0, 0.0] for _ in completions]


def scored(prompts, completions, **columns):
    """The project's Scores: totals with a component of their own."""
    from magrpo.tasks.base import Scores

    lengths = [float(len(_text(c))) for c in completions]
    return Scores([min(n, 10.0) / 10.0 for n in lengths], {"chars": lengths})


NOT_CALLABLE = 3
