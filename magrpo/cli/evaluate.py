"""magrpo-eval: a trained team or base models, and the prompting baselines, on a task's eval split.

    magrpo-eval task=humaneval eval.num_samples=10            # the four prompting baselines
    magrpo-eval checkpoint=outputs/train/<run>                # the trained team (newest complete checkpoint)
    magrpo-eval checkpoint=<run> methods=[team,discussion]
    magrpo-eval checkpoint=<run> task=arxiv                   # the same team on another task, on purpose
    magrpo-eval team=exports/<team>                           # an exported team (magrpo-export), or a hub id

With `checkpoint=` (or `team=`), the team's shape (task and data, agents, algorithm, turns, feedback, sampling)
is taken from the run's saved overrides; a key on the command line wins, and eval.json and
summary.json record both values under `from_run` (magrpo.run_config).

Writes `eval.json` (method -> metrics, plus the settings) and `eval.md` (a table) into its run
directory, and one `samples_<method>.jsonl` of example completions per method. It also writes the
`summary.json` every training run writes (`eval_summary`), so a sweep that mixes prompting
baselines and trained methods yields run directories of one layout for `magrpo-table`. The models,
the evaluation loop and the checks of a composed config (torch, transformers) are imported once a
job starts, so `--help` and an override Hydra cannot apply answer without them.
"""

from __future__ import annotations

# isort: off
import magrpo.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from magrpo import trust
from magrpo.checkpoint import resolve
from magrpo.config import ConfigError, EvalRunSchema
from magrpo.feedback import build_feedback
from magrpo.launch import (
    as_setup_error,
    check_run_dir,
    cli_main,
    keep_saved_config,
    output_dir,
    run_job,
)
from magrpo.run_config import from_run
from magrpo.tasks import build_task
from magrpo.tracking import RunLogger, RunStatus, run_identity, write_json

log = logging.getLogger("magrpo")

# Columns of eval.md, in this order, when present.
HEADLINE = ["reward_mean", "reward_std", "turn_1/reward_mean", "accuracy", "majority_accuracy",
            "turn_1/accuracy", "turn_1/majority_accuracy", "pass@1", "pass@3", "pass@5", "pass@10", "turn_1/pass@1",
            "rouge_l", "codebleu", "output_tokens_mean", "response_time_s"]


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory as given, or the newest complete checkpoint of a run directory;
    damaged ones are named and skipped (magrpo.checkpoint)."""
    return resolve(path, "checkpoint")


def markdown_table(results: dict[str, dict[str, float]]) -> str:
    multi_turn = any(k.startswith("turn_2/") for m in results.values() for k in m)
    cols = [c for c in HEADLINE if any(c in m for m in results.values())
            and (multi_turn or not c.startswith("turn_"))]   # turn 1 is the answer itself in one turn
    cols += sorted({k for m in results.values() for k in m if k.startswith("reward/")})
    lines = ["| method | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for method, m in results.items():
        lines.append(f"| {method} | " + " | ".join(f"{m[c]:.4f}" if c in m else "" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def eval_summary(status: str, results: dict[str, dict[str, float]], identity: dict[str, Any],
                 wall_seconds: float) -> dict[str, Any]:
    """summary.json of an eval run, in the training runs' layout: `final_eval` is the metrics of the
    run's (first) method, `results` holds every method's; nothing was trained (steps 0)."""
    first = next(iter(results.values()), None)
    return {"status": status, "job_type": "eval", "initial_eval": None, "final_eval": first, "results": results,
            "best": None, "steps": 0, "wall_seconds": wall_seconds, "evals": [], "config": identity}


def run_eval(cfg: DictConfig, taken: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validate, load, evaluate every method; returns {"results": {method: metrics}, ...}.
    A failure leaves summary.json (status failed, phase, reason); success leaves eval.json.
    `taken`: what the command line took up from the run `checkpoint=`/`team=` names (magrpo.run_config)."""
    from magrpo import team, validation  # noqa: PLC0415  start-up: torch loads only where a model does; --help and override errors answer without it

    out = output_dir(cfg)
    check_run_dir(out)
    keep_saved_config(out)
    with RunStatus(out, kind="eval", heartbeat=False) as status:
        origin = from_run(cfg, "eval", taken)  # what checkpoint=RUN took from the run's config
        if taken:                             # what the taken-up run or team names, resolved, is trusted
            trust.check_composed(cfg, "the composed config")
        cfg = validation.validate(cfg, EvalRunSchema)    # resolves and verifies the checkpoint too
        trust.sign_run(out, cfg, bool(taken))  # made by you: magrpo-table takes up its plugins (magrpo.trust)
        if cfg.team:
            team.check_team_option(cfg)       # the exported team, whole, with this config's agents
        status.phase = "setup"
        return _evaluate(cfg, out, status, origin)


def _evaluate(cfg: DictConfig, out: Path, status: Any, origin: dict[str, Any] | None = None) -> dict[str, Any]:
    from magrpo import collaboration, eval_loop, models, rollout, team, trainer, turns  # noqa: PLC0415  start-up: torch loads only where a model does; --help and override errors answer without it

    ckpt = Path(cfg.checkpoint) if cfg.checkpoint else None
    team_dir = cfg.team
    weights = str(ckpt) if ckpt else team_dir
    methods = list(cfg.methods) if cfg.methods else (["team"] if weights else rollout.BASELINES)
    trainer.seed_everything(cfg.seed)

    def setup() -> tuple[Any, list, list]:
        task = build_task(cfg.task, cfg.reward, cfg.sandbox)
        items = task.load(cfg.split)
        items = items[:cfg.eval.num_items] if cfg.eval.num_items else items
        if team_dir:
            # the team's own folders, with this command's agents settings (checked against the team's:
            # check_team_option); trust_remote_code only from this command line, never the team's
            trust = any(m.trust_remote_code for m in cfg.agents.models)
            root = Path(team_dir)
            agents, _ = team.team_agents(root, team.read_team(root), cfg.agents, cfg.hardware, trust)
            log.info("loaded the exported team %s", team_dir)
        else:
            agents = team.load_team_agents(cfg, cfg.hardware, ckpt)
        return task, items, agents

    task, items, agents = as_setup_error(setup)
    task_info = as_setup_error(task.run_info)   # e.g. the sandbox level that runs the code
    if not items:
        raise ConfigError(f"split={cfg.split!r} of task {cfg.task.name!r} has no items to evaluate")
    status.phase = "evaluation"
    spec, feedback = turns.TurnSpec.from_algo(cfg.algo), build_feedback(cfg.feedback, task)
    base: list = []

    def base_agents() -> list:
        """The untrained models for eval.ablation=base, for agents without an adapter to switch off:
        the agents themselves without trained weights, else fresh copies of the run's models
        (agents.models, from the run's config; an exported team's are checked to be the ones it
        was trained from), loaded once for every method."""
        if weights is None:
            return agents
        if not base:
            base.extend(models.load_agents(cfg.agents, cfg.hardware, len(agents), need_reference=False))
        return base

    diagnostics = collaboration.CollaborationConfig.from_eval(cfg.eval, base_agents)
    logger = RunLogger(cfg, out)
    results: dict[str, dict[str, float]] = {}
    identity = {**run_identity(cfg), "methods": methods, "checkpoint": str(ckpt) if ckpt else None,
                "team": team_dir}
    started, outcome = time.time(), "failed"
    try:
        for method in methods:
            metrics, examples = eval_loop.evaluate(agents, task, items, eval_loop.eval_sampling(cfg),
                                                   cfg.eval.batch_size, seed=cfg.seed + 7919,
                                                   num_examples=cfg.eval.log_completions, scheme=method,
                                                   turns=spec, feedback=feedback, diagnostics=diagnostics)
            results[method] = metrics
            logger.log(0, {f"eval/{method}/{k}": v for k, v in metrics.items()})
            logger.log_examples(0, f"samples_{method}", examples)
            log.info("%s: reward_mean=%.4f", method, metrics["reward_mean"])
        report = {"task": cfg.task.name, "split": cfg.split, "num_items": len(items),
                  "num_samples": cfg.eval.num_samples, "checkpoint": str(ckpt) if ckpt else None, "team": team_dir,
                  "models": [m.name_or_path for m in cfg.agents.models], "seed": cfg.seed, "results": results,
                  **task_info, "from_run": origin, "config": OmegaConf.to_container(cfg, resolve=True)}
        write_json(out / "eval.json", report)
        title = f"# {cfg.task.name} ({cfg.split}, {len(items)} items x {cfg.eval.num_samples} samples)\n\n"
        source = f"Weights: {weights}\n\n" if weights else "Weights: base models (untrained)\n\n"
        (out / "eval.md").write_text(title + source + markdown_table(results))
        log.info("wrote %s and %s", out / "eval.json", out / "eval.md")
        outcome = "finished"
        return report
    finally:
        logger.summary({**eval_summary(outcome, results, identity, time.time() - started), "from_run": origin})
        logger.close(0 if outcome == "finished" else 1)


def eval_job(cfg: DictConfig, taken: dict[str, Any] | None) -> None:
    """magrpo-eval's Hydra job (launch.cli_main)."""
    run_job(lambda c: run_eval(c, taken), cfg, "magrpo-eval")


def main() -> None:
    cli_main(eval_job, "magrpo-eval", "eval")


if __name__ == "__main__":
    main()
