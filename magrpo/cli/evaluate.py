"""magrpo-eval: a trained team or base models, and the prompting baselines, on a task's eval split.

    magrpo-eval task=humaneval eval.num_samples=10            # the four prompting baselines
    magrpo-eval checkpoint=outputs/train/<run>                # the trained team (newest complete checkpoint)
    magrpo-eval checkpoint=<run> methods=[team,discussion]
    magrpo-eval checkpoint=<run> task=arxiv                   # the same team on another task, on purpose
    magrpo-eval team=exports/<team>                           # an exported team (magrpo-export), or a hub id

With `checkpoint=` (or `team=`), the team's shape (task and data, agents, algorithm, turns, feedback, sampling)
is taken from the run's saved overrides; a key on the command line wins, and eval.json and
summary.json record both values under `from_run` (magrpo.launch.run_config).

Writes `eval.json` (method -> metrics, plus the settings) and `eval.md` (a table) into its run
directory, and one `samples_<method>.jsonl` of example completions per method. It also writes the
`summary.json` every training run writes (`eval_summary`), so a sweep that mixes prompting
baselines and trained methods yields run directories of one layout for `magrpo-table`. The models,
the evaluation loop and the checks of a composed config (torch, transformers) are imported once a
job starts, so `--help` and an override Hydra cannot apply answer without them.
"""

from __future__ import annotations

# isort: off
import magrpo.core.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

from typing import Any

from omegaconf import DictConfig

from magrpo.core import trust
from magrpo.core.tracking import RunStatus
from magrpo.launch import check_run_dir, cli_main, keep_saved_config, output_dir, run_job
from magrpo.launch.run_config import from_run


def run_eval(cfg: DictConfig, taken: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validate, load, evaluate every method (magrpo.evaluation.job, imported when a job starts);
    returns eval.json's content. A failure leaves summary.json (status failed, phase, reason);
    success leaves eval.json. `taken`: what the command line took up from the run
    `checkpoint=`/`team=` names (magrpo.launch.run_config)."""
    from magrpo.evaluation import job  # noqa: PLC0415  start-up: torch loads only where a model does; --help and override errors answer without it

    out = output_dir(cfg)
    check_run_dir(out)
    keep_saved_config(out)
    with RunStatus(out, kind="eval", heartbeat=False) as status:
        origin = from_run(cfg, "eval", taken)  # what checkpoint=RUN took from the run's config
        if taken:                             # what the taken-up run or team names, resolved, is trusted
            trust.check_composed(cfg, "the composed config")
        run_cfg = job.validated(cfg)          # an EvalRunConfig; resolves and verifies the checkpoint too
        trust.sign_run(out, run_cfg, bool(taken))  # made by you: magrpo-table takes up its plugins (magrpo.core.trust)
        return job.evaluate_run(run_cfg, out, status, origin)


def eval_job(cfg: DictConfig, taken: dict[str, Any] | None) -> None:
    """magrpo-eval's Hydra job (launch.cli_main)."""
    run_job(lambda c: run_eval(c, taken), cfg, "magrpo-eval")


def main() -> None:
    cli_main(eval_job, "magrpo-eval", "eval")


if __name__ == "__main__":
    main()
