"""magrpo-train: the one training entry point (a Hydra app over conf/train.yaml).

    magrpo-train                                   # embedded default: tiny agents, length_ratio
    magrpo-train task=tldr agents=qwen3_1.7b hardware=gpu logger=wandb
    magrpo-train -m seed=0,1,2 algo.advantage=mean,rloo     # a sweep
    magrpo-train resume=outputs/train/<run> max_steps=200   # continue it: its overrides are taken up
    torchrun --nproc_per_node 2 -m magrpo.cli.train ...         # data-parallel over 2 processes

A bad config exits 2 and a missing model, data set or device exits 1, each with one line on
stderr and `summary.json` saying why; a failed job of a sweep leaves the other jobs running
(magrpo.launch). The trainer and the checks of a composed config (torch, transformers: seconds) are
imported once a job starts, so `--help` and an override Hydra cannot apply answer without them.
"""

from __future__ import annotations

# isort: off
import magrpo.core.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

import logging
import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from magrpo.config.run import RunConfig
from magrpo.config.schemas import ConfigError, optimized_metric
from magrpo.core import plugins, trust
from magrpo.core.checkpoint import checkpoint_step
from magrpo.core.source import as_setup_error
from magrpo.core.tracking import RunStatus, read_status, set_aside_after
from magrpo.launch import (
    CONF_DIR,
    check_run_dir,
    cli_main,
    keep_saved_config,
    output_dir,
    quiet_progress_bars,
    run_job,
)
from magrpo.launch.run_config import from_run
from magrpo.tasks import TASKS, available_tasks
from magrpo.tasks.reward_fns import primary_metric

log = logging.getLogger("magrpo")
__all__ = ["CONF_DIR", "main", "run", "sweep_value"]


def run(cfg: DictConfig, taken: dict | None = None) -> dict:
    """Validate, build and train; returns the final summary. Usable without Hydra (tests).
    `taken`: what the command line took up from the run `resume=` names (magrpo.launch.run_config).

    The run directory is checked (it must not hold another run, unless this run resumes it in
    place) and claimed (no other live run may write it); whatever stops the run after that is
    recorded in its summary.json (status, phase, reason). Under torchrun, rank 0 owns the run
    directory and its status; the other ranks only train."""
    from magrpo.validation.checks import validate  # noqa: PLC0415  start-up: torch loads only where a model does; --help and override errors answer without it

    out = output_dir(cfg)
    if taken:       # resume= took a run up: what the composed config names, resolved, is trusted
        trust.check_composed(cfg, "the composed config")
    if int(os.environ.get("RANK", "0")) > 0:
        run_cfg = validate(cfg)
        result = _fit(run_cfg, out)
        return {**result, "sweep_value": sweep_value(run_cfg, result["final_eval"])}
    check_run_dir(out, OmegaConf.select(cfg, "resume"))
    keep_saved_config(out)
    before = read_status(out)[0]          # a run resumed in place: its status before this one claims it
    with RunStatus(out, kind="train") as status:
        origin = from_run(cfg, "train", taken)   # what resume=RUN took from the run's config
        run_cfg = validate(cfg)
        trust.sign_run(out, run_cfg, bool(taken))    # made by you: later commands take its plugins up (magrpo.core.trust)
        if plugins.loaded():
            log.info("plugins: %s", plugins.imported_with_why())
        if run_cfg.resume and Path(run_cfg.resume).resolve().is_relative_to(out.resolve()):
            step = checkpoint_step(Path(run_cfg.resume))
            if moved := set_aside_after(out, step):
                log.info("resuming in place from step %d: %d later row(s) of metrics.jsonl moved to "
                         "metrics.after_step_%d.jsonl", step, moved, step)
        status.phase = "setup"
        status.write({"status": "running", "kind": "train", "phase": "setup",
                      "config": {"task": run_cfg.task.name, "algo": run_cfg.algo.name, "seed": run_cfg.seed}})
        result = _fit(run_cfg, out, status, before, origin)
        result["sweep_value"] = sweep_value(run_cfg, result["final_eval"])   # a failure here marks the run failed
    metric = optimized_metric(run_cfg, result["primary_metric"])
    first = (result["initial_eval"] or {}).get(metric)
    log.info("finished: %d steps in %.0f s; %s %s%.4f (final eval); run dir %s", result["steps"],
             result["wall_seconds"], metric, "" if first is None else f"{first:.4f} -> ", result["sweep_value"], out)
    return result


def _fit(cfg: RunConfig, out: Path, status: RunStatus | None = None, before: str = "missing",
         origin: dict | None = None) -> dict:
    from magrpo.training import trainer  # noqa: PLC0415  start-up: torch loads only where a model does; --help and override errors answer without it

    try:
        fitting = as_setup_error(lambda: trainer.Trainer(cfg, out, status_before=before, from_run=origin))
        if status is not None:
            status.phase = "training"
        result = fitting.fit()
    except Exception as e:
        # Hydra turns the exception into an exit code; torchrun's failure report (its "root
        # cause", the first rank that failed) reads the traceback from this file instead.
        if os.environ.get("TORCHELASTIC_ERROR_FILE"):
            _elastic_errors().ErrorHandler().record_exception(e)
        raise
    trainer.shutdown()      # a failed rank raised: torchrun stops every other rank
    return result


def _elastic_errors():
    """torch's elastic error file (what torchrun reports of a failed rank), only under torchrun."""
    from torch.distributed.elastic.multiprocessing import errors  # noqa: PLC0415  start-up: torch's elastic error file only under torchrun

    return errors


def _run_and_score(cfg: DictConfig, taken: dict | None = None) -> float:
    quiet_progress_bars()   # again: joblib workers do not run main()
    return run(cfg, taken)["sweep_value"]


def sweep_value(cfg: RunConfig, final_eval: dict[str, float]) -> float:
    """The value a Hydra sweeper (Optuna...) optimises: `optimized_metric` of the final evaluation,
    by default the task's primary metric (pass@1 for coding, the normalized return for writing).
    The trainer checks at start that the evaluation reports it (Trainer.check_metrics)."""
    available_tasks()
    name = optimized_metric(cfg, primary_metric(TASKS[cfg.task.name], cfg.reward))
    if name not in final_eval:
        raise ConfigError(f"optimized_metric={name!r} is not in the final evaluation; it has: "
                          f"{', '.join(sorted(final_eval))}")
    return float(final_eval[name])


def train_job(cfg: DictConfig, taken: dict | None) -> float:
    """magrpo-train's Hydra job (launch.cli_main): the value a sweeper optimises."""
    score = run_job(lambda c: _run_and_score(c, taken), cfg, "magrpo-train")
    return float("nan") if score is None else score   # a failed job of a sweep: nan, as sweepers expect


def quiet_other_ranks(argv: list[str]) -> list[str]:
    """Under torchrun, ranks other than 0 write no .hydra/ copy (rank 0 owns the run directory) and
    print only their warnings and errors, each with its rank (conf/hydra/job_logging/other_rank.yaml):
    rank 0's lines are every rank's, printed once."""
    if int(os.environ.get("RANK", "0")) == 0:
        return argv
    given, argv = " ".join(argv), list(argv)
    if "hydra.output_subdir" not in given:
        argv.append("hydra.output_subdir=null")
    if "hydra/job_logging" not in given:
        argv.append("hydra/job_logging=other_rank")
    return argv


def main() -> None:
    argv = quiet_other_ranks(sys.argv[1:])
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):   # under torchrun, a failing rank's traceback is what it reports
        _elastic_errors().record(cli_main)(train_job, "magrpo-train", "train", argv)
    else:
        cli_main(train_job, "magrpo-train", "train", argv)


if __name__ == "__main__":
    main()
