"""Training from Python, no Hydra knowledge needed: `from magrpo import Experiment`.

    exp = Experiment("algo=ippo", "task=cover", max_steps=100, **{"algo.num_generations": 8})
    exp.config                      # the validated config (what magrpo-train would run)
    summary = exp.run()             # trains; summary.json's content
    team = exp.team()               # the trained team (magrpo.team.Team)

    Experiment(task=MyTask, reward_fn=my_reward, max_steps=20).run()   # a Task class, a reward callable

Overrides are the command line's (`"algo=ippo"`, `"recipe=agree", "method=magrpo"`); keyword keys are
the same as `key=value` (dotted keys through `**{...}`; Python values are written as Hydra reads them:
True -> true, None -> null, lists and dicts as lists and dicts). Every error is the command line's
one-line config error, raised as `magrpo.ConfigError`.

The run directory gets `.hydra/overrides.yaml` and `.hydra/config.yaml` as a magrpo-train run does,
so `magrpo-eval checkpoint=DIR`, `resume=DIR` and `magrpo-export DIR` take it up; a Task class or
reward function defined in an importable module is recorded as a plugin of the run, so those
commands import it again (one defined in a notebook's `__main__` cannot be: the log says so).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from magrpo.overrides import override_key
from magrpo.schema import ConfigError

log = logging.getLogger("magrpo")

_PLAIN = re.compile(r"^[A-Za-z0-9_./:@+-]+$")


def hydra_value(value: Any) -> str:
    """A Python value as Hydra's override grammar reads it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in ("null", "true", "false"):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {type(value).__name__} {value!r} as a config value; give a number, string, "
                      f"bool, None, list or dict")


def _module_of(obj: Any, what: str) -> str | None:
    """The importable module `obj` is defined in (recorded as a plugin), or None for `__main__`."""
    module = getattr(obj, "__module__", None)
    if not module or module == "__main__":
        log.warning("%s %s is defined in __main__: this run works here, but a later command (magrpo-eval, "
                    "resume=, magrpo-export) can find it only if it is defined in an importable module",
                    what, getattr(obj, "__qualname__", obj))
        return None
    return module


class Experiment:
    """One training run, configured as `magrpo-train OVERRIDES` would be (module docstring)."""

    def __init__(self, *overrides: str, task: Any = None, reward_fn: Any = None, config_name: str = "train",
                 **keys: Any):
        from magrpo.plugins import import_plugin

        for o in overrides:
            if not isinstance(o, str):
                raise ConfigError(f"Experiment({o!r}): overrides are strings like 'algo=ippo'; give keys as "
                                  f"keywords (max_steps=100)")
        lines = list(overrides) + [f"{k}={hydra_value(v)}" for k, v in keys.items()]
        plugins: list[str] = []
        if task is not None:
            lines.append(f"task={self._task_name(task)}")
            module = _module_of(task if isinstance(task, type) else type(task), "the task")
            if module:
                plugins.append(module)
            if not isinstance(task, type) and getattr(task, "cfg", None) is not None:
                node = OmegaConf.to_container(task.cfg, resolve=True) if OmegaConf.is_config(task.cfg) else task.cfg
                lines += [f"task.{k}={hydra_value(v)}" for k, v in dict(node).items() if k != "name"]
        if reward_fn is not None:
            lines.append(f"reward.fn={self._reward_name(reward_fn)}")
            module = _module_of(reward_fn, "the reward function")
            if module:
                plugins.append(module)
        for module in plugins:
            import_plugin(module, "Experiment")
        if plugins:
            given = [x for x in lines if override_key(x) == "plugins"]
            if not given:
                lines.append(f"plugins={hydra_value(plugins)}")
        self.overrides = lines
        self.config_name = config_name
        self.config = self._compose()
        self.run_dir: Path = Path(str(self.config.output_dir))
        self.summary: dict[str, Any] | None = None

    # -- what the arguments name ------------------------------------------------------------------------
    @staticmethod
    def _task_name(task: Any) -> str:
        """A Task class or instance, registered under its `name` (once; another class under that name
        is an error naming both)."""
        from magrpo.tasks import TASKS, Task

        cls = task if isinstance(task, type) else type(task)
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise ConfigError(f"task={task!r}: give a magrpo.Task subclass (or an instance of one)")
        name = getattr(cls, "name", "") or cls.__name__.lower()
        if name not in TASKS or TASKS[name] is not cls:
            TASKS.register(name, cls)
        return name

    @staticmethod
    def _reward_name(fn: Any) -> str:
        """A reward callable, registered under module:qualname (reward.fn takes that name)."""
        from magrpo.rewards import REWARD_FNS

        if not callable(fn):
            raise ConfigError(f"reward_fn={fn!r} is not callable; give f(prompts, completions, **columns)")
        name = f"{getattr(fn, '__module__', 'fn')}:{getattr(fn, '__qualname__', 'reward')}"
        if name not in REWARD_FNS or REWARD_FNS[name] is not fn:
            REWARD_FNS.unregister(name)
            REWARD_FNS.register(name, fn)
        return name

    # -- composing -------------------------------------------------------------------------------------
    def _compose(self) -> DictConfig:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from magrpo.config import CONF_DIR, EvalRunSchema, TrainSchema, register_schemas, validate
        from magrpo.launch import explain_override_error
        from magrpo.paper_grid import names_paper_alias
        from magrpo.plugins import conf_dirs, load_plugins, plugins_in_argv

        load_plugins(plugins_in_argv(self.overrides))
        register_schemas(paper_aliases=names_paper_alias(self.overrides))
        lines = list(self.overrides)
        if conf_dirs() and not any(override_key(x) == "hydra.searchpath" for x in lines):
            lines.append("hydra.searchpath=[" + ",".join(f"file://{d}" for d in conf_dirs()) + "]")
        given_dir = any(override_key(x) == "output_dir" for x in lines)
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
                cfg = compose(config_name=self.config_name, overrides=lines)
        except Exception as e:
            msg = explain_override_error(e, self.config_name, lines)
            raise ConfigError(msg or f"cannot compose the config: {str(e).strip().splitlines()[0]}") from None
        finally:
            GlobalHydra.instance().clear()
        if not given_dir:
            from magrpo.launch import stamp

            OmegaConf.set_struct(cfg, False)
            cfg.output_dir = (f"outputs/experiment/{stamp()}_{cfg.task.name}_"
                              f"{cfg.algo.get('name', 'algo')}_s{cfg.seed}")
            OmegaConf.set_struct(cfg, True)
        self._composed = cfg
        return validate(cfg, EvalRunSchema if self.config_name == "eval" else TrainSchema)

    # -- running ----------------------------------------------------------------------------------------
    def _save_record(self) -> None:
        """.hydra/overrides.yaml and config.yaml in the run directory, as magrpo-train leaves them."""
        import yaml

        hydra_dir = self.run_dir / ".hydra"
        hydra_dir.mkdir(parents=True, exist_ok=True)
        saved = [x for x in self.overrides if override_key(x) not in ("output_dir", "hydra.searchpath")]
        (hydra_dir / "overrides.yaml").write_text(yaml.safe_dump(saved, default_flow_style=False))
        (hydra_dir / "config.yaml").write_text(OmegaConf.to_yaml(self._composed, resolve=True))

    def run(self) -> dict[str, Any]:
        """Train (magrpo.train.run) and return the run's summary (summary.json's content)."""
        import json

        from magrpo.launch import check_run_dir
        from magrpo.train import run

        check_run_dir(self.run_dir, self.config.get("resume"))
        self._save_record()
        run(self._composed)
        self.summary = json.loads((self.run_dir / "summary.json").read_text())
        return self.summary

    def team(self, step: int | None = None, device: str | None = None):
        """The trained team (magrpo.team.Team) of this run's newest complete checkpoint (or `step`)."""
        from magrpo.team import Team

        if not (self.run_dir / "checkpoints").is_dir():
            raise ConfigError(f"{self.run_dir} has no checkpoint yet: call .run() first (save_final=true keeps one)")
        return Team.from_run(self.run_dir, step=step, device=device)

    def __repr__(self) -> str:
        return f"Experiment({', '.join(repr(o) for o in self.overrides)}) -> {self.run_dir}"
