"""magrpo-train: the one training entry point (a Hydra app over conf/train.yaml).

    magrpo-train                                   # embedded default: tiny agents, length_ratio
    magrpo-train task=tldr agents=qwen3_1.7b hardware=gpu logger=wandb
    magrpo-train -m seed=0,1,2 algo.advantage=mean,rloo     # a sweep

A bad config exits 2 and a missing model, data set or device exits 1, each with one line on
stderr and `summary.json` saying why; a failed job of a sweep leaves the other jobs running
(magrpo.launch).
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from magrpo.config import ConfigError, register_schemas, validate
from magrpo.launch import as_setup_error, conf_dir, exit_if_sweep_failed, run_job

log = logging.getLogger("magrpo")
CONF_DIR = str(conf_dir())
register_schemas()


def quiet_progress_bars() -> None:
    """HF's per-file progress bars (every checkpoint save and load) drown the training log."""
    import transformers

    transformers.utils.logging.disable_progress_bar()


def output_dir(cfg: DictConfig) -> Path:
    try:
        return Path(str(cfg.output_dir))
    except OmegaConfBaseException as e:
        raise ConfigError(f"output_dir cannot be resolved: {str(e).splitlines()[0]}") from None


def run(cfg: DictConfig) -> dict:
    """Validate, build and train; returns the final summary. Usable without Hydra (tests).

    The run directory is claimed first (no other live run may write it); whatever stops the run
    after that is recorded in its summary.json (status, phase, reason)."""
    from magrpo.tracking import RunStatus

    out = output_dir(cfg)
    with RunStatus(out, kind="train") as status:
        cfg = validate(cfg)
        status.phase = "setup"
        status.write({"status": "running", "kind": "train", "phase": "setup",
                      "config": {"task": cfg.task.name, "algo": cfg.algo.name, "seed": cfg.seed}})
        from magrpo.trainer import Trainer

        trainer = as_setup_error(lambda: Trainer(cfg, out))
        status.phase = "training"
        return trainer.fit()


def _run_and_score(cfg: DictConfig) -> float:
    quiet_progress_bars()   # again: joblib workers do not run main()
    result = run(cfg)
    return result["final_eval"]["reward_mean"]  # the value a Hydra sweeper optimises


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float:
    score = run_job(_run_and_score, cfg, "magrpo-train")
    return float("nan") if score is None else score   # a failed job of a sweep: nan, as sweepers expect


def main() -> None:
    quiet_progress_bars()
    _hydra_main()
    exit_if_sweep_failed()


if __name__ == "__main__":
    main()
