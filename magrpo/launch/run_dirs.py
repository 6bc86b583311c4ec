"""Run directories: their unique names, the one-run-per-directory rule, and where a run's config is
kept. No command writes inside a run directory but that run's own trainer (magrpo.core.writes)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from magrpo.core.checkpoint import is_team_dir, step_dirs
from magrpo.core.overrides import override_key
from magrpo.core.schema import ConfigError
from magrpo.core.tracking import read_status
from magrpo.launch.job import report
from magrpo.launch.sweep import job_dirs

log = logging.getLogger("magrpo")

# -- names -----------------------------------------------------------------------------------------
# `${now:...}` has one-second resolution, so two runs started in the same second got the same
# directory. The stamp adds this process's id (two live processes never share one) and, for a
# second stamp of one process within the same second, a count: unique, sorted by time, and typed in
# a shell as it is (no `=`, `,`, `.` or microseconds). Registered with use_cache
# (magrpo.launch.command.register_resolvers), so a multirun's jobs see the sweep directory the
# launcher made. A sweep's job folders are its job numbers; each job's overrides are in its
# `.hydra/overrides.yaml`.
STAMP_RESOLVER = "magrpo.stamp"
_last_stamp: dict[str, int] = {}         # this process's last second -> stamps given in it


def stamp() -> str:
    """`2025-01-31_12-00-00-p4242` (then `...-p4242-2`, `-3` within the same second): the time to
    the second and this process's id."""
    second = f"{datetime.now():%Y-%m-%d_%H-%M-%S}"
    count = _last_stamp.get(second, 0) + 1
    _last_stamp.clear()
    _last_stamp[second] = count
    return f"{second}-p{os.getpid()}" + (f"-{count}" if count > 1 else "")


def run_dir_follows_output_dir(argv: list[str]) -> list[str]:
    """`output_dir=DIR` of a single run also makes DIR Hydra's run directory (unless hydra.run.dir is
    given), so the run's .hydra/ and log are in DIR and no empty outputs/<cmd>/<stamp>/ is left."""
    if any(a in ("-m", "--multirun") for a in argv):
        return argv
    given = [a for a in argv if override_key(a) == "output_dir"]
    if not given or any(override_key(a) == "hydra.run.dir" for a in argv):
        return argv
    value = given[-1].partition("=")[2]
    if not value or value.startswith("${"):
        return argv
    return [*argv, f"hydra.run.dir={value}"]



def resumed_run(resume: Any) -> Path | None:
    """The training run that `resume=` continues: the directory named (a run with records) or the
    run of a checkpoint `RUN/checkpoints/step_N`; None for anything else (an exported team, a bare
    checkpoint, a path that does not exist: its own check reports it)."""
    if resume in (None, "") or not isinstance(resume, (str, Path)):
        return None
    p = Path(str(resume)).expanduser()
    for run in (p, p.parent.parent if p.parent.name == "checkpoints" else None):
        if run is not None and run.is_dir() and not is_team_dir(run) and \
                any((run / name).exists() for name in RUN_RECORDS):
            return run
    return None


def resume_in_place(argv: list[str], runs: Iterable[str | Path]) -> list[str]:
    """`resume=RUN` of a single run continues RUN itself: RUN becomes Hydra's run directory unless
    the command line gives `hydra.run.dir` or `output_dir` (a new directory on purpose), so the run's
    curve stays one `metrics.jsonl`. `runs`: the training runs the resume names (one, or none taken
    up). An exported team is no run to write into; it is left to the new directory."""
    runs = [Path(r) for r in runs]
    if len(runs) != 1 or any(a in ("-m", "--multirun") for a in argv):
        return argv
    if any(override_key(a) in ("hydra.run.dir", "output_dir") for a in argv if not a.startswith("~")):
        return argv
    run = resumed_run(runs[0])
    if run is None:
        return argv
    text = str(run)
    if re.fullmatch(r"[\w./~+-]+", text):
        return [*argv, f"hydra.run.dir={text}"]
    if any(c in text for c in "'\\$"):    # no quoting of ours reads back: the resume goes to a new directory
        log.warning("resume=%s: the run's directory name cannot be passed on as hydra.run.dir; the resumed run "
                    "writes to a new directory (give hydra.run.dir=... to choose it)", text)
        return argv
    return [*argv, f"hydra.run.dir='{text}'"]


# -- one run per directory -----------------------------------------------------------------------
# What a run leaves that a second run would mix into (Hydra's .hydra/ and log are rewritten by
# every start, so they do not count as a run on their own).
RUN_RECORDS = ("metrics.jsonl", "checkpoints", "eval.json")
# What marks a directory as a run's, for the commands that must never write into one (magrpo.core.writes):
# its records, its summary, or Hydra's record of its overrides. An exported team (team.json) counts too.
RUN_MARKERS = (*RUN_RECORDS, "summary.json", ".hydra/overrides.yaml")
def is_run_dir(path: str | Path) -> bool:
    """Whether `path` is a training or evaluation run's directory (RUN_MARKERS; `checkpoints/`
    only with a `step_N` in it, so a folder of someone's own named so is none) or an exported team."""
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
    up later (`resume=DIR`, `magrpo-eval checkpoint=DIR`; magrpo.launch.run_config) like any run."""
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
