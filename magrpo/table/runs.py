"""Reading runs for `magrpo-table`: finding run directories, loading each one's summary, config
and curves, splitting multi-method eval runs, and rebuilding a run's task from its saved config.

Nothing here formats a table: the layouts (generic.py, paper.py) take the `Run`s this returns.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from magrpo.config.groups import RewardConfig, TaskConfig
from magrpo.config.schemas import typed_node
from magrpo.core import received, records, trust
from magrpo.core.instances import instance
from magrpo.core.schema import ConfigError
from magrpo.core.tracking import effective_status
from magrpo.launch.sweep import natural_key
from magrpo.tasks import TASKS, available_tasks, build_task, reward_schema_of

PROG = "magrpo-table"

# Directories that never contain runs of their own; skipping them keeps the walk fast.
PRUNE_DIRS = {"checkpoints", "wandb", ".hydra", "__pycache__", ".superseded"}   # .superseded: magrpo-paper's set-aside jobs


class TableError(Exception):
    """A problem with the user's input: reported on stderr as one line, exit code 2."""


def warn(msg: str) -> None:
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


@dataclass
class Run:
    path: Path
    status: str
    task: str
    algo: str
    seed: Any
    final: dict[str, float]                      # final-eval metric -> value (unprefixed)
    initial: dict[str, float]
    summary_config: dict[str, Any]               # the summary's `config` block
    hydra_config: dict[str, Any] | None          # flattened `.hydra/config.yaml` (dotted keys), if present
    curves: dict[str, dict[int, float]] = field(default_factory=dict)   # "eval/reward_mean" -> {step: value}
    job_type: str = "train"                      # "eval": a magrpo-eval run (untrained or a checkpoint)
    results: dict[str, dict[str, float]] = field(default_factory=dict)  # eval runs: method -> metrics
    reason: str = ""                             # why a failed run failed (summary.json)

    @property
    def label(self) -> str:
        """The method's name for the paper layout: the config's `label`, else the algo (or eval method)."""
        found, value = self.lookup("label")
        return str(value) if found and value else self.algo

    def config(self, use_hydra: bool) -> dict[str, Any]:
        return self.hydra_config if use_hydra and self.hydra_config is not None else self.summary_config

    def lookup(self, key: str) -> tuple[bool, Any]:
        """A dotted config key: the Hydra config first, then the summary's short names (`advantage`)."""
        for source in (self.hydra_config or {}, self.summary_config):
            if key in source:
                return True, source[key]
        if key == "algo":
            return True, self.algo
        if key == "task":
            return True, self.task
        return False, None


def walk(top: Path, skip: Iterable[Path] = ()) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk of `top` without PRUNE_DIRS, the directories `skip` names and symlinked directories.
    The caller sees each directory's full listing; the pruning happens when it asks for the next."""
    skip_real = {os.path.realpath(p) for p in skip}
    for root, subdirs, files in os.walk(top):
        yield root, subdirs, files
        subdirs[:] = [d for d in subdirs if d not in PRUNE_DIRS
                      and os.path.realpath(os.path.join(root, d)) not in skip_real]


def find_runs(dirs: Iterable[Path], skip: Iterable[Path] = ()) -> list[Path]:
    """Every directory holding a summary.json under `dirs` (each dir itself included), once each."""
    found: dict[str, Path] = {}
    for top in dirs:
        hits = [Path(root) for root, _, files in walk(top, skip) if "summary.json" in files]
        for path in sorted(hits, key=lambda p: natural_key(str(p))):
            found.setdefault(os.path.realpath(path), path)   # overlapping DIRs must not double-count
    return list(found.values())


def symlinked_dirs(dirs: Iterable[Path]) -> list[Path]:
    """The symlinks to directories under `dirs`, which `find_runs` does not follow (a run someone
    sent may link anywhere, a loop included)."""
    links = [Path(root, d) for top in dirs for root, subdirs, _ in walk(top)
             for d in subdirs if os.path.islink(os.path.join(root, d))]
    return sorted(links, key=lambda p: natural_key(str(p)))


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/lists -> {"a.b.0.c": leaf}; empty containers are kept as leaves."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(node, list) and node:
        out = {}
        for i, v in enumerate(node):
            out.update(flatten(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: _hashable(node)}


def check_regular(path: Path, limit: int | None = None) -> None:
    """Refuse (OSError) a file a run directory holds that is not a regular file, or is larger than
    `limit` bytes: a FIFO or a device under a file's name (someone else's run directory) would block
    the read or never end it."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a regular file")
    if limit is not None and st.st_size > limit:
        raise OSError(f"{path} is larger than {limit >> 20} MB")


def read_hydra_config(path: Path) -> dict[str, Any]:
    """`.hydra/config.yaml` flattened (the bounded reader: magrpo.core.records), with interpolations between
    its own keys resolved (`${algo.temperature}`); one that calls a resolver (`${oc.env:TOKEN}`,
    `${hydra:...}`), or leads to one, stays as written: a run's record never reads this machine's
    environment into a table."""
    return flatten(records.resolve_own_refs(records.load_yaml(path)))


def read_curves(path: Path) -> dict[str, dict[int, float]]:
    """metrics.jsonl -> metric -> {step: value}. A resumed run re-logs the steps after its checkpoint:
    the later line wins, as it is the one the final weights descend from."""
    curves: dict[str, dict[int, float]] = {}
    if not path.exists():
        return curves
    for row in records.iter_jsonl(path):      # a line cut short by a crash is skipped
        if not isinstance(row, dict):
            continue
        step = row.get("step")
        if not isinstance(step, (int, float)) or isinstance(step, bool) or not math.isfinite(step):
            continue
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                curves.setdefault(key, {})[int(step)] = float(value)
    return curves


def _numbers(d: Any) -> dict[str, float]:
    if not isinstance(d, dict):
        return {}
    return {k: float(v) for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def load_run(path: Path) -> Run:
    """One run directory. Raises TableError when its summary.json cannot be read."""
    try:
        summary = records.load_json(path / "summary.json")
    except ConfigError as e:
        raise TableError(f"cannot read {path / 'summary.json'}: {e}") from None
    if not isinstance(summary, dict):
        raise TableError(f"{path / 'summary.json'} is not a JSON object")
    scfg = summary.get("config") or {}
    if not isinstance(scfg, dict):
        raise TableError(f"{path / 'summary.json'}: its config is not a JSON object")
    summary_config = {k: _hashable(v) for k, v in scfg.items()}
    hydra_file = path / ".hydra" / "config.yaml"
    hydra_config = None
    if hydra_file.exists():
        try:
            hydra_config = read_hydra_config(hydra_file)
        except Exception as e:  # a hand-edited or truncated file: fall back to the summary's config
            warn(f"cannot read {hydra_file} ({e}); using the config in summary.json")
    hc = hydra_config or {}
    task = scfg.get("task", hc.get("task.name", "unknown"))
    algo = scfg.get("algo", hc.get("algo.name", "unknown"))
    seed = _hashable(scfg.get("seed", hc.get("seed")))     # a hand-edited [1] must not break the grouping
    final = _numbers(summary.get("final_eval"))
    try:
        curves = read_curves(path / "metrics.jsonl")
    except ConfigError as e:
        raise TableError(f"cannot read {path / 'metrics.jsonl'}: {e}") from None
    if not final:
        final = last_eval(curves, summary)

    given = summary.get("results")
    results = {str(m): _numbers(v) for m, v in given.items() if isinstance(v, dict)} if isinstance(given, dict) else {}
    # A run killed without a word (SIGKILL, power loss) still says "running": its pid or heartbeat tells.
    return Run(path=path, status=effective_status(summary), task=str(task), algo=str(algo), seed=seed,
               final=final, initial=_numbers(summary.get("initial_eval")), summary_config=summary_config,
               hydra_config=hydra_config, curves=curves, job_type=str(summary.get("job_type", "train")),
               results=results, reason=str(summary.get("reason") or ""))


def split_methods(run: Run) -> list[Run]:
    """An eval run that evaluated several methods -> one run per method (its `algo` and label)."""
    if len(run.results) <= 1:
        return [run]
    out = []
    for method, metrics in run.results.items():
        config = {**run.summary_config, "algo": method, "label": method}
        hydra = {**run.hydra_config, "methods": method, "label": method} if run.hydra_config is not None else None
        curves = {k: v for k, v in run.curves.items() if not k.startswith("eval/")}
        prefix = f"eval/{method}/"
        curves.update({"eval/" + k[len(prefix):]: v for k, v in run.curves.items() if k.startswith(prefix)})
        out.append(Run(path=run.path, status=run.status, task=run.task, algo=method, seed=run.seed, final=metrics,
                       initial={}, summary_config=config, hydra_config=hydra, curves=curves, job_type=run.job_type,
                       results={method: metrics}, reason=run.reason))
    return out


def find_unstarted(dirs: Iterable[Path], skip: Iterable[Path] = ()) -> list[Path]:
    """Job directories with a Hydra config but no summary.json: jobs that died before their first
    evaluation (a bad model path, data that cannot be loaded...) or that have not got there yet."""
    skip_real = {os.path.realpath(p) for p in skip}
    found = [Path(root) for top in dirs for root, subdirs, files in walk(top, skip)
             if ".hydra" in subdirs and "summary.json" not in files and os.path.realpath(root) not in skip_real]
    return sorted(found, key=lambda p: natural_key(str(p)))


def last_eval(curves: dict[str, dict[int, float]], summary: dict) -> dict[str, float]:
    """The latest evaluation of a run without a final one (only used with --include-unfinished)."""
    steps = curves.get("eval/reward_mean")
    if steps:
        last = max(steps)
        return {k[len("eval/"):]: v[last] for k, v in curves.items() if k.startswith("eval/") and last in v}
    evals = [e for e in summary.get("evals") or [] if isinstance(e, dict)]
    return _numbers(evals[-1]) if evals else {}


def collect(dirs: Sequence[Path], out: Path | None, include_unfinished: bool,
            exclude: Sequence[Path] = ()) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Finished (or all) runs under `dirs`, and the runs left out with the reason. Nothing under
    `out` or `exclude` (a sweep's tuning trials) is searched."""
    for d in dirs:
        if not d.exists():
            raise TableError(f"{d}: no such directory")
        if not d.is_dir():
            raise TableError(f"{d}: not a directory")
    skip_dirs = [*([out] if out else []), *exclude]
    paths = find_runs(dirs, skip=skip_dirs)
    if not paths:
        links = symlinked_dirs(dirs)
        hint = (f"; {len(links)} symlinked director{'y was' if len(links) == 1 else 'ies were'} not followed "
                f"({', '.join(map(str, links[:3]))}{', ...' if len(links) > 3 else ''}): pass the runs "
                "themselves as DIRs") if links else ""
        raise TableError(f"no runs found under {', '.join(map(str, dirs))} (looked for */summary.json){hint}")
    runs: list[Run] = []
    skipped: list[tuple[Path, str]] = []

    def skip(path: Path, reason: str) -> None:
        warn(f"skipping {path}: {reason}")
        skipped.append((path, reason))

    for path in paths:
        try:
            run = load_run(path)
        except TableError as e:
            skip(path, str(e))
            continue
        if run.status != "finished" and not include_unfinished:
            why = f": {run.reason.splitlines()[0]}" if run.reason else ""
            skip(path, f"status {run.status!r}{why} (pass --include-unfinished to include it)")
            continue
        if not run.final:
            skip(path, "no evaluation recorded yet")
            continue
        runs += split_methods(run)
    for path in find_unstarted(dirs, skip=skip_dirs):
        skip(path, "no summary.json: the job stopped before its first evaluation (see its log), or is starting")
    if not runs:
        raise TableError(f"no usable runs under {', '.join(map(str, dirs))} ({len(skipped)} skipped, "
                         "see warnings above)")
    return runs, skipped


# -- the run's task, for what its evaluation did not report ------------------------------------------


def run_task(run: Run):
    """The run's task (a `magrpo.tasks.Task`), rebuilt from the `task` and `reward` nodes of its
    `.hydra/config.yaml` over the task's schema defaults, so that its `reward_max` and reward
    composition are the ones the run trained with. A run without that file gets the defaults.
    None for a task this version does not know; TableError when the saved nodes no longer fit."""
    try:        # a plugin's task: the plugins the run recorded, when the trust rule allows them
        up = trust.take_up(run.path)
    except ConfigError as e:
        raise TableError(str(e)) from None
    if run.task not in available_tasks():
        return None
    cls = TASKS[run.task]
    saved: dict[str, Any] = {}
    file = run.path / ".hydra" / "config.yaml"
    try:
        if file.exists():
            cfg = records.resolve_own_refs(records.load_yaml(file))
            nodes = {node: cfg[node] for node in ("task", "reward") if isinstance(cfg, dict) and
                     isinstance(cfg.get(node), dict)}
            # its values as data (an interpolation left is refused); of a run you did not make, no key
            # that chooses what is read (a data path, a lexicon, a verifier model)
            saved = received.taken_config(up.root, nodes, str(file), own=up.own)
        reward = OmegaConf.create(saved.get("reward") or {})
        if (schema := reward_schema_of(cls)) is not None:
            reward = typed_node(reward, schema, "reward.")
        task = OmegaConf.create({**(saved.get("task") or {}), "name": run.task})
        if cls.config_schema is not None:
            task = typed_node(task, cls.config_schema, "task.")
        return build_task(instance(task, cls.config_schema or TaskConfig), instance(reward, schema or RewardConfig))
    except Exception as e:   # an older config whose keys the task no longer has, a bad value...
        raise TableError(f"cannot rebuild its {run.task} reward from {file}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def num_answers(run: Run) -> int:
    """How many strings one joint answer of the run had: 1 for the single-model form (the `single`
    baseline, and the algorithms that train one policy, grpo and ppo), else the number of agents.
    summary.json's `num_agents` says it (the policies that answered); older runs fall back on the
    algorithm's form, then the saved config's `agents.num_agents`, then the task's."""
    if run.algo == "single":
        return 1
    value = run.summary_config.get("num_agents")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    from magrpo.algos import ALGOS  # noqa: PLC0415  start-up: torch loads only where a model does; reading runs and tables needs the registry's names only here

    if getattr(ALGOS.get(run.algo), "form", None) == "single":
        return 1
    found, value = run.lookup("agents.num_agents")
    if found and isinstance(value, int) and not isinstance(value, bool):
        return value

    return TASKS[run.task].num_agents if run.task in available_tasks() else 2
