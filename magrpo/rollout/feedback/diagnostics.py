"""`feedback=diagnostics`: what the reward found, in words, per task family (`Task.feedback_kind`).

    coding   which functions exist, a syntax error with its line and column, each failing test
             (by index, with its error; the assertion's source only with `feedback.show_tests`,
             since it would let an agent hard-code the expected values), whether main calls the helper
    writing  which reward levels passed or failed and why, with the measured numbers
    math     the number each agent's answer gives and whether the verifier accepted it
    generic  the reward and its components
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from magrpo.config.groups import FeedbackConfig
from magrpo.core.registry import Registry
from magrpo.core.schema import at_least, option
from magrpo.rollout.feedback import Feedback, NodeView, register_feedback
from magrpo.tasks.coding import analysis
from magrpo.tasks.coding.extract import HELPER_NAME, build_program

Diagnoser = Callable[[NodeView, int, "DiagnosticsFeedbackConfig", Any], str]
DIAGNOSERS: Registry[Diagnoser] = Registry("diagnosed task family", "task feedback_kind")


def register_diagnoser(kind: str) -> Callable[[Diagnoser], Diagnoser]:
    def deco(fn: Diagnoser) -> Diagnoser:
        DIAGNOSERS.register(kind, fn)
        return fn

    return deco


@dataclass
class DiagnosticsFeedbackConfig(FeedbackConfig):
    mode: str = "diagnostics"
    show_tests: bool = option(False,
                              help="show the failing assertion's source (lets an agent hard-code answers)")
    max_failures: int = at_least(1, 3, help="failing tests listed per answer")


@register_feedback("diagnostics")
class DiagnosticsFeedback(Feedback):
    config_schema = DiagnosticsFeedbackConfig
    cfg: DiagnosticsFeedbackConfig      # its config_schema's instance (Feedback.__init__)

    @classmethod
    def kinds(cls) -> Mapping[str, Diagnoser]:
        return DIAGNOSERS

    def message(self, view: NodeView, agent: int) -> str:
        text = DIAGNOSERS[self.kind()](view, agent, self.cfg, self.task)
        return f"{text}\n\n{self.instruction(view, agent)}"


# -- per-test outcomes ----------------------------------------------------------------------------


def test_outcomes(extras: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-test outcomes of one scored program: [{"index", "status", "error"}], status one of
    passed / failed / timeout / crashed.

    Read from the sandbox's `test_outcomes` (every test by index) when the reward reports them;
    otherwise rebuilt from `test_errors` (the errors of the tests that did not pass, in test order,
    without their indices: "index" is None there).
    """
    outcomes = extras.get("test_outcomes")
    if outcomes is not None:
        return [dict(o) for o in outcomes]
    out = []
    for error in extras.get("test_errors") or []:
        status = "timeout" if str(error).startswith("timeout") else "failed"
        out.append({"index": None, "status": status, "error": str(error)})
    return out


def _function_line(name: str, owner: str, defined: bool, returns: bool) -> str:
    state = "defined, returns a value" if defined and returns else (
        "defined, but never returns a value" if defined else "not defined")
    return f"- `{name}`{owner}: {state}"


@register_diagnoser("coding")
def coding(view: NodeView, agent: int, cfg: DiagnosticsFeedbackConfig, task: Any) -> str:
    item, ex = view.item, view.extras
    entry, team = item["entry_point"], len(view.answers) > 1
    program = build_program(view.answers, entry, item.get("imports") or "")
    lines = []
    if team:
        lines.append(_function_line(HELPER_NAME, " (agent 1's helper)",
                                    *analysis.function_status(program.aux_code, HELPER_NAME)))
    main_defined, main_returns = analysis.function_status(program.main_code, entry)
    lines.append(_function_line(entry, " (agent 2's main function)" if team else "", main_defined, main_returns))
    error = ex.get("syntax_error")
    if error:
        line = _source_line(program.source, error)
        lines.append(f"- syntax error in the team's program at {error}" + (f"\n    {line}" if line else ""))
    elif main_defined and main_returns:
        lines.append("- the program parses")
    tests = item.get("tests") or []
    if main_defined and main_returns and not error:
        if ex.get("setup_error"):
            lines.append(f"- the program failed before any test ran: {ex['setup_error']}")
        n_passed = round(float(ex.get("tests_fraction") or 0.0) * len(tests))
        lines.append(f"- tests: {n_passed} of {len(tests)} passed")
        failing = [o for o in test_outcomes(ex) if o.get("status") != "passed"]
        for o in failing[:cfg.max_failures]:
            idx = o.get("index")
            label = f"test {idx + 1}" if idx is not None else "a test"
            text = f"  - {label} {o.get('status', 'failed')}: {o.get('error') or 'no message'}"
            if cfg.show_tests and idx is not None and 0 <= idx < len(tests):
                text += f"\n      {tests[idx].strip()}"
            lines.append(text)
        if len(failing) > cfg.max_failures:
            lines.append(f"  - ... and {len(failing) - cfg.max_failures} more")
    else:
        lines.append(f"- tests: not run (`{entry}` must be defined with a return and the program must parse)")
    if team and main_defined:
        fn = analysis.find_function(program.main_code, entry)
        calls = analysis.calls_helper(fn, HELPER_NAME)
        lines.append(f"- `{entry}` calls `{HELPER_NAME}`: {'yes' if calls else 'no'}")
    return "Diagnostics of the team's program:\n" + "\n".join(lines)


def _source_line(source: str, error: str) -> str:
    """The program's line named in a "line L, column C: msg" syntax error."""
    m = re.match(r"line (\d+)", error)
    if not m:
        return ""
    lines = source.splitlines()
    n = int(m.group(1))
    return f"line {n}: {lines[n - 1].strip()}" if 1 <= n <= len(lines) else ""


@register_diagnoser("writing")
def writing(view: NodeView, agent: int, cfg: DiagnosticsFeedbackConfig, task: Any) -> str:
    r = task.reward_cfg
    ex = view.extras
    stats, passed = ex.get("stats") or {}, int(ex.get("levels_passed") or 0)

    def verdict(level: int) -> str:
        return "passed" if passed >= level else "FAILED"

    hi = "no upper limit" if r.unique_ramp_high is None else f"at most {r.unique_ramp_high}"
    band = f"{r.unique_band_low}+" if r.unique_band_high is None else f"{r.unique_band_low}-{r.unique_band_high}"
    levels = [
        f"- level 1, length of each answer ({r.min_tokens}-{r.max_tokens} words): answer 1 has "
        f"{stats.get('tokens_a1', '?')}, answer 2 has {stats.get('tokens_a2', '?')}: {verdict(1)}",
        f"- level 2, length ratio answer 2 / answer 1 in characters (best {r.length_band_low}-{r.length_band_high}, "
        f"accepted {r.length_ramp_low}-{r.length_ramp_high}): {stats.get('length_ratio', 0.0):.2f}: {verdict(2)}",
        f"- level 3, unique-word ratio answer 2 / answer 1 (best {band}, at least {r.unique_ramp_low}, {hi}): "
        f"{stats.get('unique_ratio', 0.0):.2f}: {verdict(3)}",
        f"- level 4, style: {len(stats.get('transition_categories') or [])} kinds of transition words, word "
        f"overlap (Jaccard) {stats.get('jaccard', 0.0):.3f} (full credit at {r.jaccard_cap})",
    ]
    shown = levels[:min(passed + 1, 4)]     # levels after the first failure are not scored
    total = f"reward {view.reward:.3f}; levels are checked in order and stop at the first failure"
    return f"Diagnostics of the team's answers ({total}):\n" + "\n".join(shown)


@register_diagnoser("math")
def math_answers(view: NodeView, agent: int, cfg: DiagnosticsFeedbackConfig, task: Any) -> str:
    parsed = view.extras.get("agent_answers") or [None] * len(view.answers)
    correct = view.extras.get("agent_correct") or [None] * len(view.answers)
    mine = parsed[agent]
    said = f"your final answer reads as {mine}" if mine is not None else "no final number was found in your answer"
    judged = {True: "the verifier accepted it", False: "the verifier did not accept it", None: "not checked"}
    return f"Diagnostics: {said}; {judged[correct[agent]]}."


@register_diagnoser("generic")
def generic(view: NodeView, agent: int, cfg: DiagnosticsFeedbackConfig, task: Any) -> str:
    parts = ", ".join(f"{k} = {v:.3f}" for k, v in view.components.items())
    return f"Diagnostics: the team's reward is {view.reward:.3f}" + (f" ({parts})." if parts else ".")
