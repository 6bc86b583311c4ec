"""Shared fixtures: Hydra-composed configs over conf/, and an isolated model cache per session."""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from magrpo.train import CONF_DIR

# Hub look-ups fail fast instead of retrying; the tests never need the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def compose_cfg(overrides: list[str] | None = None, config_name: str = "train"):
    """The composed config exactly as `magrpo-train OVERRIDES` sees it (hydra:* resolvable)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides or [], return_hydra_config=False)


@pytest.fixture
def make_cfg(tmp_path):
    """Compose a train config whose output_dir is a fresh tmp dir."""
    def _make(overrides: list[str] | None = None, out: str | None = None):
        return compose_cfg([f"output_dir={out or tmp_path / 'run'}", *(overrides or [])])

    return _make
