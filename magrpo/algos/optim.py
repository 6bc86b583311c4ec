"""The optimizers of the policies (and of separate critic models): each agent's settings, AdamW
with its learning-rate schedule, and the step every algorithm takes (gradients summed over
data-parallel ranks, the norm clipped)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from magrpo.config.run import RunConfig
from magrpo.config.schemas import OptimizerSchema
from magrpo.models import distributed
from magrpo.models.agents import set_keys


def agent_optimizer(cfg: RunConfig, agent: int) -> OptimizerSchema:
    """The `optimizer` settings of agent `agent` (0-based): the shared group with the non-null keys
    of agents.models[agent].optimizer on top (one models entry serves every agent)."""
    models = cfg.agents.models
    own = set_keys((models[agent] if agent < len(models) else models[0]).optimizer) if len(models) else {}
    return dataclasses.replace(cfg.optimizer, **own) if own else cfg.optimizer


def agent_overrides(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """Who -> the per-agent settings that differ from the shared groups (for summary.json): by
    agent name, or under "all" when one models entry serves every agent."""
    models = cfg.agents.models
    out = {}
    for i, spec in enumerate(models):
        groups = {"optimizer": set_keys(spec.optimizer), "sampling": set_keys(spec.sampling)}
        own = {group: keys for group, keys in groups.items() if keys}
        if own:
            out[f"agent_{i + 1}" if len(models) > 1 else "all"] = own
    return out


def build_optimizer(params: list[torch.nn.Parameter], opt_cfg: OptimizerSchema, total_steps: int,
                    lr: float | None = None) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with linear warm-up, then a constant / linear / cosine schedule to 0 over `total_steps`."""
    beta1, beta2 = opt_cfg.betas          # two numbers (OptimizerSchema checks it)
    optimizer = torch.optim.AdamW(params, lr=lr or opt_cfg.lr, betas=(beta1, beta2), eps=opt_cfg.eps,
                                  weight_decay=opt_cfg.weight_decay)
    warmup, total = opt_cfg.warmup_steps, max(total_steps, 1)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        if opt_cfg.schedule == "linear":
            return 1.0 - progress
        if opt_cfg.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def clip_and_step(params: list[torch.nn.Parameter], optimizer, scheduler, max_grad_norm: float | None) -> float:
    """Sum the gradients over data-parallel ranks, clip their norm (when set), step; returns the
    pre-clip norm (0 when clipping is off)."""
    distributed.sum_gradients(params)
    norm = 0.0
    if max_grad_norm is not None:
        norm = float(distributed.grad_norm(params))     # sharded (fsdp) and plain gradients together
        coef = min(max_grad_norm / (norm + 1e-6), 1.0)  # as torch.nn.utils.clip_grad_norm_
        if coef < 1.0:
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(coef)
    optimizer.step()
    scheduler.step()
    return norm
