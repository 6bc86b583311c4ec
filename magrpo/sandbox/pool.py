"""The worker pool: one pre-started "zygote" process per caller that forks a judge per job.

    caller ──Popen (once)──> zygote: a fresh `python -I -S -B` with a scrubbed environment that
                              has imported the sandbox and the modules generated code usually
                              needs, and has settled which isolation level runs here
                              └─fork per job──> judge (judge.py) ─> launcher ─> candidates

Starting an interpreter costs tens of milliseconds and most imports more; forking a process that
has done both costs well under one. The zygote never reads a job: each job comes as a fresh
socket (passed over the control socket with SCM_RIGHTS) that only the judge forked for it reads.
So the zygote holds nothing of the caller (not its memory, environment or secrets) and nothing
of any job, and a candidate forked from it inherits nothing worth reading.

The zygote ends when the caller's end of the control socket closes (the caller exited or was
killed); judges die with the zygote, launchers with their judge, candidates with their launcher.

The zygote's environment carries the caller's tag (MAGRPO_SANDBOX_TAG, `caller_tag`), and so does
every process forked from it or exec'd by a candidate: tests tell their own sandbox processes from
another run's by it (magrpo.sandbox.procs.tagged_processes).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import secrets
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings

from magrpo.sandbox import codec
from magrpo.sandbox.isolation import LEVELS, SandboxUnavailable, probe, scratch_parent
from magrpo.sandbox.procs import TAG_VAR, die_with_parent

_PRELOAD = ("typing", "math", "re", "random", "collections", "itertools", "functools", "heapq", "bisect",
            "string", "copy", "json", "hashlib", "statistics", "fractions", "decimal", "datetime",
            "operator", "array", "struct", "unittest", "traceback", "linecache", "textwrap")
_START_TIMEOUT_S = 60.0
_BACKSTOP_S = 15.0  # the caller's own deadline = the job's time limit + this
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from magrpo.sandbox.pool import zygote_main; "
         "sys.exit(zygote_main(int(sys.argv[2]), sys.argv[3], sys.argv[4:]))")


class SandboxWarning(RuntimeWarning):
    """Generated code runs with weaker isolation than Linux namespaces."""


# -- caller side -----------------------------------------------------------------------------------


class Pool:
    def __init__(self, requested: str):
        self.requested = requested
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.package_parent = package_parent()
        self.tmpdir = tempfile.gettempdir()  # the caller's TMPDIR, where jobs ask for their scratch
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", "-c", _BOOT, self.package_parent, str(theirs.fileno()), requested,
                 *_site_dirs()],
                env={**_ENV, "TMPDIR": self.tmpdir, TAG_VAR: caller_tag()}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                start_new_session=True, cwd="/")
        finally:
            theirs.close()
        try:
            hello = json.loads(codec.read_frame(self.sock.fileno(), time.monotonic() + _START_TIMEOUT_S))
        except (codec.ChannelClosed, codec.ChannelTimeout):
            self.close()
            raise SandboxUnavailable("the sandbox's worker process did not start") from None
        if "error" in hello:
            self.close()
            raise SandboxUnavailable(hello["error"])
        self.level: str = hello["level"]
        self.fallback_reason: str | None = hello.get("fallback_reason")
        # Where candidates' scratch directories go for jobs that ask for TMPDIR, and why not there.
        self.scratch_parent: str = hello["scratch_parent"]
        self.scratch_note: str | None = hello.get("scratch_note")

    def scratch(self) -> str:
        """Where candidates' scratch and working directories are, in words."""
        if self.level == "namespaces":
            return "a private tmpfs on /tmp"
        return self.scratch_parent + (f" ({self.scratch_note})" if self.scratch_note else "")

    def run(self, frames: list[str], time_limit_s: float) -> dict:
        """Send one job's frames to a fresh judge and return its reply (a dict)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        judge_pid = None
        try:
            with self.lock:
                socket.send_fds(self.sock, [b"j"], [theirs.fileno()])
            theirs.close()
            fd = mine.fileno()
            deadline = time.monotonic() + time_limit_s + _BACKSTOP_S
            judge_pid = json.loads(codec.read_frame(fd, deadline))["pid"]
            for frame in frames:
                codec.write_frame(fd, frame)
            return json.loads(codec.read_frame(fd, deadline))
        except codec.ChannelTimeout:
            if judge_pid is not None:  # the judge's death takes its launcher and candidates along
                try:
                    os.kill(judge_pid, signal.SIGKILL)
                except OSError:
                    pass
            return {"error": "the sandbox's judge missed its deadline and was killed"}
        except (codec.ChannelClosed, OSError) as e:
            return {"error": f"the sandbox's judge ended without a reply ({e})"}
        finally:
            theirs.close()
            mine.close()

    def close(self) -> None:
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_pools: dict[str, Pool] = {}
_pools_lock = threading.Lock()
_tag: tuple[int, str] | None = None


def caller_tag() -> str:
    """This process's label for its sandbox processes (MAGRPO_SANDBOX_TAG; module docstring): its
    pid and a random part, new in a forked child."""
    global _tag
    if _tag is None or _tag[0] != os.getpid():
        _tag = (os.getpid(), f"{os.getpid()}-{secrets.token_hex(8)}")
    return _tag[1]


def worker_pids() -> set[int]:
    """The zygotes of this process's pools: its tagged processes that live between jobs."""
    with _pools_lock:
        return {pool.proc.pid for pool in _pools.values() if pool.owner == os.getpid() and pool.proc.poll() is None}


def get_pool(requested: str) -> Pool:
    """The pool for an isolation request, started on first use (one per process)."""
    with _pools_lock:
        pool = _pools.get(requested)
        if pool is not None and pool.owner == os.getpid() and pool.proc.poll() is None:
            return pool
        pool = Pool(requested)
        _pools[requested] = pool
    if pool.fallback_reason:
        warnings.warn(f"sandbox: running generated code with the weaker isolation '{pool.level}': "
                      f"{pool.fallback_reason}", SandboxWarning, stacklevel=3)
    return pool


@atexit.register
def _close_pools() -> None:
    for pool in list(_pools.values()):
        if pool.owner == os.getpid():
            pool.close()
    _pools.clear()


def package_parent() -> str:
    """The directory that holds the `magrpo` package this process runs."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _site_dirs() -> list[str]:
    # The zygote starts with -S: `site` and the .pth hooks it runs are slow, while putting the
    # installed packages' directories on sys.path is enough for generated code.

    return [p for p in site.getsitepackages() if os.path.isdir(p)]


# -- zygote side -----------------------------------------------------------------------------------


def zygote_main(control_fd: int, requested: str, site_dirs: list[str]) -> int:
    from magrpo.sandbox import isolation, judge  # noqa: PLC0415  circle: magrpo.sandbox's __init__ imports this module

    sys.path.extend(site_dirs)
    sys.dont_write_bytecode = True
    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    control = socket.socket(fileno=control_fd)
    plan = isolation.mount_plan(sys.path + [sys.prefix, sys.base_prefix,
                                            os.path.dirname(os.path.realpath(sys.executable))])
    isolation.open_path_handles(plan)
    tmpdir = tempfile.gettempdir()
    hello = _choose_level(requested, plan, tmpdir)
    codec.write_frame(control_fd, json.dumps(hello))
    if "error" in hello:
        return 1
    level, scratch = hello["level"], {tmpdir: hello["scratch_parent"]}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides when we stop
    zygote = os.getpid()
    while True:
        _reap()
        try:
            msg, fds, _, _ = socket.recv_fds(control, 16, 1)
        except InterruptedError:
            continue
        if not msg:
            return 0  # the caller is gone
        if not fds:
            continue
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                control.close()
                die_with_parent(zygote)
                job = socket.socket(fileno=fds[0])
                codec.write_frame(job.fileno(), json.dumps({"pid": os.getpid()}))
                judge.serve_job(job, level, plan, scratch)
            finally:
                os._exit(0)
        os.close(fds[0])


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _choose_level(requested: str, plan, tmpdir: str) -> dict:
    """{"level", "scratch_parent", "scratch_note", "fallback_reason"} or {"error"}: the first
    level (of the requested one, or of all for "auto") that probes well with its scratch
    directory; probes run in a child process."""
    def attempt(level: str) -> tuple[dict | None, str]:
        scratch, note = _scratch_in_child(level, tmpdir)
        if scratch is None:
            return None, f"no scratch directory: {note}"
        why = _probe_in_child(level, plan, scratch)
        if why is not None:
            return None, why
        return {"level": level, "scratch_parent": scratch, "scratch_note": note}, ""

    if requested != "auto":
        hello, why = attempt(requested)
        if hello is not None:
            return hello
        return {"error": f"sandbox isolation '{requested}' is unavailable here: {why} "
                         f"(choose one of auto, {', '.join(LEVELS)})"}
    reasons: list[str] = []
    for level in LEVELS:
        hello, why = attempt(level)
        if hello is not None:
            return {**hello, "fallback_reason": "; ".join(reasons) if reasons else None}
        reasons.append(f"{level}: {why}")
    return {"error": "no sandbox isolation works here: " + "; ".join(reasons)}


def _scratch_in_child(level: str, tmpdir: str) -> tuple[str | None, str | None]:
    return tuple(_in_child(lambda: list(scratch_parent(level, tmpdir)), [None, "the scratch check failed"]))


def _probe_in_child(level: str, plan, scratch: str) -> str | None:
    return _in_child(lambda: probe(level, plan, scratch), "the probe process failed")


def _in_child(fn, failed):
    """fn() in a forked child (it may change ids or leave children behind), its JSON answer here."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, json.dumps({"answer": fn()}).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    try:
        return json.loads(data)["answer"]
    except (ValueError, KeyError):
        return failed
