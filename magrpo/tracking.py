"""Where metrics go: `metrics.jsonl` and `summary.json` always, W&B when `logger=wandb`.

metrics.jsonl holds one JSON object per logged step (`step` plus namespaced keys, SPEC §9); each
line is flushed as it is written, so a crashed run keeps everything up to its last step.
summary.json is rewritten atomically after every evaluation.

On W&B, every job of a sweep joins one group (`logger.group`, else the sweep directory's name),
is named `<algo>-<task>-<seed>`, and carries the run's key choices (`run_identity`) as top-level
config keys next to the full config (under `cfg`), so a dashboard can group and filter by them.
A run that raises finishes its W&B run with a non-zero exit code (shown as failed).
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

log = logging.getLogger(__name__)


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null rather than invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_clean(data), indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def run_identity(cfg: Any) -> dict[str, Any]:
    """The choices a run is compared by: the same keys in summary.json's config and at the top of
    the W&B config. `algo` is the trained algorithm, or for magrpo-eval the evaluated method(s)."""
    from magrpo.algos import ALGOS

    job_type = "eval" if "methods" in cfg else cfg.logger.get("job_type", "train")   # magrpo-eval has `methods`
    methods = list(cfg.get("methods") or [])
    if job_type == "eval":
        algo = ",".join(methods) if methods else ("team" if cfg.get("checkpoint") else "baselines")
        num_agents = 1 if methods == ["single"] else cfg.agents.num_agents
    else:
        algo = cfg.algo.name
        num_agents = ALGOS[algo].team(cfg).num_policies if algo in ALGOS else cfg.agents.num_agents
    return {"label": cfg.get("label") or algo, "algo": algo, "task": cfg.task.name, "seed": cfg.seed,
            "num_agents": num_agents, "models": [m.name_or_path for m in cfg.agents.models],
            "num_turns": cfg.algo.get("num_turns", 1), "feedback": cfg.feedback.get("mode", "none"),
            "job_type": job_type}


def sweep_group() -> str | None:
    """`<job name>-<sweep dir name>` inside a Hydra multirun (one W&B group per sweep), else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return None
        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return None
        return f"{hc.job.name}-{Path(hc.sweep.dir).name}"
    except Exception:  # outside a Hydra app the config is not there to read
        return None


# x-axis and summaries of the logged namespaces: evaluations keep their best (max) and last value.
STEP_METRICS = {"train/*": "last", "eval/*": "max,last", "time/*": "last", "speed/*": "last"}


class RunLogger:
    def __init__(self, cfg: Any, run_dir: Path):
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = run_dir / "metrics.jsonl"
        self._file = open(self.metrics_path, "a", buffering=1)
        self.wandb = None
        lg = cfg.logger
        if lg.name == "wandb" and lg.mode != "disabled":
            import wandb

            ident = run_identity(cfg)
            group = lg.group or sweep_group() or f"{ident['task']}-{ident['label']}"
            name = lg.run_name or f"{ident['label']}-{ident['task']}-{ident['seed']}"
            self.wandb = wandb.init(
                project=lg.project, entity=lg.entity, group=group, name=name,
                tags=list(lg.tags), job_type=ident["job_type"], mode=lg.mode, dir=str(run_dir),
                config={**ident, "run_dir": str(run_dir), "cfg": OmegaConf.to_container(cfg, resolve=True)},
                reinit="finish_previous")
            self.wandb.define_metric("step", hidden=True)
            for pattern, summary in STEP_METRICS.items():
                self.wandb.define_metric(pattern, step_metric="step", summary=summary)
            log.info("W&B run %s (%s, group %s) in %s", name, lg.mode, group, run_dir / "wandb")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: (float(v) if isinstance(v, (int, float)) else v) for k, v in metrics.items()}}
        self._file.write(json.dumps(_clean(row)) + "\n")
        if self.wandb is not None:
            self.wandb.log({"step": step, **metrics}, step=step)

    def log_examples(self, step: int, name: str, rows: list[dict]) -> None:
        """Sample completions: a W&B table when W&B is on, and always a jsonl file per run."""
        if not rows:
            return
        with open(self.run_dir / f"{name.replace('/', '_')}.jsonl", "a") as f:
            for r in rows:
                f.write(json.dumps(_clean({"step": step, **r}), default=str) + "\n")
        if self.wandb is not None:
            import wandb

            cols = ["step", "id", "prompts", "completions", "reward"]
            table = wandb.Table(columns=cols, data=[[step, str(r.get("id")), json.dumps(r.get("prompts")),
                                                    json.dumps(r.get("completions")), float(r.get("reward", 0.0))]
                                                   for r in rows])
            self.wandb.log({"step": step, name: table}, step=step)

    def summary(self, data: dict) -> None:
        write_json(self.run_dir / "summary.json", data)
        if self.wandb is not None:
            for k, v in flatten(data).items():
                if isinstance(v, (int, float, str, bool)) or v is None:
                    self.wandb.summary[k] = v

    def close(self, exit_code: int = 0) -> None:
        """Flush and finish; a non-zero `exit_code` marks the W&B run as failed."""
        self._file.close()
        if self.wandb is not None:
            self.wandb.finish(exit_code=exit_code)
            self.wandb = None


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out
