"""magrpo-train: the one training entry point (a Hydra app over conf/train.yaml).

    magrpo-train                                   # embedded default: tiny agents, length_ratio
    magrpo-train task=tldr agents=qwen3_1.7b hardware=gpu logger=wandb
    magrpo-train -m seed=0,1,2 algo.advantage=mean,rloo     # a sweep
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from magrpo.config import ConfigError, register_schemas, validate

log = logging.getLogger("magrpo")
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
register_schemas()


def quiet_progress_bars() -> None:
    """HF's per-file progress bars (every checkpoint save and load) drown the training log."""
    import transformers

    transformers.utils.logging.disable_progress_bar()


def run(cfg: DictConfig) -> dict:
    """Validate, build and train; returns the final summary. Usable without Hydra (tests)."""
    from magrpo.trainer import Trainer

    cfg = validate(cfg)
    return Trainer(cfg, Path(cfg.output_dir)).fit()


def sweep_value(cfg: DictConfig, final_eval: dict[str, float]) -> float:
    """The value a Hydra sweeper (Optuna...) optimises: `optimized_metric` of the final evaluation,
    by default the task's primary metric (pass@1 for coding, the normalized return for writing)."""
    from magrpo.tasks import TASKS, available_tasks

    available_tasks()
    name = cfg.get("optimized_metric") or TASKS[cfg.task.name].primary_metric
    if name not in final_eval:
        raise ConfigError(f"optimized_metric={name!r} is not in the final evaluation; it has: "
                          f"{', '.join(sorted(final_eval))}")
    return float(final_eval[name])


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float:
    try:
        result = run(cfg)
        return sweep_value(cfg, result["final_eval"])
    except ConfigError as e:
        log.error("config error: %s", e)
        sys.exit(2)


def main() -> None:
    quiet_progress_bars()
    _hydra_main()


if __name__ == "__main__":
    main()
