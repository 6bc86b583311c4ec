"""Run untrusted, model-generated Python: confined, and judged from outside.

Parts (each reads on its own):

    api.py        the calls: run_program, run_programs, check_program, run_tests, run_tests_many,
                  judge_humaneval, isolation_level; RunResult, TestReport, TestOutcome
    selfcheck.py  self_check: a known-correct and a known-wrong program, judged before the first verdict
    limits.py     SandboxLimits and the rlimits they become
    isolation.py  where the candidate runs: Linux namespaces, else a dedicated uid, else guards
    guards.py     the in-process guards (the weakest level, and a layer under `uid`)
    judge.py      the process that runs the tests and decides; candidates answer calls over pipes
    candidate.py  what runs inside the confined process
    codec.py      the plain-data values and frames that cross between them
    pool.py       the pre-started worker process that forks a judge per job
    procs.py      prctl, pidfds, /proc scans and kill loops

The sandbox runs any code and knows no task: callers hand it code, tests and the trusted code
the tests may use. docs/security.md says what each isolation
level promises.
"""

from magrpo.sandbox.api import (
    RunResult,
    TestOutcome,
    TestReport,
    check_program,
    isolation_level,
    judge_humaneval,
    run_program,
    run_programs,
    run_tests,
    run_tests_many,
)
from magrpo.sandbox.isolation import LEVELS, SandboxUnavailable
from magrpo.sandbox.limits import ISOLATION_CHOICES, SandboxLimits
from magrpo.sandbox.pool import SandboxWarning
from magrpo.sandbox.selfcheck import SandboxCheckFailed, self_check

__all__ = ["ISOLATION_CHOICES", "LEVELS", "RunResult", "SandboxCheckFailed", "SandboxLimits", "SandboxUnavailable",
           "SandboxWarning", "TestOutcome", "TestReport", "check_program", "isolation_level", "judge_humaneval",
           "run_program", "run_programs", "run_tests", "run_tests_many", "self_check"]
