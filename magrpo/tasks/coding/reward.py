"""The coding reward (the paper's leveled code reward; maximum 4.0 for two agents, 2.1 for one).

Levels are gated: a level pays only if the one before it did.

  level 1, structure   helper `aux` defined with a return        +0.4  (optional: no stop)
                       entry point defined with a return         +0.6  (required, else stop)
  level 2, syntax      imports + helper + main parse together    +0.5  (else stop)
  level 3, tests       + fraction of the task's tests passed, by the per-test outcomes of
                         the sandbox's judge (per-test timeout, stop after `max_timeouts`
                         timeouts)                                +1.0 * passed / total
           cooperation only when >= 1 test passed and agent 1 defined `aux`:
                       main calls aux                            +0.5
                         and main is not a thin wrapper of aux   +1.0
                         and a call's result is thrown away      -0.5
  total = (structure + syntax + tests + cooperation) * scale + shift   (as the reference composes them)

As in the reference, the wrapper bonus and the penalty are only looked at when main calls aux
(so cooperation is one of 0, 0.5, 1.5, 0.0 or 1.0), and "aux exists" means agent 1's answer
defines it, returning or not. The single-agent form (one answer with both functions) drops every
helper term: main +0.6, syntax +0.5, tests +1.0.

Quirk switch (docs/reference/tasks.md): the reference's "result ignored" check never fires (see
`analysis.ignored_helper_calls`), so by default the penalty is never applied;
`fix_ignored_result: true` applies it to any statement that is a bare call of aux, whatever the
spacing (`aux(s)` as well as `aux (s)`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from magrpo.config.groups import RewardConfig
from magrpo.core.schema import option
from magrpo.sandbox import run_tests_many
from magrpo.sandbox.limits import SandboxLimits
from magrpo.tasks.base import Scores
from magrpo.tasks.coding import analysis
from magrpo.tasks.coding.extract import HELPER_NAME, Program, build_program

COMPONENTS = ("structure", "syntax", "tests", "cooperation")
# Per-sample diagnostics in Scores.extras: all tests passed (pass@k), fraction passed, agent 1
# defined `aux`, main defined with a return, main calls aux (only checked once a test passed),
# the joint program, its syntax error ("line L, column C: msg"), the sandbox's errors (one per
# test that did not pass, in test order), the error that stopped the program loading, timeouts,
# each test's outcome ({"index", "status", "error"}, status one of passed, failed, timeout,
# crashed, not_run; read by the diagnostics feedback), and the
# sandbox isolation level the program ran under.
EXTRAS = ("passed", "tests_fraction", "aux_defined", "main_defined", "uses_aux", "program",
          "syntax_error", "test_errors", "setup_error", "timeouts", "test_outcomes", "isolation")


@dataclass
class CodingRewardConfig(RewardConfig):
    name: str = option("humaneval", help="the reward variant (its task's name)")
    # Level weights; the defaults are the paper's.
    aux_defined: float = option(0.4, help="level 1: the helper (aux) defined with a return")
    main_defined: float = option(0.6, help="level 1: entry point defined with a return")
    syntax: float = option(0.5, help="level 2: imports, helper and main parse together")
    tests: float = option(1.0, help="level 3: paid times the fraction of tests passed")
    main_calls_aux: float = option(0.5, help="cooperation: main calls aux")
    not_wrapper: float = option(1.0, help="cooperation: main is not a thin wrapper of aux")
    ignored_result_penalty: float = option(0.5, help="subtracted when a call's result is thrown away")
    # Sandbox.
    per_test_timeout_s: float = option(2.0,
                                       help="seconds each test may run (the reference allows 10; 2 is "
                                            "plenty for the tasks' tests and keeps a looping candidate from "
                                            "stalling a training step: 3 timeouts then stop, at most ~6 s)")
    max_timeouts: int = option(3, help="test timeouts after which a candidate's other tests are not run")
    sandbox_timeout_s: float = option(30.0, help="whole run of one candidate (setup + program + all tests)")
    memory_mb: int = option(1024, help="memory limit of one candidate's sandbox, in MB")
    max_workers: int | None = option(None, help="parallel sandbox processes; null = the sandbox's default")
    fix_ignored_result: bool = option(False,
                                      help="quirk switch: true applies ignored_result_penalty to a bare "
                                           "call of aux whose result main throws away; false = the "
                                           "reference's behaviour (its check never fires: no penalty)")


@dataclass
class Judgement:
    """Static part of the reward for one joint answer (levels 1 and 2)."""

    program: Program
    single: bool
    aux_exists: bool = False
    main_ok: bool = False               # entry point defined with a return
    structure: float = 0.0
    syntax: float = 0.0
    syntax_error: str | None = None
    reached_tests: bool = False


def judge_static(completion: Sequence[str] | str, entry_point: str, imports: str, cfg: CodingRewardConfig,
                 helper: str = HELPER_NAME) -> Judgement:
    program = build_program(completion, entry_point, imports, helper)
    single = isinstance(completion, str) or len(completion) == 1
    j = Judgement(program=program, single=single)
    if not single:
        aux_defined, aux_returns = analysis.function_status(program.aux_code, helper)
        j.aux_exists = aux_defined
        if aux_defined and aux_returns:
            j.structure += cfg.aux_defined
    main_defined, main_returns = analysis.function_status(program.main_code, entry_point)
    if not (main_defined and main_returns):
        return j
    j.structure += cfg.main_defined
    j.main_ok = True
    j.syntax_error = analysis.syntax_error(program.source)
    if j.syntax_error is not None:
        return j
    j.syntax = cfg.syntax
    j.reached_tests = True
    return j


def cooperation_bonus(main_code: str, entry_point: str, cfg: CodingRewardConfig,
                      helper: str = HELPER_NAME) -> tuple[float, bool]:
    """(bonus, main calls aux) for a main that passed >= 1 test next to an existing helper."""
    fn = analysis.find_function(main_code, entry_point)
    if not analysis.calls_helper(fn, helper):
        return 0.0, False
    bonus = cfg.main_calls_aux
    if not analysis.is_thin_wrapper(fn, helper):
        bonus += cfg.not_wrapper
    if cfg.fix_ignored_result and analysis.ignored_helper_calls(fn, helper):
        bonus -= cfg.ignored_result_penalty
    return bonus, True


def sandbox_limits(cfg: CodingRewardConfig, isolation: str = "auto") -> SandboxLimits:
    return SandboxLimits(timeout_s=cfg.sandbox_timeout_s, cpu_s=math.ceil(cfg.sandbox_timeout_s),
                         memory_mb=cfg.memory_mb, isolation=isolation)


def code_reward(completions: Sequence[Sequence[str] | str], entry_points: Sequence[str],
                tests: Sequence[Sequence[str]], setups: Sequence[str], imports: Sequence[str],
                cfg: CodingRewardConfig, helper: str = HELPER_NAME, test_setups: Sequence[str] | None = None,
                isolation: str = "auto") -> Scores:
    """Score a batch of joint answers; all sandbox runs of the batch go out in parallel.

    `setups` run before the program and in the judge, `test_setups` in the judge only (see
    magrpo.tasks.coding.data); the tests run in the judge against the program's entry point.
    `isolation` is the sandbox level asked for (the config's `sandbox.isolation`)."""
    test_setups = test_setups or [""] * len(completions)
    judgements = [judge_static(c, e, imp or "", cfg, helper)
                  for c, e, imp in zip(completions, entry_points, imports)]
    todo = [i for i, j in enumerate(judgements) if j.reached_tests and tests[i]]
    jobs = [(judgements[i].program.source, list(tests[i]), setups[i] or "", test_setups[i] or "", entry_points[i])
            for i in todo]
    reports = run_tests_many(jobs, per_test_timeout_s=cfg.per_test_timeout_s, max_timeouts=cfg.max_timeouts,
                             limits=sandbox_limits(cfg, isolation), max_workers=cfg.max_workers) if todo else []
    report_of = dict(zip(todo, reports))

    comps: dict[str, list[float]] = {k: [] for k in COMPONENTS}
    extras: dict[str, list[Any]] = {k: [] for k in EXTRAS}
    totals = []
    for i, j in enumerate(judgements):
        rep = report_of.get(i)
        n_tests = len(tests[i])
        outcomes = rep.outcomes if rep is not None else []
        passed = sum(o.status == "passed" for o in outcomes)
        frac = passed / n_tests if n_tests else 0.0
        coop, uses_aux = 0.0, False
        if rep is not None and passed >= 1 and not j.single and j.aux_exists:
            coop, uses_aux = cooperation_bonus(j.program.main_code, entry_points[i], cfg, helper)
        parts = {"structure": j.structure, "syntax": j.syntax, "tests": cfg.tests * frac, "cooperation": coop}
        for k, v in parts.items():
            comps[k].append(v)
        totals.append(sum(parts.values()) * cfg.scale + cfg.shift)
        extras["passed"].append(bool(rep is not None and n_tests and passed == n_tests))
        extras["tests_fraction"].append(frac)
        extras["aux_defined"].append(j.aux_exists)
        extras["main_defined"].append(j.main_ok)
        extras["uses_aux"].append(uses_aux)
        extras["program"].append(j.program.source)
        extras["syntax_error"].append(j.syntax_error)
        extras["test_errors"].append(list(rep.errors) if rep is not None else [])
        extras["setup_error"].append(rep.setup_error if rep is not None else None)
        extras["timeouts"].append(rep.timeouts if rep is not None else 0)
        extras["test_outcomes"].append([{"index": t, "status": o.status, "error": o.error}
                                        for t, o in enumerate(outcomes)])
        extras["isolation"].append(rep.isolation if rep is not None else None)
    return Scores(totals, comps, extras)
