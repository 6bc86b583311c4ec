"""The judge: the process that runs a task's tests and decides pass or fail.

One job = one judge process (forked by the worker pool, see pool.py). For a tests job:

    judge ──fork──> launcher (a clean copy made before the tests arrive)
                      └─ starts and kills confined candidate processes (isolation.py) on request

1. The judge reads the candidate half of the job (code, setup, limits) and forks the launcher,
   which asks for the first candidate process right away. Only then does the judge read the
   tests, so neither the first candidate nor any restarted one (every candidate descends from
   the launcher) holds the tests' source or expected values in its memory.
2. The judge execs the trusted setup (the prompt's imports and helpers, such as HumanEval/32's
   `poly`) and test setup (the test file's module code, such as `def check(candidate)`) in its
   own namespace. The entry point, and any other name the tests use that the trusted code and
   the builtins do not define, becomes a `CandidateFunction`: a proxy that sends the call's
   plain-data arguments to the candidate process and decodes its plain-data answer (codec.py).
3. Each test runs in the judge under its own deadline, with outcomes by index: passed; failed
   (the exception's type and message: the candidate's exceptions are re-raised here as the
   builtin exception of that name, so a test's `except ValueError` works); timeout; crashed (the
   candidate's process ended during the test). After a timeout or a crash the candidate is
   killed and started afresh for the next test; after `max_timeouts` timeouts the rest is not
   run.

The candidate holds no descriptor that reaches the caller, and the judge's verdict depends only
on values it decoded itself: patching builtins, forging result records, exiting early, atexit
hooks or an `__eq__` that always says yes change nothing but the candidate's own answers.

Arguments are copies: what a candidate does to the lists it was given does not come back
(tests compare what the function returns). A return value that is not plain data fails the
test with the reason.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import os
import select
import signal
import socket
import time
import warnings

from magrpo.sandbox import codec
from magrpo.sandbox.candidate import describe, run_script, serve, source
from magrpo.sandbox.isolation import MountPlan, SandboxUnavailable, launch, scratch_parent, worker_fds
from magrpo.sandbox.procs import PR_SET_CHILD_SUBREAPER, close_fds_except, die_with_parent, prctl

_LOAD_GRACE_S = 1.0  # start-up of a confined process, on top of the load timeout


class _TestTimeout(BaseException):
    """The test's deadline passed; a BaseException so `except Exception` in a test cannot swallow it."""


class CandidateCrashed(BaseException):
    """The candidate's process ended (or broke the protocol) during the test."""


class CandidateExit(BaseException):
    """The candidate raised SystemExit, KeyboardInterrupt or GeneratorExit: not an Exception,
    as it would not be in the candidate's own process either."""


class CandidateError(Exception):
    """An exception of a type the judge does not know (defined by the candidate)."""


class NotPlainData(BaseException):
    """The candidate returned a value that cannot cross (see codec.py): the test fails."""


def serve_job(sock: socket.socket, level: str, plan: MountPlan, scratch: dict[str, str]) -> None:
    """Serve one job on `sock` (in a fresh process forked for it): read, run, reply.

    The job asks for its scratch under a directory (the caller's TMPDIR); `scratch` maps the
    one the worker already checked to the directory it chose (see isolation.scratch_parent)."""
    fd = sock.fileno()
    spec = json.loads(codec.read_frame(fd, time.monotonic() + 30.0))
    wanted = spec.get("scratch_parent") or "/tmp"
    chosen = scratch.get(wanted) or scratch_parent(level, wanted)[0]
    if chosen is None:
        codec.write_frame(fd, json.dumps({"error": f"no scratch directory: {scratch_parent(level, wanted)[1]}"}))
        return
    spec["scratch_parent"] = chosen
    if spec["mode"] == "program":
        result = _run_program(spec, level, plan)
    else:
        result = _run_tests(fd, spec, level, plan)
    result["isolation"] = level
    codec.write_frame(fd, json.dumps(result))


# -- the launcher ----------------------------------------------------------------------------------


class _Launcher:
    """A child of the judge, forked before the tests are read, that (re)starts candidates."""

    def __init__(self, spec: dict, level: str, plan: MountPlan):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        judge = os.getpid()
        pid = os.fork()
        if pid == 0:
            self.sock.close()
            _launcher_main(theirs, judge, spec, level, plan)
        theirs.close()
        self.pid = pid

    def request_start(self) -> None:
        self.sock.send(b"start")

    def finish_start(self) -> tuple[int, int, int]:
        """(death fd, request fd, reply fd) of the new candidate; SandboxUnavailable if none."""
        msg, fds, _, _ = socket.recv_fds(self.sock, 4096, 3)
        if msg != b"ok" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            raise SandboxUnavailable(msg.decode("utf-8", "replace").removeprefix("error: ") or "the launcher ended")
        return fds[0], fds[1], fds[2]

    def kill(self) -> None:
        self.sock.send(b"kill")
        self.sock.recv(16)

    def close(self) -> None:
        try:
            self.sock.send(b"quit")
            self.sock.recv(16)
        except OSError:
            pass
        self.sock.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _launcher_main(sock: socket.socket, judge: int, spec: dict, level: str, plan: MountPlan) -> None:
    try:
        die_with_parent(judge)
        prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of a `uid`/`guards` candidate come back here
        close_fds_except({sock.fileno()} | worker_fds())
        limits, cand = spec["limits"], None
        while True:
            cmd = sock.recv(16)
            if cand is not None:
                cand.kill()
                cand = None
            if cmd in (b"", b"quit"):
                sock.send(b"bye")
                os._exit(0)
            if cmd == b"kill":
                sock.send(b"ok")
                continue
            req_r, req_w = os.pipe()
            reply_r, reply_w = os.pipe()
            devnull = os.open(os.devnull, os.O_RDWR)
            try:
                cand = launch(level, limits, functools.partial(serve, spec["setup"], spec["code"], req_r, reply_w),
                              {req_r, reply_w}, (devnull, devnull, devnull), plan, spec["scratch_parent"])
            except (SandboxUnavailable, OSError) as e:
                sock.send(f"error: {e}".encode()[:4000])
                continue
            finally:
                for fd in (req_r, reply_w, devnull):
                    os.close(fd)
            socket.send_fds(sock, [b"ok"], [cand.death_fd, req_w, reply_r])
            os.close(req_w)
            os.close(reply_r)
    except BaseException:  # noqa: B036
        os._exit(1)


# -- the link to one candidate ---------------------------------------------------------------------


class Session:
    """The judge's end of the current candidate process; restarted after a timeout or crash."""

    def __init__(self, launcher: _Launcher, load_timeout_s: float, job_deadline: float):
        self.launcher, self.load_timeout_s, self.job_deadline = launcher, load_timeout_s, job_deadline
        self.fds: tuple[int, int, int] | None = None
        self.deadline = job_deadline  # of the running test
        self.seq = 0

    def load(self) -> str | None:
        """Finish a requested start: None once the candidate is ready, else why not."""
        try:
            self.fds = self.launcher.finish_start()
        except SandboxUnavailable as e:
            return f"the sandbox could not start: {e}"
        death, _, reply = self.fds
        deadline = min(time.monotonic() + self.load_timeout_s + _LOAD_GRACE_S, self.job_deadline)
        try:
            msg = codec.decode(codec.read_frame(reply, deadline, (death,)))
        except codec.ChannelTimeout:
            self.kill()
            return f"timeout: the candidate code did not finish loading within {self.load_timeout_s:g}s"
        except codec.ChannelClosed:
            self.kill()
            return "the candidate's process ended while its code was loading"
        except ValueError:
            self.kill()
            return "the candidate sent a malformed message while loading"
        if msg == ["ready"]:
            return None
        self.kill()
        if isinstance(msg, list) and len(msg) == 2 and msg[0] == "load_error" and isinstance(msg[1], str):
            return msg[1]
        return "the candidate sent a malformed message while loading"

    def restart(self) -> str | None:
        self.kill()
        self.launcher.request_start()
        return self.load()

    def kill(self) -> None:
        if self.fds is not None:
            for fd in self.fds:
                os.close(fd)
            self.fds = None
            self.launcher.kill()

    def call(self, name: str, args: tuple, kwargs: dict):
        if self.fds is None:
            raise CandidateCrashed("the candidate's process has ended")
        try:
            payload = f'["call",{self.seq},{json.dumps(name)},{codec.encode(args)},{codec.encode(kwargs)}]'
        except codec.UnsupportedValue as e:
            raise TypeError(f"cannot pass this argument to the candidate: {e}") from None
        death, request, reply = self.fds
        seq, self.seq = self.seq, self.seq + 1
        try:
            codec.write_frame(request, payload)
            frame = codec.read_frame(reply, self.deadline, (death,))
        except codec.ChannelTimeout:
            raise _TestTimeout from None
        except codec.ChannelClosed:
            self.kill()
            raise CandidateCrashed("the candidate's process ended during this test") from None
        try:
            msg = codec.decode(frame)
            kind, n = msg[0], msg[1]
            if n != seq:
                raise ValueError("out of order")
        except (ValueError, TypeError, IndexError, KeyError):
            self.kill()
            raise CandidateCrashed("the candidate broke the call protocol") from None
        if kind == "ok" and len(msg) == 3:
            return msg[2]
        if kind == "raise" and len(msg) == 4 and isinstance(msg[2], str) and isinstance(msg[3], str):
            raise _rebuild_exception(msg[2], msg[3])
        if kind == "unsupported" and len(msg) == 3 and isinstance(msg[2], str):
            raise NotPlainData(msg[2])
        self.kill()
        raise CandidateCrashed("the candidate broke the call protocol")


_NOT_EXCEPTIONS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit"}


def _rebuild_exception(type_name: str, message: str) -> BaseException:
    if type_name in _NOT_EXCEPTIONS:
        return CandidateExit(f"{type_name}: {message}" if message else type_name)
    cls = getattr(builtins, type_name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message) if message else cls()
        except Exception:  # e.g. UnicodeDecodeError wants five arguments
            pass
    return CandidateError(f"{type_name}: {message}" if message else type_name)


class CandidateFunction:
    """Stands for the candidate's function `name` in the judge: calls go to the candidate process."""

    def __init__(self, name: str, session: Session):
        self._name, self._session = name, session
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self._session.call(self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<candidate function {self._name}>"


# -- the tests -------------------------------------------------------------------------------------


def _on_alarm(signum, frame):
    raise _TestTimeout


def _timed_exec(code: str, filename: str, ns: dict, deadline: float) -> tuple[str, str | None]:
    """('passed', None) | ('failed', why) | ('timeout', why) | ('crashed', why)."""
    try:
        compiled = source(code, filename)
        left = deadline - time.monotonic()
        if left <= 0:
            raise _TestTimeout
        signal.setitimer(signal.ITIMER_REAL, left)
        try:
            exec(compiled, ns)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _TestTimeout:
        return "timeout", None
    except CandidateCrashed as e:
        return "crashed", str(e)
    except NotPlainData as e:
        return "failed", f"the candidate {e}"
    except CandidateExit as e:  # worded as the candidate raised it: "SystemExit: 3"
        return "failed", str(e)
    except BaseException as e:  # noqa: B036 - an exit inside a test is a failure, not an exit
        return "failed", describe(e)
    return "passed", None


def parse_code(src: str) -> ast.Module:
    """`ast.parse` of code someone else wrote (a completion, a data set's program): the warnings its
    text raises (`1if x` is an "invalid decimal literal", a bad escape) are that code's, not the
    user's, and are not printed; a SyntaxError is raised as ast.parse raises it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(src)


def free_names(sources: list[str]) -> set[str]:
    """Every name read in these sources (ones that do not parse are skipped)."""
    names: set[str] = set()
    for src in sources:
        try:
            tree = parse_code(src)
        except SyntaxError:
            continue
        names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return names


def _run_tests(fd: int, spec: dict, level: str, plan: MountPlan) -> dict:
    limits = spec["limits"]
    start = time.monotonic()
    job_deadline = start + float(limits["timeout_s"])
    per_test = float(spec["per_test_timeout_s"])
    launcher = _Launcher(spec, level, plan)
    launcher.request_start()
    session = Session(launcher, per_test, job_deadline)
    try:
        job = json.loads(codec.read_frame(fd, time.monotonic() + 30.0))  # the tests: only now
        signal.signal(signal.SIGALRM, _on_alarm)
        tests = list(job["tests"])
        ns: dict = {"__name__": "__judge__"}
        setup_error = None
        for code, filename, label in ((spec["setup"], "setup.py", "setup code: "),
                                      (job["test_setup"], "test_setup.py", "test setup: ")):
            status, why = _timed_exec(code, filename, ns, min(time.monotonic() + max(per_test, 5.0), job_deadline))
            if status != "passed" and setup_error is None:
                setup_error = label + (why or f"timeout after {max(per_test, 5.0):g}s")
        load_error = session.load()
        if setup_error or load_error:
            why = setup_error or load_error
            return _report([("not_run", "not run: candidate code failed")] * len(tests), why, "ok")
        for name in free_names(tests + [job["test_setup"]]) - set(ns) - set(dir(builtins)):
            ns[name] = CandidateFunction(name, session)
        if job.get("entry_point"):
            ns[job["entry_point"]] = CandidateFunction(job["entry_point"], session)

        outcomes: list[tuple[str, str | None]] = []
        timeouts, status = 0, "ok"
        for i, test in enumerate(tests):
            if timeouts >= int(job["max_timeouts"]):
                outcomes += [("not_run", f"not run: stopped after {timeouts} timeouts")] * (len(tests) - i)
                break
            if time.monotonic() >= job_deadline:
                outcomes += [("not_run", "not run: the sandbox wall clock ran out")] * (len(tests) - i)
                status = "timeout"
                break
            test_deadline = min(time.monotonic() + per_test, job_deadline)
            session.deadline = test_deadline
            outcome, why = _timed_exec(test, f"test_{i}.py", ns, test_deadline)
            if outcome == "timeout":
                timeouts += 1
                why = (f"timeout after {per_test:g}s" if test_deadline < job_deadline
                       else "timeout: the sandbox wall clock ran out during this test")
            outcomes.append((outcome, why))
            if time.monotonic() >= job_deadline and i + 1 < len(tests):
                outcomes += [("not_run", "not run: the sandbox wall clock ran out")] * (len(tests) - i - 1)
                status = "timeout"
                break
            if outcome in ("timeout", "crashed") or session.fds is None:
                if i + 1 < len(tests) and timeouts < int(job["max_timeouts"]):
                    restart_error = session.restart()
                    if restart_error:
                        reason = f"not run: the candidate could not be restarted ({restart_error})"
                        outcomes += [("not_run", reason)] * (len(tests) - i - 1)
                        break
        return _report(outcomes, None, status)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        session.kill()
        launcher.close()


def _report(outcomes: list[tuple[str, str | None]], setup_error: str | None, status: str) -> dict:
    return {"kind": "tests", "outcomes": [{"status": s, "error": e} for s, e in outcomes],
            "setup_error": setup_error, "status": status}


# -- a program run as a script ---------------------------------------------------------------------


def _run_program(spec: dict, level: str, plan: MountPlan) -> dict:
    limits = spec["limits"]
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    rec_r, rec_w = os.pipe()
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        cand = launch(level, limits, lambda: run_script(spec["code"], spec["run_name"], spec["files"], rec_w),
                      {rec_w}, (devnull, out_w, err_w), plan, spec["scratch_parent"])
    except (SandboxUnavailable, OSError) as e:
        for fd in (out_r, out_w, err_r, err_w, rec_r, rec_w, devnull):
            os.close(fd)
        return {"kind": "program", "status": "error", "returncode": None, "stdout": "",
                "stderr": f"sandbox: could not start: {e}", "duration_s": 0.0, "records": []}
    for fd in (out_w, err_w, rec_w, devnull):
        os.close(fd)
    start = time.monotonic()
    cap = int(limits["max_output_bytes"])
    caps = {out_r: cap, err_r: cap, rec_r: 1 << 20}
    bufs = {fd: bytearray() for fd in caps}

    def pump(timeout: float, watch: list[int]) -> list[int]:
        ready = select.select(watch, [], [], max(timeout, 0))[0]
        for fd in ready:
            if fd not in bufs:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                watch.remove(fd)
                continue
            room = caps[fd] - len(bufs[fd])
            if room > 0:
                bufs[fd] += chunk[:room]  # the rest is read and dropped so the writer never blocks
        return ready

    watch = [out_r, err_r, rec_r, cand.death_fd]
    deadline = start + float(limits["timeout_s"])
    ended = False
    while time.monotonic() < deadline:
        if cand.death_fd in pump(deadline - time.monotonic(), watch):
            ended = True
            break
    wait_status = cand.exit_status() if ended else None
    duration = time.monotonic() - start
    cand.kill()  # everything it left behind goes now, so the pipes reach their end
    watch.remove(cand.death_fd)
    until = time.monotonic() + 2.0
    while len(watch) > 0 and time.monotonic() < until:
        pump(0.05, watch)
    for fd in (out_r, err_r, rec_r):
        os.close(fd)

    if not ended:
        status, returncode = "timeout", None
    elif wait_status is None:
        status, returncode = "error", None
    elif os.WIFSIGNALED(wait_status):
        status, returncode = "killed", -os.WTERMSIG(wait_status)
    else:
        returncode = os.waitstatus_to_exitcode(wait_status)
        status = "ok" if returncode == 0 else "error"
    records = []
    for line in bytes(bufs[rec_r]).decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return {"kind": "program", "status": status, "returncode": returncode,
            "stdout": bufs[out_r].decode("utf-8", "replace"), "stderr": bufs[err_r].decode("utf-8", "replace"),
            "duration_s": duration, "records": records}
