"""Where magrpo-export, magrpo-crossplay and magrpo-table write, checked in one place.

No command writes inside a run directory but that run's own trainer: `check_out_dir` refuses an
output directory that is, or lies inside, a run directory or an exported team
(magrpo.launch.is_run_dir: any run, not only the ones the command reads) or one of the command's
sources (a checkpoint `RUN/checkpoints/step_N` counts as its run RUN).

An output directory that already holds a file the command writes is refused unless --force
(`check_overwrite`, before any work); with --force those files are replaced and nothing else
there is touched. `publish` writes the files into a hidden temporary directory inside the output
directory and moves them into place only once all are written, so a failed command leaves no
half set (and a refusal nothing at all).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from magrpo.schema import ConfigError


def check_out_dir(out: str | Path, sources: Iterable[str | Path] = (), key: str = "--out", note: str = "",
                  team: bool = False) -> None:
    """Refuse (ConfigError, one line) to write into `out` inside a run, an exported team or a source
    (module docstring). `note` follows the path in the message (`(the default: DIR/table)`);
    `team`: `out` is an exported team's directory, written whole (an earlier export there is
    replaced with --force, so only what is around it counts)."""
    from magrpo.launch import run_dir_around
    from magrpo.team import is_team_dir

    target = Path(out).expanduser().resolve()
    named = f"{key} {str(out)!r}{note}"
    root = run_dir_around(target.parent if team and is_team_dir(target) else target)
    if root is not None:
        if is_team_dir(root):
            raise ConfigError(f"{named} is inside the exported team {str(root)!r}, which holds the team alone; "
                              f"give a directory outside it")
        raise ConfigError(f"{named} is inside the run directory {str(root)!r}; no command writes into a run but "
                          f"its own trainer: give a directory outside it")
    for src in sources:
        p = Path(src).expanduser()
        if not p.exists():       # a hub id, or a path whose own error comes later
            continue
        p = p.resolve()
        for d in {p, run_dir_around(p) or p}:
            if target.is_relative_to(d):
                raise ConfigError(f"{named} is inside {str(src)!r}, which this command reads; give a directory "
                                  f"outside it")


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


def publish(out: str | Path, fill: Callable[[Path], object], force: bool, key: str = "--out") -> list[Path]:
    """`fill(stage)` writes the command's files into a hidden temporary directory inside `out`; they
    are then checked against what `out` holds (check_overwrite) and moved into place. Returns
    their paths in `out` (in the order `fill` returns them when it returns a list, else sorted).
    Whatever fails, the temporary directory goes, and so do the directories made for `out`."""
    out = Path(out).expanduser()
    created = _make_dirs(out, key)
    stage = Path(tempfile.mkdtemp(prefix=".magrpo-out.", suffix=".tmp", dir=out))
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
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        _remove_empty(created)
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return [out / n for n in names]
