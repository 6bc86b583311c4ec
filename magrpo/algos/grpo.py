"""Single-agent GRPO (the paper's single-model baseline): one policy writes the whole joint answer
from the task's single-agent prompt and is trained with MAGRPO's group-relative update; it is
MAGRPO with N = 1 (same file, same math), only the team differs."""

from __future__ import annotations

from dataclasses import dataclass

from magrpo.algos.base import register_algo
from magrpo.algos.magrpo import MAGRPO, MAGRPOConfig


@dataclass
class GRPOConfig(MAGRPOConfig):
    name: str = "grpo"


@register_algo("grpo")
class GRPO(MAGRPO):
    config_schema = GRPOConfig
    algo: GRPOConfig           # its config_schema's instance (checked when built: TeamAlgorithm.reads)
    form = "single"
