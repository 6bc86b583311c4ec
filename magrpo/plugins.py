"""Plugins: the user's own modules, imported before anything is composed or looked up by name.

A plugin is any importable module that registers tasks, rewards, algorithms, advantage
estimators, scales, loss aggregations or feedback modes (`from magrpo import register_task, ...`).
Three ways name one, all of them taken together, in this order:

  * the config key `plugins: [my_pkg.tasks, ...]` (on the command line: `plugins=[my_pkg.tasks]`);
  * the environment variable `MAGRPO_PLUGINS=my_pkg.tasks,other.mod`;
  * an installed package's entry point in the group `magrpo.plugins`
    (`[project.entry-points."magrpo.plugins"] my_tasks = "my_pkg.tasks"`), so `pip install` is enough.

A plugin module may also name a directory of its own YAML (config groups to compose, e.g. its
`task/my_task.yaml`) with a module-level `MAGRPO_CONF_DIR = "/path/to/conf"`: it joins Hydra's
search path.

A run records the plugins it imported (`plugins` in its config, summary.json and checkpoints,
`plugins` in an exported team's team.json), and every command that takes the run up imports them
again. They are imported from the user's environment, never from the run or team directory, and
the log names each one; a plugin that cannot be imported is one line naming the module and what
needs it.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from magrpo.overrides import override_key
from magrpo.schema import ConfigError

log = logging.getLogger("magrpo")

ENV = "MAGRPO_PLUGINS"
ENTRY_POINT_GROUP = "magrpo.plugins"
CONF_ATTR = "MAGRPO_CONF_DIR"
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

_loaded: dict[str, str] = {}        # module -> who asked for it (first), in import order
_conf_dirs: list[str] = []


def _check_name(module: str, why: str) -> str:
    if not isinstance(module, str) or not _MODULE_RE.match(module.strip()):
        raise ConfigError(f"{why}: {module!r} is not a module name (dotted Python identifiers, e.g. my_pkg.tasks)")
    return module.strip()


def import_plugin(module: str, why: str) -> None:
    """Import one plugin module once; `why` says who named it (for the log and the error)."""
    module = _check_name(module, why)
    if module in _loaded:
        return
    _loaded[module] = why
    try:
        mod = importlib.import_module(module)
    except Exception as e:
        _loaded.pop(module, None)
        missing = isinstance(e, ModuleNotFoundError) and e.name is not None and module.startswith(e.name)
        what = "is not installed here (no such module)" if missing else \
            f"failed to import ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})"
        raise ConfigError(f"the plugin {module!r} ({why}) {what}; install it, or put its folder on PYTHONPATH") from None
    log.info("plugin %s imported (%s)", module, why)
    conf = getattr(mod, CONF_ATTR, None)
    if conf and str(conf) not in _conf_dirs:
        _conf_dirs.append(str(conf))


def load_recorded(modules: Iterable[str], source: str | Path) -> None:
    """Import the plugins a run, checkpoint or team recorded (`source`): modules of this environment
    only, never one that lies inside `source` itself (an artifact names what you installed; it does
    not bring code along), each named in the log."""
    import importlib.util

    root = Path(str(source)).expanduser().resolve()
    for module in modules:
        module = _check_name(module, f"recorded by {source}")
        if module in _loaded:
            continue
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None) if spec is not None else None
        locations = [origin, *(getattr(spec, "submodule_search_locations", None) or [])] if spec else []
        for where in [w for w in locations if w and w not in ("built-in", "frozen")]:
            if Path(where).resolve().is_relative_to(root):
                raise ConfigError(f"the plugin {module!r} recorded by {source} would be imported from inside it "
                                  f"({where}); a run or team never brings code along: install the plugin instead")
        import_plugin(module, f"recorded by {source}")


def env_plugins() -> list[str]:
    return [m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()]


def entry_point_plugins() -> list[str]:
    from importlib.metadata import entry_points

    return [ep.value.partition(":")[0].strip() for ep in entry_points(group=ENTRY_POINT_GROUP)]


def load_plugins(extra: Iterable[str] = (), why: str = "plugins=") -> list[str]:
    """Import the plugins named by `extra` (the config key, a run's record), MAGRPO_PLUGINS and the
    `magrpo.plugins` entry points; the list of every plugin imported in this process so far."""
    for module in extra or ():
        import_plugin(module, why)
    for module in env_plugins():
        import_plugin(module, ENV)
    for module in entry_point_plugins():
        import_plugin(module, f"entry point {ENTRY_POINT_GROUP}")
    return loaded()


def loaded() -> list[str]:
    """The plugin modules imported in this process, in order."""
    return list(_loaded)


def conf_dirs() -> list[str]:
    """The YAML directories the imported plugins name (MAGRPO_CONF_DIR)."""
    return list(_conf_dirs)


def plugins_in_argv(argv: list[str]) -> list[str]:
    """The modules a command line names with `plugins=[a,b]` (or `+plugins=`, `++plugins=`, `plugins=a`)."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("~") or "=" not in arg or override_key(arg) != "plugins":
            continue
        from hydra.core.override_parser.overrides_parser import OverridesParser

        try:
            parsed = OverridesParser.create().parse_overrides([arg])[0].value()
        except Exception:
            raise ConfigError(f"{arg!r}: give the plugins as a list of module names, e.g. plugins=[my_pkg.tasks]") \
                from None
        values = parsed if isinstance(parsed, list) else [parsed]
        out += [_check_name(str(v), arg) for v in values if v not in (None, "")]
    return out


def forget() -> None:
    """Forget what was imported (tests): the next load_plugins imports again."""
    _loaded.clear()
    _conf_dirs.clear()



# -- the commands that are no Hydra apps (magrpo-export, -crossplay, -table) ---------------------------------


def add_option(parser) -> None:
    """`--plugins a,b` for a command with its own argparse parser."""
    parser.add_argument("--plugins", metavar="MODULES", default="",
                        help=f"comma-separated modules to import first (README, Extending); {ENV} and the "
                             f"'{ENTRY_POINT_GROUP}' entry points are imported too, and the plugins a run or "
                             f"team recorded are imported again by themselves")


def load_option(args, prog: str) -> None:
    """Import what `--plugins` names; a plugin that cannot be imported exits 2 with one line."""
    import sys

    try:
        load_plugins([m.strip() for m in (getattr(args, "plugins", "") or "").split(",") if m.strip()],
                     why="--plugins")
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
