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


def _agent_prompt(item: Item, agent: int, role: str, other_role: str, rules: list[str]) -> str:
    """Agent `agent`'s prompt (1 or 2): its role, the other agent's, the problem, its rules."""
    return (
        f"You are agent {agent} of a two-agent Python team.\n"
        f"Your role: {role}\n"
        f"Agent {3 - agent}'s role: {other_role}\n\n"
        f"Problem:\n{item['prompt'].strip()}\n\n"
        f"Rules:\n"
        + "".join(f"- {rule}\n" for rule in [*rules, _FORMAT])
    )


def helper_prompt(item: Item, helper: str = HELPER_NAME) -> str:
    entry = item["entry_point"]
    return _agent_prompt(
        item, 1,
        f"write ONE helper function named `{helper}` that does a useful part of the work for the problem below.",
        f"write the main function `{entry}`, which will call `{helper}`.",
        [f"Define `def {helper}(...)` and make it return its result.",
         f"Do not write `{entry}`; agent 2 does that."],
    )


def main_prompt(item: Item, helper: str = HELPER_NAME) -> str:
    entry = item["entry_point"]
    return _agent_prompt(
        item, 2,
        f"write the main function `{entry}` for the problem below.",
        f"write a helper function `{helper}(...)` for this problem. It will be defined when your code runs, "
        f"but you cannot see it.",
        [f"Define `def {entry}(...)` with the signature above and make it return the answer.",
         f"You may call `{helper}` and use its return value; do NOT define `{helper}` yourself."],
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
