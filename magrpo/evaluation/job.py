"""The evaluation job `magrpo-eval` runs on a composed config: validate it, load the team (a
checkpoint's or an exported team's agents, or the base models), evaluate every method on the task's
split, and write eval.json, eval.md, the samples and the summary.json every run writes (magrpo-table
reads eval runs and training runs alike). The command around it is magrpo/cli/evaluate.py.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from magrpo.config.run import EvalRunConfig
from magrpo.config.schemas import ConfigError, EvalRunSchema
from magrpo.core.checkpoint import resolve
from magrpo.core.instances import as_data
from magrpo.core.source import as_setup_error
from magrpo.core.tracking import RunLogger, RunStatus, run_identity, write_json
from magrpo.evaluation import collaboration
from magrpo.evaluation import loop as eval_loop
from magrpo.models import agents as models
from magrpo.rollout import record as rollout
from magrpo.rollout import turns
from magrpo.rollout.feedback import build_feedback
from magrpo.tasks import build_task
from magrpo.team import checks, team
from magrpo.validation import checks as validation

log = logging.getLogger("magrpo")

# Columns of eval.md, in this order, when present.
HEADLINE = ["reward_mean", "reward_std", "turn_1/reward_mean", "accuracy", "majority_accuracy",
            "turn_1/accuracy", "turn_1/majority_accuracy", "pass@1", "pass@3", "pass@5", "pass@10", "turn_1/pass@1",
            "rouge_l", "codebleu", "output_tokens_mean", "response_time_s"]


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory as given, or the newest complete checkpoint of a run directory;
    damaged ones are named and skipped (magrpo.core.checkpoint)."""
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


def validated(composed: DictConfig) -> EvalRunConfig:
    """The composed config (magrpo-eval's node, as the command composed it) checked as magrpo-eval's
    (magrpo.validation.checks.validate): a checkpoint resolved and verified; an exported team
    (`team=`) is checked whole, with this config's agents, when the evaluation starts (evaluate_run)."""
    cfg = validation.validate(composed, EvalRunSchema)
    if not isinstance(cfg, EvalRunConfig):      # validate hands an EvalRunSchema's config down as one
        raise TypeError(f"validate gave a {type(cfg).__name__} for magrpo-eval's config, not an EvalRunConfig")
    return cfg


def evaluate_run(cfg: EvalRunConfig, out: Path, status: RunStatus, origin: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load the team (or the base models) and evaluate every method of the validated `cfg` into the
    run directory `out`; `status` is the run's RunStatus (its phase), `origin` what the command line
    took from a run (magrpo.launch.run_config.from_run). Returns eval.json's content."""
    if cfg.team:
        checks.check_team_option(cfg)     # the exported team, whole, with this config's agents
    status.phase = "setup"
    ckpt = Path(cfg.checkpoint) if cfg.checkpoint else None
    team_dir = cfg.team
    weights = str(ckpt) if ckpt else team_dir
    methods = list(cfg.methods) if cfg.methods else (["team"] if weights else rollout.BASELINES)
    models.seed_everything(cfg.seed)

    def setup() -> tuple[Any, list, list]:
        task = build_task(cfg.task, cfg.reward, cfg.sandbox)
        items = task.load(cfg.split)
        items = items[:cfg.eval.num_items] if cfg.eval.num_items else items
        if team_dir:
            # the team's own folders, with this command's agents settings (checked against the team's:
            # check_team_option); trust_remote_code only from this command line, never the team's
            trust = any(m.trust_remote_code for m in cfg.agents.models)
            root = Path(team_dir)
            agents, _ = team.team_agents(root, checks.read_team(root), cfg.agents, cfg.hardware, trust)
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
                  **task_info, "from_run": origin, "config": as_data(cfg)}
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


