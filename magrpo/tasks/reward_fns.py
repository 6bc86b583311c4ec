"""Reward functions: callables that replace a task's own reward, for any task and any algorithm.

    reward.fn=my_pkg.rewards:brevity                    # module:function, imported
    reward.fn=brevity                                   # a name registered with @register_reward
    reward.fns=[brevity,my_pkg.rewards:polite] reward.weights=[1.0,0.5]   # total = sum_i w_i f_i

A reward function has TRL's signature, `f(prompts, completions, **columns) -> list[float]`:
`prompts[k]` and `completions[k]` are the k-th joint answer, each the list of the agents' texts
(plain strings for a one-agent team, as TRL has them: `agents.num_agents=1`, algo=grpo or ppo), and
`columns` the items' dataset columns as lists (`magrpo.tasks.base.columns`). Per joint answer it
returns a float, or a list with one float per agent (summed into the team's reward, and each
agent's share for `algo.reward=individual`), or it returns the project's `Scores`.

The task keeps its prompts, data and metrics (computed on its own reward's diagnostics); its
`reward.shift` and `reward.scale` compose the total as they do its own reward:
total = (sum_i w_i f_i) * scale + shift. Each function's value is a reward component named after
it (`reward/<name>`). `reward.max` is the largest raw total; normalized_return = raw / max, and
without it no normalized_return is reported. A function that raises, returns the wrong number of
values or a value that is not a finite number stops the run with a `RewardFunctionError` naming
the function and the item: a failure never becomes a reward of 0.
"""

from __future__ import annotations

import importlib
import math
import numbers
import re
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from magrpo.config.groups import RewardConfig, TaskConfig
from magrpo.core.plugins import check_name
from magrpo.core.registry import Registry, registrar
from magrpo.core.schema import ConfigError, did_you_mean
from magrpo.core.source import defined_at, first_line, raised_at
from magrpo.tasks.base import RewardError, Scores, Task, batch_words, columns, reward_keys, short

if TYPE_CHECKING:       # start-up: magrpo.config.schemas loads OmegaConf, and the tasks load without it
    from magrpo.config.schemas import SandboxSchema

# Filled by the user's modules (`@register_reward("name")`) and the plugins (magrpo.core.plugins).
REWARD_FNS: Registry[Callable[..., Any]] = Registry("reward function", "reward.fn")

register_reward = registrar(REWARD_FNS)

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class RewardFunctionError(RewardError):
    """A reward function failed on an item (raised, or returned what is not a reward): one line
    naming the function, the item and the user's file and line; the run stops (never a reward of 0)."""


# -- the config -------------------------------------------------------------------------------------


def reward_specs(reward_cfg: RewardConfig) -> list[tuple[str, str]]:
    """(config key, spec) of each reward function the `reward` config names; [] for the task's own
    reward. `reward.fn=x` is `reward.fns=[x]`. (Validation asks it of the typed node too, which
    `reward_keys` reads alike.)"""
    keys = reward_keys(reward_cfg)
    fn, fns = keys.fn, keys.fns
    if fns is not None:
        return [(f"reward.fns[{i}]", str(s)) for i, s in enumerate(fns)]
    return [("reward.fn", str(fn))] if fn is not None else []


def resolve(spec: str, key: str = "reward.fn", imports: bool = True) -> Callable[..., Any]:
    """The function `spec` names: a registered name, or `module:function` (imported; with
    `imports=False` only a module imported already, as the trust rule takes up a run's or team's
    reward modules before its config is checked). Anything else is a ConfigError listing the
    registered names and the accepted form."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        if not _MODULE_RE.match(module) or not _MODULE_RE.match(attr):
            raise ConfigError(f"{key}={spec!r} is not module:function (dotted Python names on each side of "
                              f"the colon, e.g. my_pkg.rewards:brevity)")
        check_name(module, f"{key}={spec!r}")      # never a standard-library module or a __main__
        if not imports and module not in sys.modules:
            raise ConfigError(f"{key}={spec!r}: the module {module!r} was not taken up (magrpo.core.trust); nothing "
                              f"was imported")
        try:
            obj: Any = importlib.import_module(module)
        except Exception as e:
            missing = isinstance(e, ModuleNotFoundError) and e.name is not None and \
                (e.name == module or module.startswith(e.name + "."))    # the module itself, not a dependency
            what = "cannot be found" if missing else f"failed to import ({type(e).__name__}: {first_line(e)})"
            raise ConfigError(f"{key}={spec!r}: the module {module!r} {what}; install it, or put its folder "
                              f"on PYTHONPATH") from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise ConfigError(f"{key}={spec!r}: {module!r} has no attribute {attr!r}")
            obj = getattr(obj, part)
            if isinstance(obj, types.ModuleType):       # module:other_module.f reaches past the module named
                raise ConfigError(f"{key}={spec!r}: {module}.{part} is a module; name the function in the module "
                                  f"that defines it (module:function)")
        if not callable(obj):
            raise ConfigError(f"{key}={spec!r} is not a function f(prompts, completions, **columns) but a value of "
                              f"type {type(obj).__name__}")
        home = str(getattr(obj, "__module__", "") or "")
        if home != module and not home.startswith(module + "."):
            raise ConfigError(f"{key}={spec!r}: {attr!r} is defined in {home or 'no module'!r}, not in {module!r}; "
                              f"name it where it is defined ({home or 'its module'}:{attr.rpartition('.')[2]})")
        return obj
    if spec in REWARD_FNS:
        return REWARD_FNS[spec]
    names = REWARD_FNS.names()
    known = ", ".join(names) or "none is registered"
    hint = f"; did you mean {spec.rpartition('.')[0]}:{spec.rpartition('.')[2]}?" if "." in spec \
        else did_you_mean(spec, names)
    raise ConfigError(f"{key}={spec!r} is not a registered reward function ({known}) nor module:function "
                      f"(e.g. my_pkg.rewards:brevity, a function f(prompts, completions, **columns)){hint}")


def component_name(spec: str) -> str:
    """The reward component a function's value is logged as: its registered name, or the
    function's own name for module:function."""
    return spec.rpartition(":")[2].rpartition(".")[2] if ":" in spec else spec


def check_reward_node(node: Any, imports: bool = True) -> None:
    """The reward-function keys of a typed `reward` node (magrpo.validation.checks.validate): fn or fns, not
    both; one weight per function; every function found (`imports`: as `resolve`); no two logged
    under one name."""
    keys = reward_keys(node)
    fn, fns, weights, top = keys.fn, keys.fns, keys.weights, keys.max
    if fn is not None and fns is not None:
        raise ConfigError(f"reward.fn={fn!r} and reward.fns={list(fns)} both name the reward functions; give one "
                          f"(reward.fn=x is reward.fns=[x])")
    if fns is not None and len(fns) == 0:
        raise ConfigError("reward.fns=[] names no reward function; give at least one, or null for the task's "
                          "own reward")
    specs = reward_specs(node)
    if not specs:
        unused = "applies to reward functions, and neither reward.fn nor reward.fns names one"
        if weights is not None:
            raise ConfigError(f"reward.weights={list(weights)} {unused}")
        if top is not None:
            raise ConfigError(f"reward.max={top} {unused}")
        if _completions(node) != RewardConfig.completions:
            raise ConfigError(f"reward.completions={_completions(node)!r} applies to reward functions, and neither "
                              f"reward.fn nor reward.fns names one")
        return
    if weights is not None:
        if len(weights) != len(specs):
            raise ConfigError(f"reward.weights={list(weights)} has {len(weights)} weight(s) for {len(specs)} reward "
                              f"function(s) {[s for _, s in specs]}; give one per function, or null for 1.0 each")
        for i, w in enumerate(weights):
            if not math.isfinite(w):
                raise ConfigError(f"reward.weights[{i}]={w!r} is not a finite number")
    names: dict[str, str] = {}
    for key, spec in specs:
        resolve(spec, key, imports)
        name = component_name(spec)
        if name in names:
            raise ConfigError(f"{key}={spec!r} and {names[name]!r} would both be logged as reward/{name}; "
                              f"register one under another name")
        names[name] = spec


def _completions(node: Any) -> str:
    """`reward.completions`: what a reward function gets per joint answer (RewardConfig)."""
    value = reward_keys(node).completions
    return RewardConfig.completions if value is None else str(value)


def fallback_note(task_cls: type[Task], reward_cfg: RewardConfig) -> str | None:
    """Why a run whose reward functions have no `reward.max` tracks reward_mean instead of the
    task's primary metric normalized_return (None when it does not)."""
    if task_cls.primary_metric != "normalized_return" or not reward_specs(reward_cfg) \
            or reward_keys(reward_cfg).max is not None:
        return None
    return (f"reward functions replace the reward of task {task_cls.name!r}, whose maximum holds for that reward "
            f"only: without reward.max no normalized_return is reported, and the run tracks reward_mean "
            f"instead of normalized_return (set reward.max to the largest raw total of the functions to have it)")


def primary_metric(task_cls: type[Task], reward_cfg: RewardConfig) -> str:
    """The metric `best` and sweeps track: the task's, or reward_mean under `fallback_note`."""
    return "reward_mean" if fallback_note(task_cls, reward_cfg) else task_cls.primary_metric


# -- scoring ----------------------------------------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and math.isfinite(x)


class RewardFn:
    """One configured reward function: its config key and spec, the component it is logged as,
    and the callable (imported on first use: a rebuilt task that only normalizes needs none)."""

    def __init__(self, key: str, spec: str):
        self.key, self.spec, self.name = key, spec, component_name(spec)
        self._fn: Callable[..., Any] | None = None

    @property
    def fn(self) -> Callable[..., Any]:
        if self._fn is None:
            self._fn = resolve(self.spec, self.key)
        return self._fn

    def error(self, what: str, raised: BaseException | None = None) -> RewardFunctionError:
        """The one line: the function, what went wrong, and where in the user's code (the line that
        raised `raised`, else the function's definition)."""
        site = raised_at(raised, self.fn) if raised is not None else defined_at(self.fn)
        where = "" if site is None else f" (at {site})" if raised is not None else f" (defined at {site})"
        return RewardFunctionError(f"reward function {self.spec!r} ({self.key}) {what}{where}")

    def values(self, prompts: list, completions: list, cols: dict[str, list], ids: list[str],
               sizes: list[int]) -> tuple[list[float | list[float]], dict[str, list[float]]]:
        """Per joint answer a float or per-agent floats, checked; and the components of a returned Scores."""
        n = len(completions)
        try:
            out = self.fn(prompts=prompts, completions=completions, **cols)
        except Exception as e:
            raise self.failure(e, prompts, completions, cols, ids) from e
        comps = dict(out.components) if isinstance(out, Scores) else {}
        if hasattr(out, "tolist"):          # a numpy array or torch tensor
            out = out.tolist()
        if isinstance(out, (str, bytes, Mapping)) or not isinstance(out, Sequence):
            raise self.error(f"returned {short(out)} ({type(out).__name__}) for {batch_words(ids)}; it must return a "
                             f"list with one value per joint answer")
        if len(out) != n:
            raise self.error(f"returned {len(out)} value(s) for {n} joint answer(s) ({batch_words(ids)}); it must return "
                             f"one per joint answer")
        values: list[float | list[float]] = []
        for k, v in enumerate(out):
            if hasattr(v, "tolist"):
                v = v.tolist()
            if isinstance(v, (list, tuple)):
                if len(v) != sizes[k]:
                    raise self.error(f"returned {len(v)} per-agent value(s) for item {ids[k]!r}, whose joint answer "
                                     f"has {sizes[k]} agent(s); give one per agent")
                bad = [x for x in v if not _is_number(x)]
                if bad:
                    raise self.error(f"returned {short(bad[0])} for an agent of item {ids[k]!r}; every value must "
                                     f"be a finite number")
                values.append([float(x) for x in v])
            elif _is_number(v):
                values.append(float(v))
            else:
                raise self.error(f"returned {short(v)} for item {ids[k]!r}; every value must be a finite number "
                                 f"(or a list with one finite number per agent)")
        for name, vals in comps.items():
            if not all(_is_number(x) for x in vals):
                raise self.error(f"returned Scores whose component {name!r} holds a value that is not a finite "
                                 f"number ({batch_words(ids)})")
        return values, comps

    def failure(self, e: Exception, prompts: list, completions: list, cols: dict[str, list],
                ids: list[str]) -> RewardFunctionError:
        """The error of a raising function, naming the item it fails on: each joint answer of the
        batch alone, the first that raises; else the batch."""
        if len(completions) > 1:
            for k in range(len(completions)):
                try:
                    self.fn(prompts=[prompts[k]], completions=[completions[k]],
                            **{c: [v[k]] for c, v in cols.items()})
                except Exception as one:
                    return self.error(f"raised {type(one).__name__} on item {ids[k]!r}: {first_line(one)}", one)
            return self.error(f"raised {type(e).__name__} on {batch_words(ids)} (on no joint answer alone): "
                              f"{first_line(e)}", e)
        return self.error(f"raised {type(e).__name__} on item {ids[0]!r}: {first_line(e)}", e)


class RewardFns:
    """The reward functions a `reward` node names, with their weights and `max`."""

    def __init__(self, specs: list[tuple[str, str]], weights: Sequence[float] | None, top: float | None,
                 completions: str = RewardConfig.completions):
        self.fns = [RewardFn(key, spec) for key, spec in specs]
        self.weights = [float(w) for w in weights] if weights is not None else [1.0] * len(self.fns)
        self.max = None if top is None else float(top)
        self.completions = completions       # "parts" or "text" (RewardConfig.completions)

    @classmethod
    def from_config(cls, reward_cfg: RewardConfig) -> RewardFns | None:
        specs = reward_specs(reward_cfg)
        keys = reward_keys(reward_cfg)
        return cls(specs, keys.weights, keys.max,
                   _completions(reward_cfg)) if specs else None

    def score(self, prompts: list[list[str]], completions: list[list[str]], cols: dict[str, list],
              shift: float, scale: float, assemble: Callable[[dict, list[str]], str] | None = None) -> Scores:
        """Scores of the joint answers: total = (sum_i w_i f_i) * scale + shift; each function's own
        value as the component named after it; per agent, the shares (extras["individual"], None
        where a function gave one float), which add up to the total as the tasks' shares do.
        `assemble(item, parts)`: the joint answer as one text (`Task.assemble`), for `completions="text"`."""
        n = len(completions)
        ids = [str(x) if x is not None else f"#{k}" for k, x in enumerate(cols.get("id") or [None] * n)]
        sizes = [len(c) for c in completions]
        single = n > 0 and all(s == 1 for s in sizes)     # one model's answers: plain strings, as in TRL
        if self.completions == "text":                    # one string per joint answer, whatever the team
            assert assemble is not None, "reward.completions=text needs the task's assemble"
            items = [{c: v[k] for c, v in cols.items()} for k in range(n)]
            p_arg: list = ["\n\n".join(p) for p in prompts]
            c_arg: list = [assemble(items[k], list(c)) for k, c in enumerate(completions)]
        else:
            p_arg = [p[0] for p in prompts] if single else [list(p) for p in prompts]
            c_arg = [c[0] for c in completions] if single else [list(c) for c in completions]
        kwargs = {k: v for k, v in cols.items() if k not in ("prompts", "completions")}
        raw = [0.0] * n
        shares: list[list[float] | None] = [[0.0] * s for s in sizes]
        unsplit: list[str | None] = [None] * n
        components: dict[str, list[float]] = {}
        for fn, w in zip(self.fns, self.weights):
            values, comps = fn.values(p_arg, c_arg, kwargs, ids, sizes)
            components[fn.name] = [v if isinstance(v, float) else sum(v) for v in values]
            components.update({f"{fn.name}/{c}": vals for c, vals in comps.items()})
            for k, v in enumerate(values):
                raw[k] += w * components[fn.name][k]
                row = shares[k]
                if isinstance(v, list) and row is not None:
                    shares[k] = [r + w * x for r, x in zip(row, v)]
                elif not isinstance(v, list):
                    shares[k], unsplit[k] = None, unsplit[k] or fn.spec
        totals = [r * scale + shift for r in raw]
        individual = [None if row is None else [x * scale + shift / len(row) for x in row] for row in shares]
        return Scores(totals, components, {"individual": individual, "unsplit": unsplit, "item_id": ids})


class RewardFnTask(Task):
    """Placed before a task's class (`task_class`): its reward is the reward functions', the rest
    (prompts, data, metrics) the task's own."""

    reward_fns: RewardFns
    task_cls: type[Task]          # the task's own class (set by `task_class`)
    feedback_kind = "generic"     # feedback=diagnostics explains these functions' values, not the task's levels

    def __init__(self, cfg: TaskConfig, reward_cfg: RewardConfig, sandbox: SandboxSchema | None = None):
        super().__init__(cfg, reward_cfg, sandbox)
        fns = RewardFns.from_config(reward_cfg)
        assert fns is not None, "task_class gives this class only to a reward node that names functions"
        self.reward_fns = fns
        self.reward_note = fallback_note(self.task_cls, reward_cfg)
        self.primary_metric = "reward_mean" if self.reward_note else self.task_cls.primary_metric

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: list[Any]) -> Scores:
        keys = reward_keys(self.reward_cfg)        # as Task.normalized_return
        return self.reward_fns.score(prompts, completions, cols, keys.shift, keys.scale, self.assemble)

    def individual_rewards(self, scores: Scores, num_agents: int) -> list[list[float]]:
        rows = scores.extras.get("individual") or [None] * len(scores)
        unsplit = scores.extras.get("unsplit") or [None] * len(scores)
        ids = scores.extras.get("item_id") or [f"#{k}" for k in range(len(scores))]
        for k, row in enumerate(rows):
            if row is None:
                raise RewardFunctionError(
                    f"algo.reward='individual' needs each agent's share of the reward, but reward function "
                    f"{unsplit[k]!r} returned one float for item {ids[k]!r}; return a list with one float per agent "
                    f"for every joint answer, or set algo.reward=team")
        return [list(row) for row in rows]

    def reward_max(self, num_answers: int) -> float | None:
        return self.reward_fns.max

    def normalized_return(self, reward: float, num_answers: int) -> float | None:
        return Task.normalized_return(self, reward, num_answers)    # raw / reward.max, whatever the task's

    def metrics(self, items: Sequence[Any], completions: list[list[str]], scores: Scores) -> dict[str, float]:
        """The task's own metrics, on its own reward's diagnostics (accuracy, pass@k...)."""
        own = super().metrics
        if getattr(own, "__func__", None) is Task.metrics or not items:
            return {}
        task_scores = super().reward([[""] * len(c) for c in completions], completions, **columns(items))
        return own(items, completions, task_scores)


_CLASSES: dict[type, type] = {}


def task_class(cls: type[Task], reward_cfg: RewardConfig) -> type[Task]:
    """The class to build a task of `cls` with: `cls` itself, or, when the `reward` node names reward
    functions, `cls` under `RewardFnTask`."""
    if not reward_specs(reward_cfg):
        return cls
    if cls not in _CLASSES:
        _CLASSES[cls] = type(cls.__name__, (RewardFnTask, cls), {"__module__": cls.__module__, "task_cls": cls,
                                                                 "__qualname__": cls.__qualname__})
    return _CLASSES[cls]


# -- a reward that teaches nothing -------------------------------------------------------------------

# Training steps at the start of a run over which a reward with zero spread in every group of
# samples is said (once, one warning line); a shorter run is watched over all of its steps.
ZERO_SPREAD_STEPS = 3


class ZeroSpread:
    """Watches the first `steps` training steps: when at each of them every group of samples got
    equal rewards (`train/frac_reward_zero_std` = 1, logged by every algorithm built on
    magrpo.algos.scaffold), the reward prefers no answer to another and nothing is learned. `see` returns the one
    line that says so, naming the reward (the task's reward source, `Task.reward_fns`), its value and the
    likely cause, once; else None."""

    def __init__(self, task: Task, num_agents: int, steps: int = ZERO_SPREAD_STEPS):
        self.task, self.num_agents, self.steps = task, num_agents, steps
        self.means: list[float] = []
        self.stds: list[float] = []
        self.done = steps <= 0

    def see(self, metrics: Mapping[str, float]) -> str | None:
        if self.done:
            return None
        frac = metrics.get("train/frac_reward_zero_std")
        if frac is None or frac < 1 - 1e-9:
            self.done = True
            return None
        self.means.append(float(metrics.get("train/reward_mean", math.nan)))
        self.stds.append(float(metrics.get("train/reward_std", math.nan)))
        if len(self.means) < self.steps:
            return None
        self.done = True
        return self.line()

    def line(self) -> str:
        same = max(self.stds) < 1e-8 and max(self.means) - min(self.means) < 1e-8
        value = (f"every reward was {self.means[0]:.6g}" if same else
                 f"equal within each group, differing only between items; mean {sum(self.means) / len(self.means):.6g}")
        fns: RewardFns | None = self.task.reward_fns
        specs = [(fn.key, fn.spec) for fn in fns.fns] if fns is not None else []
        mode = fns.completions if fns is not None else RewardConfig.completions
        if specs:
            who = f"reward function{'s' if len(specs) > 1 else ''} " + ", ".join(f"{spec!r} ({key})" for key, spec in specs)
            if mode == "parts" and self.num_agents > 1:
                cause = (f"in a team each completion a reward function gets is the list of the {self.num_agents} "
                         f"agents' texts, so len() of one is the team size; a function written for TRL's strings "
                         f"should set reward.completions=text")
            else:
                cause = (f"the function gives every answer to an item the same value; check what it reads of the "
                         f"completions it gets (reward.completions={mode})")
        else:
            who = f"task {self.task.name!r}'s own reward"
            cause = ("the reward does not tell these answers apart: they may all be alike "
                     "(train/completions/mean_length), or the reward may not depend on them")
        n = len(self.means)
        return (f"reward has zero spread: at each of the first {n} training step(s) every group of samples got equal "
                f"rewards ({value}), so no answer is preferred to another and nothing is learned; the reward is "
                f"{who}; likely cause: {cause}")


def check_splits(task: Task, item: dict, num_agents: int) -> None:
    """For `algo.reward=individual`: the reward functions split per agent (scored on empty answers
    to `item` before training); a RewardFunctionError now, not at the first step."""
    prompts = [task.prompts(item, num_agents)]
    task.individual_rewards(task.score([item], prompts, [[""] * num_agents]), num_agents)


__all__ = ["REWARD_FNS", "RewardFunctionError", "ZERO_SPREAD_STEPS", "ZeroSpread", "check_reward_node", "fallback_note",
           "primary_metric", "register_reward", "resolve", "reward_specs", "task_class"]
