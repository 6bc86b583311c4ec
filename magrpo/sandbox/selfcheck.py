"""The sandbox checks itself before it gives its first verdict.

A judge that fails honest code does not crash: it scores every program 0 and says nothing, and a
reward built on it pays nothing for correct code. So before the first verdict a process runs two
small programs through the same path as the coding reward (`run_tests` with setup, tests and an
entry point) at the isolation level that will judge: a correct one, which imports a module from
the Python installation that the worker has not loaded, writes and reads back files in its
working directory and its temporary directory; and a wrong one. If the correct one fails or the
wrong one passes, `self_check` raises SandboxCheckFailed with one line that names the level, the
directories involved and the reason. The verdict is kept per process and requested level.
"""

from __future__ import annotations

import os
import threading
import time

from magrpo.core.schema import SetupError
from magrpo.sandbox.api import run_tests_many
from magrpo.sandbox.limits import SandboxLimits
from magrpo.sandbox.pool import get_pool

# The program is trusted to be correct: if it fails, the judge is broken, not the program.
_CORRECT = '''
import colorsys  # not preloaded by the worker: read from the Python installation here
import tempfile


def scaled(x):
    with open("self_check.txt", "w") as f:  # the working directory
        f.write(str(x * 2))
    with tempfile.TemporaryFile("w+") as f:  # the temporary directory
        f.write("1")
        f.seek(0)
        one = int(f.read())
    with open("self_check.txt") as f:
        return int(f.read()) + one - round(sum(colorsys.rgb_to_hsv(0.0, 0.0, 0.0)))
'''
_WRONG = '''
def scaled(x):
    return x * 2  # forgets the +1
'''
_SETUP = "import math\n"
_TESTS = ["assert scaled(1) == 3", "assert scaled(20) == 41", "assert scaled(0) == math.floor(1.5)"]
_PER_TEST_S = 5.0  # generous: a slow machine must not fail a healthy judge


class SandboxCheckFailed(SetupError):
    """The sandbox judged its known-correct program failed, or its known-wrong program passed."""


_lock = threading.Lock()
_locks: dict[tuple[int, str], threading.Lock] = {}
_results: dict[tuple[int, str], dict | str] = {}  # (pid, requested level) -> result, or the failure's message


def self_check(isolation: str = "auto") -> dict:
    """Run the known-correct and the known-wrong program at the level that `isolation` runs here;
    once per process and requested level (later calls return the kept result at no cost).

    Returns {"level", "seconds", "scratch", "tmpdir", "package"}: the level that ran, the check's
    wall time, where scratch and working directories are, the caller's TMPDIR and the directory
    holding the package. Raises SandboxCheckFailed (a SetupError) with a one-line message when
    the judge is broken, and SandboxUnavailable when the level cannot run here at all."""
    SandboxLimits(isolation=isolation)  # validates the name
    key = (os.getpid(), isolation)
    with _lock:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:  # concurrent first callers of a level wait for one check instead of running their own
        kept = _results.get(key)
        if kept is None:
            try:
                kept = _run(isolation)
            except SandboxCheckFailed as e:
                kept = str(e)
            _results[key] = kept
    if isinstance(kept, str):
        raise SandboxCheckFailed(kept)
    return dict(kept)


def _run(isolation: str) -> dict:
    pool = get_pool(isolation)  # started (and its level settled) before the clock: not the check's cost
    limits = SandboxLimits(timeout_s=4 * _PER_TEST_S, isolation=isolation)
    start = time.perf_counter()
    good, bad = run_tests_many([(_CORRECT, _TESTS, _SETUP, "", "scaled"), (_WRONG, _TESTS, _SETUP, "", "scaled")],
                               per_test_timeout_s=_PER_TEST_S, max_timeouts=1, limits=limits, max_workers=2)
    seconds = time.perf_counter() - start
    info = {"level": pool.level, "seconds": seconds, "scratch": pool.scratch(), "tmpdir": pool.tmpdir,
            "package": pool.package_parent}
    reason = None
    if good.passed != good.total:
        why = good.setup_error or next((e for e in good.errors if e), None) or good.status
        reason = f"a known-correct program failed ({why})"
    elif bad.passed:
        reason = f"a known-wrong program passed {bad.passed} of {bad.total} tests"
    if reason is not None:
        message = (f"sandbox self-check failed at isolation '{pool.level}' (scratch: {info['scratch']}; "
                   f"TMPDIR: {info['tmpdir']}; package: {info['package']}): {reason}; "
                   f"generated code would be judged wrongly, so nothing runs")
        raise SandboxCheckFailed(" ".join(message.split()))
    return info
