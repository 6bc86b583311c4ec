"""Plugins: the user's own modules, imported before anything is composed or looked up by name.

A plugin is any importable module that registers tasks, rewards, algorithms, advantage
estimators, scales, loss aggregations or feedback modes (`from magrpo import register_task, ...`).
Three ways name one, all of them taken together, in this order:

  * the config key `plugins: [my_pkg.tasks, ...]` (on the command line: `plugins=[my_pkg.tasks]`);
  * the environment variable `MAGRPO_PLUGINS=my_pkg.tasks,other.mod`;
  * an installed package's entry point in the group `magrpo.core.plugins`
    (`[project.entry-points."magrpo.plugins"] my_tasks = "my_pkg.tasks"`), so `pip install` is enough.

A plugin module may also name a directory of its own YAML (config groups to compose, e.g. its
`task/my_task.yaml`) with a module-level `MAGRPO_CONF_DIR = "/path/to/conf"`: it joins Hydra's
search path.

A run records the plugins it imported (`plugins` in its config, summary.json and checkpoints,
`plugins` in an exported team's team.json). Whether a later command imports them again is the
trust rule's to say (magrpo.core.trust); this module does the importing, the same way for every plugin:

  * the name is checked first: dotted identifiers, at most MAX_NAME characters and MAX_PLUGINS
    names a list; never a package's `__main__` (a program, not a plugin) nor a standard-library
    module;
  * the module is found without running any of its code (nor a parent package's `__init__`), and
    a plugin a directory recorded is refused when it (or a parent package) lies inside that
    directory, or beside it (on `sys.path` through the folder that holds it), by path and by symlink;
  * the log names it before it is imported, and why;
  * whatever goes wrong while importing is one PluginError line naming the plugin: an exception
    (with the file and line it came from), `sys.exit`/`os._exit`, a missing dependency (by its
    own name), a name that clashes with a registered one; Ctrl-C is a PluginInterrupt.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, NoReturn

from magrpo.core.overrides import override_key
from magrpo.core.schema import ConfigError
from magrpo.core.source import first_line, raised_at, shown_at

log = logging.getLogger("magrpo")

ENV = "MAGRPO_PLUGINS"
ENTRY_POINT_GROUP = "magrpo.plugins"
CONF_ATTR = "MAGRPO_CONF_DIR"
MAX_NAME = 200          # characters of one module name
MAX_PLUGINS = 64        # names in one list (a config's, a run's record, MAGRPO_PLUGINS)
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

_loaded: dict[str, str] = {}        # module -> who asked for it (first), in import order
_code: dict[str, str] = {}          # other modules imported here for a run or team (reward functions' modules)
_conf_dirs: list[str] = []


class PluginError(ConfigError):
    """A plugin that cannot be taken: a bad name, not installed, refused where it lies, or failing
    while it is imported. One line naming the plugin (a ConfigError: exit 2)."""


class PluginInterrupt(KeyboardInterrupt):
    """Ctrl-C while a plugin was being imported: its message is the one line to end with."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "interrupted while importing a plugin"


def shown(value: Any, limit: int = 80) -> str:
    """A value someone else wrote, for one line: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}...' ({len(str(value))} characters)"


# -- names -----------------------------------------------------------------------------------------


def check_name(module: Any, why: str) -> str:
    """`module` as a plugin name, or a PluginError saying what is wrong with it."""
    if not isinstance(module, str):
        raise PluginError(f"{why}: {shown(module)} is not a module name (dotted Python identifiers, e.g. my_pkg.tasks)")
    name = module.strip()
    if len(name) > MAX_NAME:
        raise PluginError(f"{why}: {shown(name)} is not a module name: longer than {MAX_NAME} characters")
    if not _MODULE_RE.match(name):
        raise PluginError(f"{why}: {shown(name)} is not a module name (dotted Python identifiers, e.g. my_pkg.tasks)")
    if "__main__" in name.split("."):
        raise PluginError(f"{why}: {shown(name)} is a package's __main__ module, which runs a program when imported; "
                          f"a plugin is a module that registers things")
    if name.split(".")[0] in sys.stdlib_module_names:
        raise PluginError(f"{why}: {shown(name)} is a module of Python's standard library, not a plugin")
    return name


def check_names(modules: Any, why: str) -> list[str]:
    """A list of plugin names, each checked, at most MAX_PLUGINS, before any is imported."""
    if isinstance(modules, (str, bytes)) or not isinstance(modules, Iterable):
        raise PluginError(f"{why}: {shown(modules)} is not a list of module names; give a list, e.g. "
                          f"plugins=[my_pkg.tasks]")
    names = list(modules)
    if len(names) > MAX_PLUGINS:
        raise PluginError(f"{why}: {len(names)} plugin names; at most {MAX_PLUGINS} are taken")
    return [check_name(m, why) for m in names]


# -- finding a module without running it ---------------------------------------------------------------


def _find(name: str, path: Any) -> Any:
    """The spec `name` would be imported from (`path`: the parent package's search locations), as
    importlib finds it, without importing anything."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path)
        except (ImportError, ValueError, TypeError):
            continue
        if spec is not None:
            return spec
    return None


def locate(module: str, why: str) -> list[tuple[str, Any]]:
    """The spec of `module` and of each parent package (outermost first), found the way an import
    finds them but running none of their code: a dotted name does not import its parents here."""
    specs: list[tuple[str, Any]] = []
    path = None
    parts = module.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name)
        if loaded is not None:
            spec, inner = getattr(loaded, "__spec__", None), getattr(loaded, "__path__", None)
        else:
            spec = _find(name, path)
            if spec is None:
                what = "is not installed here (no such module)" if i == 0 or name == module else \
                    f"is not installed here (no module {name!r})"
                raise PluginError(f"the plugin {module!r} ({why}) {what}; install it, or put its folder on PYTHONPATH")
            inner = spec.submodule_search_locations
        specs.append((name, spec))
        path = inner
        if path is None and i < len(parts) - 1:
            raise PluginError(f"the plugin {module!r} ({why}): {name!r} is a module, not a package")
    return specs


def _places(spec: Any) -> list[str]:
    if spec is None:
        return []
    out = [spec.origin] if getattr(spec, "has_location", False) and spec.origin else []
    return out + [str(p) for p in (spec.submodule_search_locations or [])]


def forms(path: str | Path) -> set[Path]:
    """A path as written (absolute, links kept) and resolved: a link is caught either way."""
    p = Path(path).expanduser()
    return {Path(os.path.abspath(p)), p.resolve()}


def within_or_beside(place: str | Path, root: str | Path) -> bool:
    """Whether `place` lies inside `root` or inside the folder that holds it (by path and by link)."""
    holders = {f.parent for f in forms(root)}
    return any(f == h or f.is_relative_to(h) for f in forms(place) for h in holders)


def check_location(module: str, specs: list[tuple[str, Any]], root: Path, beside: bool, why: str) -> None:
    """Refuse a plugin that `root` (a run or team directory) would bring along: the module, or a
    parent package, lies inside `root`; with `beside`, or its top package is found through the
    folder that holds `root` (a download whose folder is on sys.path)."""
    roots = forms(root)
    for _name, spec in specs:
        for place in _places(spec):
            if any(f == r or f.is_relative_to(r) for f in forms(place) for r in roots):
                raise PluginError(f"the plugin {module!r} ({why}) would be imported from inside {root} ({place}); "
                                  f"a run or team never brings code along: install the plugin instead")
    if beside:              # the module, or a parent package, in the folder that holds `root` (at any depth)
        for _name, spec in specs:
            for place in _places(spec):
                if within_or_beside(place, root):
                    raise PluginError(f"the plugin {module!r} ({why}) would be imported from beside {root} ({place}, "
                                      f"in the folder that holds it); a run or team never brings code along: "
                                      f"install the plugin, or name it yourself with plugins=[{module}]")
    if beside and specs and specs[0][1] is not None:
        top = specs[0][1]       # the sys.path entry it is found through: a package's folder's parent, a module's folder
        folders = [Path(p).parent for p in (top.submodule_search_locations or [])] or \
            [Path(p).parent for p in _places(top)]
        holders = {r.parent for r in roots}
        for entry in folders:
            if forms(entry) & holders:
                raise PluginError(f"the plugin {module!r} ({why}) would be imported from beside {root} (from "
                                  f"{entry}, the folder that holds it); a run or team never brings code along: "
                                  f"install the plugin, or name it yourself with plugins=[{module}]")


# -- importing ----------------------------------------------------------------------------------------


class ProcessExit(BaseException):
    """`os._exit(code)` called in this process while `exits_raise()` holds: raised instead of leaving."""

    def __init__(self, code: Any) -> None:
        super().__init__(code)
        self.code = code


@contextmanager
def exits_raise() -> Iterator[None]:
    """While it holds, `os._exit` in this process raises ProcessExit, so that what called it can be
    named in one line (a forked child still exits as it asked)."""
    real_exit, pid = os._exit, os.getpid()

    def guarded_exit(status: int) -> NoReturn:      # os._exit's own signature
        if os.getpid() != pid:
            real_exit(status)
        raise ProcessExit(status)

    os._exit = guarded_exit
    try:
        yield
    finally:
        os._exit = real_exit


def code_folders() -> list[str]:
    """The folders of the plugins and reward modules imported here: a failure inside them is named
    there, wherever they are installed."""
    out = []
    for name in [*_loaded, *_code]:
        f = getattr(sys.modules.get(name), "__file__", None)
        if f:
            out.append(os.path.dirname(os.path.abspath(f)))
    return out


def origin_line(exc: BaseException, folders: Iterable[str] = ()) -> str:
    """`file:line` where `exc` came from: in `folders` (a plugin's own files) or the user's code
    (magrpo.core.source.raised_at); else the deepest frame outside Python's import machinery."""
    found = raised_at(exc, prefer=folders)
    if found:
        return found
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    return shown_at(frames[-1].filename, frames[-1].lineno) if frames else "an unknown place"


def _plugin_folders(specs: list[tuple[str, Any]]) -> list[str]:
    out = []
    for _, spec in specs[-1:]:
        for place in _places(spec):
            p = os.path.abspath(place)
            out.append(os.path.dirname(p) if p.endswith(".py") else p)
    return out


def _exit_words(code: Any) -> str:
    return "None" if code is None else shown(code, 40)


def import_plugin(module: str, why: str, root: Path | None = None, beside: bool = False,
                  plugin: bool = True) -> None:
    """Import one plugin module once; `why` says who named it (for the log and the error). `root`:
    the run or team directory that recorded it (refused from inside it, and with `beside` from
    the folder that holds it). Every failure is one PluginError line (module docstring).
    `plugin=False`: a module a run's reward function lives in, imported the same way but not
    recorded as a plugin of this process."""
    module = check_name(module, why)
    if module in _loaded or (not plugin and module in _code):
        return
    record = _loaded if plugin else _code
    specs = locate(module, why)
    if root is not None:
        check_location(module, specs, Path(root), beside, why)
    folders = _plugin_folders(specs)
    log.info("%s %s: importing it (%s)", "plugin" if plugin else "module", module, why)
    record[module] = why
    try:
        with exits_raise():
            mod = importlib.import_module(module)
    except BaseException as e:      # noqa: BLE001  (every way a plugin can end the import is one line)
        record.pop(module, None)
        where = origin_line(e, folders)
        head = f"the plugin {module!r} ({why})"
        if isinstance(e, KeyboardInterrupt):
            raise PluginInterrupt(f"interrupted while importing {head}; nothing was run") from None
        if isinstance(e, ProcessExit):
            raise PluginError(f"{head} called os._exit({_exit_words(e.code)}) at {where} while being imported; "
                              f"nothing was run") from None
        if isinstance(e, SystemExit):
            raise PluginError(f"{head} called sys.exit({_exit_words(e.code)}) at {where} while being imported; "
                              f"nothing was run") from None
        if isinstance(e, ModuleNotFoundError) and e.name and e.name != module and not module.startswith(e.name + "."):
            raise PluginError(f"{head} needs the module {e.name!r}, which is not installed here ({where})") from None
        if isinstance(e, ConfigError):      # a registry's refusal (a name registered twice) says it all
            raise PluginError(f"{head}: {e}") from None
        if not isinstance(e, Exception):
            raise
        first = first_line(e)
        raise PluginError(f"{head} raised {type(e).__name__}{': ' + first[:300] if first else ''} at {where} "
                          f"while being imported") from None
    conf = getattr(mod, CONF_ATTR, None) if plugin else None
    if conf and str(conf) not in _conf_dirs:
        _conf_dirs.append(str(conf))


def env_plugins() -> list[str]:
    return check_names([m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()], ENV)


def entry_point_plugins() -> list[str]:
    return [module for module, _ in entry_point_places()]


def entry_point_places() -> list[tuple[str, str | None]]:
    """Each `magrpo.core.plugins` entry point's module and where the distribution that declares it lies
    (its `*.dist-info` folder; None when the metadata does not say): one found inside or beside a
    directory someone else made is no package you installed (magrpo.core.trust)."""
    out = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        place = getattr(dist, "_path", None)
        out.append((ep.value.partition(":")[0].strip(), str(place) if place is not None else None))
    return out


def named_by_user(extra: Iterable[str] = (), installed: bool = True) -> list[str]:
    """The plugins the user names: `extra` (their command line's or call's), MAGRPO_PLUGINS and (with
    `installed`) the installed packages' entry points."""
    return [*extra, *env_plugins(), *(entry_point_plugins() if installed else [])]


def load_plugins(extra: Iterable[str] = (), why: str = "plugins=", beside: Iterable[str | Path] = ()) -> list[str]:
    """Import the plugins named by `extra` (the config key), MAGRPO_PLUGINS and the
    `magrpo.core.plugins` entry points; the list of every plugin imported in this process so far.
    `beside`: the directories the command takes up; an entry point declared by a distribution that
    lies inside or beside one (a `*.dist-info` a download brought) is no package you installed: it
    is not imported, and the log says so."""
    for module in check_names(list(extra or ()), why):
        import_plugin(module, why)
    for module in env_plugins():
        import_plugin(module, ENV)
    dirs = [Path(str(d)).expanduser() for d in beside]
    for module, place in entry_point_places():
        near = next((d for d in dirs if place is not None and within_or_beside(place, d)), None)
        if near is not None:
            log.warning("entry point %s of %s: not imported; it lies beside %s, a directory this command takes up, "
                        "so it is no package you installed", module, place, near)
            continue
        import_plugin(module, f"entry point {ENTRY_POINT_GROUP}")
    return loaded()


def loaded() -> list[str]:
    """The plugin modules imported in this process, in order."""
    return list(_loaded)


def imported_with_why() -> str:
    """The plugins imported in this process and who named each, for the run's log."""
    return "; ".join(f"{m} ({why})" for m, why in _loaded.items())


def conf_dirs() -> list[str]:
    """The YAML directories the imported plugins name (MAGRPO_CONF_DIR)."""
    return list(_conf_dirs)


def plugins_in_argv(argv: list[str]) -> list[str]:
    """The modules a command line names with `plugins=[a,b]` (or `+plugins=`, `++plugins=`), each
    checked; a value that is not a list is refused before anything is imported."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("~") or "=" not in arg or override_key(arg) != "plugins":
            continue
        from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415  start-up: Hydra's parser loads only where an override is parsed

        try:
            parsed = OverridesParser.create().parse_overrides([arg])[0].value()
        except Exception:
            raise PluginError(f"{shown(arg)}: give the plugins as a list of module names, e.g. plugins=[my_pkg.tasks]") \
                from None
        if parsed in (None, ""):
            continue
        if not isinstance(parsed, list):
            raise PluginError(f"{shown(arg)}: plugins is a list of module names; write plugins=[{parsed}]")
        out += check_names([str(v) for v in parsed if v not in (None, "")], shown(arg, 60))
    return out


def forget() -> None:
    """Forget what was imported (tests): the next load_plugins imports again."""
    _loaded.clear()
    _code.clear()
    _conf_dirs.clear()


# -- the commands that are no Hydra apps (magrpo-export, -crossplay, -table) ---------------------------------


def add_option(parser) -> None:
    """`--plugins a,b` and `--trust-plugins` for a command with its own argparse parser."""
    parser.add_argument("--plugins", metavar="MODULES", default="",
                        help=f"comma-separated modules to import first (docs: Extending); {ENV} and the "
                             f"'{ENTRY_POINT_GROUP}' entry points are imported too. The plugins a run or team "
                             f"recorded are imported again when you made it (docs: Sharing teams and runs safely)")
    parser.add_argument("--trust-plugins", action="store_true",
                        help="import the plugins and reward functions the runs or teams given here record, "
                             "though you did not make them (or `magrpo-trust DIR` once per directory)")


def load_option(args, prog: str, beside: Iterable[str | Path] = ()) -> None:
    """Import what `--plugins` names; a plugin that cannot be imported exits 2 with one line.
    `beside`: the directories the command takes up (load_plugins)."""
    try:
        load_plugins([m.strip() for m in (getattr(args, "plugins", "") or "").split(",") if m.strip()],
                     why="--plugins", beside=beside)
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except PluginInterrupt as e:
        print(f"{prog}: {e}", file=sys.stderr)
        raise SystemExit(130) from None
