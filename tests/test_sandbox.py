"""The sandbox against hostile and ordinary programs.

Every case runs under small limits, and an autouse fixture checks after each test that none of
the sandbox processes it started is still alive: no process that carries this test process's tag
(magrpo.sandbox.procs.tagged_processes: every process its sandbox starts has it, setsid and double
forks included) other than the pools' workers, and none whose command line or working directory
lies in this test's sandbox directories. Another checkout's test run, or another test process of
this one, tags its own processes with another tag: they are never counted here.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from magrpo.sandbox import (
    RunResult,
    SandboxLimits,
    TestReport,
    check_program,
    run_program,
    run_programs,
    run_tests,
    run_tests_many,
)
from magrpo.sandbox.pool import caller_tag, worker_pids
from magrpo.sandbox.procs import TAG_VAR, process_state, tagged_processes

FAST = SandboxLimits(timeout_s=2.0, cpu_s=3, memory_mb=256, max_processes=8)


def _alive(pid: int) -> bool:
    return process_state(pid) not in (None, "Z", "X")


def _live_processes_mentioning(text: str) -> list[int]:
    """Live pids whose command line or working directory contains `text`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if (text in cmdline or text in cwd) and _alive(int(name)):
            found.append(int(name))
    return found


def _runs_sleep(pid: int) -> bool:
    """Whether `pid` has finished exec'ing `sleep`: its name is set and its new environment is in place."""
    try:
        with open(f"/proc/{pid}/comm") as f, open(f"/proc/{pid}/environ", "rb") as env:
            return f.read().strip() == "sleep" and bool(env.read())
    except OSError:
        return False


def _marker() -> str:
    """A sleep duration (seconds) that no other test, here or in another run, starts: a token in the
    sleeper's command line that only this test's processes mention."""
    return f"30.{secrets.randbelow(10 ** 9):09d}"


def _survivors(before: set[int]) -> set[int]:
    """This test process's sandbox processes (its tag), but its pools' workers and what lived before."""
    return tagged_processes(caller_tag()) - worker_pids() - before


@pytest.fixture(autouse=True)
def sandbox_root(tmp_path, monkeypatch):
    """Sandboxes of this test live under tmp_path; none of their processes may outlive it."""
    root = tmp_path / "sbx"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    before = tagged_processes(caller_tag())
    yield str(root)
    deadline = time.monotonic() + 1.0  # a SIGKILLed process may take a moment to disappear
    while (_survivors(before) or _live_processes_mentioning(str(root))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _survivors(before) == set()
    assert _live_processes_mentioning(str(root)) == []
    assert os.listdir(root) == [], "the sandbox working directory was not removed"


def test_survivors_are_this_test_processes_tagged_ones_only(tmp_path):
    """The check above counts an orphan that carries this process's tag (as an escaped sandbox
    process would: reparented, in a session of its own) and not one with another run's tag."""
    before = tagged_processes(caller_tag())
    orphans = {}
    for tag in (caller_tag(), "another-run"):
        pidfile = tmp_path / f"{len(orphans)}.pid"
        # sh forks the sleeper into a new session and exits: the sleeper is nobody's child here.
        subprocess.run(["sh", "-c", f"setsid sleep 30 & echo $! > {pidfile}"], env={**os.environ, TAG_VAR: tag},
                       check=True)
        orphans[tag] = int(pidfile.read_text())
    # sh has exited, but its sleeper may still be inside execve, when /proc/<pid>/environ reads
    # empty for a moment: wait until both run `sleep` before looking for their tags.
    deadline = time.monotonic() + 5.0
    while not all(_runs_sleep(pid) for pid in orphans.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert _survivors(before) == {orphans[caller_tag()]}
    finally:
        for pid in orphans.values():
            os.kill(pid, 9)
    deadline = time.monotonic() + 1.0
    while _survivors(before) and time.monotonic() < deadline:
        time.sleep(0.05)


# -- ordinary programs ---------------------------------------------------------------------------


def test_passing_program_output_and_status():
    r = run_program("import sys\nprint('hello')\nprint('to err', file=sys.stderr)", FAST)
    assert isinstance(r, RunResult)
    assert (r.status, r.returncode, r.ok, r.completed) == ("ok", 0, True, True)
    assert r.stdout == "hello\n" and r.stderr == "to err\n"
    assert r.duration_s > 0  # measured


def test_failing_program_reports_the_exception():
    r = run_program("def f():\n    raise ValueError('bad value\\nsecond line')\nf()", FAST)
    assert (r.status, r.returncode, r.ok, r.completed) == ("error", 1, False, False)
    assert r.exception == "ValueError: bad value"
    assert 'File "program.py", line 2, in f' in r.stderr  # the program's own frames and lines
    assert "raise ValueError" in r.stderr and "magrpo/sandbox" not in r.stderr


def test_syntax_error_and_main_block():
    r = run_program("def f(:\n  pass", FAST)
    assert r.status == "error" and r.exception.startswith("SyntaxError")
    code = "if __name__ == '__main__':\n    print('main')\nprint(__name__)"
    assert run_program(code, FAST).stdout == "main\n__main__\n"
    assert run_program(code, FAST, run_name="__sandbox__").stdout == "__sandbox__\n"


def test_files_are_provided_and_the_directory_removed():
    r = run_program("import os\nprint(open('data/in.txt').read())\nprint(os.getcwd())",
                    FAST, files={"data/in.txt": "payload"})
    assert r.ok
    text, cwd = r.stdout.splitlines()
    assert text == "payload"
    # At `namespaces` the directory is a tmpfs of the candidate's own mount namespace (its path
    # may exist here too); at every level the file is gone once the run ends.
    assert not os.path.exists(os.path.join(cwd, "data", "in.txt"))
    with pytest.raises(ValueError):
        run_program("pass", FAST, files={"../outside.txt": "x"})


# -- hostile programs ----------------------------------------------------------------------------


def test_infinite_loop_times_out_and_is_killed():
    r = run_program("print('started', flush=True)\nwhile True:\n    pass", SandboxLimits(timeout_s=1.0, cpu_s=5))
    # A timeout, not the CPU limit (5 s) or an exit: killed by the caller, no exit code of its own;
    # the autouse fixture checks that no process of it is left.
    assert (r.status, r.returncode, r.completed) == ("timeout", None, False)
    assert r.stdout == "started\n"  # output before the kill is kept
    assert r.duration_s >= 1.0  # it had its whole time limit


def test_cpu_limit_kills_a_busy_program():
    r = run_program("while True:\n    pass", SandboxLimits(timeout_s=6.0, cpu_s=1))
    assert r.status == "killed" and r.returncode in (-24, -9)  # SIGXCPU, or SIGKILL at the hard limit


def test_huge_allocation_fails_without_hurting_the_caller():
    r = run_program("x = bytearray(8 * 1024**3)\nprint('allocated')", FAST)
    assert r.status in ("killed", "error") and "allocated" not in r.stdout
    r = run_program("chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))", FAST)
    assert r.status in ("killed", "error") and r.exception in (None, "MemoryError")


def test_deep_recursion():
    r = run_program("def f(n):\n    return f(n + 1)\nf(0)", FAST)
    assert r.status == "error" and r.exception.startswith("RecursionError")


def test_exit_codes_and_early_exits():
    r = run_program("import sys\nprint('a')\nsys.exit(3)\nprint('b')", FAST)
    assert (r.status, r.returncode, r.completed, r.stdout) == ("error", 3, False, "a\n")
    r = run_program("import os\nos._exit(0)\nprint('b')", FAST)
    assert (r.status, r.returncode, r.completed, r.stdout) == ("ok", 0, False, "")
    # A self-checking program passes only if it runs to its end.
    assert check_program("assert 1 + 1 == 2", 2.0) == (True, "passed")
    for early_exit in ("import sys; sys.exit(0)", "import os; os._exit(0)", "exit(0)", "raise SystemExit"):
        ok, message = check_program(early_exit + "\nassert 1 + 1 == 3", 2.0)
        assert not ok and message.startswith("failed"), early_exit
    assert check_program("assert 1 + 1 == 3", 2.0) == (False, "failed: AssertionError")
    assert check_program("while True:\n    pass", 1.0) == (False, "timed out")


@pytest.fixture
def outside():
    # Not under /tmp: at `namespaces` the candidate's /tmp is a tmpfs of its own, where making a
    # directory of the same path succeeds and means nothing.
    path = Path(tempfile.mkdtemp(prefix="magrpo-outside-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_writes_outside_the_directory_are_refused(outside):
    victim = outside / "victim.txt"
    victim.write_text("keep me")
    attempts = {
        "open": f"open({str(outside / 'a.txt')!r}, 'w').write('x')",
        "open_append": f"open({str(victim)!r}, 'a').write('x')",
        "os_open": f"import os; os.open({str(outside / 'b.txt')!r}, os.O_CREAT | os.O_WRONLY)",
        "pathlib": f"import pathlib; pathlib.Path({str(outside / 'c.txt')!r}).write_text('x')",
        "fileio": f"import io; io.FileIO({str(outside / 'd.txt')!r}, 'w')",
        "relative": "import os; os.chdir('..'); open('e.txt', 'w').write('x')",
        "symlink": f"import os; os.symlink({str(outside / 'f.txt')!r}, 'link'); open('link', 'w').write('x')",
        "remove": f"import os; os.remove({str(victim)!r})",
        "rename": f"import os; os.rename({str(victim)!r}, 'stolen.txt')",
        "rmtree": f"import shutil; shutil.rmtree({str(outside)!r})",
        "mkdir": f"import os; os.makedirs({str(outside / 'g' / 'h')!r})",
        "chmod": f"import os; os.chmod({str(victim)!r}, 0o777)",
        "posix": f"import posix; posix.unlink({str(victim)!r})",
        "copy": f"import shutil; shutil.copy({str(victim)!r}, {str(outside / 'copy.txt')!r})",
    }
    results = run_programs(list(attempts.values()), FAST)
    # Refused (guards, uid), or out of sight: a read-only file system with a private /tmp
    # (namespaces), where the path does not exist or cannot be written.
    refusals = ("PermissionError", "FileNotFoundError", "OSError: [Errno 30]")
    for (name, _), r in zip(attempts.items(), results):
        assert r.status == "error" and r.exception.startswith(refusals), (name, r.stderr)
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert victim.read_text() == "keep me" and oct(victim.stat().st_mode & 0o777) != "0o777"


def test_writes_inside_the_directory_work():
    code = """
import os, shutil, tempfile, pathlib
open('a.txt', 'w').write('x')
os.makedirs('d/e')
os.rename('a.txt', 'd/e/b.txt')
pathlib.Path('p.txt').write_text('y')
fd, path = tempfile.mkstemp()
os.close(fd)
shutil.rmtree('d')
with open(os.devnull, 'w') as f:
    f.write('discarded')
print(sorted(os.listdir('.')) == sorted(['p.txt', os.path.basename(path)]))
"""
    r = run_program(code, FAST)
    assert r.ok and r.stdout == "True\n", r.stderr


def test_big_file_is_capped():
    r = run_program("open('big', 'wb').write(b'x' * (3 * 2**20))", SandboxLimits(timeout_s=2.0, max_file_mb=1))
    assert r.status == "error" and "File too large" in r.exception


def test_subprocess_is_refused_by_default():
    mark = _marker()
    code = """
import os, subprocess
refused = 0
for call in (lambda: subprocess.Popen(['sleep', 'MARK']), lambda: os.system('sleep MARK'),
             lambda: os.execv('/bin/sleep', ['sleep', 'MARK']),
             lambda: os.posix_spawn('/bin/sleep', ['sleep', 'MARK'], {})):
    try:
        status = call()
    except PermissionError:
        refused += 1
    else:  # os.system forks, and its child's exec of the shell is refused: exit status 127
        refused += isinstance(status, int) and os.waitstatus_to_exitcode(status) == 127
print(refused)
"""
    code = code.replace("MARK", mark)  # a sleep only this test starts
    r = run_program(code, FAST)
    assert r.ok and r.stdout == "4\n", r.stderr
    assert _live_processes_mentioning(mark) == []


def test_spawned_processes_are_capped_and_all_killed():
    mark = _marker()
    code = """
import subprocess
started, refused = 0, 0
for _ in range(200):
    try:
        subprocess.Popen(['sleep', 'MARK'])
        started += 1
    except OSError:
        refused += 1
print(started, refused)
"""
    limits = SandboxLimits(timeout_s=5.0, max_processes=8, allow_subprocess=True)
    code = code.replace("MARK", mark)  # a sleep only this test starts
    r = run_program(code, limits)
    assert r.ok, r.stderr
    started, refused = map(int, r.stdout.split())
    assert started == 7 and refused == 193  # 8 processes in the group, the program included
    assert _live_processes_mentioning(mark) == []


def test_escaped_children_are_killed_too():
    mark = _marker()
    # A new session (setsid) leaves the process group, but not the supervisor's descendants.
    code = "import subprocess\nsubprocess.Popen(['setsid', 'sleep', 'MARK'])\nsubprocess.Popen(['sh', '-c', 'sleep MARK &'])"
    code = code.replace("MARK", mark)  # a sleep only this test starts
    r = run_program(code, SandboxLimits(timeout_s=2.0, allow_subprocess=True))
    assert r.ok, r.stderr
    assert _live_processes_mentioning(mark) == []


def test_forked_children_are_capped_and_killed():
    code = """
import os, time, json
kids = []
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
print(json.dumps({"kids": kids}))
"""
    r = run_program(code, FAST)
    assert r.ok, r.stderr
    out = json.loads(r.stdout)
    assert len(out["kids"]) == FAST.max_processes - 1
    # (The pids are the candidate's own; at `namespaces` they mean nothing here, and the
    # autouse fixture checks that no process of this sandbox is left.)


def test_fork_bomb_is_bounded():
    code = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)"
    r = run_program(code, SandboxLimits(timeout_s=1.5, max_processes=16))
    # The bomb hits its process cap (the loop goes on, sleeping) until the time limit kills all of it:
    # the autouse fixture checks that none of its processes is left.
    assert (r.status, r.returncode, r.completed) == ("timeout", None, False)


def test_output_flood_is_bounded_and_never_blocks_the_program():
    r = run_program("import sys\nfor _ in range(5000):\n    sys.stdout.write('x' * 10000)\nprint('end', file=sys.stderr)",
                    SandboxLimits(timeout_s=5.0, max_output_bytes=1000))
    # 50 MB written: kept to the first 1000 bytes, the rest read and dropped, so the program ran to
    # its end (status ok, not a timeout blocked on a full pipe) and its stderr is intact.
    assert (r.status, r.returncode) == ("ok", 0) and len(r.stdout) == 1000 and r.stderr == "end\n"


def test_signalling_the_parent_or_the_caller_is_refused():
    # Refused (guards, uid), out of sight (namespaces: the caller is in another PID namespace),
    # or ignored (namespaces: the parent is the namespace's init, which the kernel shields).
    refusals = ("PermissionError", "ProcessLookupError")
    for target in ("os.getppid()", str(os.getpid()), "-1", f"-{os.getpgrp()}"):
        r = run_program(f"import os, signal\nos.kill({target}, signal.SIGKILL)\nprint('alive')", FAST)
        assert (r.status == "error" and r.exception.startswith(refusals)) or r.stdout == "alive\n", target
    r = run_program(f"import os, signal\nos.killpg({os.getpgrp()}, signal.SIGKILL)", FAST)
    assert r.exception.startswith(refusals)
    # Its own group is fair game: it only kills itself.
    assert run_program("import os, signal\nos.kill(0, signal.SIGKILL)", FAST).status == "killed"


def test_the_candidate_holds_no_capabilities():
    # Inside its own user namespace a process keeps every capability across a uid change; the
    # candidate must not (it could unmount its scratch tmpfs and see the caller's /tmp).
    r = run_program("for line in open('/proc/self/status'):\n"
                    "    if line.startswith('Cap'):\n        print(line.split()[1])", FAST)
    assert r.ok and r.stdout.split() == ["0" * 16] * 5, r.stdout
    r = run_program("import ctypes\nprint(ctypes.CDLL(None).umount2(b'/tmp', 2))", FAST)
    assert r.stdout == "-1\n"


def test_a_killed_supervisor_does_not_hang_the_caller():
    # Through a raw syscall the guards do not see, after forging a clean report on every pipe it
    # holds: the caller ignores records of a supervisor that did not end normally, and cleans up.
    code = """
import ctypes, os, time
fake = b'{"run": {"status": "ok", "returncode": 0, "duration_s": 0.1, "clean": true}}\\n'
for fd in map(int, os.listdir('/proc/self/fd')):
    if fd > 2:
        try:
            os.write(fd, fake)
        except OSError:
            pass
ctypes.CDLL(None).kill(os.getppid(), 9)
time.sleep(30)
"""
    r = run_program(code, SandboxLimits(timeout_s=3.0))
    # Its parent dies (guards, uid) or shrugs the signal off (namespaces: the namespace's init);
    # either way the caller gets a result back, not the forged clean report, and the autouse
    # fixture checks that nothing of the run is left.
    assert r.status in ("killed", "timeout", "error") and not r.completed


def test_run_programs_keeps_order_and_runs_in_parallel(monkeypatch):
    # Each run first waits at a barrier of 4: it opens only when the 4 runs are under way together,
    # so run one at a time the first would never get past it (BrokenBarrierError after the wait).
    import threading

    from magrpo.sandbox import api

    barrier, real = threading.Barrier(4, timeout=120), api.run_program

    def together(code, limits):
        barrier.wait()
        return real(code, limits)

    monkeypatch.setattr(api, "run_program", together)
    programs = [f"import time\ntime.sleep(0.5)\nprint({i})" for i in range(4)]
    results = run_programs(programs, SandboxLimits(timeout_s=5.0), max_workers=4)
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", "3\n"]
    assert not barrier.broken
    assert run_programs([]) == []


# -- the per-test harness ------------------------------------------------------------------------

CODE = "def add(a, b):\n    return a + b\n"


def test_run_tests_counts_passes_and_failures():
    tests = ["assert add(1, 2) == 3", "assert add(1, 1) == 3", "assert add('a', 'b') == 'ab'", "assert mul(2, 2) == 4"]
    rep = run_tests(CODE, tests, limits=FAST)
    assert isinstance(rep, TestReport)
    assert (rep.passed, rep.failed, rep.timeouts, rep.total, rep.setup_error, rep.status) == (2, 2, 0, 4, None, "ok")
    assert rep.errors == ["AssertionError", "NameError: name 'mul' is not defined"]
    assert rep.fraction == 0.5


def test_run_tests_setup_and_setup_errors():
    rep = run_tests("def root(x):\n    return math.sqrt(x)", ["assert root(9) == 3"], setup="import math", limits=FAST)
    assert rep.passed == 1
    rep = run_tests("def f(:\n", ["assert True", "assert True"], limits=FAST)
    assert rep.setup_error.startswith("SyntaxError") and (rep.passed, rep.failed, rep.total) == (0, 2, 2)
    rep = run_tests("raise ImportError('no numpy here')", ["assert True"], limits=FAST)
    assert rep.setup_error == "ImportError: no numpy here" and rep.fraction == 0.0
    rep = run_tests("x = 1", ["assert True"], setup="import not_a_module_xyz", limits=FAST)
    assert rep.setup_error.startswith("setup code: ModuleNotFoundError")
    rep = run_tests("while True:\n    pass", ["assert True"], per_test_timeout_s=0.3, limits=FAST)
    assert rep.setup_error.startswith("timeout") and rep.passed == 0
    assert run_tests(CODE, [], limits=FAST).fraction == 0.0


def test_run_tests_stops_after_max_timeouts():
    tests = ["assert add(1, 2) == 3"] + ["while True:\n    pass"] * 5 + ["assert add(2, 2) == 4"]
    rep = run_tests(CODE, tests, per_test_timeout_s=0.3, max_timeouts=3, limits=FAST)
    # Stopped after the third timeout: the two loops and the test after them were never run.
    assert (rep.passed, rep.timeouts, rep.failed, rep.total) == (1, 3, 3, 7)
    assert rep.errors == ["timeout after 0.3s"] * 3 + ["not run: stopped after 3 timeouts"] * 3


def test_timeouts_are_not_swallowed_by_except_exception():
    code = "def spin():\n    while True:\n        try:\n            pass\n        except Exception:\n            pass\n"
    rep = run_tests(code, ["spin()", "assert True"], per_test_timeout_s=0.3, limits=FAST)
    assert (rep.passed, rep.timeouts) == (1, 1)


def test_exits_mid_suite_never_count_as_passes():
    code = CODE + "def quit3():\n    import sys\n    sys.exit(3)\ndef die():\n    import os\n    os._exit(0)\n"
    tests = ["assert add(1, 2) == 3", "quit3()", "assert add(2, 2) == 4", "die()",
             "assert add(3, 3) == 6", "assert add(4, 4) == 8"]
    rep = run_tests(code, tests, limits=FAST)
    # The candidate's sys.exit fails that test; its os._exit ends its process (a crash), and a
    # fresh candidate process answers the tests after it.
    assert (rep.passed, rep.failed, rep.timeouts, rep.status) == (4, 2, 0, "ok")
    assert [o.status for o in rep.outcomes] == ["passed", "failed", "passed", "crashed", "passed", "passed"]
    assert rep.errors == ["SystemExit: 3", "the candidate's process ended during this test"]
    # Exiting while the candidate code is exec'd: nothing ran.
    rep = run_tests("import os\nos._exit(0)", ["assert True"], limits=FAST)
    assert rep.passed == 0 and rep.setup_error is not None


def test_junk_output_and_wall_clock_kill():
    code = CODE + "print('{\"test\": 0, \"outcome\": \"pass\"}')\nprint('{\"done\": true}')\n"
    rep = run_tests(code, ["assert add(1, 1) == 3"], limits=FAST)
    assert (rep.passed, rep.failed) == (0, 1)
    # A candidate that catches everything still times out: the deadline is kept by the judge.
    stubborn = CODE + ("def spin():\n    while True:\n        try:\n            while True:\n                pass\n"
                       "        except BaseException:\n            pass\n")
    rep = run_tests(stubborn, ["assert add(1, 2) == 3", "spin()", "assert add(2, 2) == 4"],
                    per_test_timeout_s=0.3, limits=SandboxLimits(timeout_s=5.0))
    assert (rep.passed, rep.timeouts, rep.failed, rep.status) == (2, 1, 0, "ok")
    # The whole run's wall clock bounds it too.
    rep = run_tests(stubborn, ["assert add(1, 2) == 3", "spin()", "assert True"], per_test_timeout_s=5.0,
                    limits=SandboxLimits(timeout_s=1.5))
    assert (rep.passed, rep.timeouts, rep.status) == (1, 1, "timeout")


def test_run_tests_many_keeps_order():
    jobs = [(f"def f():\n    return {i}", [f"assert f() == {i}", "assert f() == 1"], "") for i in range(4)]
    reports = run_tests_many(jobs, limits=FAST, max_workers=2)
    assert [r.passed for r in reports] == [1, 2, 1, 1]
