"""The command-line front of every entry point: what a Hydra command (magrpo-train, magrpo-eval) does
around Hydra, and what a plain argparse command (magrpo-export, magrpo-crossplay) does first."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from magrpo.config.schemas import CONF_DIR
from magrpo.core import trust
from magrpo.core.checkpoint import is_team_dir
from magrpo.core.overrides import override_key
from magrpo.core.plugins import (
    PluginInterrupt,
    add_option,
    conf_dirs,
    load_option,
    load_plugins,
    plugins_in_argv,
)
from magrpo.core.schema import ConfigError
from magrpo.core.trust import UntrustedError
from magrpo.launch.groups import GROUPS_RESOLVER, help_groups
from magrpo.launch.job import interrupt_report, quiet_progress_bars, report, stopped, term_as_interrupt
from magrpo.launch.override_errors import dashed_overrides, explain_override_error
from magrpo.launch.run_config import (
    caller_keys_in_argv,
    dirs_in_argv,
    inherit_argv,
    named_runs,
    reward_modules_in_argv,
    trust_plugins_in_argv,
)
from magrpo.launch.run_dirs import STAMP_RESOLVER, resume_in_place, run_dir_follows_output_dir, stamp
from magrpo.validation.store import register_schemas

# A Hydra command's job: `job(cfg, taken)`, `taken` being what the command line took up from the run
# it names (magrpo.launch.run_config.inherit_argv; None when it names none).
Job = Callable[[DictConfig, Any], Any]


def register_resolvers() -> None:
    """The resolvers conf/ uses: `${magrpo.stamp:}` in the run and sweep directory names and
    `${magrpo.groups:CONFIG}` in --help. Registering again is harmless."""
    if not OmegaConf.has_resolver(STAMP_RESOLVER):
        OmegaConf.register_new_resolver(STAMP_RESOLVER, stamp, use_cache=True)
    if not OmegaConf.has_resolver(GROUPS_RESOLVER):
        OmegaConf.register_new_resolver(GROUPS_RESOLVER, help_groups)


class HydraJob:
    """The task function Hydra runs: `job(cfg, taken)`. A launcher that runs jobs in worker processes
    (joblib, ray, submitit) pickles it and rebuilds it there (`__reduce__`), registering the resolvers
    in the worker, which resolves the sweep directory before the job starts. Hydra names the job
    (`hydra.job.name`, in the run directory's path) after the module of `job` (`__wrapped__`)."""

    def __init__(self, job: Job, taken: dict[str, Any] | None = None) -> None:
        register_resolvers()
        self.job, self.taken = job, taken
        self.__wrapped__ = job

    def __call__(self, cfg: DictConfig) -> Any:
        return self.job(cfg, self.taken)

    def __reduce__(self) -> tuple:
        return HydraJob, (self.job, self.taken)


def run_hydra(task: Callable[[DictConfig], Any], config_name: str, argv: list[str]) -> None:
    """Run `task` as the Hydra app over conf/<config_name>.yaml with the command line `argv`. The one
    place the process's state is changed for Hydra, and put back after: Hydra reads its command line
    from sys.argv only (@hydra.main parses sys.argv[1:]), and raises a composition error as an
    exception (which cli_main words) only with HYDRA_FULL_ERROR=1."""
    app = hydra.main(config_path=CONF_DIR, config_name=config_name, version_base="1.3")(task)
    saved_argv, saved_full_error = sys.argv[:], os.environ.get("HYDRA_FULL_ERROR")
    sys.argv[1:] = argv
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        app()
    finally:
        sys.argv[:] = saved_argv
        if saved_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_full_error


@trust.one_command
def cli_main(job: Job, prog: str, config_name: str, argv: list[str] | None = None) -> None:
    """What every Hydra entry point runs on its command line `argv` (default: sys.argv[1:]): register
    the schemas and resolvers, put the overrides of the run that `resume=`/`checkpoint=` names before
    the command line's (magrpo.launch.run_config), import the plugins, run `job` as a Hydra app, and turn
    what Hydra would report with its own words (a mistyped key, an unknown group option) or a
    traceback (Ctrl-C) into one line of ours: exit 2 for a bad override, 130 for an interrupt, 143
    for a SIGTERM, which stops the command as Ctrl-C does (magrpo.launch.job.Terminated)."""
    with term_as_interrupt():
        _cli_main(job, prog, config_name, argv)


def _cli_main(job: Job, prog: str, config_name: str, argv: list[str] | None) -> None:
    quiet_progress_bars()
    register_resolvers()
    argv = list(sys.argv[1:] if argv is None else argv)
    if (msg := dashed_overrides(argv, prog)) is not None:   # --max_steps=10: Hydra would print its usage block
        report(prog, f"config error: {msg}")
        sys.exit(2)
    given = list(argv)          # the user's own command line: what it names is theirs (magrpo.core.trust)
    try:    # checkpoint=RUN / resume=RUN: the run's overrides first, then the command line's
        with console_log():
            # what a named run records is checked (and its trusted code imported) before its overrides
            # are read; a hub team, downloaded by inherit_argv, is checked once it is here
            search = load_cli_plugins(config_name, given)
            before = named_runs(config_name, given)
            argv, taken = inherit_argv(config_name, argv)
            if named_runs(config_name, argv) != before:
                search = load_cli_plugins(config_name, argv, given=given)
    except UntrustedError as e:
        report(prog, f"refused: {e}")
        sys.exit(2)
    except ConfigError as e:
        report(prog, f"config error: {e}")
        sys.exit(2)
    except KeyboardInterrupt as e:      # a PluginInterrupt names the plugin it was importing
        how, code = stopped(e)
        report(prog, str(e) if isinstance(e, PluginInterrupt) else f"{how} before a run started; nothing was written")
        sys.exit(code)
    # argv holds a taken-up run's overrides too; the nodes cached when nothing can have changed them
    # (magrpo.validation.store): --help and a mistyped key answer without importing torch
    register_schemas(cached=True)
    argv = run_dir_follows_output_dir([*argv, search] if search else argv)
    if config_name == "train" and taken:    # resume=RUN continues RUN's own directory
        argv = resume_in_place(argv, taken)
    user_full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        run_hydra(HydraJob(job, taken), config_name, argv)
    except KeyboardInterrupt as e:
        how, code = stopped(e)
        run_dir = getattr(e, "run_dir", None)
        print(f"{prog}: {interrupt_report(prog, run_dir, argv, how, resumable=config_name == 'train')}",
              file=sys.stderr, flush=True)
        sys.exit(code)
    except Exception as e:
        msg = explain_override_error(e, config_name, argv)
        if msg is None or user_full_error:
            raise
        if taken:
            runs = ", ".join(f"{d}/.hydra/overrides.yaml" for d in taken)
            lines = " ".join(next(iter(taken.values()))["lines"])
            msg += f" (the command line took up the overrides of {runs}: {lines})"
        report(prog, f"config error: {msg}")
        sys.exit(2)


def load_cli_plugins(config_name: str, argv: list[str], taken: dict | None = None,
                     given: list[str] | None = None) -> str | None:
    """Import the plugins of a command line (magrpo.core.plugins): the plugins and reward modules the run,
    checkpoint or team that `resume=`/`checkpoint=`/`team=` names records, when the trust rule
    allows them (magrpo.core.trust: else an UntrustedError before anything is imported), then the
    command line's own `plugins=[...]`, MAGRPO_PLUGINS and the entry points. `given`: the user's own
    command line (`argv` holds a taken-up run's overrides too). Returns the `hydra.searchpath=[...]`
    override that adds a trusted run's config directories and the plugins' (None when there are
    none, or the command line sets the search path itself)."""
    own = list(argv if given is None else given)
    own_plugins = plugins_in_argv(own)
    trust.allow_named([*own_plugins, *reward_modules_in_argv(own)])
    runs = named_runs(config_name, argv)
    # the flag covers what this command line names itself: the run or team it takes up, its partners
    trust.on_this_command(trust_plugins_in_argv(own), "trust_plugins=true", caller_keys_in_argv(own),
                          dirs=[*runs, *dirs_in_argv(own)])
    paths: list[str] = []
    for run in runs:      # first: a missing one is named with the run that needs it
        up = trust.take_up(run)
        if not is_team_dir(up.root):                # a team composes with no directory of its own
            paths += up.config_dirs
    load_plugins(own_plugins, beside=runs)
    paths += [f"file://{d}" for d in conf_dirs()]
    paths = list(dict.fromkeys(paths))
    if not paths or any(override_key(a) == "hydra.searchpath" for a in own):
        return None
    return "hydra.searchpath=[" + ",".join(paths) + "]"


@contextmanager
def console_log() -> Iterator[None]:
    """The `magrpo` logger's INFO lines on stderr before Hydra sets up logging (the plugins a
    command is about to import); nothing changes where logging is set up already."""
    logger = logging.getLogger("magrpo")
    if logging.getLogger().handlers or logger.handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def parse_plain_cli(parser: Any, argv: list[str] | None, dirs: Callable[[Any], list[str]] = lambda args: []) -> Any:
    """The arguments of a command that is not a Hydra app (magrpo-export, magrpo-crossplay), with
    the console set up as the Hydra commands set it: INFO lines, no download progress bars.
    `dirs(args)`: the runs and teams the command line names, which `--trust-plugins` covers."""

    add_option(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    quiet_progress_bars()
    named = [Path(d).expanduser() for d in dirs(args)]
    trust.on_this_command(args.trust_plugins, "--trust-plugins", dirs=named)
    load_option(args, parser.prog, beside=[d for d in named if d.exists()])
    trust.allow_named([m.strip() for m in (args.plugins or "").split(",") if m.strip()])
    return args
