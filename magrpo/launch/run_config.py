"""A trained run's config, taken up by `magrpo-eval checkpoint=RUN` and `magrpo-train resume=RUN`.

Every run magrpo-train starts keeps the overrides it was composed with in `RUN/.hydra/overrides.yaml`
(Hydra writes it). Given `checkpoint=` or `resume=` on the command line, the entry point composes
again (`inherit_argv`, before Hydra reads the command line): the run's overrides first, then the
command line's. What is taken from the run:

  * magrpo-eval: what shapes the team, the keys under `task`, `reward`, `agents`, `algo`,
    `feedback`, `experiment` and `scale` (task and data, models, share_policy/share_base and
    per-agent settings, algorithm and form, topology, branching, turns, sampling, feedback);
    not the run's seed, hardware, logger, eval settings or `debug`: those are the evaluation's own;
  * a resume: every override but the new invocation's own (`hydra.*`, `output_dir`, `resume`)
    and `hparams_search` (a sweeper recipe, which would turn the resume into a sweep).

A key given on the command line wins over the run's. A group picked there (`task=arxiv`) also drops
the run's keys under it (`task.data.*`), and a task picked there drops the run's `reward` choice and
keys (the reward follows the task). Hydra then writes the overrides actually used into the new run's
`.hydra/overrides.yaml`, so a resumed run is itself a run to take up, and its directory is named
after the task it trains or evaluates.

`from_run` (called by the job) describes what happened for summary.json and eval.json: the run
directory, the keys inherited and each key the command line overrode with both values. A run
directory without `.hydra/overrides.yaml` (one started from Python with `magrpo.cli.train.run`, or whose
`.hydra/` was removed) has nothing to take up: the command line must then give the team itself, and
it is refused, naming the keys, where the checkpoint's `config.json` says the team was trained
otherwise (task, algorithm, topology, turns, feedback, team size and level).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from magrpo.config.schemas import CONF_DIR
from magrpo.core import checkpoint, received, records, signatures
from magrpo.core.checkpoint import CALLER_KEYS, OVERRIDES_FILE, is_team_dir
from magrpo.core.overrides import check_saved_line, override_key
from magrpo.core.overrides import parse_override as _parse
from magrpo.core.plugins import conf_dirs
from magrpo.core.records import RecordError
from magrpo.core.schema import ConfigError
from magrpo.models import hub

log = logging.getLogger("magrpo")

SAVED = Path(".hydra") / "overrides.yaml"
# config name -> the keys naming a run: magrpo-eval's team= names an exported team (magrpo.team.team), which
# keeps the run's overrides in its overrides.yaml.
RUN_KEYS = {"train": ("resume",), "eval": ("checkpoint", "team")}
# magrpo-eval takes these from the run (the roots of the overrides that shape the team).
EVAL_INHERITS = ("task", "reward", "agents", "algo", "feedback", "experiment", "scale", "plugins")
# Never taken from a run: the new invocation's own keys, and a sweeper recipe.
NEVER = ("hydra", "output_dir", "resume", "checkpoint", "team", "hparams_search")
# A group picked on the command line also drops the run's choice and keys of these.
FOLLOWS = {"task": ("reward",)}
# Checked against the checkpoint's config.json when the run has no saved overrides to take up.
SHAPE_KEYS = ("task.name", "algo.name", "algo.topology", "algo.num_turns", "feedback.mode", "agents.num_agents",
              "agents.share_policy", "agents.share_base")

_ROOT_RE = re.compile(r"[./@\[]")
MAX_SAVED_LINES = 1000          # a run's saved overrides: what a real command line could hold
MAX_SAVED_BYTES = 256 << 10


# -- overrides as text ------------------------------------------------------------------------------


def override_value(line: str) -> Any:
    """The value an override gives, as Hydra reads it (quotes removed, lists as lists); a sweep
    as written; a deletion (`~key`) None."""
    try:
        o = _parse(line)
    except Exception:
        return line.partition("=")[2]
    if o.is_sweep_override():
        return line.partition("=")[2]
    return None if o.is_delete() else o.value()


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith((prefix + ".", prefix + "/", prefix + "["))


def _root(key: str) -> str:
    return _ROOT_RE.split(key, 1)[0]


def in_scope(kind: str, key: str) -> bool:
    """Whether `key` is taken from the run by `kind` (train: a resume; eval: magrpo-eval)."""
    root = _root(key)
    return root not in NEVER and (kind == "train" or root in EVAL_INHERITS)


def merge(run: list[str], given: list[str]) -> tuple[list[str], dict[str, str]]:
    """The run's overrides the command line (`given`) leaves standing, and, for each it drops, the
    command-line override that replaced it. Hydra applies the kept ones first, then `given`."""
    replacing: list[tuple[str, str]] = []
    for g in given:
        key = override_key(g)
        replacing.append((key, g))
        replacing += [(follower, g) for follower in FOLLOWS.get(key, ())]
    kept, dropped = [], {}
    for r in run:
        k = override_key(r)
        by = next((g for key, g in replacing if key == k), None) or \
            next((g for key, g in replacing if _under(k, key)), None)
        if by is None:
            kept.append(r)
        else:
            dropped[r] = by
    return kept, dropped


# -- the run a checkpoint belongs to ---------------------------------------------------------------


def _saved_file(run_dir: Path) -> Path:
    """Where a run directory keeps its overrides: `.hydra/overrides.yaml`, or an exported team's
    `overrides.yaml` (magrpo.team.team)."""
    return run_dir / OVERRIDES_FILE if is_team_dir(run_dir) else run_dir / SAVED


def run_dir_of(path: str | Path) -> Path | None:
    """The run directory holding `.hydra/overrides.yaml` that `path` names: the path itself (a run
    directory, or an exported team with its overrides.yaml), or the run a checkpoint
    `RUN/checkpoints/step_N` (or `RUN/checkpoints`) belongs to; None when there is none."""
    p = Path(str(path)).expanduser()
    candidates = [p]
    if p.name == "checkpoints":
        candidates.append(p.parent)
    if p.parent.name == "checkpoints":
        candidates.append(p.parent.parent)
    return next((c for c in candidates if _saved_file(c).is_file()), None)


def saved_overrides(run_dir: Path) -> list[str]:
    """The overrides a run (or an exported team) was composed with, each checked (`check_saved_line`)."""
    f = _saved_file(Path(run_dir))
    try:
        lines = records.load_yaml(f, MAX_SAVED_BYTES) or []
    except RecordError as e:
        raise RecordError(f"cannot read the run's saved overrides: {e}") from None
    if not isinstance(lines, list):
        raise ConfigError(f"{f}: not a list of overrides (key=value lines), so the run's config cannot be taken up")
    if len(lines) > MAX_SAVED_LINES:
        raise ConfigError(f"{f}: {len(lines)} saved overrides; a run's record holds at most {MAX_SAVED_LINES}")
    return [check_saved_line(line, f) for line in lines]


def caller_only(line: str) -> bool:
    """Whether a saved override sets a key only the caller may set (trust_remote_code,
    trust_plugins): a run, a checkpoint or a team never opts in to running code on the user's behalf."""
    if re.split(r"[./\[\]]", override_key(line))[-1] in CALLER_KEYS:
        return True
    value = line.partition("=")[2]
    if any(re.search(rf"\b{k}['\"]?\s*:", value) for k in CALLER_KEYS):   # inside a value: [{..., trust_remote_code: true}]
        raise ConfigError(f"the saved override {line[:200]!r} sets {'/'.join(CALLER_KEYS)} inside its value; only "
                          f"your own command line may set it, so the run's config is not taken up")
    return False


_PATH_UP = re.compile(r"(^|[/\\])\.\.([/\\]|$)")


def check_inheritable(line: str, where: Path | str) -> None:
    """A saved override that could make the command compose config from outside conf/ is refused,
    naming the file: one placing config under `hydra` (callbacks, launcher, search path), and a
    group option given as a path that climbs (`experiment=../../x`) or starts at the root."""
    target, _, value = line.lstrip("+~").partition("=")
    key, _, package = target.partition("@")
    if "hydra" in re.split(r"[./]", package.strip()):
        raise ConfigError(f"{where}: the saved override {line[:200]!r} places config under hydra (Hydra's own "
                          f"settings: callbacks, launcher, search path); a run's saved overrides never steer the "
                          f"command that takes them up")
    if _is_group(key.strip()) and (_PATH_UP.search(value) or value.strip().startswith(("/", "\\"))):
        raise ConfigError(f"{where}: the saved override {line[:200]!r} names a config by a path outside the "
                          f"config directories; a run's saved overrides pick options by name")
    if key.strip() in NAME_KEYS and not _PLAIN_NAME.fullmatch(value.strip().strip("'\"")):
        raise ConfigError(f"{where}: the saved override {line[:200]!r} gives {key.strip()} a value that is not a "
                          f"plain name (letters, digits, _ . + -): it names run directories, so a saved one never "
                          f"holds a path")


# Keys whose values name run directories (conf/train.yaml, conf/eval.yaml hydra.run.dir) or files.
NAME_KEYS = ("task.name", "algo.name", "feedback.mode", "label", "seed", "reward.name")
_PLAIN_NAME = re.compile(r"(?!\.)(?!.*\.\.)[\w.+-]{0,200}")


def _is_group(key: str) -> bool:
    """Whether an override's key picks an option of a config group (`task`, `method/task/agree`)
    rather than setting a value."""
    if not key or "." in key or "[" in key:
        return False
    return "/" in key or any((Path(d) / key).is_dir() for d in [CONF_DIR, *conf_dirs()])


def inheritable(kind: str, run_dir: Path) -> list[str]:
    """The saved overrides of `run_dir` that `kind` takes up: never a caller-only key, never an
    interpolation (refused), and of a run or team you did not make, no key that chooses where data
    goes or what is read (skipped, each in one line: magrpo.core.received.taken_lines)."""
    lines = []
    where = _saved_file(Path(run_dir))
    for line in saved_overrides(run_dir):
        check_inheritable(line, where)
        if caller_only(line):
            log.warning("%s: not taken up: %s (only your own command line or call may trust code: shipped with "
                        "a model, or named by a run)", where, line)
        elif in_scope(kind, override_key(line)):
            lines.append(line)
    return received.taken_lines(signatures.trust_root(run_dir), lines, str(where), options=option_keys)


def option_keys(group: str, option: str, depth: int = 0) -> dict:
    """What picking `group=option` sets, as config data from the top: the option's own YAML (in conf/
    or a plugin's config directory) and the options its defaults list picks in turn, read as data
    (the schema nodes under `/schema/` hold the dataclasses' defaults and are left out). A pick
    from a record you did not make is taken up only when this sets no reach key (magrpo.core.key_classes)."""
    if depth > 8 or not option or not _PLAIN_NAME.fullmatch(option.replace("/", "_")):
        return {}
    for d in [CONF_DIR, *conf_dirs()]:
        f = Path(d) / group / f"{option}.yaml"
        if f.is_file():
            break
    else:
        return {}
    try:
        text = records.read_text(f)
        node = records.parse_yaml(text, str(f)) or {}
    except RecordError:
        return {}
    if not isinstance(node, dict):
        return {}
    out: dict = {}
    for entry in node.pop("defaults", None) or []:
        pick = entry if isinstance(entry, str) else next(iter(entry.items()), None) if isinstance(entry, dict) else None
        if isinstance(pick, tuple):
            target, choice = pick
            target = str(target).removeprefix("override ").removeprefix("optional ").strip().lstrip("/")
            target = target.partition("@")[0]
            if not target.startswith("schema") and isinstance(choice, str) and "${" not in choice:
                _merge(out, option_keys(target, choice, depth + 1))
    packaged = "# @package _global_" in text.splitlines()[0] if text.strip() else False
    if packaged:
        _merge(out, node)
    else:
        here = out
        for part in group.split("/"):
            here = here.setdefault(part, {})
        _merge(here, node)
    return out


def _merge(into: dict, more: dict) -> None:
    for k, v in more.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


# -- the command line --------------------------------------------------------------------------------


def inherit_argv(config_name: str, argv: list[str]) -> tuple[list[str], dict[str, Any] | None]:
    """`argv` with the run's overrides put before the command line's, when it names a run by
    `checkpoint=` (magrpo-eval) or `resume=` (magrpo-train) whose directory saved its overrides;
    otherwise `argv` unchanged (a path that does not exist is reported by the run's own checks).
    Also what the job needs to describe it (`from_run`): per run directory, its overrides taken
    up and its values of the keys the command line gives, read now, before a resume in place has
    Hydra rewrite that directory's .hydra/.

    In a sweep over the key (`checkpoint=A,B`) every run named must have saved the same overrides
    to take up (checkpoints of one run, or runs differing only in keys not taken, like the seed
    for an evaluation); runs of different teams are refused."""
    kind = "eval" if config_name == "eval" else "train"
    try:
        given = list(get_args_parser().parse_args(argv).overrides or [])
    except (SystemExit, Exception):      # Hydra reports a bad command line itself
        return argv, None
    lines = [g for g in given if override_key(g) in RUN_KEYS[kind] and not g.startswith("~")]
    if not lines:
        return argv, None
    argv, given, lines = _fetch_hub_team(argv, given, lines)
    try:
        o = _parse(lines[-1])
    except Exception:
        return argv, None
    values = [str(v) for v in (o.sweep_string_iterator() if o.is_sweep_override() else [o.value()])
              if v not in (None, "", "null")]
    found: dict[str, tuple[Path | None, tuple[str, ...] | None]] = {}
    for v in values:
        if not Path(v).expanduser().exists():
            return argv, None
        run = run_dir_of(v)
        found[v] = (run, tuple(inheritable(kind, run)) if run is not None else None)
    if len({lines_ for _, lines_ in found.values()}) > 1:
        shown = "; ".join(f"{v}: {' '.join(r) if r is not None else '(no saved overrides)'}"
                          for v, (_, r) in found.items())
        raise ConfigError(f"{lines[-1]}: these runs were trained with different configs ({shown}); take up one "
                          f"run per command, or give every key of the team on the command line")
    runs = {run: list(run_lines) for run, run_lines in found.values() if run is not None and run_lines is not None}
    if not runs:
        return argv, None
    run_lines = next(iter(runs.values()))
    asked = [override_key(g) for g in given if in_scope(kind, override_key(g))]
    taken = {str(run): {"lines": run_lines, "values": {k: _saved_value(run, k) for k in asked}} for run in runs}
    kept, _ = merge(run_lines, given)
    at = argv.index(given[0])
    return [*argv[:at], *kept, *argv[at:]], taken


def _fetch_hub_team(argv: list[str], given: list[str], lines: list[str]) -> tuple[list[str], list[str], list[str]]:
    """`team=owner/name` (a hub repo, not a local path): download it once (offline: the cached
    copy) and name its local directory instead, so the team is taken up like a local one."""
    last = lines[-1]
    if override_key(last) != "team":
        return argv, given, lines
    value = str(override_value(last) or "")
    if not value or Path(value).expanduser().exists() or not hub.is_repo_id(value):
        return argv, given, lines
    from magrpo.team.checks import local_team  # noqa: PLC0415  start-up: torch loads only where a model does; the schemas are read without it

    local = f"team={local_team(value)}"
    swap = {last: local}
    return [swap.get(a, a) for a in argv], [swap.get(g, g) for g in given], [swap.get(x, x) for x in lines]


# -- the runs a command line names, and the code it names itself -----------------------------------------


def named_runs(config_name: str, argv: list[str]) -> list[Path]:
    """The existing paths a command line names with `resume=` (train) or `checkpoint=`/`team=`
    (eval), each value of a sweep over them."""
    kind = "eval" if config_name == "eval" else "train"
    out = []
    for arg in argv:
        if arg.startswith("~") or override_key(arg) not in RUN_KEYS[kind]:
            continue
        try:
            o = _parse(arg)
        except Exception:
            continue
        for v in (o.sweep_string_iterator() if o.is_sweep_override() else [o.value()]):
            if v not in (None, "", "null") and Path(str(v)).expanduser().exists():   # a file too: its run is taken up
                out.append(Path(str(v)).expanduser())
    return out


def dirs_in_argv(argv: list[str]) -> list[Path]:
    """The existing directories a command line names with `partners=` or `diversity=` (the Fictitious
    Co-Play partners and a population's earlier members)."""
    out = []
    for arg in argv:
        if arg.startswith("~") or "=" not in arg or override_key(arg) not in ("partners", "diversity"):
            continue
        value = override_value(arg)
        for v in value if isinstance(value, list) else [value]:
            if v not in (None, "") and Path(str(v)).expanduser().exists():
                out.append(Path(str(v)).expanduser())
    return out


def reward_modules_in_argv(argv: list[str]) -> list[str]:
    """The modules a command line's `reward.fn=module:function` / `reward.fns=[...]` name."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("~") or "=" not in arg or override_key(arg) not in ("reward.fn", "reward.fns"):
            continue
        value = override_value(arg)
        out += [str(v).partition(":")[0] for v in (value if isinstance(value, list) else [value])
                if v is not None and ":" in str(v)]
    return out


def caller_keys_in_argv(argv: list[str]) -> set[str]:
    """The caller-only keys (trust_remote_code, sandbox isolation...) a command line sets anywhere
    itself: only the user's own command line may."""
    said = set()
    for a in argv:
        if a.startswith("~") or "=" not in a:
            continue
        key, _, value = a.partition("=")
        leaf = re.split(r"[./\[\]@]", override_key(key))[-1] if key else ""
        said |= {k for k in CALLER_KEYS if leaf == k or re.search(rf"\b{k}['\"]?\s*:", value)}
    return said


def trust_plugins_in_argv(argv: list[str]) -> bool:
    """Whether a command line says `trust_plugins=true` (magrpo.core.trust): only the user's own says so."""
    said = [override_value(a) for a in argv if "=" in a and not a.startswith("~") and override_key(a) == "trust_plugins"]
    return bool(said) and said[-1] is True


# -- inside the job: what was taken, and the runs with nothing to take ------------------------------


def _job_overrides() -> list[str] | None:
    if not HydraConfig.initialized():
        return None
    return list(HydraConfig.get().overrides.task)


def _saved_value(run_dir: Path, key: str) -> Any:
    """The value `key` had in the run: the option of a group (.hydra/hydra.yaml), else the key's
    value in its composed config (.hydra/config.yaml; an interpolation as written). Of an exported
    team, the key's value in its resolved config (team.json)."""
    if is_team_dir(run_dir):
        return records.select(_team_config(run_dir), key)
    try:
        hydra = records.load_yaml(run_dir / ".hydra" / "hydra.yaml")
        choices = records.select(hydra, "hydra.runtime.choices")
        if isinstance(choices, dict) and key in choices:
            return choices[key]
        cfg = records.resolve_own_refs(records.load_yaml(run_dir / ".hydra" / "config.yaml"))
    except RecordError:
        return None
    return records.select(cfg, key)


def from_run(cfg: DictConfig, kind: str, taken: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """For a job started from the command line with `resume=`/`checkpoint=`: the record of what it
    took from the run (None otherwise). `taken`: what inherit_argv read from the runs before Hydra
    started (a resume in place has Hydra rewrite the run's .hydra/ before the job); without it the
    run's files are read now. A run without saved overrides: nothing was taken, and the command
    line is checked against the checkpoint's config (module docstring)."""
    key = next((k for k in RUN_KEYS[kind] if OmegaConf.select(cfg, k)), RUN_KEYS[kind][0])
    value = OmegaConf.select(cfg, key)
    job = _job_overrides()
    if not value or job is None:
        return None
    run = run_dir_of(value)
    if run is None:
        _check_unsaved(cfg, kind, value, job)
        return {"run_dir": None, "saved_overrides": None, "inherited": {}, "overridden": {}}
    stash = (taken or {}).get(str(run), {})
    run_lines = stash.get("lines", None)
    run_lines = inheritable(kind, run) if run_lines is None else run_lines
    last = {override_key(g): override_value(g) for g in job}       # the job's overrides: the run's it kept,
    same = [r for r in run_lines                                    # then the command line's
            if override_key(r) in last and last[override_key(r)] == override_value(r)]
    inherited = {override_key(r): override_value(r) for r in same}
    given = [g for g in job if inherited.get(override_key(g), object()) != override_value(g)]
    overridden: dict[str, dict[str, Any]] = {}
    _, dropped = merge([r for r in run_lines if r not in same], given)
    for r, by in dropped.items():
        k, was = override_key(r), override_value(r)
        if override_key(by) == k:
            overridden[k] = {"run": was, "given": override_value(by)}
        else:
            overridden[k] = {"run": was, "given": None, "dropped_by": by}
    run_keys = {override_key(r) for r in run_lines}
    for g in given:
        k = override_key(g)
        if k in run_keys or not in_scope(kind, k):
            continue
        before = stash["values"][k] if k in stash.get("values", {}) else _saved_value(run, k)
        now = override_value(g)
        if before != now:
            overridden[k] = {"run": before, "given": now}
    record = {"run_dir": str(run), "saved_overrides": str(_saved_file(run)), "inherited": inherited,
              "overridden": overridden}
    changes = [f"{k} ({v['run']!r} -> {v['given']!r})" if "dropped_by" not in v else f"{k} (dropped by {v['dropped_by']})"
               for k, v in overridden.items()]
    log.info("%s=%s: took up the run's %s%s", key, value,
             " ".join(f"{k}={v}" for k, v in inherited.items()) or "config (the run gave no override that this takes up)",
             "; the command line overrides " + ", ".join(changes) if changes else "")
    return record


def _check_unsaved(cfg: DictConfig, kind: str, value: Any, job: list[str]) -> None:
    """A run with no saved overrides: its team is what the command line says. Refuse when the
    checkpoint's config.json says the team was trained otherwise in a key the command line leaves
    at its default."""
    key = next((k for k in RUN_KEYS[kind] if OmegaConf.select(cfg, k)), RUN_KEYS[kind][0])
    if key == "team" or is_team_dir(value):        # team= names no run: read_team refuses what is no team
        stored = _team_config(Path(str(value)).expanduser())
    else:
        ckpt = checkpoint.resolve(value, key)        # a bad path is refused here as it would be later
        stored = checkpoint.stored_config(ckpt)
    given = [override_key(g) for g in job]
    diffs = []
    for k in SHAPE_KEYS:
        if any(_under(k, g) for g in given):
            continue
        was = OmegaConf.select(OmegaConf.create(stored), k, default=None, throw_on_resolution_failure=False)
        now = OmegaConf.select(cfg, k, default=None, throw_on_resolution_failure=False)
        if was is not None and now is not None and was != now:
            diffs.append(f"{k}={was!r} (this command line: {now!r})")
    if diffs:
        where = Path(str(value)).expanduser()
        where = where.parent.parent if where.parent.name == "checkpoints" else where
        raise ConfigError(f"{key}={str(value)!r}: {where} has no saved config ({SAVED}, which magrpo-train writes "
                          f"into every run directory), so the run's config cannot be taken up, and its checkpoint "
                          f"was trained with {', '.join(diffs)}; give the overrides the training run used")


def _team_config(team_dir: Path) -> dict:
    from magrpo.team.checks import read_team  # noqa: PLC0415  start-up: torch loads only where a model does; the schemas are read without it

    return read_team(Path(team_dir))["config"]
