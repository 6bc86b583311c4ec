"""magrpo-train: the one training entry point (a Hydra app over conf/train.yaml).

    magrpo-train                                   # embedded default: tiny agents, length_ratio
    magrpo-train task=tldr agents=qwen3_1.7b hardware=gpu logger=wandb
    magrpo-train -m seed=0,1,2 algo.advantage=mean,rloo     # a sweep
    torchrun --nproc_per_node 2 -m magrpo.train ...         # data-parallel over 2 processes
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig
from torch.distributed.elastic.multiprocessing.errors import record

from magrpo import distributed
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
    try:
        result = Trainer(cfg, Path(cfg.output_dir)).fit()
    except Exception as e:
        # Hydra turns the exception into an exit code; torchrun's failure report (its "root
        # cause", the first rank that failed) reads the traceback from this file instead.
        if os.environ.get("TORCHELASTIC_ERROR_FILE"):
            from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

            ErrorHandler().record_exception(e)
        raise
    distributed.shutdown()      # a failed rank raised: torchrun stops every other rank
    return result


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float:
    try:
        result = run(cfg)
    except ConfigError as e:
        log.error("config error: %s", e)
        sys.exit(2)
    return result["final_eval"]["reward_mean"]  # the value a Hydra sweeper optimises


def quiet_other_ranks() -> None:
    """Under torchrun, ranks other than 0 log to stdout only and write no .hydra/ copy: rank 0
    owns the run directory."""
    if int(os.environ.get("RANK", "0")) > 0:
        given = " ".join(sys.argv[1:])
        if "hydra.output_subdir" not in given:
            sys.argv.append("hydra.output_subdir=null")
        if "hydra/job_logging" not in given:
            sys.argv.append("hydra/job_logging=stdout")


@record        # under torchrun, a failing rank's traceback is what the launcher reports
def main() -> None:
    quiet_progress_bars()
    quiet_other_ranks()
    _hydra_main()


if __name__ == "__main__":
    main()
