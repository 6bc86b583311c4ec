"""In-process guards: the weakest isolation level (`guards`), also layered under `uid`.

They replace the ordinary Python entry points that write files, signal or start processes, inside
the candidate's own interpreter. Code that reaches for ctypes or raw syscalls passes them by, and
so does an exec'd binary (exec is also refused by a seccomp filter unless allowed). They stop
accidents and cheap tricks, not a determined adversary: that is what the namespaces are for.

* files: writes, creations, deletions, renames, chmod/chown... of paths that resolve outside the
  scratch directory raise PermissionError (`open`, `io.open`, `FileIO`, `os.*` and so `shutil`,
  `pathlib`...);
* signals: `os.kill`/`killpg`/`pidfd_open` reach only the program's own process group; leaving
  it (setsid, setpgid) is refused;
* processes: `os.fork` and friends fail with EAGAIN once the group holds `max_processes`
  processes (the kernel's RLIMIT_NPROC does not bind root); exec of other programs
  (`subprocess`, `os.system`, `os.exec*`, `os.posix_spawn`) raises PermissionError unless allowed;
* limits: raising a resource limit back is refused.
"""

from __future__ import annotations

import _io
import _posixsubprocess
import builtins
import errno
import io
import os
import posix
import resource
import sys

from magrpo.sandbox.procs import proc_table


def install(root: str, max_processes: int, allow_subprocess: bool) -> None:
    patches: dict = {}
    _guard_files(root, patches)
    own_group = os.getpgrp()
    _guard_signals(own_group, patches)
    _guard_processes(own_group, max_processes, allow_subprocess, patches)
    _guard_rlimits()
    # os functions are the posix module's: patch both names so `import posix` finds them too.
    for name, fn in patches.items():
        setattr(os, name, fn)
        if hasattr(posix, name):
            setattr(posix, name, fn)


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise PermissionError(errno.EPERM, f"sandbox: {what} is not allowed")

    return refused


def _guard_files(root: str, patches: dict) -> None:
    real_open, real_readlink, realpath = _io.open, os.readlink, os.path.realpath

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
        # The exact str inside (a str subclass could lie about its contents); open() itself
        # refuses any mode that is not a str.
        return isinstance(mode, str) and any(c in str.__str__(mode) for c in "wax+")

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
        mod.open = guarded_open  # type: ignore[attr-defined]  # patching the stdlib: typeshed types open as a function of builtins only
    io.FileIO = _io.FileIO = GuardedFileIO  # type: ignore[misc]  # patching the stdlib's class in place

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    real_os_open = os.open

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & write_flags:
            check(path, dir_fd)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

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


def _guard_signals(own_group: int, patches: dict) -> None:
    real_open = _io.open

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

    leave = _refuse("leaving the process group")
    patches.update(kill=kill, killpg=killpg, setsid=leave, setpgid=leave, setpgrp=leave)
    if real_pidfd_open is not None:
        patches["pidfd_open"] = pidfd_open


def _guard_processes(own_group: int, max_processes: int, allow_subprocess: bool, patches: dict) -> None:
    def group_size() -> int:
        return sum(1 for t in proc_table().values() if t[2] == own_group)

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
            if name not in ("execv", "execve"):  # exec replaces a process, it adds none
                patches[name] = capped(getattr(os, name))
        fork_exec = capped(_posixsubprocess.fork_exec)
    else:
        for name in exec_names:
            patches[name] = _refuse("running other programs")
        fork_exec = _refuse("running other programs")
    # subprocess binds fork_exec at its import: patch both.
    _posixsubprocess.fork_exec = fork_exec
    if "subprocess" in sys.modules:
        sys.modules["subprocess"]._fork_exec = fork_exec  # type: ignore[attr-defined]  # subprocess's private binding, not in typeshed


def _guard_rlimits() -> None:
    real_setrlimit = resource.setrlimit

    def setrlimit(res, limits):
        soft, hard = limits
        _, cur_hard = resource.getrlimit(res)
        inf = resource.RLIM_INFINITY
        if cur_hard != inf and (hard == inf or hard > cur_hard):
            raise PermissionError(errno.EPERM, "sandbox: raising a resource limit is not allowed")
        return real_setrlimit(res, limits)

    resource.setrlimit = setrlimit
    resource.prlimit = _refuse("prlimit")
