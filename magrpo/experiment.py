"""Training from Python, no Hydra knowledge needed: `from magrpo import Experiment`.

    exp = Experiment("algo=ippo", "task=cover", max_steps=100, **{"algo.num_generations": 8})
    exp.config                      # the validated config (what magrpo-train would run)
    summary = exp.run()             # trains; summary.json's content
    team = exp.team()               # the trained team (magrpo.team.team.Team)

    Experiment(task=MyTask, reward_fn=my_reward, max_steps=20).run()   # a Task class, a reward callable

Overrides are the command line's (`"algo=ippo"`, `"recipe=agree", "method=magrpo"`); keyword keys are
the same as `key=value` (dotted keys through `**{...}`; Python values are written as Hydra reads them:
True -> true, None -> null, lists and dicts as lists and dicts, and a string as literal text: its
backslashes, quotes and `${...}` reach the composed config and the run's saved overrides and config
exactly as given, never as an interpolation). Every error is the command line's one-line config
error, raised as `magrpo.ConfigError`.

Every key is honoured or refused. An Experiment is one run in this process, so of Hydra's own keys it
takes `hydra.run.dir=DIR` alone, which decides the run directory as on the command line (with no
`output_dir=`, DIR is the run directory; with `output_dir=OUT` too, the run writes in OUT and DIR
gets a copy of its `.hydra/` record); any other `hydra.*` key or `hydra/...` group (sweep, launcher,
sweeper, callbacks, logging, search path), a flag (`-m`, `--cfg`) and a sweep value (`seed=0,1`,
`range(...)`) are refused. Extra config directories join through a plugin's `MAGRPO_CONF_DIR`.

The run directory gets `.hydra/overrides.yaml` and `.hydra/config.yaml` as a magrpo-train run does,
so `magrpo-eval checkpoint=DIR`, `resume=DIR` and `magrpo-export DIR` take it up; a Task class or
reward function is recorded by name (its module, a plugin of the run), so those commands import it
again. One that has no such name is refused when the Experiment is made, in one line saying why: a
lambda, a function or class defined inside a function, a functools.partial or other callable object,
a bound method, or anything defined in `__main__` (a notebook cell, the script being run). Define it
at module level in an importable module (a `my_rewards.py` next to the notebook) and pass that.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import json
import logging
import re
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from magrpo.config.run import RunConfig
from magrpo.config.schemas import CONF_DIR, EvalRunSchema, TrainSchema
from magrpo.core import trust
from magrpo.core.instances import as_data
from magrpo.core.overrides import override_key, parse_override
from magrpo.core.plugins import conf_dirs, import_plugin, load_plugins, plugins_in_argv
from magrpo.core.schema import ConfigError, literal
from magrpo.launch import check_run_dir, explain_override_error, register_resolvers, resumed_run, stamp
from magrpo.launch.run_config import reward_modules_in_argv
from magrpo.tasks import TASKS, Task
from magrpo.team.team import Team
from magrpo.validation.checks import validate
from magrpo.validation.store import register_schemas

_PLAIN = re.compile(r"^[A-Za-z0-9_./:@+-]+$")
_BACKSLASHES_BEFORE_QUOTE = re.compile(r"(\\*)'")
_BACKSLASHES_AT_END = re.compile(r"(\\+)$")
# The one Hydra key an Experiment honours (module docstring).
HYDRA_KEYS = ("hydra.run.dir",)


def _reads_back(text: str, value: Any) -> bool:
    """Whether Hydra's override grammar reads `x=text` back as exactly `value` (of its type)."""
    try:
        got = parse_override(f"x={text}").value()
    except Exception:
        return False
    return type(got) is type(value) and got == value


def quoted(text: str) -> str:
    """`text` in single quotes as Hydra's override grammar reads it back: a backslash escapes only a
    quote or the backslashes before a quote (or before the closing quote); any other is itself."""
    text = _BACKSLASHES_BEFORE_QUOTE.sub(lambda m: m.group(1) * 2 + "\\'", text)
    return "'" + _BACKSLASHES_AT_END.sub(lambda m: m.group(1) * 2, text) + "'"


def hydra_value(value: Any) -> str:
    """A Python value as Hydra's override grammar reads it back (a string: exactly that string in the
    composed config, no interpolation resolved)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        if value == "???":
            raise ConfigError("'???' is OmegaConf's mark of a missing value, not a string it can hold; give "
                              "another string, or None")
        if _PLAIN.match(value) and _reads_back(value, value):
            return value
        return quoted(literal(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        for k in value:
            if not (isinstance(k, str) and _PLAIN.match(k) and _reads_back(f"{{{k}:0}}", {k: 0})):
                raise ConfigError(f"cannot write the dict key {k!r} as a config key; keys are names (letters, "
                                  f"digits, _-./:@+, not a number, bool or null)")
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {type(value).__name__} {value!r} as a config value; give a number, string, "
                      f"bool, None, list or dict")


# -- what an Experiment takes --------------------------------------------------------------------------
def _refuse_unsupported(line: str) -> None:
    """A flag, a Hydra key other than hydra.run.dir, or a sweep: one line naming it (module docstring)."""
    if line.lstrip().startswith("-"):
        raise ConfigError(f"Experiment({line!r}): {line} is a flag of the magrpo-train command line, not an "
                          f"override; an Experiment is one run in this process: give key=value overrides (for "
                          f"a sweep, make one Experiment per value)")
    key, value = override_key(line), line.partition("=")[2]
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        if key in HYDRA_KEYS and not line.startswith("~"):
            return
        hint = ("; a config directory joins through a plugin's MAGRPO_CONF_DIR (plugins=[my_pkg])"
                if key == "hydra.searchpath" else "")
        given = f"{key}={value!r}" if "=" in line else f"~{key}"
        raise ConfigError(f"Experiment({line!r}): {given} is not taken: an Experiment is one run in this "
                          f"process, without Hydra's launcher, sweeper, callbacks, logging or search path; the "
                          f"Hydra key it takes is {', '.join(HYDRA_KEYS)}=DIR (the run directory){hint}")
    try:
        sweep = parse_override(line).is_sweep_override()
    except Exception:
        return          # composing words the parse error (explain_override_error)
    if sweep:
        raise ConfigError(f"Experiment({line!r}): {line!r} gives several values, which is a sweep; an Experiment "
                          f"is one run and takes one value per key: make one Experiment per value, write "
                          f"{key}=[...] for a list or quote a string that holds commas")


def _shown(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None)
    return name if isinstance(name, str) else f"<{type(obj).__name__} object>"


def _unnamed_because(obj: Any) -> str | None:
    """Why `module:qualname` cannot name `obj` for a later command (None: it can)."""
    if isinstance(obj, functools.partial):
        return "is a functools.partial, which has no name of its own"
    if inspect.ismethod(obj):
        return f"is a method bound to a {type(obj.__self__).__name__} object, which has no name of its own"
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return f"is a callable {type(obj).__name__} object, which has no name of its own"
    if "<lambda>" in qualname:
        return "is a lambda, which has no name of its own"
    if "<locals>" in qualname:
        return f"is defined inside the function {qualname.partition('.<locals>')[0]}()"
    if module == "__main__":
        return "is defined in __main__ (a notebook or the script being run), which no later command can import"
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception as e:
        return f"cannot be imported again as {module}:{qualname} ({type(e).__name__})"
    if found is not obj:
        return f"is not what {module}:{qualname} names"
    return None


def _recorded_module(obj: Any, what: str, advice: str) -> str:
    """The module that names `obj` (recorded as a plugin of the run); a ConfigError when none can."""
    why = _unnamed_because(obj)
    if why is not None:
        raise ConfigError(f"{what}={_shown(obj)} {why}, so the run could not record it and magrpo-eval, resume= "
                          f"and magrpo-export could not find it again; {advice} in an importable module (e.g. "
                          f"a .py file next to the notebook) and pass that")
    return obj.__module__


# The line format of the command line's train.log (Hydra's default job logging).
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


@contextlib.contextmanager
def run_logging(run_dir: Path, quiet: bool = False):
    """For the block: magrpo's log lines (INFO and up) go to `run_dir/train.log`, and to stderr unless
    `quiet` or the program has logging set up already (a handler on the root logger). Put back after."""
    logger = logging.getLogger("magrpo")
    run_dir.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(run_dir / "train.log", encoding="utf-8")]
    handlers[0].setFormatter(logging.Formatter(LOG_FORMAT))
    if not quiet and not logging.getLogger().handlers:
        console = logging.StreamHandler()
        console.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        handlers.append(console)
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    for h in handlers:
        logger.addHandler(h)
    try:
        yield
    finally:
        for h in handlers:
            logger.removeHandler(h)
            h.close()
        logger.setLevel(level)


class Experiment:
    """One training run, configured as `magrpo-train OVERRIDES` would be (module docstring): every
    key honoured or refused, string values kept verbatim, and a `task=`/`reward_fn=` object taken only
    when a later command can import it again by name (else a ConfigError when it is made)."""

    def __init__(self, *overrides: str, task: Any = None, reward_fn: Any = None, config_name: str = "train",
                 **keys: Any):
        for o in overrides:
            if not isinstance(o, str):
                raise ConfigError(f"Experiment({o!r}): overrides are strings like 'algo=ippo'; give keys as "
                                  f"keywords (max_steps=100)")
        lines = list(overrides) + [f"{k}={hydra_value(v)}" for k, v in keys.items()]
        for line in lines:
            _refuse_unsupported(line)
        plugins: list[str] = []
        if task is not None:
            name, module = self._task_name(task, lines)
            lines.append(f"task={hydra_value(name)}")
            plugins.append(module)
            if not isinstance(task, type) and getattr(task, "cfg", None) is not None:
                node = as_data(task.cfg)        # its schema's instance (a config node, a dict: resolved, as given)
                lines += [f"task.{k}={hydra_value(v)}" for k, v in dict(node).items() if k != "name"]
        if reward_fn is not None:
            name, module = self._reward_name(reward_fn, lines)
            lines.append(f"reward.fn={hydra_value(name)}")
            plugins.append(module)
        for module in plugins:
            import_plugin(module, "Experiment")
        given = plugins_in_argv(lines)
        if any(m not in given for m in plugins):     # the objects' modules join the plugins given
            lines.append(f"plugins={hydra_value(list(dict.fromkeys(given + plugins)))}")
        self.overrides = lines
        self.config_name = config_name
        self.config = self._compose()
        self.run_dir: Path = Path(str(self.config.output_dir))
        self.summary: dict[str, Any] | None = None

    # -- what the arguments name ------------------------------------------------------------------------
    @staticmethod
    def _task_name(task: Any, lines: list[str]) -> tuple[str, str]:
        """A Task class or instance: its `name` (registered once; another class under that name is an
        error naming both) and the module that defines it."""
        cls = task if isinstance(task, type) else type(task)
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise ConfigError(f"task={task!r}: give a magrpo.Task subclass (or an instance of one)")
        name = getattr(cls, "name", "") or cls.__name__.lower()
        chosen = [x for x in lines if override_key(x) == "task"]
        if chosen:
            raise ConfigError(f"task={cls.__qualname__} and the override {chosen[-1]!r} both choose the task; "
                              f"give one of them")
        module = _recorded_module(cls, "task", "define the Task class at module level")
        if name not in TASKS or TASKS[name] is not cls:
            TASKS.register(name, cls)
        return name, module

    @staticmethod
    def _reward_name(fn: Any, lines: list[str]) -> tuple[str, str]:
        """A reward function: the name reward.fn takes (module:qualname) and its module."""
        if not callable(fn):
            raise ConfigError(f"reward_fn={fn!r} is not callable; give f(prompts, completions, **columns)")
        chosen = [x for x in lines if override_key(x) in ("reward.fn", "reward.fns")]
        if chosen:
            raise ConfigError(f"reward_fn={_shown(fn)} and the override {chosen[-1]!r} both name the reward "
                              f"function; give one of them")
        module = _recorded_module(fn, "reward_fn", "define it with def at module level")
        return f"{module}:{fn.__qualname__}", module

    # -- composing -------------------------------------------------------------------------------------
    def _compose(self) -> RunConfig:
        named = plugins_in_argv(self.overrides)
        trust.allow_named([*named, *reward_modules_in_argv(self.overrides)])   # yours: the run signs them
        load_plugins(named)
        register_schemas()
        register_resolvers()
        lines = list(self.overrides)
        if conf_dirs():         # the plugins' own YAML (hydra.searchpath is never given: it is refused)
            lines.append("hydra.searchpath=[" + ",".join(hydra_value(f"file://{d}") for d in conf_dirs()) + "]")
        given_dir = any(override_key(x) == "output_dir" and not x.startswith("~") for x in lines)
        given_run_dir = [x for x in lines if override_key(x) == "hydra.run.dir"]
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
                cfg = compose(config_name=self.config_name, overrides=lines, return_hydra_config=bool(given_run_dir))
        except Exception as e:
            msg = explain_override_error(e, self.config_name, lines)
            raise ConfigError(msg or f"cannot compose the config: {str(e).strip().splitlines()[0]}") from None
        finally:
            GlobalHydra.instance().clear()
        OmegaConf.set_struct(cfg, False)
        # The command line's rule (magrpo.launch.run_dir_follows_output_dir): output_dir=OUT is the run's
        # directory, hydra.run.dir=DIR is where Hydra keeps its record, and the run's directory without OUT.
        self.hydra_run_dir: Path | None = None
        if given_run_dir:
            try:
                run_dir = OmegaConf.select(cfg, "hydra.run.dir", throw_on_resolution_failure=True)
            except OmegaConfBaseException as e:
                raise ConfigError(f"{given_run_dir[-1]}: the directory cannot be resolved "
                                  f"({str(e).strip().splitlines()[0]})") from None
            if run_dir is None or not str(run_dir).strip():
                raise ConfigError(f"{given_run_dir[-1]!r} names no directory; give hydra.run.dir=DIR")
            self.hydra_run_dir = Path(str(run_dir))
            cfg.pop("hydra")
        resumed = resumed_run(OmegaConf.select(cfg, "resume")) if not (given_dir or given_run_dir) else None
        if resumed is not None:     # resume=RUN continues RUN in place, as on the command line
            cfg.output_dir = literal(str(resumed))
        elif not given_dir:
            cfg.output_dir = literal(str(self.hydra_run_dir)) if self.hydra_run_dir else (
                f"outputs/experiment/{stamp()}_{cfg.task.name}_{OmegaConf.select(cfg, 'algo.name', default='algo')}_s{cfg.seed}")
        OmegaConf.set_struct(cfg, True)
        self._composed = cfg
        return validate(cfg, EvalRunSchema if self.config_name == "eval" else TrainSchema)

    # -- running ----------------------------------------------------------------------------------------
    def _record_dirs(self) -> list[Path]:
        """The run directory, and hydra.run.dir where it is another (it gets a copy of the record)."""
        return [self.run_dir] + ([self.hydra_run_dir] if self.hydra_run_dir not in (None, self.run_dir) else [])

    def _save_record(self) -> None:
        """.hydra/overrides.yaml and config.yaml in the run directory, as magrpo-train leaves them (the
        config as composed, interpolations as written: a literal `${` stays escaped)."""
        saved = [x for x in self.overrides if override_key(x) not in ("output_dir", "hydra.run.dir")]
        for d in self._record_dirs():
            hydra_dir = d / ".hydra"
            hydra_dir.mkdir(parents=True, exist_ok=True)
            (hydra_dir / "overrides.yaml").write_text(yaml.safe_dump(saved, default_flow_style=False,
                                                                     allow_unicode=True))
            (hydra_dir / "config.yaml").write_text(OmegaConf.to_yaml(self._composed))

    def run(self, quiet: bool = False) -> dict[str, Any]:
        """Train (magrpo.cli.train.run) and return the run's summary (summary.json's content). As on the
        command line, the run's log goes to `train.log` in its directory, and its progress lines
        (`step 20/120 reward ...`, the evaluations, `finished: ...`) to stderr unless `quiet=True`
        or your program has set up logging itself (then they go where your handlers send them)."""
        # import magrpo (and its public names) sets nothing in the environment; the command module
        # sets the process defaults when it loads (magrpo.core.process)
        from magrpo.cli.train import run  # noqa: PLC0415  effects: magrpo.cli.train sets the process defaults when it loads

        check_run_dir(self.run_dir, self.config.resume)
        if self.hydra_run_dir not in (None, self.run_dir):
            check_run_dir(self.hydra_run_dir, self.config.resume, "hydra.run.dir")
        self._save_record()
        with run_logging(self.run_dir, quiet):
            run(self._composed)
        self.summary = json.loads((self.run_dir / "summary.json").read_text())
        return self.summary

    def team(self, step: int | None = None, device: str | None = None):
        """The trained team (magrpo.team.team.Team) of this run's newest complete checkpoint (or `step`)."""
        if not (self.run_dir / "checkpoints").is_dir():
            raise ConfigError(f"{self.run_dir} has no checkpoint yet: call .run() first (save_final=true keeps one)")
        return Team.from_run(self.run_dir, step=step, device=device)

    def __repr__(self) -> str:
        return f"Experiment({', '.join(repr(o) for o in self.overrides)}) -> {self.run_dir}"
