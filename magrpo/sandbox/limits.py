"""Resource limits of a sandboxed program, and how they are applied to a process.

The kernel enforces each of them on the candidate's processes: CPU seconds (RLIMIT_CPU, soft then
a hard kill one second later), address space (RLIMIT_AS), size of any file written
(RLIMIT_FSIZE), open files (RLIMIT_NOFILE), no core dumps, and the number of processes
(RLIMIT_NPROC). The last one counts every process of the real uid and does not bind root at all,
so it is only applied where the candidate has a uid of its own: a mapped unprivileged uid in its
own user namespace (`namespaces`), or a dedicated uid (`uid`). At `guards` the in-process guards
count the program's process group instead (see guards.py).
"""

from __future__ import annotations

import resource
from dataclasses import asdict, dataclass

ISOLATION_CHOICES = ("auto", "namespaces", "uid", "guards")


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0  # wall clock for the whole run (program, or candidate load + all tests)
    cpu_s: int = 10  # RLIMIT_CPU of each process
    memory_mb: int = 1024  # RLIMIT_AS of each process
    max_processes: int = 32  # processes the candidate may have at once, itself included
    max_output_bytes: int = 65536  # per stream kept (run_program)
    max_file_mb: int = 16  # RLIMIT_FSIZE, and the size of the scratch tmpfs at `namespaces`
    max_open_files: int = 256  # RLIMIT_NOFILE
    allow_subprocess: bool = False  # allow exec of other programs (refused by a seccomp filter otherwise)
    isolation: str = "auto"  # auto | namespaces | uid | guards (see magrpo.sandbox.isolation)

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_CHOICES:
            raise ValueError(f"sandbox isolation {self.isolation!r} is not one of {', '.join(ISOLATION_CHOICES)}")
        for name in ("timeout_s", "cpu_s", "memory_mb", "max_processes", "max_output_bytes", "max_file_mb",
                     "max_open_files"):
            value = getattr(self, name)
            if not value > 0 or value != value or value == float("inf"):
                raise ValueError(f"sandbox limit {name}={value!r} must be a positive finite number")

    def to_dict(self) -> dict:
        return asdict(self)


def apply_rlimits(limits: dict, nproc: int | None) -> None:
    """Lower this process's limits (soft and hard, so they cannot be raised back). `nproc` is the
    RLIMIT_NPROC to set, None to leave it alone (see the module docstring)."""
    mb = 1024 * 1024
    cpu = int(limits["cpu_s"])
    _lower(resource.RLIMIT_CPU, cpu, cpu + 1)  # soft -> SIGXCPU, hard -> SIGKILL one second later
    _lower(resource.RLIMIT_AS, int(limits["memory_mb"]) * mb)
    _lower(resource.RLIMIT_FSIZE, int(limits["max_file_mb"]) * mb)
    _lower(resource.RLIMIT_NOFILE, int(limits["max_open_files"]))
    _lower(resource.RLIMIT_CORE, 0)
    if nproc is not None:
        _lower(resource.RLIMIT_NPROC, nproc)


def _lower(res: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    _, cur_hard = resource.getrlimit(res)
    if cur_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur_hard), min(hard, cur_hard)
    resource.setrlimit(res, (soft, hard))
