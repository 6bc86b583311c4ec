"""Prompts for the coding tasks (the paper's helper/main split of a program).

Agent 1 writes a helper `aux`, agent 2 writes the entry point and may call `aux` without
seeing it (decentralised execution: each agent answers from its own prompt only). Both are told
their own role and the other's, so that agent 1 writes something agent 2 can plausibly use and
agent 2 does not redefine it. The single-agent prompt (GRPO, the `single` baseline) asks one
model for both functions in one answer.
"""

from __future__ import annotations

from magrpo.tasks.base import Item
from magrpo.tasks.coding.extract import HELPER_NAME

_FORMAT = "Reply with Python code only (imports allowed): no explanations, no tests, no example calls."


def helper_prompt(item: Item, helper: str = HELPER_NAME) -> str:
    entry = item["entry_point"]
    return (
        f"You are agent 1 of a two-agent Python team.\n"
        f"Your role: write ONE helper function named `{helper}` that does a useful part of the work "
        f"for the problem below.\n"
        f"Agent 2's role: write the main function `{entry}`, which will call `{helper}`.\n\n"
        f"Problem:\n{item['prompt'].strip()}\n\n"
        f"Rules:\n"
        f"- Define `def {helper}(...)` and make it return its result.\n"
        f"- Do not write `{entry}`; agent 2 does that.\n"
        f"- {_FORMAT}\n"
    )


def main_prompt(item: Item, helper: str = HELPER_NAME) -> str:
    entry = item["entry_point"]
    return (
        f"You are agent 2 of a two-agent Python team.\n"
        f"Your role: write the main function `{entry}` for the problem below.\n"
        f"Agent 1's role: write a helper function `{helper}(...)` for this problem. It will be "
        f"defined when your code runs, but you cannot see it.\n\n"
        f"Problem:\n{item['prompt'].strip()}\n\n"
        f"Rules:\n"
        f"- Define `def {entry}(...)` with the signature above and make it return the answer.\n"
        f"- You may call `{helper}` and use its return value; do NOT define `{helper}` yourself.\n"
        f"- {_FORMAT}\n"
    )


def single_prompt(item: Item, helper: str = HELPER_NAME) -> str:
    entry = item["entry_point"]
    return (
        f"Solve the Python problem below with two functions:\n"
        f"1. a helper function `{helper}(...)` that does a useful part of the work and returns it;\n"
        f"2. the main function `{entry}` with the signature below, which calls `{helper}` and "
        f"returns the answer.\n\n"
        f"Problem:\n{item['prompt'].strip()}\n\n"
        f"{_FORMAT}\n"
    )
