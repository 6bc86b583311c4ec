"""Override lines as data: what a saved `.hydra/overrides.yaml` (or an exported team's
overrides.yaml) may hold before a command takes it up (docs/security.md, "Sharing teams and runs safely")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from magrpo.core.records import check_depth
from magrpo.core.schema import ConfigError

MAX_VALUE_DEPTH = 16      # a saved override's list or dict value nests no deeper (a command line never does)


def override_key(line: str) -> str:
    """The key (or group) an override sets: `task` of `task=tldr`, `task.data.path` of
    `+task.data.path=x` or `~task.data.path`, `hydra.run.dir` of `hydra.run.dir=DIR`."""
    key = line.lstrip("+~").partition("=")[0]
    return key.partition("@")[0].strip()


def parse_override(line: str):
    """Hydra's parse of one override line (raises on a line that is none)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415  start-up: Hydra's parser loads only where an override is parsed

    return OverridesParser.create().parse_overrides([line])[0]



def check_saved_line(line: Any, where: Path | str) -> str:
    """One saved override, checked to be data: `key=value`, `+key=value`, `++key=value` or `~key`,
    with one value. A flag (`--experimental-rerun=FILE`, `-m`), a sweep (`a=1,2`, `range(..)`) or a
    line Hydra cannot parse is refused, naming the file and the line: a saved override never
    steers the command that takes it up."""
    shown = repr(line) if not isinstance(line, str) else repr(line[:200])
    if not isinstance(line, str):
        raise ConfigError(f"{where}: the saved override {shown} is not a key=value line; the run's config "
                          f"cannot be taken up")
    if not line.strip() or line.lstrip().startswith("-"):
        raise ConfigError(f"{where}: the saved override {shown} is a command-line flag, not a key=value line; "
                          f"saved overrides are data and are never passed on as flags")
    try:
        o = parse_override(line)
    except Exception as e:
        raise ConfigError(f"{where}: the saved override {shown} is not a valid override "
                          f"({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__})") from None
    try:
        value = o.value()
        if isinstance(value, (list, dict)):
            check_depth(value, f"{where}: the saved override {shown}", MAX_VALUE_DEPTH)
    except ConfigError:
        raise
    except Exception:       # noqa: BLE001  (a value the parser keeps lazily: checked when composed)
        pass
    if o.is_sweep_override():
        raise ConfigError(f"{where}: the saved override {shown} is a sweep (several values); a run's saved "
                          f"overrides give one value per key")
    if not o.is_delete() and "=" not in line:
        raise ConfigError(f"{where}: the saved override {shown} gives no value (key=value)")
    return line
