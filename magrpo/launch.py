"""What the command-line entry points share: where the configs live, a unique stamp for run
directory names, how a failure is reported, and how a multirun survives its jobs.

Failures, by kind (README, "When a run fails"):
  * a config error (a bad value, a missing path, an incompatible resume): one line on stderr
    naming the key, the value and what is allowed; exit code 2;
  * a setup error (a model, data set, device or sandbox that is not available here): one line
    on stderr naming it; exit code 1;
  * anything else (a crash while training): the traceback; exit code 1.
Each also leaves `summary.json` with `status: failed`, the phase and the reason in the run
directory. In a multirun (`-m`) a failed job does not stop the sweep: the failure is recorded
and reported, the other jobs run, and at the end `SweepReport` lists the failed jobs and the
command exits 1.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from magrpo.config import CONF_DIR, conf_dir  # noqa: F401  (where the configs live; re-exported)
from magrpo.schema import ConfigError, SetupError, did_you_mean

log = logging.getLogger("magrpo")




def output_dir(cfg: DictConfig) -> Path:
    try:
        return Path(str(cfg.output_dir))
    except OmegaConfBaseException as e:
        raise ConfigError(f"output_dir cannot be resolved: {str(e).splitlines()[0]}") from None


def quiet_progress_bars() -> None:
    """HF's per-file progress bars (every checkpoint save and load) drown the training log."""
    import transformers

    transformers.utils.logging.disable_progress_bar()


# -- run directory names -------------------------------------------------------------------------
# `${now:...}` has one-second resolution, so two runs started in the same second got the same
# directory. The stamp adds microseconds and the pid (two live processes never share a pid).
# Cached per config, so a multirun's jobs see the sweep directory the launcher made.
STAMP_RESOLVER = "magrpo.stamp"


def _stamp() -> str:
    now = datetime.now()
    return f"{now:%Y-%m-%d_%H-%M-%S}.{now.microsecond:06d}-p{os.getpid()}"


if not OmegaConf.has_resolver(STAMP_RESOLVER):
    OmegaConf.register_new_resolver(STAMP_RESOLVER, _stamp, use_cache=True)


# -- --help: the config groups a user picks from ----------------------------------------------------
GROUPS_RESOLVER = "magrpo.groups"
INTERNAL_GROUPS = ("hydra", "schema")      # Hydra's own, and the algorithms' and modes' schema defaults


def _group_options(group: str) -> list[str]:
    """A group's options: its YAML (conf/ and the plugins' conf directories; an experiment's nested
    ones as paths) and the registered entries that compose from their schema alone."""
    from magrpo.plugins import conf_dirs

    names: set[str] = set()
    for root in [Path(CONF_DIR), *map(Path, conf_dirs())]:
        d = root / group
        files = d.rglob("*.yaml") if group == "experiment" else d.glob("*.yaml")
        names |= {f.relative_to(d).with_suffix("").as_posix() for f in files}
    registries = {"algo": "magrpo.algos.base:ALGOS", "task": "magrpo.tasks:TASKS", "reward": "magrpo.tasks:TASKS",
                  "feedback": "magrpo.feedback:FEEDBACKS"}
    if group in registries:
        import importlib

        module, _, attr = registries[group].partition(":")
        names |= set(getattr(importlib.import_module(module), attr))
    return sorted(names)


def _fold(options: list[str]) -> str:
    """`paper/agree/{at_grpo, c3}`: nested options under their folder, one entry per folder."""
    flat = [o for o in options if "/" not in o]
    nested: dict[str, list[str]] = {}
    for o in options:
        if "/" in o:
            folder, _, leaf = o.rpartition("/")
            nested.setdefault(folder, []).append(leaf)
    return ", ".join([*flat, *(f"{folder}/{{{', '.join(leaves)}}}" for folder, leaves in sorted(nested.items()))])


def help_groups(config_name: str) -> str:
    """--help's list of config groups: the user's groups and their options, not the internal ones;
    a group outside the defaults list is shown with the `+` it needs."""
    import yaml

    try:
        defaults = yaml.safe_load((Path(CONF_DIR) / f"{config_name}.yaml").read_text()).get("defaults") or []
    except (OSError, ValueError, AttributeError):
        defaults = []
    in_defaults = {str(next(iter(d))).split("@")[0].removeprefix("override ") for d in defaults if isinstance(d, dict)}
    lines = []
    for group in config_groups():
        options = _group_options(group)
        if not options:
            continue
        name = group if group in in_defaults else f"+{group}"
        lines.append(f"{name}: {_fold(options)}")
    return "\n".join(lines)


if not OmegaConf.has_resolver(GROUPS_RESOLVER):
    OmegaConf.register_new_resolver(GROUPS_RESOLVER, help_groups)


# -- reporting -----------------------------------------------------------------------------------


def _file_log(level: int, msg: str) -> None:
    """Into the run's log file only: the console already got the message on stderr."""
    record = log.makeRecord(log.name, level, __file__, 0, msg, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def report(prog: str, msg: str) -> None:
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)
    _file_log(logging.ERROR, msg)


def _job() -> tuple[bool, str]:
    """(in a multirun, a name for this job)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return False, ""
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return False, ""
    overrides = OmegaConf.select(hc, "job.override_dirname", default="")
    return True, f"job {OmegaConf.select(hc, 'job.num', default='?')}" + (f" ({overrides})" if overrides else "")


def as_setup_error(fn: Callable[[], Any]) -> Any:
    """Run a set-up step; an unexpected exception becomes a SetupError that says what it was (the
    traceback is kept in summary.json)."""
    try:
        return fn()
    except (ConfigError, SetupError):
        raise
    except Exception as e:
        raise SetupError(f"{type(e).__name__}: {e}") from e


def run_job(fn: Callable[[DictConfig], Any], cfg: DictConfig, prog: str) -> Any:
    """`fn(cfg)` as a Hydra job, failing as the module docstring says. Returns fn's result, or
    None for a failed job of a multirun."""
    multirun, name = _job()
    where = f"{name}: " if multirun else ""
    try:
        CURRENT_RUN["dir"] = output_dir(cfg)
    except ConfigError:
        CURRENT_RUN["dir"] = None
    try:
        return fn(cfg)
    except ConfigError as e:
        report(prog, f"{where}config error: {e}")
        code = 2
    except SetupError as e:
        report(prog, f"{where}setup error: {e}")
        code = 1
    except Exception as e:
        if not multirun:
            raise
        _file_log(logging.ERROR, "".join(traceback.format_exception(e)))
        report(prog, f"{where}failed: {type(e).__name__}: {e}")
        return None
    if multirun:
        return None
    sys.exit(code)


# -- multirun ------------------------------------------------------------------------------------
FAILED_JOBS: list[tuple[str, str]] = []     # (job directory, why) of the last multirun in this process


def job_dirs(sweep_dir: Path) -> list[Path]:
    from magrpo.table.runs import natural_key

    found = {p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")}
    return sorted(found, key=lambda p: natural_key(str(p)))


def failed_jobs(sweep_dir: Path) -> list[tuple[str, str]]:
    """Jobs under `sweep_dir` that did not finish: (job directory, why). A training job finishes
    with summary.json status "finished"; an evaluation job with eval.json written."""
    from magrpo.tracking import read_status

    out = []
    for d in job_dirs(sweep_dir):
        status, summary = read_status(d)
        if status == "finished" or (status == "missing" and (d / "eval.json").exists()):
            continue
        if status == "missing":
            why = "no summary.json: the job ended before recording a result (see its log)"
        else:
            why = f"status {status}" + (f": {summary['reason']}" if summary.get("reason") else "")
        out.append((str(d), why))
    return out


class SweepReport(Callback):
    """At the end of a multirun: list the jobs that failed (FAILED_JOBS; the entry point exits 1)."""

    def __init__(self, prog: str = "magrpo") -> None:
        self.prog = prog

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        FAILED_JOBS[:] = failed_jobs(sweep_dir) if sweep_dir.is_dir() else []
        if FAILED_JOBS:
            total = len(job_dirs(sweep_dir))
            lines = [f"{self.prog}: {len(FAILED_JOBS)} of {total} job(s) failed in {sweep_dir}:"]
            lines += [f"  {Path(d).name}: {why}" for d, why in FAILED_JOBS]
            print("\n".join(lines), file=sys.stderr, flush=True)


def exit_if_sweep_failed() -> None:
    """Exit 1 after a multirun with failed jobs. The list is taken, not kept: a later command in
    the same process (a notebook, a test) starts clean rather than failing for an old sweep."""
    failed = list(FAILED_JOBS)
    FAILED_JOBS.clear()
    if failed:
        sys.exit(1)


# -- one run per directory -----------------------------------------------------------------------
# What a run leaves that a second run would mix into (Hydra's .hydra/ and log are rewritten by
# every start, so they do not count as a run on their own).
RUN_RECORDS = ("metrics.jsonl", "checkpoints", "eval.json")
# What marks a directory as a run's, for the commands that must never write into one (magrpo.writes):
# its records, its summary, or Hydra's record of its overrides. An exported team (team.json) counts too.
RUN_MARKERS = (*RUN_RECORDS, "summary.json", ".hydra/overrides.yaml")


def is_run_dir(path: str | Path) -> bool:
    """Whether `path` is a training or evaluation run's directory (RUN_MARKERS; `checkpoints/`
    only with a `step_N` in it, so a folder of someone's own named so is none) or an exported team."""
    from magrpo.checkpoint import is_team_dir, step_dirs

    p = Path(path)
    if not p.is_dir():
        return False
    if is_team_dir(p) or ((p / "checkpoints").is_dir() and bool(step_dirs(p / "checkpoints"))):
        return True
    return any((p / name).exists() for name in RUN_MARKERS if name != "checkpoints")


def run_dir_around(path: str | Path) -> Path | None:
    """The run directory (or exported team) that `path` is or lies inside, resolved: the nearest of
    it and its existing ancestors that is_run_dir; a checkpoint `RUN/checkpoints/step_N` gives RUN."""
    p = Path(path).expanduser().resolve()
    for d in (p, *p.parents):
        if is_run_dir(d):
            return d
    return None


def check_out_dir(out: str | Path, sources: Iterable[str | Path] = (), key: str = "--out", note: str = "",
                  team: bool = False) -> None:
    """Refuse (ConfigError, one line) to write into `out` inside a run, an exported team or a source
    (module docstring). `note` follows the path in the message (`(the default: DIR/table)`);
    `team`: `out` is an exported team's directory, written whole (an earlier export there is
    replaced with --force, so only what is around it counts)."""
    from magrpo.checkpoint import is_team_dir

    target = Path(out).expanduser().resolve()
    named = f"{key} {str(out)!r}{note}"
    root = run_dir_around(target.parent if team and is_team_dir(target) else target)
    if root is not None:
        if is_team_dir(root):
            raise ConfigError(f"{named} is inside the exported team {str(root)!r}, which holds the team alone; "
                              f"give a directory outside it")
        raise ConfigError(f"{named} is inside the run directory {str(root)!r}; no command writes into a run but "
                          f"its own trainer: give a directory outside it")
    for src in sources:
        p = Path(src).expanduser()
        if not p.exists():       # a hub id, or a path whose own error comes later
            continue
        p = p.resolve()
        for d in {p, run_dir_around(p) or p}:
            if target.is_relative_to(d):
                raise ConfigError(f"{named} is inside {str(src)!r}, which this command reads; give a directory "
                                  f"outside it")


def check_run_dir(run_dir: Path, resume: Any = None, key: str = "output_dir") -> None:
    """Refuse to write into a directory that holds another run, finished or not, unless `resume`
    names a checkpoint of that very run (resuming continues it in place). A directory whose run
    stopped before recording anything (a config error, say) holds nothing to lose and is reused."""
    run_dir = Path(run_dir)
    held = [name for name in RUN_RECORDS if (run_dir / name).exists()]
    if not held:
        return
    if resume:
        try:
            inside = Path(str(resume)).expanduser().resolve().is_relative_to(run_dir.resolve())
        except OSError:
            inside = False
        if inside:
            return
    from magrpo.tracking import read_status

    status, summary = read_status(run_dir)
    what = f"a {status} run" + (f" of {summary['steps']} step(s)" if summary.get("steps") else "")
    way_out = (f"resume it in place with resume={run_dir}, or " if (run_dir / "checkpoints").is_dir()
               else "")
    raise ConfigError(f"{key}={str(run_dir)!r} already holds {what} ({', '.join(held)}); a run never writes into "
                      f"another run's directory: {way_out}give this one another directory "
                      f"(hydra.run.dir=... or output_dir=...)")


def keep_saved_config(run_dir: Path) -> None:
    """Copy Hydra's record of this run (.hydra/: config, overrides) into `run_dir` when the run
    writes somewhere else than Hydra's run directory (`output_dir=DIR`), so that DIR can be taken
    up later (`resume=DIR`, `magrpo-eval checkpoint=DIR`; magrpo.run_config) like any run."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    hydra_dir = Path(HydraConfig.get().runtime.output_dir) / ".hydra"
    target = Path(run_dir) / ".hydra"
    try:
        if not hydra_dir.is_dir() or target.resolve() == hydra_dir.resolve():
            return
        target.mkdir(parents=True, exist_ok=True)
        for f in hydra_dir.glob("*.yaml"):
            shutil.copyfile(f, target / f.name)
    except OSError as e:
        log.warning("could not copy the run's config (%s) into %s: %s; resume=%s will need every override "
                    "again", hydra_dir, target, e, run_dir)


class RunDirGuard(Callback):
    """Checks the run (or sweep) directory before Hydra writes its .hydra/ copy and log into it, so
    a run refused for an occupied directory changes nothing there. Hydra turns an exception of a
    callback into a warning and goes on, so the refusal exits here (2, as any config error)."""

    def __init__(self, prog: str = "magrpo") -> None:
        self.prog = prog

    def _check(self, dirs: list[Path], resume: Any, key: str) -> None:
        try:
            for d in dirs:
                check_run_dir(d, resume, key)
        except ConfigError as e:
            report(self.prog, f"config error: {e}")
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            run_dir = Path(str(config.hydra.run.dir))
        except OmegaConfBaseException:
            return      # resolved again by Hydra, which reports the problem
        given = OmegaConf.select(config, "output_dir", default=None, throw_on_resolution_failure=False)
        key = "output_dir" if given is not None and str(given) == str(run_dir) else "hydra.run.dir"
        self._check([run_dir], OmegaConf.select(config, "resume", default=None), key)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            sweep_dir = Path(str(config.hydra.sweep.dir))
        except OmegaConfBaseException:
            return
        if sweep_dir.is_dir():
            self._check(job_dirs(sweep_dir), None, "hydra.sweep.dir")


# -- the command line ----------------------------------------------------------------------------


def parse_plain_cli(parser: Any, argv: list[str] | None) -> Any:
    """The arguments of a command that is not a Hydra app (magrpo-export, magrpo-crossplay), with
    the console set up as the Hydra commands set it: INFO lines, no download progress bars."""
    from magrpo.plugins import add_option, load_option

    add_option(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    quiet_progress_bars()
    load_option(args, parser.prog)
    return args


def cli_main(hydra_main: Callable[[], Any], prog: str, config_name: str) -> None:
    """What every Hydra entry point runs: register the schemas, put the overrides of the run that
    `resume=`/`checkpoint=` names before the command line's (magrpo.run_config), run the app, and
    turn what Hydra would report with its own words (a mistyped key, an unknown group option) or a
    traceback (Ctrl-C) into one line of ours: exit 2 for a bad override, 130 for an interrupt."""
    from magrpo.config import register_schemas

    quiet_progress_bars()
    import json

    from magrpo.run_config import TAKEN_ENV, inherit_argv

    argv = sys.argv[:]
    try:    # checkpoint=RUN / resume=RUN: the run's overrides first, then the command line's
        sys.argv[1:], taken = inherit_argv(config_name, sys.argv[1:])
        search = load_cli_plugins(config_name, sys.argv[1:], taken)   # before anything is composed or looked up
    except ConfigError as e:
        sys.argv[:] = argv
        report(prog, f"config error: {e}")
        sys.exit(2)
    register_schemas()
    if search:
        sys.argv.append(search)
    sys.argv[1:] = run_dir_follows_output_dir(sys.argv[1:])
    if taken:
        os.environ[TAKEN_ENV] = json.dumps(taken, default=str)
    else:   # never a parent command's
        os.environ.pop(TAKEN_ENV, None)
    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"   # composition errors reach us as exceptions, not as Hydra's text
    try:
        hydra_main()
    except KeyboardInterrupt:
        print(f"{prog}: {interrupt_report(prog)}", file=sys.stderr, flush=True)
        sys.exit(130)
    except Exception as e:
        msg = explain_override_error(e, config_name, sys.argv[1:])
        if msg is None or user_full_error == "1":
            raise
        if taken:
            runs = ", ".join(f"{d}/.hydra/overrides.yaml" for d in taken)
            lines = " ".join(next(iter(taken.values()))["lines"])
            msg += f" (the command line took up the overrides of {runs}: {lines})"
        report(prog, f"config error: {msg}")
        sys.exit(2)
    finally:
        sys.argv[:] = argv
        os.environ.pop(TAKEN_ENV, None)
        if user_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = user_full_error
    exit_if_sweep_failed()


def run_dir_follows_output_dir(argv: list[str]) -> list[str]:
    """`output_dir=DIR` of a single run also makes DIR Hydra's run directory (unless hydra.run.dir is
    given), so the run's .hydra/ and log are in DIR and no empty outputs/<cmd>/<stamp>/ is left."""
    if any(a in ("-m", "--multirun") for a in argv):
        return argv
    given = [a for a in argv if a.lstrip("+").partition("=")[0] == "output_dir"]
    if not given or any(a.lstrip("+").partition("=")[0] == "hydra.run.dir" for a in argv):
        return argv
    value = given[-1].partition("=")[2]
    if not value or value.startswith("${"):
        return argv
    return [*argv, f"hydra.run.dir={value}"]


def load_cli_plugins(config_name: str, argv: list[str], taken: dict | None = None) -> str | None:
    """Import the plugins of a command line (magrpo.plugins): `plugins=[...]` (its own, or taken up
    from a run), MAGRPO_PLUGINS, the entry points, and the plugins recorded by the run, checkpoint
    or team that `resume=`/`checkpoint=`/`team=` names. Returns the `hydra.searchpath=[...]`
    override that adds the plugins' conf directories (None when they name none, or the command
    line sets the search path itself)."""
    from magrpo.plugins import conf_dirs, load_plugins, load_recorded, plugins_in_argv
    from magrpo.run_config import named_runs, recorded_plugins, recorded_searchpath

    paths: list[str] = []
    for run in named_runs(config_name, argv):      # first: a missing one is named with the run that needs it
        load_recorded(recorded_plugins(run), run)
        paths += recorded_searchpath(run)
    for run, record in (taken or {}).items():       # plugins=[...] taken up from a run's saved overrides
        load_recorded(plugins_in_argv(record.get("lines", [])), run)
    load_plugins(plugins_in_argv(argv))
    paths += [f"file://{d}" for d in conf_dirs()]
    paths = list(dict.fromkeys(paths))
    if not paths or any(a.lstrip("+").startswith("hydra.searchpath=") for a in argv):
        return None
    return "hydra.searchpath=[" + ",".join(paths) + "]"


def _overrides(argv: list[str]) -> list[str]:
    return [a for a in argv if not a.startswith("-")]


def group_options(group: str) -> list[str]:
    """The options of config group `group` (its conf/<group>/*.yaml), [] for a key that is no group."""
    root = Path(CONF_DIR) / group
    return sorted(p.stem for p in root.glob("*.yaml")) if root.is_dir() else []


def explain_override_error(exc: BaseException, config_name: str, argv: list[str]) -> str | None:
    """Our message for an override Hydra could not apply, or None for anything else."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options is not None:
        group, _, bad = exc.missing_cfg_file.rpartition("/")
        top = group.split("/")[0]
        if "/" in group and (Path(CONF_DIR) / top).is_dir():       # a nested option: experiment=paper/covr/magrpo
            value = exc.missing_cfg_file[len(top) + 1:]
            options = _group_options(top)
            folder = value.rpartition("/")[0]
            while folder and not any(o.startswith(folder + "/") for o in options):
                folder = folder.rpartition("/")[0]
            shown = [o for o in options if o.startswith(folder + "/")] if folder else options
            return (f"{top}={value!r} is not an option of the config group {top!r}; choose one of: {_fold(shown)}"
                    f"{did_you_mean(value, options)}")
        return (f"{group}={bad!r} is not an option of the config group {group!r}; choose one of: "
                f"{', '.join(exc.options)}{did_you_mean(bad, exc.options)}")
    if isinstance(exc, OverrideParseException):
        return (f"cannot parse the overrides ({str(exc).splitlines()[0]}); quote values with brackets, "
                f"commas or spaces, e.g. task.data.eval_split='test[:32]'")
    if isinstance(exc, ValueError) and str(exc).startswith("Config group override must be"):
        for arg in _overrides(argv):
            group, _, value = arg.lstrip("+~").partition("=")
            options = group_options(group)
            if options and value not in options:
                return (f"{group}={value!r} is not an option of the config group {group!r}; choose one of: "
                        f"{', '.join(options)}{did_you_mean(value, options)}")
        return None
    if isinstance(exc, ConfigCompositionException):
        msg = _composition_message(str(exc))
        if msg is not None:
            return msg
    key = getattr(exc.__cause__, "full_key", None)
    if isinstance(exc, ConfigCompositionException) and key:
        import re

        m = re.match(r"Could not override '([^']+)'", str(exc))
        typed = m.group(1) if m else key
        parent, _, leaf = typed.rpartition(".")
        allowed = _keys_at(config_name, [a for a in _overrides(argv) if a.lstrip("+~").partition("=")[0] != typed],
                           parent)
        if leaf in allowed:     # defined only by an option the sweep chooses per job (an experiment's key)
            return (f"{typed!r} is not in conf/{config_name}.yaml: only an option chosen per job of this sweep "
                    f"defines it, and Hydra checks command-line keys before it chooses; write ++{typed}=VALUE "
                    f"to set it in every job")
        where = f"in {parent}" if parent else "at the top level"
        listing = f"; keys allowed {where}: {', '.join(allowed)}" if allowed else ""
        return f"unknown config key {typed!r}{listing}{did_you_mean(leaf, allowed)}"
    return None


def _composition_message(text: str) -> str | None:
    """Our line for the composition errors Hydra words as advice: a sweep value in a single run, and
    a group that is not in the defaults list (`recipe=cover`, `experiment/paper/agree=magrpo`)."""
    import re

    m = re.match(r"Ambiguous value for argument '([^']*)'", text)
    if m:
        line = m.group(1)
        key, _, value = line.partition("=")
        return (f"{line!r} gives several values, which is a sweep; a single run takes one value: run "
                f"`-m {line}` to sweep over them, write {key}=[{value}] for a list or {key}='{value}' for a string")
    m = re.match(r"Could not override '([^']*)'\. No match in the defaults list", text)
    if m:
        group = m.group(1)
        root, _, rest = group.partition("/")
        options = group_options(group)
        if rest and (Path(CONF_DIR) / root).is_dir():
            return (f"{group!r} is no config group of its own: the options under conf/{group}/ belong to the group "
                    f"{root!r}; write {root}={rest}/OPTION (e.g. {root}={rest}/{options[0] if options else '...'})")
        if options:
            return (f"the config group {group!r} is not in the defaults, so it cannot be replaced; add it with "
                    f"+{group}=OPTION (one of: {', '.join(options)})")
        return f"{group!r} is not a config group; the groups are: {', '.join(config_groups())}"
    return None


def config_groups() -> list[str]:
    """The user-facing config groups under conf/ (not Hydra's own or the internal schema groups)."""
    return sorted(p.name for p in Path(CONF_DIR).iterdir() if p.is_dir() and p.name not in INTERNAL_GROUPS)


def _keys_at(config_name: str, overrides: list[str], dotted: str) -> list[str]:
    """Keys of the node `dotted` of the config composed with `overrides` (sweep values: the first);
    [] when that cannot be composed."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        single = [o.input_line if not o.is_sweep_override() else
                  f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" for o in parsed]
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=single)
        node = OmegaConf.select(cfg, dotted) if dotted else cfg
    except Exception:
        return []
    finally:
        GlobalHydra.instance().clear()
    return sorted(str(k) for k in node.keys()) if OmegaConf.is_dict(node) else []


# -- interrupts ----------------------------------------------------------------------------------
CURRENT_RUN: dict[str, Any] = {}     # the run directory of the job running in this process


def interrupt_report(prog: str) -> str:
    """One line for Ctrl-C: the step reached, the status recorded and the exact resume command."""
    import shlex

    from magrpo.tracking import read_status

    run_dir = CURRENT_RUN.get("dir")
    if run_dir is None:
        return "interrupted before a run started; nothing was written"
    status, summary = read_status(run_dir)
    where = f"interrupted at step {summary.get('steps', 0)}; {run_dir}/summary.json says {status}"
    try:
        from magrpo.checkpoint import resolve

        ckpt = resolve(run_dir, "resume")
    except Exception:
        return f"{where}; no checkpoint was saved, so it cannot be resumed (save_every=N saves one every N steps)"
    try:
        import yaml

        given = yaml.safe_load((Path(run_dir) / ".hydra" / "overrides.yaml").read_text()) or []
    except (OSError, ValueError):
        given = _overrides(sys.argv[1:])
    keep = [o for o in given if o.partition("=")[0].lstrip("+~") not in ("resume", "hydra.run.dir", "output_dir")]
    cmd = shlex.join([prog, *keep, f"resume={run_dir}", f"hydra.run.dir={run_dir}"])
    return f"{where} (checkpoint {Path(ckpt).name}); resume with: {cmd}"
