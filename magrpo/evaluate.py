"""magrpo-eval: a trained team or base models, and the prompting baselines, on a task's eval split.

    magrpo-eval task=humaneval eval.num_samples=10            # the four prompting baselines
    magrpo-eval checkpoint=outputs/train/<run>                # the trained team (last checkpoint)
    magrpo-eval checkpoint=<run> methods=[team,discussion]

Writes `eval.json` (method -> metrics, plus the settings) and `eval.md` (a table) into its run
directory, and one `samples_<method>.jsonl` of example completions per method. It also writes the
`summary.json` every training run writes (`eval_summary`), so a sweep that mixes prompting
baselines and trained methods yields run directories of one layout for `magrpo-table`.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from magrpo.config import ConfigError, EvalRunSchema, validate
from magrpo.train import CONF_DIR, quiet_progress_bars

log = logging.getLogger("magrpo")

BASELINES = ["single", "naive_concat", "sequential", "discussion"]
# Columns of eval.md, in this order, when present.
HEADLINE = ["reward_mean", "reward_std", "pass@1", "pass@3", "pass@5", "pass@10", "rouge_l", "codebleu",
            "output_tokens_mean", "response_time_s"]


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory as given, or the newest checkpoint of a run directory."""
    from magrpo.trainer import STATE_FILE

    p = Path(path).expanduser()
    if (p / STATE_FILE).exists():
        return p
    steps = sorted((p / "checkpoints").glob("step_*"), key=lambda d: int(d.name.split("_")[1]))
    if not steps:
        raise ConfigError(f"checkpoint={str(path)!r}: neither a checkpoint (no {STATE_FILE}) nor a run "
                          f"directory with checkpoints/step_*")
    return steps[-1]


def markdown_table(results: dict[str, dict[str, float]]) -> str:
    cols = [c for c in HEADLINE if any(c in m for m in results.values())]
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


def run_eval(cfg: DictConfig) -> dict[str, Any]:
    """Validate, load, evaluate every method; returns {"results": {method: metrics}, ...}."""
    from magrpo.evaluation import eval_sampling, evaluate
    from magrpo.models import load_agent_weights, load_agents
    from magrpo.tasks import build_task
    from magrpo.tracking import RunLogger, run_identity, write_json
    from magrpo.trainer import seed_everything

    cfg = validate(cfg, EvalRunSchema)
    out = Path(cfg.output_dir)
    ckpt = resolve_checkpoint(cfg.checkpoint) if cfg.checkpoint else None
    methods = list(cfg.methods) if cfg.methods else (["team"] if ckpt else BASELINES)
    seed_everything(cfg.seed)
    task = build_task(cfg.task, cfg.reward)
    items = task.load(cfg.split)
    items = items[:cfg.eval.num_items] if cfg.eval.num_items else items
    from magrpo.algos import ALGOS

    num_agents = ALGOS[cfg.algo.name].team(cfg).num_policies
    agents = load_agents(cfg.agents, cfg.hardware, num_agents, need_reference=False)
    if ckpt is not None:
        for agent in agents:
            load_agent_weights(agent, ckpt / agent.name)
        log.info("loaded trained weights from %s", ckpt)
    logger = RunLogger(cfg, out)
    results: dict[str, dict[str, float]] = {}
    identity = {**run_identity(cfg), "methods": methods, "checkpoint": str(ckpt) if ckpt else None}
    started, status = time.time(), "failed"
    try:
        for method in methods:
            if method not in ("single", "team") and len(agents) < 2:
                raise ConfigError(f"method {method!r} needs at least 2 agents; agents.num_agents={len(agents)}")
            with torch.no_grad():
                metrics, examples = evaluate(agents, task, items, eval_sampling(cfg), cfg.eval.batch_size,
                                             seed=cfg.seed + 7919, num_examples=cfg.eval.log_completions,
                                             scheme=method)
            results[method] = metrics
            logger.log(0, {f"eval/{method}/{k}": v for k, v in metrics.items()})
            logger.log_examples(0, f"samples_{method}", examples)
            log.info("%s: reward_mean=%.4f", method, metrics["reward_mean"])
        report = {"task": cfg.task.name, "split": cfg.split, "num_items": len(items),
                  "num_samples": cfg.eval.num_samples, "checkpoint": str(ckpt) if ckpt else None,
                  "models": [m.name_or_path for m in cfg.agents.models], "seed": cfg.seed, "results": results,
                  "config": OmegaConf.to_container(cfg, resolve=True)}
        write_json(out / "eval.json", report)
        title = f"# {cfg.task.name} ({cfg.split}, {len(items)} items x {cfg.eval.num_samples} samples)\n\n"
        source = f"Weights: {ckpt}\n\n" if ckpt else "Weights: base models (untrained)\n\n"
        (out / "eval.md").write_text(title + source + markdown_table(results))
        log.info("wrote %s and %s", out / "eval.json", out / "eval.md")
        status = "finished"
        return report
    finally:
        logger.summary(eval_summary(status, results, identity, time.time() - started))
        logger.close(0 if status == "finished" else 1)


@hydra.main(config_path=CONF_DIR, config_name="eval", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    try:
        run_eval(cfg)
    except ConfigError as e:
        log.error("config error: %s", e)
        sys.exit(2)


def main() -> None:
    quiet_progress_bars()
    _hydra_main()


if __name__ == "__main__":
    main()
