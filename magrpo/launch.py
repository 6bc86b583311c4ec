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
import sys
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from magrpo.schema import ConfigError, SetupError

log = logging.getLogger("magrpo")


def conf_dir() -> Path:
    """The repository's `conf/` in a source checkout (editable install), else the copy shipped
    inside the package (a wheel install; see setup.py)."""
    here = Path(__file__).resolve().parent
    repo = here.parent / "conf"
    return repo if (repo / "train.yaml").is_file() else here / "conf"


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
    from magrpo.table import natural_key

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
    if FAILED_JOBS:
        sys.exit(1)
