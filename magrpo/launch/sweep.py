"""A multirun (`-m`) outlives its failed jobs: each failure is reported and recorded as it happens
(run_job), the other jobs run, and at the end SweepReport lists the jobs that did not finish and
the command exits 1."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from magrpo.core import records
from magrpo.core.schema import ConfigError
from magrpo.core.tracking import read_status


def natural_key(text: str) -> list:
    """Sort `10_seed=1` after `9_seed=0`: Hydra numbers multirun jobs without padding."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def job_dirs(sweep_dir: Path) -> list[Path]:
    found = {p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")}
    return sorted(found, key=lambda p: natural_key(str(p)))


def job_overrides(job_dir: Path) -> str:
    """A sweep job's overrides as one line (its folder is its number; they are in .hydra/)."""
    try:
        lines = records.load_yaml(job_dir / ".hydra" / "overrides.yaml") or []
    except ConfigError:
        return "overrides unknown"
    return " ".join(str(x) for x in lines) if isinstance(lines, list) else "overrides unknown"


def failed_jobs(sweep_dir: Path) -> list[tuple[str, str]]:
    """Jobs under `sweep_dir` that did not finish: (job directory, why). A training job finishes
    with summary.json status "finished"; an evaluation job with eval.json written."""
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
    """At the end of a multirun: list the jobs that failed and exit 1. The exit is here, where the
    sweep's outcome is known, because Hydra hands the command nothing back from a multirun (and
    turns a callback's exception into a warning). Hydra calls the callbacks' ends in reverse
    order, so this one, first in conf/train.yaml and conf/eval.yaml, ends last."""

    def __init__(self, prog: str = "magrpo") -> None:
        self.prog = prog

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        failed = failed_jobs(sweep_dir) if sweep_dir.is_dir() else []
        if not failed:
            return
        lines = [f"{self.prog}: {len(failed)} of {len(job_dirs(sweep_dir))} job(s) failed in {sweep_dir}:"]
        lines += [f"  {Path(d).name} ({job_overrides(Path(d))}): {why}" for d, why in failed]
        print("\n".join(lines), file=sys.stderr, flush=True)
        sys.exit(1)
