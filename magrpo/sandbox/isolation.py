"""Where the candidate's process runs, from strongest to weakest isolation.

`namespaces` (the default wherever the kernel allows it): the candidate gets Linux namespaces of
its own, entered with unshare(2) through ctypes:

    judge ──fork──> P: unshare(user, pid, net, mount, ipc); the judge writes P's uid/gid map
                     └─fork──> X: PID 1 of the new PID namespace; mounts; drops to the mapped
                                  unprivileged uid; limits; no exec
                                  └─fork──> Y: the candidate

* user: inside, the candidate is uid/gid 65534 (mapped to the unprivileged `nobody` outside when
  the trainer is root, to the trainer's own uid otherwise), with no capabilities, no_new_privs,
  and no way to create further user namespaces;
* PID: it sees and can signal only its own processes; when X ends, the kernel kills every
  process left in the namespace, so nothing survives a run (double forks, setsid, pty included).
  X is the namespace's init: it only reaps, and reports how Y ended on a pipe to the judge;
* mount: every mount is read-only, except a fresh size-capped tmpfs on /tmp and on /dev/shm
  (the scratch and working directory: /tmp, or /dev/shm when the trainer's files lie under
  /tmp); /proc is a new procfs of the new PID namespace only
  (the trainer's memory, environ and command line are out of sight). What the candidate needs
  (the Python installation, the venv, the package: see `mount_plan`) stays readable wherever it
  lies: a directory above it that the unprivileged uid cannot traverse (a Python under a 0700
  /root, a checkout under a private job directory) is covered by a tmpfs that holds read-only
  clones of just those paths, and paths under /tmp or /dev/shm are cloned back onto the fresh
  tmpfs laid there. A root trainer lays those covers as itself, in a mount namespace of its
  own, before it creates the user namespace: root inside that namespace could not even look
  into a 0700 directory that another user owns;
* network: an empty network namespace (only a down loopback): no connection goes anywhere;
* IPC: System V IPC and POSIX message queues of its own.

`uid` (the trainer runs as root, namespaces are unavailable): the candidate runs under a uid of
its own (one per run), with RLIMIT_NPROC and the in-process guards; its scratch is a private 0700
directory, under the caller's TMPDIR when that uid can reach it, else under /tmp, /var/tmp or
/dev/shm (`scratch_parent`). It imports through descriptors the worker opened on the directories
it cannot traverse (`open_path_handles`). It cannot signal or read other users' processes, nor
write files it does not own; it can still see the process list, reach the network and write
world-writable directories such as /tmp. Everything running under that uid is killed at the end
of the run.

`guards` (neither): the candidate runs as the trainer's user with only the in-process guards
(guards.py) and rlimits; its process group and every descendant are killed at the end.

At every level: a scrubbed environment (a short allow-list, and the caller's MAGRPO_SANDBOX_TAG
that labels its sandbox processes: procs.TAG_VAR), resource limits (limits.py), and
exec of other programs refused by a seccomp filter unless `allow_subprocess`.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from magrpo.sandbox import guards
from magrpo.sandbox.limits import SandboxLimits, apply_rlimits
from magrpo.sandbox.procs import (
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    TAG_VAR,
    check,
    close_fds_except,
    die_with_parent,
    drop_capabilities,
    kill_tree_and_reap,
    libc,
    pidfd_open,
    prctl,
    reap_children,
)

LEVELS = ("namespaces", "uid", "guards")  # strongest first

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
NAMESPACES = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC
INSIDE_ID = 65534  # the candidate's uid and gid inside its user namespace
OUTSIDE_ID = 65534  # ...and outside, when the trainer is root (`nobody`)
UID_BASE, UID_SPAN = 1_600_000_000, 1 << 22  # level `uid`: one uid per run, UID_BASE + judge pid
_SETUP_TIMEOUT_S = 10.0


class SandboxUnavailable(RuntimeError):
    """The requested isolation level cannot run here."""


@dataclass
class Candidate:
    """A running candidate process, as the judge holds it."""

    level: str
    pid: int  # SIGKILL this to end the candidate (X at `namespaces`, Y otherwise)
    death_fd: int  # becomes readable once the candidate process (Y) has ended
    _cleanup: Callable[[], None]
    _exit_status: Callable[[], int | None]
    closed: bool = field(default=False)

    def exit_status(self) -> int | None:
        """Wait status of the candidate process once it has ended (None if unknown)."""
        return self._exit_status()

    def kill(self) -> None:
        """End the candidate and everything it started; reap it all. Idempotent."""
        if not self.closed:
            self.closed = True
            self._cleanup()


# -- entry point used by the judge -----------------------------------------------------------------


def launch(level: str, limits: dict, body: Callable[[], int], keep: set[int], stdio: tuple[int, int, int],
           plan: MountPlan, scratch_parent: str) -> Candidate:
    """Fork a confined process that runs `body()` and exits with its return value.

    `keep` are the descriptors the body uses; `stdio` the descriptors that become its 0, 1, 2.
    `scratch_parent` holds the scratch directory at `uid` and `guards` (see `scratch_parent`).
    Raises SandboxUnavailable if the level cannot be set up."""
    starter = {"namespaces": _launch_namespaces, "uid": _launch_uid, "guards": _launch_guards}[level]
    return starter(limits, body, keep, stdio, plan, scratch_parent)


def _enter_body(body: Callable[[], int], keep: set[int], stdio: tuple[int, int, int], workdir: str) -> None:
    """In the candidate process, after confinement: descriptors, environment, then the body."""
    for target, fd in enumerate(stdio):
        if fd != target:
            os.dup2(fd, target)
    close_fds_except(keep)
    os.chdir(workdir)
    tag = os.environ.get(TAG_VAR)       # the caller's label (procs.TAG_VAR), for its exec'd children too
    os.environ.clear()
    os.environ.update(_ENV, HOME=workdir, TMPDIR=workdir, **({TAG_VAR: tag} if tag else {}))
    tempfile.tempdir = None
    code = 1
    try:
        code = body()
    finally:
        os._exit(code)


_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}


# -- namespaces ------------------------------------------------------------------------------------


class _Lines:
    """Line messages on a pipe with several writers (P, then X)."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def read(self, deadline: float) -> str:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return "error: the sandbox set-up timed out"
            chunk = os.read(self.fd, 4096)
            if not chunk:
                return "error: the sandbox set-up process ended without a word"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")


def _say(fd: int, text: str) -> None:
    os.write(fd, (text.replace("\n", " ") + "\n").encode("utf-8", "replace"))


def _launch_namespaces(limits, body, keep, stdio, plan, scratch_parent) -> Candidate:
    judge = os.getpid()
    sync_r, sync_w = os.pipe()  # P and X -> judge
    go_r, go_w = os.pipe()  # judge -> P: the id maps are written
    pid = os.fork()
    if pid == 0:
        _namespace_parent(judge, sync_w, go_r, limits, body, keep, stdio, plan)  # never returns
    os.close(sync_w)
    os.close(go_r)
    lines = _Lines(sync_r)
    deadline = time.monotonic() + _SETUP_TIMEOUT_S

    def fail(message: str):
        os.close(go_w)
        _kill_pid_and_reap(pid)
        os.close(sync_r)
        raise SandboxUnavailable(message)

    msg = lines.read(deadline)
    if msg != "unshared":
        fail(msg.removeprefix("error: "))
    if os.geteuid() == 0:
        try:
            _write_id_maps(pid)
        except OSError as e:
            fail(f"cannot write the user namespace's id maps: {e}")
    os.write(go_w, b"g")
    os.close(go_w)
    # P says "init <pid>" once it has forked X; X says "ready" once confined, then "exit <status>"
    # when the candidate ends, which may all come before P's word.
    init_pid, ready = None, False
    status: list[int | None] = [None]
    while init_pid is None or not ready:
        msg = lines.read(deadline)
        if msg.startswith("init "):
            init_pid = int(msg.split()[1])
        elif msg == "ready":
            ready = True
        elif msg.startswith("exit ") and ready:
            status[0] = int(msg.split()[1])
        else:
            if init_pid is not None:
                _kill_pid_and_reap(init_pid)
            _kill_pid_and_reap(pid)
            os.close(sync_r)
            raise SandboxUnavailable(msg.removeprefix("error: "))

    def exit_status() -> int | None:
        if status[0] is None:
            msg = lines.read(time.monotonic() + 1.0)
            if msg.startswith("exit "):
                status[0] = int(msg.split()[1])
        return status[0]

    def cleanup() -> None:
        # Killing the namespace's init ends every process in it; P then reaps it and exits.
        try:
            os.kill(init_pid, 9)
        except OSError:
            pass
        _kill_pid_and_reap(pid)
        os.close(sync_r)

    return Candidate("namespaces", init_pid, sync_r, cleanup, exit_status)


def _write_id_maps(pid: int) -> None:
    # Root in the parent namespace may map any id: the candidate's ids become `nobody` outside.
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"{INSIDE_ID} {OUTSIDE_ID} 1")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"{INSIDE_ID} {OUTSIDE_ID} 1")


def _namespace_parent(judge, sync_w, go_r, limits, body, keep, stdio, plan) -> None:
    """P: outside the new PID namespace (it is X's parent), inside the others. Never returns."""
    try:
        die_with_parent(judge)
        close_fds_except(keep | set(stdio) | {sync_w, go_r})
        euid, egid = os.geteuid(), os.getegid()
        covered = euid == 0 and _cover_as_root(plan)
        check(libc().unshare(NAMESPACES), "unshare")
        die_with_parent(judge)
        if euid != 0:
            # Unprivileged: a process may map only its own ids, and only with setgroups denied.
            for name, text in (("setgroups", "deny"), ("uid_map", f"{INSIDE_ID} {euid} 1"),
                               ("gid_map", f"{INSIDE_ID} {egid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        _say(sync_w, "unshared")
        if os.read(go_r, 1) != b"g":
            os._exit(1)
        os.close(go_r)
        me = os.getpid()
        x = os.fork()
        if x == 0:
            _namespace_init(me, sync_w, limits, body, keep, stdio, plan, setgroups=euid == 0, covered=covered)
        _say(sync_w, f"init {x}")
        os.close(sync_w)
        for fd in keep | set(stdio):
            try:
                os.close(fd)
            except OSError:
                pass
        while True:
            try:
                os.waitpid(x, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        os._exit(0)
    except BaseException as e:  # noqa: B036 - report anything, then leave without unwinding
        try:
            _say(sync_w, f"error: {e}")
        finally:
            os._exit(1)


def _namespace_init(parent, sync_w, limits, body, keep, stdio, plan, setgroups: bool, covered: bool) -> None:
    """X: PID 1 of the new namespace. Sets up the file system, drops privileges, forks the
    candidate, reaps, and reports how the candidate ended. Never returns."""
    try:
        die_with_parent()  # its parent P lives outside this PID namespace: getppid() says 0
        _mount_filesystems(plan, limits, covered)
        try:
            # Limits of this user namespace: no nested user namespaces (a large kernel surface).
            with open("/proc/sys/user/max_user_namespaces", "w") as f:
                f.write("0")
        except OSError:
            pass
        if setgroups:
            os.setgroups([])
        os.setresgid(INSIDE_ID, INSIDE_ID, INSIDE_ID)
        os.setresuid(INSIDE_ID, INSIDE_ID, INSIDE_ID)
        drop_capabilities()  # the uid change kept them all (see procs.drop_capabilities)
        die_with_parent()
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        apply_rlimits(limits, nproc=int(limits["max_processes"]) + 1)  # + this init
        if not limits["allow_subprocess"]:
            forbid_exec()
        prctl(PR_SET_DUMPABLE, 0)  # the candidate (same uid) cannot ptrace or read this process
        workdir = _namespace_workdir(plan)
        _say(sync_w, "ready")
        y = os.fork()
        if y == 0:
            os.close(sync_w)
            _enter_body(body, keep, stdio, workdir)
        for fd in keep | set(stdio):
            try:
                os.close(fd)
            except OSError:
                pass
        while True:  # as init, every orphan of the namespace is ours to reap
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(0)
            except InterruptedError:
                continue
            if pid == y:
                _say(sync_w, f"exit {status}")
                os._exit(0)  # the kernel now kills whatever is left in the namespace
    except BaseException as e:  # noqa: B036
        try:
            _say(sync_w, f"error: {e}")
        finally:
            os._exit(1)


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 1 << 14, 1 << 18
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, AT_RECURSIVE, AT_FDCWD = 0x1, 0x2, 0x8000, -100
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 0x4
_SYSCALLS = {"x86_64": {"open_tree": 428, "move_mount": 429, "mount_setattr": 442},
             "aarch64": {"open_tree": 428, "move_mount": 429, "mount_setattr": 442}}


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _syscall_numbers() -> dict[str, int]:
    nr = _SYSCALLS.get(os.uname().machine)
    if nr is None:
        raise OSError(f"no mount syscall numbers for {os.uname().machine}")
    return nr


def _clone_tree(path: str) -> int:
    """A detached, recursive copy of the mounts at `path` (open_tree), as a descriptor."""
    return check(libc().syscall(_syscall_numbers()["open_tree"], AT_FDCWD, path.encode(),
                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE), f"open_tree {path}")


def _attach(fd: int, path: str, is_dir: bool) -> None:
    """Create the mount point `path` (and its parents) and move the detached tree `fd` onto it."""
    if is_dir:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
    check(libc().syscall(_syscall_numbers()["move_mount"], fd, b"", AT_FDCWD, path.encode(),
                         MOVE_MOUNT_F_EMPTY_PATH), f"move_mount {path}")
    os.close(fd)


def _candidate_file_ids() -> None:
    """From now on, files this process creates are the candidate's: the only ids mapped in its
    user namespace (root's are not, and creating a file with unmapped ids fails). Lookups pass
    only directories others may search from then on, or the covers laid over the others."""
    libc().setfsuid(INSIDE_ID)
    libc().setfsgid(INSIDE_ID)


def _cover_hidden(plan: MountPlan, candidate_ids: bool) -> None:
    """Lay a tmpfs over each directory the candidate cannot traverse, holding clones of the
    paths under it that the candidate needs (made read-only with every other mount later)."""
    # Every clone is taken before anything changes: once the file system ids are the
    # candidate's, or a cover hides a directory, the paths under it are out of reach.
    clones = []
    for hidden, paths in plan.hidden:
        for p in paths:
            try:
                clones.append((p, os.path.isdir(p), _clone_tree(p)))
            except OSError as e:
                raise OSError(e.errno, f"cannot lend {p} to the candidate: its uid cannot traverse {hidden} "
                                       f"({_describe_dir(hidden)}) and cloning it failed ({e})") from None
    ids = f"uid={INSIDE_ID},gid={INSIDE_ID}"
    for hidden, _ in plan.hidden:
        check(libc().mount(b"tmpfs", hidden.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                           f"mode=0755,size=1m,{ids}".encode()), f"mount tmpfs on {hidden}")
    if candidate_ids:
        _candidate_file_ids()
    for p, is_dir, fd in clones:
        _attach(fd, p, is_dir)


def _cover_as_root(plan: MountPlan) -> bool:
    """P, when the trainer is root and before the user namespace exists: lay the covers of
    `plan.hidden` in a mount namespace of P's own, as the trainer's root. The user namespace's
    mounts are then copied from it. True if done (False: nothing to cover, or no new mount
    namespace for root here; X then tries it inside, where only root-owned directories open)."""
    if not plan.hidden:
        return False
    if libc().unshare(CLONE_NEWNS) != 0:
        return False
    check(libc().mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _cover_hidden(plan, candidate_ids=False)
    return True


def _mount_filesystems(plan: MountPlan, limits: dict, covered: bool) -> None:
    lc = libc()
    nr = _syscall_numbers()
    # Nothing mounted here propagates back to the trainer's mount namespace.
    check(lc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    if not covered:
        _cover_hidden(plan, candidate_ids=True)
    attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    check(lc.syscall(nr["mount_setattr"], AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
          "make every mount read-only")
    # Needed paths under the directories that get a fresh tmpfs (a venv in /tmp): cloned now,
    # read-only, and put back on the fresh tmpfs below.
    under = [p for p in plan.needed if any(p.startswith(d + "/") for d in SCRATCH_MOUNTS)]
    clones = [(p, os.path.isdir(p), _clone_tree(p)) for p in under]
    check(lc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
    size = f"size={int(limits['max_file_mb'])}m,mode=0700,uid={INSIDE_ID},gid={INSIDE_ID}".encode()
    for d in SCRATCH_MOUNTS:
        if os.path.isdir(d):
            check(lc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size), f"mount tmpfs on {d}")
    _candidate_file_ids()
    for p, is_dir, fd in clones:
        _attach(fd, p, is_dir)


SCRATCH_MOUNTS = ("/tmp", "/dev/shm")  # a fresh tmpfs on each at `namespaces`; one is the working directory


def _namespace_workdir(plan: MountPlan) -> str:
    """The candidate's working directory at `namespaces`: the first fresh tmpfs that holds no
    clone of a needed path (a venv under /tmp is put back on /tmp's), so that the program starts
    in an empty directory wherever the trainer's files lie, and its parent is read-only. Where
    both hold clones, an empty directory of its own on /tmp (its parent, /tmp, is private too)."""
    for d in SCRATCH_MOUNTS:
        if os.path.isdir(d) and not any(p.startswith(d + "/") for p in plan.needed):
            return d
    return tempfile.mkdtemp(prefix="work-", dir="/tmp")


@dataclass(frozen=True)
class MountPlan:
    """What the candidate needs to read, for the levels that change its identity."""

    needed: tuple[str, ...]  # real paths, outermost only (a clone takes its subdirectories along)
    # (directory the candidate's uid cannot traverse, the needed paths under it)
    hidden: tuple[tuple[str, tuple[str, ...]], ...]


def mount_plan(paths: list[str]) -> MountPlan:
    """The plan for `paths` (sys.path, the prefixes, the interpreter's directory).

    A directory is traversable for the candidate if others may search it (the candidate is
    neither its owner nor in its group)."""
    needed = sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})
    # Keep only the outermost of nested paths: cloning a tree takes its subdirectories along.
    outer = [p for p in needed if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in needed)]
    hidden: dict[str, list[str]] = {}
    for p in outer:
        closed = closed_ancestor(p)
        if closed is not None:
            hidden.setdefault(closed, []).append(p)
    return MountPlan(tuple(outer), tuple((d, tuple(ps)) for d, ps in sorted(hidden.items())))


def closed_ancestor(path: str, *, itself: bool = False) -> str | None:
    """The outermost directory above `path` (or `path` itself, with `itself`) that others may not
    search, None if there is none."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + itself):
        ancestor = "/" + "/".join(parts[:i])
        if not os.stat(ancestor).st_mode & stat.S_IXOTH:
            return ancestor
    return None


def _describe_dir(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot stat it: {e.strerror}"
    return f"mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}"


# -- seccomp: no exec ------------------------------------------------------------------------------

# audit arch, execve, execveat, unshare: the syscall numbers of the architectures covered
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 59, 322, 272), "aarch64": (0xC00000B7, 221, 281, 97)}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def forbid_exec() -> bool:
    """execve/execveat fail with EPERM from now on, in this process and its children."""
    arch = _SECCOMP_ARCH.get(os.uname().machine)
    return arch is not None and deny_syscalls([arch[1], arch[2]])


def forbid_unshare() -> bool:
    """unshare(2) fails with EPERM from now on, as under common container seccomp profiles."""
    arch = _SECCOMP_ARCH.get(os.uname().machine)
    return arch is not None and deny_syscalls([arch[3]])


def deny_syscalls(numbers: list[int]) -> bool:
    """Install a seccomp filter under which these syscalls (and any syscall of another ABI, such
    as 32-bit calls from a 64-bit process) fail with EPERM. Sets no_new_privs, which the kernel
    requires. False where this architecture is not covered."""
    arch = _SECCOMP_ARCH.get(os.uname().machine)
    if arch is None or not numbers:
        return False
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, eperm = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    prog = [(ld, 0, 0, 4),  # seccomp_data.arch
            (jeq, 1, 0, arch[0]), (ret, 0, 0, eperm),
            (ld, 0, 0, 0),  # seccomp_data.nr
            (jge, len(numbers) + 1, 0, 0x40000000)]  # x32 syscalls
    prog += [(jeq, len(numbers) - i, 0, nr) for i, nr in enumerate(numbers)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    filters = (_SockFilter * len(prog))(*[_SockFilter(*p) for p in prog])
    fprog = _SockFprog(len(prog), filters)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    return libc().prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


# -- uid -------------------------------------------------------------------------------------------


def _launch_uid(limits, body, keep, stdio, plan, scratch_parent) -> Candidate:
    judge = os.getpid()
    uid = UID_BASE + judge % UID_SPAN
    scratch = tempfile.mkdtemp(prefix="magrpo-sbx-", dir=scratch_parent)
    os.chown(scratch, uid, uid)
    os.chmod(scratch, 0o700)
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            die_with_parent(judge)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            apply_rlimits(limits, nproc=int(limits["max_processes"]))  # the uid is this run's alone
            if not limits["allow_subprocess"]:
                forbid_exec()
            prctl(PR_SET_DUMPABLE, 0)
            _reroute_imports()
            guards.install(os.path.realpath(scratch), int(limits["max_processes"]), limits["allow_subprocess"])
        except BaseException:  # noqa: B036
            os._exit(125)
        _enter_body(body, keep | {fd for _, fd in _path_handles}, stdio, scratch)
    return _forked_candidate("uid", pid, scratch, lambda: _kill_uid(uid))


# Level `uid` cannot mount anything over an untraversable directory (a Python under a 0700
# /root), so the worker opens the directories the candidate needs while it still may, and the
# candidate imports through those open handles (/proc/self/fd/N/...), which lookups enter
# without passing the directories above them.
_path_handles: list[tuple[str, int]] = []


def open_path_handles(plan: MountPlan) -> None:
    """In the worker, once: O_PATH handles on the directories of `plan.hidden` (see mount_plan)."""
    for _, paths in plan.hidden:
        for p in paths:
            if os.path.isdir(p):
                _path_handles.append((p, os.open(p, os.O_PATH | os.O_DIRECTORY)))


def worker_fds() -> set[int]:
    """Descriptors of the worker that processes between it and a candidate must keep open."""
    return {fd for _, fd in _path_handles}


def _reroute_imports() -> None:
    def reroute(entry):
        for p, fd in _path_handles:
            if isinstance(entry, str) and (entry == p or entry.startswith(p + "/")):
                return f"/proc/self/fd/{fd}" + entry[len(p):]
        return entry

    if not _path_handles:
        return
    sys.path[:] = [reroute(e) for e in sys.path]
    sys.path_importer_cache.clear()
    for module in list(sys.modules.values()):
        path = getattr(module, "__path__", None)
        if isinstance(path, list):  # packages already imported: their submodules too
            path[:] = [reroute(e) for e in path]


def _kill_uid(uid: int) -> None:
    """SIGKILL every process running as `uid`: a helper with that uid does kill(-1), which
    reaches exactly the processes it may signal; the killed are reaped (as the subreaper, they
    are all ours) until /proc shows none left."""
    deadline = time.monotonic() + 5.0
    while True:
        helper = os.fork()
        if helper == 0:
            try:
                os.setresuid(uid, uid, uid)
                libc().kill(-1, 9)
            finally:
                os._exit(0)
        _wait(helper)
        reap_children()
        if not _processes_of(uid) or time.monotonic() > deadline:
            return
        time.sleep(0.001)


def _processes_of(uid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as f:
                    if any(line.startswith("Uid:") and str(uid) in line.split() for line in f):
                        found.append(int(name))
            except OSError:
                continue
    return found


# -- guards ----------------------------------------------------------------------------------------


def _launch_guards(limits, body, keep, stdio, plan, scratch_parent) -> Candidate:
    judge = os.getpid()
    scratch = tempfile.mkdtemp(prefix="magrpo-sbx-", dir=scratch_parent)
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent(judge)
            os.setpgid(0, 0)  # own group: the judge can kill it without killing itself
            nproc = None if os.geteuid() == 0 else _user_tasks(os.getuid()) + int(limits["max_processes"])
            apply_rlimits(limits, nproc=nproc)
            if not limits["allow_subprocess"]:
                forbid_exec()
            guards.install(os.path.realpath(scratch), int(limits["max_processes"]), limits["allow_subprocess"])
        except BaseException:  # noqa: B036
            os._exit(125)
        _enter_body(body, keep, stdio, scratch)
    return _forked_candidate("guards", pid, scratch, lambda: None)


def _user_tasks(uid: int) -> int:
    # RLIMIT_NPROC counts all tasks of the user: allow max_processes more than exist now.
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                continue
    return count


# -- shared by uid and guards ----------------------------------------------------------------------


def _forked_candidate(level: str, pid: int, scratch: str, kill_rest: Callable[[], None]) -> Candidate:
    pidfd = pidfd_open(pid)
    status: list[int | None] = [None]
    if pidfd is None:  # old kernel: a pipe that the candidate's end closes on exit stands in
        raise SandboxUnavailable("pidfd_open is unavailable (Linux < 5.3)")

    def exit_status() -> int | None:
        if status[0] is None:
            try:
                done, st = os.waitpid(pid, 0)
                status[0] = st
            except ChildProcessError:
                pass
        return status[0]

    def cleanup() -> None:
        # The judge is a child subreaper: orphans of the candidate come back to it.
        kill_tree_and_reap(pid)
        kill_rest()
        reap_children(block_until=time.monotonic() + 5.0)
        os.close(pidfd)
        shutil.rmtree(scratch, ignore_errors=True)

    return Candidate(level, pid, pidfd, cleanup, exit_status)


def _kill_pid_and_reap(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    _wait(pid)


def _wait(pid: int) -> int | None:
    """Reap `pid`; its exit code (None if it was not ours to wait for)."""
    while True:
        try:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        except ChildProcessError:
            return None
        except InterruptedError:
            continue


# -- where the scratch directory goes ---------------------------------------------------------------

SCRATCH_FALLBACKS = ("/tmp", "/var/tmp", "/dev/shm")


def scratch_parent(level: str, wanted: str) -> tuple[str | None, str | None]:
    """(directory to hold the candidates' scratch directories, why `wanted` was passed over).

    `wanted` is the caller's temporary directory (TMPDIR). At `uid` the candidate's uid must be
    able to reach it: a per-job TMPDIR under a private (0700) directory is out of its reach, and
    the scratch then goes to the first of SCRATCH_FALLBACKS that it can reach (the scratch itself
    is private to that uid). At `guards` the candidate is the trainer, who can use `wanted`.
    At `namespaces` the scratch is a fresh tmpfs on /tmp inside, and this is "/tmp".
    The directory is None (and the reason says why) when no directory will do."""
    if level == "namespaces":
        return "/tmp", None
    if level == "uid":
        usable = lambda d: _enterable_as(UID_BASE, d)  # noqa: E731 - any uid of the level's range
        who = "the sandbox's uid"
    else:
        usable = lambda d: os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)  # noqa: E731
        who = "the trainer's user"
    why = None
    for d in dict.fromkeys([os.path.realpath(wanted), *SCRATCH_FALLBACKS]):
        if usable(d):
            return d, why
        if why is None:
            closed = closed_ancestor(d, itself=True) if os.path.isdir(d) else None
            where = f"{closed} ({_describe_dir(closed)}) closes it" if closed else "it is not a usable directory"
            why = f"{who} cannot use TMPDIR={d}: {where}"
    return None, f"{why}, nor any of {', '.join(SCRATCH_FALLBACKS)}"


def _enterable_as(uid: int, path: str) -> bool:
    """Whether a process of `uid` (no groups) can reach directory `path` (search every directory
    on the way). Asked of the kernel, in a child that takes that uid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os._exit(0 if os.path.isdir(path) and os.access(path, os.X_OK) else 1)
        except BaseException:  # noqa: B036
            os._exit(2)
    return _wait(pid) == 0


# -- choosing a level ------------------------------------------------------------------------------


def probe(level: str, plan: MountPlan, scratch_parent: str) -> str | None:
    """None if `level` works here (a trivial candidate starts, runs and ends), else why not."""
    if level == "uid" and os.geteuid() != 0:
        return "it needs the trainer to run as root (it switches the program to an unprivileged uid)"
    if sys.platform != "linux":
        return f"it needs Linux (this is {sys.platform})"

    limits = SandboxLimits(timeout_s=5.0).to_dict()
    devnull = os.open(os.devnull, os.O_RDWR)
    r, w = os.pipe()

    def body() -> int:
        os.write(w, struct.pack("B", 7))
        return 0

    try:
        cand = launch(level, limits, body, {w}, (devnull, devnull, devnull), plan, scratch_parent)
    except (SandboxUnavailable, OSError) as e:
        return str(e)
    finally:
        os.close(w)
        os.close(devnull)
    try:
        ok = bool(select.select([r], [], [], 5.0)[0]) and os.read(r, 1) == b"\x07"
        status = cand.exit_status()
    finally:
        cand.kill()
        os.close(r)
    if not ok or status != 0:
        return f"a trial program did not run (exit status {status})"
    return None
