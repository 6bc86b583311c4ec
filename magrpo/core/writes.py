"""Where magrpo-export, magrpo-crossplay and magrpo-table write, checked in one place.

No command writes inside a run directory but that run's own trainer: `magrpo.launch.check_out_dir`
refuses an output directory that is, or lies inside, a run directory or an exported team
(magrpo.launch.is_run_dir: any run, not only the ones the command reads) or one of the command's
sources (a checkpoint `RUN/checkpoints/step_N` counts as its run RUN).

An output directory that already holds a file the command writes is refused unless --force
(`check_overwrite`, before any work); with --force those files are replaced and nothing else
there is touched. `publish` writes the files into a hidden temporary directory inside the output
directory and moves them into place only once all are written, so a failed command leaves no
half set (and a refusal nothing at all).

Every such write goes through a hidden temporary directory `.NAME.<pid>-<host>.XXXX.tmp` next to
its destination (`temp_dir`): it has no manifest and a hidden name, so nothing loads it as a team or
checkpoint (checkpoint.step_dirs skips it, an explicit path to one is refused). An in-process
failure removes it; a SIGKILL cannot, so the next write to the same destination removes those
whose process is gone (`remove_stale_temps`; only this host's, whose pids it can see).

A write that fails because the disk is full (ENOSPC or EDQUOT anywhere in the exception's chain,
or the way safetensors and torch.save word it) becomes `DiskFullError`: one line naming the
directory and the space free there (a SetupError: exit 1), raised once the partial files are
gone. magrpo.core.checkpoint.write_checkpoint (checkpoints, exported teams) and `publish` use it.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from magrpo.core.schema import ConfigError, SetupError

log = logging.getLogger("magrpo")


def check_overwrite(out: str | Path, names: Iterable[str], force: bool, key: str = "--out") -> None:
    """Refuse (ConfigError, one line) an output directory holding any of `names` (the files the
    command writes) unless `force`; a directory where one of those files goes is refused even
    then (only files are replaced, never a directory)."""
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{key} {str(out)!r} is a file; give a directory")
    held = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    for n in held:
        if (out / n).is_dir() and not (out / n).is_symlink():
            raise ConfigError(f"{key} {str(out)!r} holds a directory {n!r} where this command writes a file; "
                              f"move it, or give another directory")
    if held and not force:
        raise ConfigError(f"{key} {str(out)!r} already holds {', '.join(held)}, which this command writes; give "
                          f"another directory, or --force to replace those files (nothing else there is touched)")


def _make_dirs(path: Path, key: str) -> list[Path]:
    """mkdir -p `path`; the directories it created, outermost first."""
    missing = [d for d in (path, *path.parents) if not d.exists()][::-1]
    try:
        for d in missing:
            d.mkdir()
    except OSError as e:
        _remove_empty(missing)
        raise ConfigError(f"{key} {str(path)!r}: cannot create it ({e.strerror or e})") from None
    return missing


def _remove_empty(dirs: list[Path]) -> None:
    for d in reversed(dirs):
        try:
            d.rmdir()
        except OSError:
            pass


# -- temporary directories ---------------------------------------------------------------------------

HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]      # a pid means something on its host only
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-(?P<host>[0-9a-f]{8})\.[a-z0-9_]+\.tmp$")


def is_temp_name(name: str) -> bool:
    """A hidden `.….tmp` name: a temporary directory of a write (this magrpo's or an older one's)."""
    return name.startswith(".") and name.endswith(".tmp")


def temp_dir(parent: Path, name: str) -> Path:
    """A new hidden temporary directory in `parent` for writing `name`, named after its writer
    (`.NAME.<pid>-<host>.XXXX.tmp`) so that a later write can tell whether that process is gone."""
    return Path(tempfile.mkdtemp(prefix=f".{name}.{os.getpid()}-{HOST}.", suffix=".tmp", dir=parent))


def remove_stale_temps(parent: Path, wanted: Callable[[str], bool]) -> list[Path]:
    """Remove the temporary directories in `parent` of the destinations `wanted` accepts whose
    writer was on this host and is gone (killed: nothing could clean up). A live writer's, another
    host's, and one caught between the two renames of a replacement (`.NAME.old-<pid>` beside it:
    left for a person) stay. Returns the removed ones."""
    removed = []
    for d in sorted(parent.iterdir()) if parent.is_dir() else []:
        m = _TEMP_RE.match(d.name)
        if m is None or not wanted(m["name"]) or m["host"] != HOST or d.is_symlink() or not d.is_dir():
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or pid_alive(pid) or (parent / f".{m['name']}.old-{pid}").exists():
            continue
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            log.info("removed %s, left by a write whose process (pid %d) is gone", d, pid)
            removed.append(d)
    return removed


# -- a full disk -----------------------------------------------------------------------------------

FULL_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
# The errno as the wrappers word it: Rust's io::Error through safetensors' SafetensorError
# ("I/O error: No space left on device (os error 28)", older "IoError(Os { code: 28, kind:
# StorageFull, ... })"), or any message carrying the C library's text.
_FULL_TEXT = [(re.compile(r"no space left on device|os error 28\b|code: 28\b|StorageFull", re.I), errno.ENOSPC),
              (re.compile(r"disk quota exceeded|os error 122\b|code: 122\b|QuotaExceeded", re.I), errno.EDQUOT)]
# torch.save's zip writer reports a short write without its cause ("[enforce fail at
# inline_container.cc:672] . unexpected pos 576 vs 534", "PytorchStreamWriter failed writing file
# data/0: file write failed"): on a local disk, that is a full one.
_TORCH_SHORT_WRITE = re.compile(r"PytorchStreamWriter failed writing file[^\n]{0,160}|unexpected pos \d+ vs \d+")


class DiskFullError(SetupError):
    """A write that failed for a full disk; the message names the directory and the space free."""


def disk_full(exc: BaseException) -> str | None:
    """What says the disk is full in `exc` or the exceptions chained to it ("no space left on
    device", "disk quota exceeded", or torch's short write as torch words it); None otherwise."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    torch_short = None
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            return FULL_ERRNOS[e.errno]
        text = str(e)
        for pattern, code in _FULL_TEXT:
            if pattern.search(text):
                return FULL_ERRNOS[code]
        if torch_short is None and (m := _TORCH_SHORT_WRITE.search(text)):
            torch_short = f"torch.save: {m.group(0)}"
        stack += [e.__cause__, e.__context__]
    return torch_short


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def disk_full_error(exc: BaseException, where: str | Path, what: str | Path) -> DiskFullError | None:
    """The one-line DiskFullError for `exc` (disk_full), raised while writing `what` in the
    directory `where`; None when `exc` is something else."""
    why = disk_full(exc)
    if why is None:
        return None
    where = Path(where)
    here = next((d for d in (where, *where.parents) if d.exists()), where)
    try:
        free = f"{_size(shutil.disk_usage(here).free)} free there"
    except OSError:
        free = "free space unknown"
    return DiskFullError(f"the disk is full at {where}: writing {what} failed ({why}; {free}); free some space "
                         f"or write elsewhere")


@contextmanager
def disk_full_is_one_line(where: str | Path, what: str | Path) -> Iterator[None]:
    """Turn a disk-full failure of the block (writing `what` into `where`) into DiskFullError."""
    try:
        yield
    except Exception as e:
        full = disk_full_error(e, where, what)
        if full is None:
            raise
        raise full from e


STAGE = "magrpo-out"     # publish's temporary directory inside OUT: .magrpo-out.<pid>-<host>.XXXX.tmp


def publish(out: str | Path, fill: Callable[[Path], object], force: bool, key: str = "--out") -> list[Path]:
    """`fill(stage)` writes the command's files into a hidden temporary directory inside `out`; they
    are then checked against what `out` holds (check_overwrite) and moved into place. Returns
    their paths in `out` (in the order `fill` returns them when it returns a list, else sorted).
    Whatever fails, the temporary directory goes, and so do the directories made for `out`."""
    out = Path(out).expanduser()
    created = _make_dirs(out, key)
    try:
        remove_stale_temps(out, lambda name: name == STAGE)
        with disk_full_is_one_line(out, "a temporary directory"):
            stage = temp_dir(out, STAGE)
    except BaseException:
        _remove_empty(created)
        raise
    try:
        listed = fill(stage)
        names = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
        if isinstance(listed, list):
            order = [Path(p).relative_to(stage).as_posix() for p in listed]
            names = [n for n in order if n in names] + [n for n in names if n not in order]
        check_overwrite(out, names, force, key)
        for n in names:
            (out / n).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / n, out / n)
    except BaseException as e:
        full = disk_full_error(e, out, "the output files") if isinstance(e, Exception) else None
        shutil.rmtree(stage, ignore_errors=True)
        _remove_empty(created)
        if full is not None:
            raise full from e
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return [out / n for n in names]


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: Any, pid_start: Any = None) -> bool:
    """Whether process `pid` (started at `pid_start` ticks, when known) still exists on this host."""
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 1 << 31:    # what a record says: any number
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass   # alive, owned by someone else
    return pid_start is None or start_ticks(pid) in (None, pid_start)
