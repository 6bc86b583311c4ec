"""Process bookkeeping shared by the judge and the isolation levels: prctl switches, pidfds,
/proc scans and "kill everything that is left" loops. Linux only."""

from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return _libc


def check(result: int, what: str) -> int:
    """Raise OSError naming `what` when a libc call returned -1."""
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def prctl(option: int, arg: int = 0) -> bool:
    return libc().prctl(option, arg, 0, 0, 0) == 0


PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty every capability set of this process (bounding, ambient, effective, permitted,
    inheritable), for good.

    A uid change alone is not enough inside a user namespace: the kernel only clears
    capabilities when the ids leave the namespace's uid 0, and when uid 0 is not mapped (as in
    ours) a process keeps the full set it got with the namespace, enough to unmount the
    scratch tmpfs or signal the namespace's creator."""
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly for caps already gone
    libc().prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    nr = _SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        raise OSError(f"no capset syscall number for {os.uname().machine}")
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: two 32-bit halves of each set
    check(libc().syscall(nr, ctypes.byref(header), ctypes.byref(data)), "capset")
    with open("/proc/self/status") as f:
        held = [line for line in f if line.startswith(("CapPrm:", "CapEff:", "CapBnd:"))]
    if any(int(line.split()[1], 16) for line in held):
        raise OSError("capabilities are still held after dropping them")


def die_with_parent(expected_parent: int | None = None) -> None:
    """SIGKILL this process when its parent ends (and right now if it already has, when the
    parent is visible from here). Changing uids clears this: arm it again afterwards."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(111)


def pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # kernel < 5.3


def close_fds_except(keep: set[int]) -> None:
    """Close every open descriptor of this process but `keep` (0, 1, 2 are the caller's business)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


# Every process a caller's sandbox starts carries MAGRPO_SANDBOX_TAG=<that caller's tag> in its
# environment (pool.caller_tag): the worker's, inherited by forks, kept in the candidate's, so
# exec'd children have it too. /proc/PID/environ keeps it through setsid and double forks: it tells
# one caller's sandbox processes from another's (another run, another test process) on one machine.
TAG_VAR = "MAGRPO_SANDBOX_TAG"


def tagged_processes(tag: str) -> set[int]:
    """Live processes (zombies aside) whose environment carries MAGRPO_SANDBOX_TAG=`tag`, among those
    whose environment this process may read (its own user's; every one when root)."""
    entry = f"{TAG_VAR}={tag}".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if entry in environ.split(b"\0") and process_state(int(name)) not in (None, "Z", "X"):
            found.add(int(name))
    return found


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, None when the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ")".
    return stat[stat.rfind(")") + 2:].split()


def process_state(pid: int) -> str | None:
    """The state letter of a process (R, S, Z...), None when it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def proc_table() -> dict[int, tuple[str, int, int, int]]:
    """pid -> (state, ppid, pgrp, session) of every process, read from /proc/<pid>/stat."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(name)
        if fields is not None and len(fields) >= 4:
            table[int(name)] = (fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def descendants(table: dict[int, tuple[str, int, int, int]], roots: set[int]) -> set[int]:
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


def reap_children(block_until: float | None = None) -> bool:
    """Reap every ended child. With `block_until`, wait (until then) for all children to end.
    True when no child is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid:
            continue
        if block_until is None or time.monotonic() > block_until:
            return False
        time.sleep(0.001)


def kill_tree_and_reap(pgid: int, deadline_s: float = 5.0) -> None:
    """SIGKILL process group `pgid` and every descendant of this process, and reap them all.

    Meant for a subreaper: every orphan of the program comes back to it, so having no children
    left means nothing of the program is left."""
    deadline = time.monotonic() + deadline_s
    me = os.getpid()
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
        if reap_children():
            return
        table = proc_table()
        for pid in descendants(table, {me}) | {p for p, t in table.items() if t[2] == pgid}:
            if pid != me and table[pid][0] not in "ZX":
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if time.monotonic() > deadline:
            return
        time.sleep(0.002)
