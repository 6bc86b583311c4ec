"""A conformance check for a task: does it keep the contract of `magrpo.tasks.base.Task`?

    from magrpo import check_task

    report = check_task(MyTask)          # a Task subclass, a Task instance, or a registered name
    print(report)                        # "task 'my_task': ok", or one line per problem
    report.raise_if_failed()             # in a test: TaskCheckError listing every problem

or from the command line, for a registered task (a built-in one, or a plugin's):

    magrpo-check-task my_task            # prints the problems (or "ok"); exit 1 on problems

It runs the task without a model: it loads the splits, builds prompts for every team size the
task accepts, and scores random joint answers, collecting every problem as one line that says
what is wrong and where (split, item id, team size). An exception the task raises inside a check
becomes such a line ("load('eval') raised FileNotFoundError: ..."); a check that cannot run
because an earlier one failed (no items loaded) is left out and said so in `notes`.
"""

from __future__ import annotations

import copy
import enum
import functools
import math
import numbers
import random
import string
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeGuard, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf

from magrpo.config.groups import RewardConfig, TaskConfig
from magrpo.config.schemas import conf_dir as _conf_dir
from magrpo.config.schemas import typed_node
from magrpo.core.instances import instance
from magrpo.core.schema import ConfigError, check_values
from magrpo.core.source import raised_at
from magrpo.tasks import TASKS, Item, Scores, Task, columns, raw_reward, reward_keys, reward_schema_of
from magrpo.tasks.symmetry import Symmetry

# How far a normalized return may stray outside [0, 1], and an individual reward row from the
# joint reward, before it is a problem (float rounding, not a bug).
TOLERANCE = 1e-6
# The composition the shift/scale check asks for: total = raw * SCALE + SHIFT (RewardConfig).
SHIFT, SCALE = 0.5, 2.0
# Every problem line names at most this many offenders (items, answers) before "and N more".
_SHOWN = 3

_T = TypeVar("_T")


class _Raised(enum.Enum):
    """What `_Checker.attempt` gives for a call that raised (the problem already reported)."""
    RAISED = enum.auto()


RAISED = _Raised.RAISED


class TaskCheckError(AssertionError):
    """A task that fails `check_task`; the message lists every problem, one per line."""


@dataclass
class TaskCheck:
    """What `check_task` found: `problems` (one line each; none = the task keeps the contract) and
    `notes` (checks that did not apply or could not run, and why)."""

    task: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_failed(self) -> None:
        """Raise TaskCheckError listing every problem, if there is one."""
        if self.problems:
            raise TaskCheckError(str(self))

    def __str__(self) -> str:
        if not self.problems:
            return f"task {self.task!r}: ok"
        return "\n".join([f"task {self.task!r}: {len(self.problems)} problem(s)"]
                         + [f"  {p}" for p in self.problems])


# -- building the task ---------------------------------------------------------------------------

def _node(schema: type | None, name: str, conf_file: Path | None, overrides: Mapping[str, object] | None,
          prefix: str, open_keys: bool = False) -> DictConfig:
    """A config node as a run would get it: the schema's defaults under the task's own conf/ file
    (a registered name only) and `overrides`, typed and checked as `magrpo.validation.checks.validate` does
    (`open_keys`: keys the schema does not declare are kept, as a reward node without a schema's)."""
    raw: DictConfig | ListConfig = OmegaConf.create({"name": name} if schema is None or "name" in {f.name for f in fields(schema)} else {})
    if conf_file is not None and conf_file.is_file():
        own = OmegaConf.load(conf_file)
        if not isinstance(own, DictConfig):
            raise ConfigError(f"{conf_file}: not a config node (a mapping of keys)")
        own.pop("defaults", None)       # the group's base file, whose keys the schema already holds
        raw = OmegaConf.merge(raw, own)
    if overrides is not None:
        raw = OmegaConf.merge(raw, overrides if OmegaConf.is_config(overrides) else OmegaConf.create(dict(overrides)))
    if not isinstance(raw, DictConfig):
        raise ConfigError(f"{prefix.rstrip('.')}: not a config node (a mapping of keys)")
    if schema is None:
        return raw
    node = typed_node(raw, schema, prefix, open_keys=open_keys)
    check_values(node, schema, prefix)
    return node


def _build(task: type[Task] | Task | str, cfg: Mapping[str, object] | None,
           reward_cfg: Mapping[str, object] | None) -> tuple[str, Task | None, str | None]:
    """(name, instance, problem): the task to check, or the one line why it cannot be built. `cfg`
    and `reward_cfg` are keys over the task's defaults (check_task); the task gets its configs as
    a run does: instances of its schemas (TaskConfig, RewardConfig where it declares none)."""
    if isinstance(task, Task):
        if cfg is not None or reward_cfg is not None:
            raise TypeError("check_task: cfg and reward_cfg apply to a task class or name; "
                            "a Task instance already holds its config")
        return task.name or type(task).__name__, task, None
    conf_dir = None
    if isinstance(task, str):
        conf_dir, task = _conf_dir(), TASKS[task]      # an unknown name: RegistryError listing the known ones
    if not (isinstance(task, type) and issubclass(task, Task)):
        raise TypeError(f"check_task: expected a Task subclass, a Task instance or a registered task name, "
                        f"not {task!r}")
    name = task.name or task.__name__
    try:
        task_node = _node(task.config_schema, name, conf_dir and conf_dir / "task" / f"{name}.yaml", cfg, "task.")
        reward_schema = reward_schema_of(task)     # none: RewardConfig's keys, the others free-form
        reward_node = _node(reward_schema or RewardConfig, name, conf_dir and conf_dir / "reward" / f"{name}.yaml",
                            reward_cfg, "reward.", open_keys=reward_schema is None)
    except ConfigError as e:
        return name, None, f"the task's config does not validate: {e}"
    except Exception as e:
        return name, None, f"building the task's config nodes from its schemas raised {_exc(e)}"
    try:
        return name, task(instance(task_node, task.config_schema or TaskConfig),
                          instance(reward_node, reward_schema or RewardConfig)), None
    except Exception as e:
        return name, None, f"{task.__name__}(cfg, reward_cfg) raised {_exc(e)}"


# -- small helpers -------------------------------------------------------------------------------

def _exc(e: BaseException) -> str:
    """`Type: first line of the message` (cut to 300 characters), and where in the task's own code
    it was raised (`(at file:line)`, magrpo.tasks.base.raised_at)."""
    lines = str(e).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
    text = text if len(text) <= 300 else text[:297] + "..."
    site = raised_at(e)
    return f"{text} (at {site})" if site else text


def _raw_score(task: Task, items: list[Item], prompts: list[list[str]], answers: list[list[str]]) -> Any:
    """What the task's reward returns, before `Task.score` checks it (a wrong count, a NaN): the
    checks below report those in their own words, with counts. A task that overrides `score`
    itself is asked through it."""
    if type(task).score is Task.score:
        return task.reward(prompts, answers, **columns(items))
    return task.score(items, prompts, answers)


def _real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _finite(x: object) -> TypeGuard[float]:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _as_scores(scores: list[float]) -> Scores:
    """The task's scores as a run hands them on (magrpo.tasks.base.checked_scores): a plain list of
    floats, which the checks accept, becomes a Scores without components."""
    return scores if isinstance(scores, Scores) else Scores(scores)


def _same(a: Any, b: Any) -> bool:
    """Equal floats, NaN equal to NaN (a NaN is reported once, as not finite, not as non-determinism)."""
    if _real(a) and _real(b):
        fa, fb = float(a), float(b)
        return fa == fb or (math.isnan(fa) and math.isnan(fb))
    return a == b


def _more(shown: Sequence[str], total: int) -> str:
    return ", ".join(shown[:_SHOWN]) + (f" and {total - _SHOWN} more" if total > _SHOWN else "")


def _where(split: str, item: Item) -> str:
    return f"{split} item {item['id']!r}"


# -- random answers ------------------------------------------------------------------------------

KINDS = ("empty", "words", "long", "echo")


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 9)))


def _answer(rng: random.Random, kind: str, prompt: str) -> str:
    if kind == "empty":
        return ""
    if kind == "words":
        return " ".join(_word(rng) for _ in range(rng.randint(1, 4)))
    if kind == "echo":
        return prompt
    sentences = [" ".join(_word(rng) for _ in range(rng.randint(4, 16))).capitalize() + rng.choice(".!?")
                 for _ in range(rng.randint(8, 30))]
    return "".join(s + rng.choice([" ", " ", "\n", "\n\n"]) for s in sentences).strip()


# -- the checks ----------------------------------------------------------------------------------

class _Checker:
    def __init__(self, task: Task, report: TaskCheck, splits: Sequence[str], num_items: int, num_answers: int,
                 seed: int):
        self.task, self.report = task, report
        self.splits, self.num_items, self.num_answers, self.seed = list(splits), num_items, num_answers, seed
        self.pool: list[tuple[str, Item]] = []          # (split, item): the items the later checks use
        self.no_max: list[int] = []                     # team sizes without a reward_max
        self.tried: dict[int, list[float]] = {}         # team size -> the finite rewards of every answer tried
        self.batches: dict[int, tuple[list, list]] = {}  # team size -> (its answers, its prompts)
        self.empty_lines: list[str] = []                # the problems check_empty found
        self._copies: tuple[Task, Task] | str | None = None   # check_shift_scale's instances (copies())

    def problem(self, line: str) -> None:
        self.report.problems.append(line)

    def note(self, line: str) -> None:
        self.report.notes.append(line)

    def attempt(self, what: str, call: Callable[[], _T], note: str = "") -> _T | Literal[_Raised.RAISED]:
        """`call()`; where it raises, the problem `WHAT raised Type: message (at file:line)NOTE` and RAISED."""
        try:
            return call()
        except Exception as e:
            self.problem(f"{what} raised {_exc(e)}{note}")
            return RAISED

    def run(self) -> None:
        counts = self.check_counts()
        for split in self.splits:
            self.check_split(split)
        if not self.pool:
            self.note("no split gave items: prompts, rewards and metrics were not checked")
            return
        if not counts:
            self.note("no accepted team size: prompts, rewards and metrics were not checked")
            return
        self.check_refused(counts)
        for n in counts:
            self.check_team(n)
        self.check_constant()
        if self.no_max:
            self.note(f"reward_max is None for team size(s) {', '.join(map(str, self.no_max))}: normalized returns "
                      f"not checked there, and an all-empty answer was compared with the best answer tried")

    # -- team sizes -----------------------------------------------------------------------------
    def check_counts(self) -> list[int]:
        cls = type(self.task)
        counts = self.attempt("accepted_counts()", cls.accepted_counts)
        if counts is RAISED:
            return []
        if (not isinstance(counts, Sequence) or not counts
                or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts)):
            self.problem(f"accepted_counts() returned {counts!r}; it must be a non-empty tuple of team sizes >= 1")
            return []
        sizes = sorted(set(counts))
        if cls.num_agents not in sizes:
            self.problem(f"num_agents={cls.num_agents!r} (the task's default team) is not among its accepted "
                         f"team sizes {tuple(sizes)}")
        return sizes

    # -- data -----------------------------------------------------------------------------------
    def check_split(self, split: str) -> None:
        where = f"load({split!r})"
        items = self.attempt(where, lambda: self.task.load(split))
        if items is RAISED:
            return
        if not isinstance(items, list):
            self.problem(f"{where} returned {type(items).__name__}, not a list of items")
            return
        if not items:
            self.problem(f"{where} returned no items")
            return
        not_dicts = [i for i, it in enumerate(items) if not isinstance(it, dict)]
        if not_dicts:
            self.problem(f"{where}: {len(not_dicts)} of {len(items)} items are not dicts "
                         f"(items {_more([str(i) for i in not_dicts], len(not_dicts))}, "
                         f"the first a {type(items[not_dicts[0]]).__name__})")
        dicts = [(i, it) for i, it in enumerate(items) if isinstance(it, dict)]
        no_id = [i for i, it in dicts if "id" not in it]
        if no_id:
            self.problem(f"{where}: {len(no_id)} of {len(items)} items have no 'id' "
                         f"(items {_more([str(i) for i in no_id], len(no_id))})")
        unhashable = [(i, it["id"]) for i, it in dicts if "id" in it and not isinstance(it["id"], Hashable)]
        if unhashable:
            i, v = unhashable[0]
            self.problem(f"{where}: {len(unhashable)} item id(s) are not hashable (item {i}'s id is a "
                         f"{type(v).__name__}: {v!r})")
        seen: dict[Any, list[int]] = {}
        for i, it in dicts:
            if "id" in it and isinstance(it["id"], Hashable):
                seen.setdefault(it["id"], []).append(i)
        dupes = [(k, idx) for k, idx in seen.items() if len(idx) > 1]
        if dupes:
            shown = [f"{k!r} (items {', '.join(map(str, idx))})" for k, idx in dupes]
            self.problem(f"{where}: {len(dupes)} id(s) appear more than once: {_more(shown, len(dupes))}")
        good = [it for i, it in dicts if "id" in it and isinstance(it["id"], Hashable) and len(seen[it["id"]]) == 1]
        self.pool += [(split, it) for it in good[:self.num_items]]

    # -- prompts --------------------------------------------------------------------------------
    def check_refused(self, counts: list[int]) -> None:
        """A team size the task does not accept is refused: 0, one above the largest, and any gap."""
        wrong = sorted({0, counts[-1] + 1} | (set(range(1, counts[-1])) - set(counts)))
        split, item = self.pool[0]
        for n in wrong:
            try:
                got = self.task.prompts(item, n)
            except Exception:
                continue
            self.problem(f"prompts({_where(split, item)}, {n}) returned {_count(got)} instead of raising: "
                         f"{n} is not among the accepted team sizes {tuple(counts)}")

    def team_prompts(self, n: int) -> list[list[str] | None]:
        """Each pool item's prompts for a team of `n` (None where they broke the contract); the first
        item that breaks it is reported."""
        out: list[list[str] | None] = []
        failed: list[str] = []
        for split, item in self.pool:
            why: str | None
            try:
                got = self.task.prompts(item, n)
            except Exception as e:
                why = f"raised {_exc(e)}"
            else:
                why = _bad_prompts(got, n)
            if why is not None:
                failed.append(f"prompts({_where(split, item)}, {n}) {why}")
            out.append(None if why is not None else list(got))
        if failed:
            self.problem(failed[0] + (f" ({len(failed)} of the {len(self.pool)} items checked fail)"
                                      if len(failed) > 1 else ""))
        return out

    # -- one team size --------------------------------------------------------------------------
    def answers(self, n: int, prompts: list) -> list:
        """The joint answers scored for a team of `n`: (pool index, what each agent wrote, texts).
        `num_answers` random ones (each agent: empty, a few words, long text, or its own prompt)
        on random items, then up to `num_answers` built from items (every agent writes one of the
        item's own fields: a reference, a gold answer, a canonical solution...)."""
        rng = random.Random(f"{self.seed}/{n}")
        batch = []
        for _ in range(self.num_answers):
            p = rng.randrange(len(self.pool))
            kinds = [rng.choice(KINDS) for _ in range(n)]
            batch.append((p, kinds, [_answer(rng, kind, (prompts[p] or [""] * n)[a]) for a, kind in enumerate(kinds)]))
        built = [(p, [f"item[{key!r}]"] * n, [text] * n)
                 for p, (_, item) in enumerate(self.pool) for key, text in _item_texts(item)]
        return batch + rng.sample(built, min(self.num_answers, len(built)))

    def check_team(self, n: int) -> None:
        team = f"team of {n}"
        prompts = self.team_prompts(n)
        batch = self.answers(n, prompts)
        self.check_assemble(n, batch)
        scores = self.score(team, batch, prompts, "answers")
        if scores is None:
            return
        before = len(self.report.problems)
        self.check_deterministic(team, batch, prompts, scores)
        if len(self.report.problems) == before:     # a reward that varies by itself cannot be compared
            self.check_shift_scale(team, batch, prompts, scores)
        top = self.reward_max(n)
        if top is not None:
            self.check_normalized(team, n, batch, scores, top)
        empty = [(p, ["empty"] * n, [""] * n) for p in range(len(self.pool))]
        got = self.score(team, empty, prompts, "all-empty answers")
        if got is not None:
            self.tried[n] = [float(s) for s in [*scores, *got] if _finite(s)]
            self.batches[n] = (batch, prompts)
            before = len(self.report.problems)
            self.check_empty(team, n, empty, got, top, scores)
            self.empty_lines += self.report.problems[before:]
        if type(self.task).splits_reward and n >= 2:
            self.check_individual(team, n, batch, scores)
        self.check_metrics(team, batch, scores)
        self.check_symmetries(team, n, batch, prompts)

    def items_of(self, batch: list) -> list[Item]:
        return [self.pool[p][1] for p, _, _ in batch]

    def describe(self, batch: list, k: int) -> str:
        p, kinds, _ = batch[k]
        return f"answer {k} ({_where(*self.pool[p])}; {'/'.join(kinds)})"

    def check_assemble(self, n: int, batch: list) -> None:
        p, kinds, answer = batch[0]
        got = self.attempt(f"assemble({_where(*self.pool[p])}, {n} answers)",
                           lambda: self.task.assemble(self.pool[p][1], answer))
        if got is RAISED:
            return
        if not isinstance(got, str):
            self.problem(f"assemble({_where(*self.pool[p])}, {n} answers) returned a {type(got).__name__}, "
                         f"not a string")

    def score(self, team: str, batch: list, prompts: list, what: str) -> list[float] | None:
        """task.score over `batch`, its problems reported; None when it raised or gave no list of
        one value per joint answer."""
        scores, lines = self.try_score(team, batch, prompts, what)
        self.report.problems += lines
        return scores

    def try_score(self, team: str, batch: list, prompts: list, what: str,
                  task: Task | None = None) -> tuple[list[float] | None, list[str]]:
        items = copy.deepcopy(self.items_of(batch))
        rows = [list(prompts[p] or [""] * len(ans)) for p, _, ans in batch]
        answers = [list(ans) for _, _, ans in batch]
        try:
            scores = _raw_score(task or self.task, items, rows, answers)
        except Exception as e:
            return None, [f"reward of {len(batch)} {what} for a {team} raised {_exc(e)}"]
        if not isinstance(scores, list):
            return None, [f"reward of {len(batch)} {what} for a {team} returned {type(scores).__name__}, "
                          f"not Scores or a list of floats"]
        if len(scores) != len(batch):
            return None, [f"reward of {len(batch)} {what} for a {team} returned {len(scores)} values, "
                          f"one per joint answer expected"]
        lines = []
        bad = [k for k, s in enumerate(scores) if not _finite(s)]
        if bad:
            lines.append(f"reward for a {team} is not a finite float for {len(bad)} of {len(batch)} {what}: "
                         f"{self.describe(batch, bad[0])} scored {scores[bad[0]]!r}")
        components = getattr(scores, "components", None) or {}
        if not isinstance(components, Mapping):
            lines.append(f"reward for a {team} has components of type {type(components).__name__}, not a dict "
                         f"of name -> values")
            components = {}
        for name, values in components.items():
            if not isinstance(values, Sequence) or len(values) != len(scores):
                lines.append(f"reward component {name!r} for a {team} has "
                             f"{len(values) if isinstance(values, Sequence) else type(values).__name__} values "
                             f"for {len(scores)} joint answers")
                continue
            bad = [k for k, v in enumerate(values) if not _finite(v)]
            if bad:
                lines.append(f"reward component {name!r} for a {team} is not a finite float for {len(bad)} of "
                             f"{len(batch)} {what}: {self.describe(batch, bad[0])} has {values[bad[0]]!r}")
        return scores, lines

    def check_deterministic(self, team: str, batch: list, prompts: list, scores: list) -> None:
        """The same answers scored again score the same (totals and components)."""
        again, lines = self.try_score(team, batch, prompts, "answers")
        if again is None:
            self.problem(f"reward for a {team} is not deterministic: scoring the same answers again failed "
                         f"({lines[0]})")
            return
        diff = [k for k, (a, b) in enumerate(zip(scores, again)) if not _same(a, b)]
        if diff:
            k = diff[0]
            self.problem(f"reward for a {team} is not deterministic: {len(diff)} of {len(batch)} answers "
                         f"scored differently the second time ({self.describe(batch, k)}: {scores[k]!r}, "
                         f"then {again[k]!r})")
            return
        first, second = (getattr(s, "components", None) or {} for s in (scores, again))
        if not isinstance(first, Mapping) or not isinstance(second, Mapping):
            return
        changed = sorted(set(first) ^ set(second)) + [
            name for name in first if name in second
            and (len(first[name]) != len(second[name]) or not all(map(_same, first[name], second[name])))]
        if changed:
            self.problem(f"reward for a {team} is not deterministic: component(s) "
                         f"{_more([repr(c) for c in changed], len(changed))} changed when the same answers were "
                         f"scored again")

    def copies(self) -> tuple[Task, Task] | str:
        """Two more instances of the task, built once: one from its own config (`same`), one with
        shift=SHIFT and scale=SCALE (`shifted`); or the one line why they cannot be built."""
        if self._copies is None:
            # a RewardConfig as a run builds the task; one built by hand may hold a config node, or plain
            # data, and its copies are built alike
            given: Any = self.task.reward_cfg
            shifted: Any
            try:
                if is_dataclass(given) and not isinstance(given, type):
                    shifted = replace(given, shift=SHIFT, scale=SCALE)
                elif OmegaConf.is_config(given):
                    shifted = OmegaConf.merge(given, {"shift": SHIFT, "scale": SCALE})
                else:
                    shifted = {**dict(given or {}), "shift": SHIFT, "scale": SCALE}
                build = type(self.task)
                self._copies = (build(self.task.cfg, copy.deepcopy(given), self.task.sandbox_cfg),
                                build(self.task.cfg, shifted, self.task.sandbox_cfg))
            except Exception as e:
                self._copies = (f"reward.shift and reward.scale were not checked: the task could not be built "
                                f"again ({_exc(e)})")
        return self._copies

    def check_shift_scale(self, team: str, batch: list, prompts: list, scores: list) -> None:
        """The task composes its total from `reward.shift` and `reward.scale` (total = raw * scale +
        shift, RewardConfig), as normalized returns and tables assume when they undo them: the task
        built again with shift=SHIFT and scale=SCALE scores the same answers raw * SCALE + SHIFT,
        where raw is what a copy built from the task's own config scores. A copy that scores the
        answers otherwise than the task itself (a judge sampled per instance) leaves it unchecked."""
        built = self.copies()
        if isinstance(built, str):
            if built not in self.report.notes:
                self.note(built)
            return
        same, shifted = built
        base, lines = self.try_score(team, batch, prompts, "answers", task=same)
        again, more = self.try_score(team, batch, prompts, "answers", task=shifted)
        if base is None or again is None:
            self.problem(f"{(lines or [''])[0] if base is None else more[0]} (a copy of the task built from its "
                         f"config{'' if base is None else f' with reward.shift={SHIFT} and reward.scale={SCALE}'})")
            return
        if not all(map(_same, base, scores)):
            k = next(k for k, (a, b) in enumerate(zip(base, scores)) if not _same(a, b))
            line = (f"reward.shift and reward.scale were not checked: a second instance of the task scores the same "
                    f"answers otherwise than the first ({self.describe(batch, k)}: {scores[k]!r}, then {base[k]!r})")
            if line.split(" (")[0] not in " ".join(self.report.notes):
                self.note(line)
            return
        keys = reward_keys(same.reward_cfg)
        expected = [raw_reward(float(a), keys.shift, keys.scale) * SCALE + SHIFT if _finite(a) else None
                    for a in base]
        bad = [k for k, (e, b) in enumerate(zip(expected, again)) if e is not None and _finite(b)
               and not math.isclose(float(b), e, rel_tol=TOLERANCE, abs_tol=TOLERANCE)]
        if bad:
            k = bad[0]
            self.problem(f"reward for a {team} does not follow reward.shift and reward.scale: with shift={SHIFT} "
                         f"and scale={SCALE}, {len(bad)} of {len(batch)} answers scored otherwise than raw * scale "
                         f"+ shift ({self.describe(batch, k)}: {again[k]!r}, expected {expected[k]!r}); compose "
                         f"the total in reward() as self.total(raw) = raw * reward.scale + reward.shift (magrpo.tasks."
                         f"RewardConfig), which normalized_return and the tables undo")

    def reward_max(self, n: int) -> float | None:
        top = self.attempt(f"reward_max({n})", lambda: self.task.reward_max(n))
        if top is RAISED:
            return None
        if top is not None and (not _finite(top) or top < 0):
            self.problem(f"reward_max({n}) returned {top!r}; it must be a finite number > 0, or None")
            return None
        if not top:                     # None or 0: no fixed maximum
            self.no_max.append(n)
            return None
        return float(top)

    def normalized(self, team: str, n: int, batch: list, scores: list, top: float) -> list[float | None] | None:
        out: list[float | None] = []
        for k, s in enumerate(scores):
            if not _finite(s):
                out.append(None)
                continue
            v = self.attempt(f"normalized_return({s!r}, {n})", functools.partial(self.task.normalized_return, s, n),
                             f" ({self.describe(batch, k)})")
            if v is RAISED:
                return None
            if not _finite(v):
                self.problem(f"normalized_return({s!r}, {n}) returned {v!r} though reward_max({n}) = {top!r}; "
                             f"it must be a finite float ({self.describe(batch, k)})")
                return None
            out.append(float(v))
        return out

    def check_normalized(self, team: str, n: int, batch: list, scores: list, top: float) -> None:
        values = self.normalized(team, n, batch, scores, top)
        if values is None:
            return
        for label, bad in (("above 1", [k for k, v in enumerate(values) if v is not None and v > 1 + TOLERANCE]),
                           ("below 0", [k for k, v in enumerate(values) if v is not None and v < -TOLERANCE])):
            if bad:
                k = bad[0]
                self.problem(f"normalized_return is {label} for {len(bad)} of {len(batch)} answers of a "
                             f"{team}: {self.describe(batch, k)} scored {scores[k]!r}, normalized {values[k]!r} "
                             f"(reward_max({n}) = {top!r})")

    def check_constant(self) -> None:
        """A reward that gives every answer tried, at every team size (random, item-built and
        all-empty answers), the same value teaches nothing: one line naming the value, in place of
        the all-empty answers' lines, which say the same in part."""
        values = [v for vs in self.tried.values() for v in vs]
        if len(values) < 2 or min(values) != max(values):
            return
        if self.later_turn_varies(values[0]):
            return
        self.report.problems = [p for p in self.report.problems if p not in self.empty_lines]
        sizes = " and ".join(map(str, self.tried))
        self.problem(f"the reward is {values[0]!r} for every answer tried ({len(values)} joint answers, team size(s) "
                     f"{sizes}: random, item-built and all-empty): a reward that gives every answer the same value "
                     f"teaches nothing (does it read the answers?)")

    def later_turn_varies(self, value: float) -> bool:
        """Whether the same answers, scored as a second turn's (each item's `turn_history` holding the
        answer itself), get another reward than `value`: a task that pays at later turns only (invest)."""
        for batch, prompts in self.batches.values():
            items = [{**copy.deepcopy(item), "turn_history": [list(ans)]} for item, (_, _, ans) in
                     zip(self.items_of(batch), batch)]
            rows = [list(prompts[p] or [""] * len(ans)) for p, _, ans in batch]
            try:
                again = _raw_score(self.task, items, rows, [list(ans) for _, _, ans in batch])
            except Exception:
                continue
            if isinstance(again, list) and any(_finite(s) and float(s) != value for s in again):
                self.note(f"the reward is {value!r} for every first-turn answer tried; it pays at later turns")
                return True
        return False

    def check_empty(self, team: str, n: int, empty: list, got: list, top: float | None, scores: list) -> None:
        """An all-empty joint answer must not get the maximum: with reward_max, its normalized return
        stays below 1; without, its reward stays below the best of the answers scored before."""
        if top is not None:
            values = self.normalized(team, n, empty, got, top) or []
            paid = [k for k, v in enumerate(values) if v is not None and v >= 1 - TOLERANCE]
            if paid:
                k = paid[0]
                self.problem(f"the reward pays an all-empty answer of a {team} the maximum: normalized return "
                             f"{values[k]!r} on {len(paid)} of {len(empty)} items, the first "
                             f"{_where(*self.pool[empty[k][0]])} (reward {got[k]!r})")
            return
        others, floor = [s for s in scores if _finite(s)], [s for s in got if _finite(s)]
        if others and floor and min(floor) >= max(others):
            self.problem(f"the reward pays an all-empty answer of a {team} as much as any answer tried: "
                         f"{min(floor)!r} or more, the best of {len(others)} random and item-built answers "
                         f"{max(others)!r} (the task has no reward_max)")

    def check_individual(self, team: str, n: int, batch: list, scores: list) -> None:
        rows = self.attempt(f"individual_rewards(scores, {n})",
                            lambda: self.task.individual_rewards(_as_scores(scores), n),
                            " (the task has splits_reward)")
        if rows is RAISED:
            return
        rows = rows.tolist() if hasattr(rows, "tolist") else rows       # an array or a tensor
        if not isinstance(rows, Sequence) or len(rows) != len(scores):
            self.problem(f"individual_rewards(scores, {n}) returned "
                         f"{len(rows) if isinstance(rows, Sequence) else type(rows).__name__} rows for "
                         f"{len(scores)} joint rewards")
            return
        shape = [k for k, r in enumerate(rows) if not isinstance(r, Sequence) or len(r) != n]
        if shape:
            r = rows[shape[0]]
            self.problem(f"individual_rewards(scores, {n}) gives {len(shape)} of {len(rows)} rows a length other "
                         f"than {n}: row {shape[0]} has {len(r) if isinstance(r, Sequence) else repr(r)}")
            return
        bad = [k for k, r in enumerate(rows) if not all(_finite(x) for x in r)]
        if bad:
            self.problem(f"individual_rewards(scores, {n}) has values that are not finite floats in {len(bad)} of "
                         f"{len(rows)} rows: row {bad[0]} = {list(rows[bad[0]])!r}")
            return
        off = [k for k, (r, s) in enumerate(zip(rows, scores))
               if _finite(s) and not math.isclose(sum(map(float, r)), float(s), rel_tol=TOLERANCE, abs_tol=TOLERANCE)]
        if off:
            k = off[0]
            self.problem(f"individual_rewards(scores, {n}) rows do not sum to the joint reward for {len(off)} of "
                         f"{len(rows)} answers: {self.describe(batch, k)} sums to {sum(map(float, rows[k]))!r}, "
                         f"the joint reward is {scores[k]!r}")

    def check_symmetries(self, team: str, n: int, batch: list, prompts: list) -> None:
        """Each declared symmetry leaves the reward as it is: the answers above and answers written
        in its own symbols, scored as they are and with a random permutation of the symbols applied
        to every agent's answer and prompt alike (where it acts), get the same rewards."""
        declared = self.attempt("symmetries()", lambda: tuple(self.task.symmetries()))
        if declared is RAISED:
            return
        bad = [s for s in declared if not isinstance(s, Symmetry)]
        if bad:
            self.problem(f"symmetries() returned {type(bad[0]).__name__} {bad[0]!r}, not a Symmetry "
                         f"(magrpo.tasks.symmetry)")
            return
        for sym in declared:
            rng = random.Random(f"{self.seed}/{n}/{sym.name}")
            own = [(rng.randrange(len(self.pool)), [f"symbols of {sym.name!r}"] * n,
                    [" ".join(rng.choice(sym.symbols) for _ in range(rng.randint(1, 3))) for _ in range(n)])
                   for _ in range(self.num_answers)]
            tried = [*batch, *own]
            before, lines = self.try_score(team, tried, prompts, "answers")
            if before is None or lines:
                continue            # the reward's own problems are reported above
            for _ in range(3):
                perm = sym.draw(rng)
                moved = [(p, kinds, [self.task.relabel(t, sym, perm, "answer", a) if sym.acts("answer") else t
                                     for a, t in enumerate(ans)]) for p, kinds, ans in tried]
                moved_prompts = [None if row is None else
                                 [self.task.relabel(t, sym, perm, "prompt", a) if sym.acts("prompt") else t
                                  for a, t in enumerate(row)] for row in prompts]
                after, lines = self.try_score(team, moved, moved_prompts, "relabelled answers")
                if after is None:
                    self.problem(lines[0] if lines else f"reward of relabelled answers failed for a {team}")
                    return
                differ = [k for k, (x, y) in enumerate(zip(before, after)) if not math.isclose(x, y, rel_tol=1e-9,
                                                                                               abs_tol=1e-12)]
                if differ:
                    k = differ[0]
                    shown = ", ".join(f"{a}->{b}" for a, b in zip(sym.symbols, perm) if a != b)
                    self.problem(f"symmetry {sym.name!r} changes the reward for a {team}: relabelled ({shown}), "
                                 f"{self.describe(tried, k)} scored {after[k]!r} instead of {before[k]!r} "
                                 f"({len(differ)} of {len(tried)} answers differ)")
                    return

    def check_metrics(self, team: str, batch: list, scores: list) -> None:
        items = copy.deepcopy(self.items_of(batch))
        try:
            got = self.task.metrics(items, [list(a) for _, _, a in batch], _as_scores(scores))
        except NotImplementedError:
            return
        except Exception as e:
            self.problem(f"metrics({len(batch)} answers of a {team}) raised {_exc(e)}")
            return
        if not isinstance(got, Mapping):
            self.problem(f"metrics({len(batch)} answers of a {team}) returned {type(got).__name__}, "
                         f"not a dict of floats")
            return
        bad = [f"{k!r}: {v!r}" for k, v in got.items() if not isinstance(k, str) or not _finite(v)]
        if bad:
            self.problem(f"metrics({len(batch)} answers of a {team}) has {len(bad)} entries that are not "
                         f"a name and a finite float: {_more(bad, len(bad))}")


def _count(got: Any) -> str:
    return f"{len(got)} prompt(s)" if isinstance(got, Sequence) and not isinstance(got, str) else repr(got)


def _bad_prompts(got: Any, n: int) -> str | None:
    """Why `got` is not `n` non-empty prompt strings, or None."""
    if isinstance(got, str) or not isinstance(got, Sequence):
        return f"returned a {type(got).__name__}, not a list of {n} strings"
    if len(got) != n:
        return f"returned {len(got)} prompt(s); a team of {n} needs {n}"
    wrong = [i for i, p in enumerate(got) if not isinstance(p, str)]
    if wrong:
        return f"returned a {type(got[wrong[0]]).__name__} as agent {wrong[0] + 1}'s prompt, not a string"
    empty = [i for i, p in enumerate(got) if not p.strip()]
    if empty:
        return f"returned an empty prompt for agent(s) {', '.join(str(i + 1) for i in empty)}"
    return None


def _item_texts(item: Item) -> list[tuple[str, str]]:
    """(key, text) of each of an item's text and number fields but the id: the answers built from
    it (a reference, a gold answer, a canonical solution, the source text...)."""
    return [(k, str(v)) for k, v in item.items() if k != "id" and isinstance(v, (str, int, float))
            and not isinstance(v, bool) and str(v).strip()]


def check_task(task: type[Task] | Task | str, *, cfg: Mapping[str, object] | None = None,
               reward_cfg: Mapping[str, object] | None = None,
               splits: Sequence[str] = ("train", "eval"), num_items: int = 8, num_answers: int = 16,
               seed: int = 0) -> TaskCheck:
    """Check that `task` keeps the Task contract; return a TaskCheck (`.problems`, `.notes`, `.ok`,
    `.raise_if_failed()`).

    `task`: a Task subclass (built from its `config_schema`/`reward_schema` defaults), a Task
    instance (checked as it is), or a registered name (its class, with the keys of the task's own
    conf/task/NAME.yaml and conf/reward/NAME.yaml over the schema defaults: what `task=NAME` runs).
    `cfg` / `reward_cfg`: keys merged over those defaults (a dict or an OmegaConf node), e.g.
    `cfg={"num_train": 4}`; for a class or a name only. The nodes are checked as a run checks them.

    The checks, each problem one line naming what is wrong and where (split, item id, team size):

    * every split of `splits` loads to a non-empty list of dicts, each with a hashable "id",
      unique within the split; the first `num_items` good items of each split feed the checks below;
    * `accepted_counts()` is a non-empty tuple of sizes >= 1 that holds `num_agents`; `prompts(item,
      n)` gives n non-empty strings for every accepted n and every item, and raises for a size the
      task does not accept (0, one above the largest, any gap);
    * for every accepted n, `num_answers` random joint answers on random items (each agent's text
      drawn from a `seed`ed RNG: empty, a few random words, long random text, or its own prompt
      echoed back) and up to `num_answers` answers built from the items (every agent writes one
      of the item's own text or number fields: its reference, gold answer, canonical solution...):
      `assemble` gives a string; `score` gives Scores (or a list) with one finite float per joint
      answer and every component aligned and finite, and the same again for the same inputs;
    * the reward follows `reward.shift` and `reward.scale` (total = raw * scale + shift, which
      normalized returns and tables undo): the task built again with shift=0.5, scale=2 scores the
      same answers raw * 2 + 0.5 (a task whose reward varies by itself is not asked);
    * where `reward_max(n)` is a positive number: `normalized_return` of every reward is in [0, 1];
    * the answers above and an all-empty joint answer per item, at every team size, do not all get
      the same reward (a constant reward teaches nothing: one line naming the value);
    * an all-empty joint answer (one per item) is never paid the maximum: with `reward_max`, its
      normalized return is below 1; without one, its reward is below the best reward of the
      answers above (a reward that pays nothing more than silence teaches nothing);
    * a task with `splits_reward`: `individual_rewards(scores, n)` gives one row of n finite
      floats per joint answer, summing to its joint reward (for teams of 2 and more; the
      single-model form writes the whole team's answer and is not split);
    * `metrics` gives a dict of finite floats (a NotImplementedError means it has none);
    * every symmetry the task declares (`symmetries()`, magrpo.tasks.symmetry) leaves the reward as
      it is: the answers above and answers written in its symbols get the same rewards with a
      random permutation of the symbols applied to every agent's answer and prompt (where it acts).

    An exception the task raises becomes a problem line ("load('eval') raised ..."), and the
    checks go on where they can. Raises only for a bad call: an unknown name (RegistryError), or
    something that is not a task (TypeError).
    """
    if num_items < 1 or num_answers < 1:
        raise ValueError(f"check_task: num_items={num_items} and num_answers={num_answers} must be >= 1")
    name, instance, why = _build(task, cfg, reward_cfg)
    report = TaskCheck(name)
    if instance is None:
        report.problems.append(why if why is not None else "the task could not be built")
        report.notes.append("the task could not be built: nothing else was checked")
        return report
    _Checker(instance, report, splits, num_items, num_answers, seed).run()
    return report
