"""Where magrpo-export, magrpo-crossplay and magrpo-table write, checked in one place.

No command writes inside a run directory but that run's own trainer: `check_out_dir` refuses an
output directory that is, or lies inside, a run directory or an exported team
(magrpo.launch.is_run_dir: any run, not only the ones the command reads) or one of the command's
sources (a checkpoint `RUN/checkpoints/step_N` counts as its run RUN).
"""

from __future__ import annotations

from collections.abc import Iterable
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
