"""Where metrics go: `metrics.jsonl` and `summary.json` always, W&B when `logger=wandb`.

metrics.jsonl holds one JSON object per logged step (`step` plus namespaced keys, SPEC §9); each
line is flushed as it is written, so a crashed run keeps everything up to its last step.
summary.json is rewritten atomically after every evaluation.
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

            self.wandb = wandb.init(
                project=lg.project, entity=lg.entity, group=lg.group, name=lg.run_name or run_dir.name,
                tags=list(lg.tags), job_type=lg.job_type, mode=lg.mode, dir=str(run_dir),
                config=OmegaConf.to_container(cfg, resolve=True), reinit="finish_previous")
            log.info("W&B run %s (%s) in %s", self.wandb.name, lg.mode, run_dir / "wandb")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: (float(v) if isinstance(v, (int, float)) else v) for k, v in metrics.items()}}
        self._file.write(json.dumps(_clean(row)) + "\n")
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

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
            self.wandb.log({name: table}, step=step)

    def summary(self, data: dict) -> None:
        write_json(self.run_dir / "summary.json", data)
        if self.wandb is not None:
            for k, v in flatten(data).items():
                if isinstance(v, (int, float, str, bool)) or v is None:
                    self.wandb.summary[k] = v

    def close(self) -> None:
        self._file.close()
        if self.wandb is not None:
            self.wandb.finish()
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
