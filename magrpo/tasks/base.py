"""The contract between the trainer and a task.

A task turns dataset items into one prompt per agent, scores joint answers, and computes
its evaluation metrics. Rewards follow TRL's convention, extended to teams:

    reward(prompts, completions, **columns) -> Scores

`prompts[k]` and `completions[k]` are the k-th joint action: one string per agent (one string
in total for the single-agent form used by GRPO and the `single` baseline). `columns` are the
items' dataset columns, each a list aligned with k. `Scores` is a plain `list[float]` of
totals, so it drops into TRL-style code, with the reward's components attached.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from magrpo.config.groups import RewardConfig, TaskConfig
from magrpo.core.schema import ConfigError, SetupError, field_value
from magrpo.core.source import defined_at, first_line, is_magrpo, raised_at
from magrpo.tasks.relabel import Symmetry

if TYPE_CHECKING:       # start-up: magrpo.config.schemas loads OmegaConf, and the tasks load without it
    from magrpo.config.schemas import SandboxSchema

Item = dict[str, Any]


class RewardError(ConfigError):
    """A reward failed on an item while the run scored answers: a task's own `reward` (or a reward
    function, `magrpo.tasks.reward_fns.RewardFunctionError`) raised, or returned the wrong number of values or
    a value that is not a finite number. One line naming the reward, the item, the value and the
    user's file and line; the commands report it as a "reward error" (exit 2, as a config error),
    never as a reward of 0."""

    label = "reward error"




def reward_keys(node: Any) -> RewardConfig:
    """The `RewardConfig` keys of a `reward` node as a RewardConfig: a typed node, a schema instance,
    a plain dict or None (a key not given, or null, takes its default). Every task has these keys, a plugin
    task without a reward schema too, so they are read from here, as attributes."""
    if isinstance(node, RewardConfig):
        return node
    given = {f.name: field_value(node, f.name) for f in fields(RewardConfig)} if node is not None else {}
    return RewardConfig(**{k: v for k, v in given.items() if v is not None})


def reward_schema_of(task_cls: type) -> type | None:
    """The schema a task's `reward` node is checked against: its `reward_schema`, with the keys of
    `RewardConfig` added when it does not inherit them (a plugin's task written before them)."""
    schema = getattr(task_cls, "reward_schema", None)
    if schema is None or issubclass(schema, RewardConfig):
        return schema
    return _with_reward_keys(schema)


_WITH_KEYS: dict[type, type] = {}


def _with_reward_keys(schema: type) -> type:
    if schema not in _WITH_KEYS:
        both = type(schema.__name__, (RewardConfig, schema), {"__module__": schema.__module__})
        _WITH_KEYS[schema] = dataclass(both)
    return _WITH_KEYS[schema]


class Scores(list):
    """Totals as a list of floats, plus named components (each a list aligned with the totals)."""

    def __init__(self, totals: Sequence[float], components: Mapping[str, Sequence[float]] | None = None,
                 extras: Mapping[str, Sequence[Any]] | None = None):
        super().__init__(float(t) for t in totals)
        self.components = {k: [float(x) for x in v] for k, v in (components or {}).items()}
        self.extras = {k: list(v) for k, v in (extras or {}).items()}
        for name, values in self.components.items():
            if len(values) != len(self):
                raise ValueError(f"reward component {name!r} has {len(values)} values for {len(self)} totals")

    @classmethod
    def concat(cls, parts: Sequence[Scores]) -> Scores:
        totals = [t for p in parts for t in p]
        names = list(dict.fromkeys(k for p in parts for k in p.components))
        comps = {k: [x for p in parts for x in p.components.get(k, [0.0] * len(p))] for k in names}
        extra_names = list(dict.fromkeys(k for p in parts for k in p.extras))
        extras = {k: [x for p in parts for x in p.extras.get(k, [None] * len(p))] for k in extra_names}
        return cls(totals, comps, extras)


def raw_reward(total: float, shift: float = 0.0, scale: float = 1.0) -> float:
    """Undo the reward's composition `total = raw * scale + shift` (every task composes it so):
    raw = (total - shift) / scale. The one inverse: normalized returns and tables call it."""
    if not scale:
        raise ValueError("reward.scale=0 cannot be inverted: every total is the shift")
    return (total - shift) / scale


def columns(items: Sequence[Item]) -> dict[str, list[Any]]:
    """Items as TRL-style keyword columns: {key: [value per item]}."""
    keys = list(dict.fromkeys(k for it in items for k in it))
    return {k: [it.get(k) for it in items] for k in keys}


class Task:
    """Base class: subclasses set `name`, `num_agents`, and implement the methods below.

    `cfg` is the `task` config, an instance of the task's `config_schema` (a TaskConfig holding
    the node's keys as attributes for a task without one), `reward_cfg` the `reward` config, an
    instance of its `reward_schema` (`reward_schema_of`; RewardConfig without one), `sandbox_cfg`
    the `sandbox` config (None: its defaults). All arrive validated. A task narrows the first two
    to its own schemas by declaring them (`cfg: MyTaskConfig`, `reward_cfg: MyRewardConfig`).
    """

    cfg: TaskConfig
    reward_cfg: RewardConfig
    sandbox_cfg: SandboxSchema | None

    name: ClassVar[str] = ""
    num_agents: ClassVar[int] = 2        # the team the task is written for (its default)
    # Team sizes the task accepts (`agents.num_agents`); None = 1 (one model writes the whole
    # answer) or `num_agents`. A task whose prompts and reward take any team overrides `prompts`.
    agent_counts: ClassVar[tuple[int, ...] | None] = None
    # Metric that `best` in summary.json tracks and that sweeps compare on (an instance's own may
    # differ: reward functions without `reward.max` track reward_mean, RewardFnTask).
    primary_metric: str = "reward_mean"
    # Dataclasses the `task` and `reward` config nodes are checked against at start-up, so a
    # misspelt or mistyped key stops the run before any work (see magrpo.config.schemas).
    config_schema: ClassVar[type | None] = None
    # Whether the team reward splits into one share per agent (`algo.reward=individual` of the
    # PPO-family baselines); a task that says yes implements `individual_rewards`.
    splits_reward: ClassVar[bool] = False
    reward_schema: ClassVar[type | None] = None
    # Which family of `feedback=diagnostics` explains this task's reward (magrpo/rollout/feedback/diagnostics.py).
    feedback_kind: ClassVar[str] = "generic"

    # Whether the reward runs model-generated code (magrpo.sandbox): such a task honours the
    # `sandbox` config node and records the isolation level that ran in summary.json.
    uses_sandbox: ClassVar[bool] = False
    # The task's reward source, resolved once when it is built: the reward functions that replace
    # its own reward (`reward.fn` / `reward.fns`: a magrpo.tasks.reward_fns.RewardFns, set by
    # RewardFnTask), or None for its own reward; and, with them, why the run tracks reward_mean
    # instead of the task's primary metric (None: it does not).
    reward_fns: Any = None
    reward_note: str | None = None

    def __init__(self, cfg: TaskConfig, reward_cfg: RewardConfig, sandbox: SandboxSchema | None = None):
        self.cfg = cfg
        self.reward_cfg = reward_cfg
        self.sandbox_cfg = sandbox   # None = its defaults

    def run_info(self) -> dict[str, Any]:
        """What summary.json records about how this task ran (the coding tasks: the sandbox's
        isolation level)."""
        return {}

    # -- data -------------------------------------------------------------------------------
    def load(self, split: str) -> list[Item]:
        """Items of `split` ("train" or "eval"), each with a unique "id"."""
        raise NotImplementedError

    # -- prompts ----------------------------------------------------------------------------
    def agent_prompts(self, item: Item) -> list[str]:
        """First-turn prompt of each agent (multi-agent form), `num_agents` strings."""
        raise NotImplementedError

    def single_prompt(self, item: Item) -> str:
        """Prompt for one model that writes the whole joint answer (GRPO, `single` baseline)."""
        raise NotImplementedError

    @classmethod
    def accepted_counts(cls) -> tuple[int, ...]:
        """The team sizes this task accepts, ascending."""
        return tuple(sorted(set(cls.agent_counts or (1, cls.num_agents))))

    @classmethod
    def describe_counts(cls) -> str:
        """`accepted_counts` in words: "1 or 2", "1 to 8"."""
        counts = cls.accepted_counts()
        if len(counts) > 2 and counts == tuple(range(counts[0], counts[-1] + 1)):
            return f"{counts[0]} to {counts[-1]}"
        return ", ".join(map(str, counts[:-1])) + (" or " if len(counts) > 1 else "") + str(counts[-1])

    def check_team(self, num_agents: int) -> None:
        """A team size the task does not accept is refused (config validation says so first)."""
        if num_agents not in self.accepted_counts():
            raise ValueError(f"task {self.name!r} accepts {self.describe_counts()} agents, got {num_agents}")

    def prompts(self, item: Item, num_agents: int) -> list[str]:
        self.check_team(num_agents)
        if num_agents == 1:
            return [self.single_prompt(item)]
        return self.team_prompts(item, num_agents)

    def team_prompts(self, item: Item, num_agents: int) -> list[str]:
        """One prompt per agent of a team of `num_agents` (a task taking any size overrides this)."""
        return self.agent_prompts(item)

    def context_prompt(self, item: Item, agent: int, prompt: str, own: str | None, others: dict[int, str]) -> str:
        """Agent `agent`'s prompt extended with answers it may see (the `sequential` and
        `discussion` baselines): its own earlier answer and the other agents' answers by index."""
        parts = [prompt]
        if own is not None:
            parts.append(f"Your previous answer:\n{own.strip()}")
        parts += [f"Agent {j + 1}'s answer:\n{text.strip()}" for j, text in sorted(others.items())]
        parts.append("Write your part again, consistent with the answers above and without repeating them."
                     if own is not None else "Write your part so that it fits with the answer(s) above.")
        return "\n\n".join(parts)

    def revise_instruction(self, item: Item, agent: int, num_agents: int) -> str:
        """The request that ends every between-turn message (magrpo.rollout.feedback): answer again, in the
        format the first prompt asked for."""
        return "Now write your part again: reply with your complete revised answer only, in the format asked for above."

    # -- the joint answer -------------------------------------------------------------------
    # How `assemble` joins the agents' parts, in words (an exported team's team.json records it).
    assembly: ClassVar[str] = "the agents' answers in agent order, separated by a blank line"

    def assemble(self, item: Item, parts: Sequence[str]) -> str:
        """The team's joint answer to `item` as one text, from each agent's part (what a user of a
        trained team reads; the reward reads the parts themselves)."""
        return "\n\n".join(p.strip() for p in parts)

    # -- symmetries (Other-Play) ------------------------------------------------------------
    def symmetries(self) -> tuple[Symmetry, ...]:
        """The relabellings the reward does not see (magrpo.tasks.symmetry): interchangeable option
        letters, colour names, channel symbols. `algo.other_play=true` trains under random ones, and
        `check_task` checks that each leaves the reward as it is. None by default."""
        return ()

    def relabel(self, text: str, symmetry: Symmetry, perm: Sequence[str], place: str, agent: int = 0) -> str:
        """`text`, agent `agent`'s "prompt" or "answer" (`place`), with `symmetry.symbols[i]` relabelled
        `perm[i]` (`Symmetry.apply`). A game that reads a move in its own way (or in letters of each
        agent's own) overrides it."""
        return symmetry.apply(text, perm)

    # -- reward -----------------------------------------------------------------------------
    def move(self, text: str) -> Hashable | None:
        """The move an answer makes, for statistics over moves (`algo.signal_bonus`): the answer
        itself, stripped, by default (None: an empty answer); a game reads its letter."""
        return text.strip() or None

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: list[Any]) -> Scores:
        raise NotImplementedError

    def score(self, items: Sequence[Item], prompts: list[list[str]], completions: list[list[str]]) -> Scores:
        """`reward` of the joint answers to `items`, checked: one value per joint answer, every value
        and component a finite number. A RewardError otherwise, and when the reward of a task
        outside magrpo raises (naming the task, the item and the user's file and line)."""
        try:
            out = self.reward(prompts, completions, **columns(items))
        except (ConfigError, SetupError):
            raise
        except Exception as e:
            if is_magrpo(type(self).reward):     # a built-in task's own failure keeps its traceback
                raise
            raise _reward_raised(self, items, prompts, completions, e) from e
        return checked_scores(self, items, out)

    def individual_rewards(self, scores: Scores, num_agents: int) -> list[list[float]]:
        """Each agent's share of every joint reward: `[len(scores)][num_agents]`, each row summing to
        the joint reward. Only for tasks with `splits_reward`."""
        raise NotImplementedError(f"task {self.name!r} has one team reward that does not split per agent")

    # -- normalization ----------------------------------------------------------------------
    def reward_max(self, num_answers: int) -> float | None:
        """The largest raw reward (before `shift`/`scale`) a joint answer of `num_answers` strings
        can get, or None when the reward has no fixed maximum. Tables report returns as a fraction
        of it (the paper's normalized return)."""
        return None

    def total(self, raw: float) -> float:
        """The reward a joint answer is paid for a raw reward: raw * `reward.scale` + `reward.shift`,
        the composition `normalized_return` and the tables undo (`raw_reward`). A task's `reward`
        returns totals: `return Scores([self.total(r) for r in raws])`."""
        keys = reward_keys(self.reward_cfg)
        return raw * keys.scale + keys.shift

    def normalized_return(self, reward: float, num_answers: int) -> float | None:
        """The raw reward (`raw_reward`: shift and scale undone) as a fraction of `reward_max`:
        1.0 = every level paid, whatever `reward.shift` and `reward.scale` are."""
        top = self.reward_max(num_answers)
        if not top:
            return None
        keys = reward_keys(self.reward_cfg)
        return raw_reward(reward, keys.shift, keys.scale) / top

    # -- evaluation metrics -----------------------------------------------------------------
    def metrics(self, items: Sequence[Item], completions: list[list[str]], scores: Scores) -> dict[str, float]:
        """Task metrics beyond the reward (ROUGE-L, CodeBLEU, pass@k...). `items` may repeat an
        item once per sample; group by item["id"] where a metric needs it."""
        return {}


# -- a reward's result, checked ----------------------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and math.isfinite(x)


def short(v: Any) -> str:
    """`repr(v)`, cut to 60 characters."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def batch_words(ids: Sequence[str]) -> str:
    """The items of a batch, in words: "item 'a'" (its samples), or "the batch of items 'a' to 'c'"."""
    distinct = list(dict.fromkeys(ids))
    if len(distinct) == 1:
        return f"item {distinct[0]!r}"
    return f"the batch of items {distinct[0]!r} to {distinct[-1]!r}" if distinct else "an empty batch"


def item_ids(items: Sequence[Item], n: int) -> list[str]:
    """The id of each of `n` joint answers' items ("#k" where an item has none)."""
    ids = [it.get("id") if isinstance(it, Mapping) else None for it in items][:n]
    ids += [None] * (n - len(ids))
    return [f"#{k}" if x is None else str(x) for k, x in enumerate(ids)]


def _task_reward(task: Task) -> str:
    fn = type(task).reward
    where = defined_at(fn)
    return f"task {task.name or type(task).__name__!r}: its reward {fn.__qualname__}" + (f" ({where})" if where else "")


def checked_scores(task: Task, items: Sequence[Item], out: Any) -> Scores:
    """What `task.reward` returned for `len(items)` joint answers, as Scores, or a RewardError
    naming the task, its reward (file and line), the item and the value."""
    n = len(items)
    ids = item_ids(items, n)
    if not isinstance(out, list) and hasattr(out, "tolist"):       # a numpy array or torch tensor
        out = out.tolist()
    if isinstance(out, (str, bytes, Mapping)) or not isinstance(out, Sequence):
        raise RewardError(f"{_task_reward(task)} returned {short(out)} ({type(out).__name__}) for {batch_words(ids)}; "
                          f"it must return Scores (or a list) with one value per joint answer")
    if len(out) != n:
        raise RewardError(f"{_task_reward(task)} returned {len(out)} value(s) for {n} joint answer(s) "
                          f"({batch_words(ids)}); it must return one per joint answer")
    for k, v in enumerate(out):
        if not _is_number(v):
            raise RewardError(f"{_task_reward(task)} returned {short(v)} for item {ids[k]!r}; every value must be "
                              f"a finite number")
    scores = out if isinstance(out, Scores) else Scores(out)
    for name, values in scores.components.items():
        for k, v in enumerate(values):
            if not math.isfinite(v):
                raise RewardError(f"{_task_reward(task)} returned {v!r} as component {name!r} for item {ids[k]!r}; "
                                  f"every value must be a finite number")
    return scores


def _reward_raised(task: Task, items: Sequence[Item], prompts: list, completions: list,
                   e: Exception) -> RewardError:
    """The error of a task's raising reward, naming the item it fails on: each joint answer of the
    batch alone, the first that raises; else the batch."""
    ids = item_ids(items, len(completions))
    where = batch_words(ids) if len(set(ids)) > 1 else f"item {ids[0]!r}" if ids else "no joint answer"
    if len(completions) > 1:
        for k in range(len(completions)):
            try:
                task.reward([prompts[k]], [completions[k]], **columns([items[k]]))
            except Exception as one:
                e, where = one, f"item {ids[k]!r}"
                break
        else:
            where += " (on no joint answer alone)"
    site = raised_at(e, type(task).reward)
    return RewardError(f"task {task.name or type(task).__name__!r}: its reward raised {type(e).__name__} on {where}: "
                       f"{first_line(e)}" + (f" (at {site})" if site else ""))
