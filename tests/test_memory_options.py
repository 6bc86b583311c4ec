"""Memory options: gradient checkpointing (hardware.*, with agents.* as an alias), bf16 autocast,
and micro-batches; each changes what is stored, not what is learned."""

import pytest
import torch

from magrpo.algos.magrpo import MAGRPO
from magrpo.config import validate
from magrpo.models import load_agents
from magrpo.rollout import Sampling, generate
from magrpo.tasks import build_task
from magrpo.train import run


def _update_grads(make_cfg, overrides):
    cfg = validate(make_cfg(["optimizer.max_grad_norm=1e9", *overrides]))
    agents = load_agents(cfg.agents, cfg.hardware, 1, need_reference=False)
    algo = MAGRPO(cfg, agents, build_task(cfg.task, cfg.reward))
    torch.manual_seed(0)
    gen = generate(agents[0], ["explain bees", "a longer prompt about the water cycle"], Sampling(3, 10))
    metrics = algo._update(0, gen, torch.linspace(-1, 1, 6))
    grads = {n: p.grad.clone() for n, p in agents[0].model.named_parameters() if p.grad is not None}
    return agents[0], grads, metrics


@pytest.mark.parametrize("key", ["hardware.gradient_checkpointing", "agents.gradient_checkpointing"])
def test_gradient_checkpointing_recomputes_the_same_gradients(make_cfg, key):
    agent, grads, _ = _update_grads(make_cfg, [f"{key}=true"])
    assert agent.model.is_activation_checkpointing
    _, want, _ = _update_grads(make_cfg, [])
    for name in want:
        torch.testing.assert_close(grads[name], want[name], atol=1e-5, rtol=0, msg=name)


def test_micro_batches_bound_the_rows_per_forward(make_cfg):
    _, want, _ = _update_grads(make_cfg, ["algo.micro_batch_size=64"])
    _, grads, _ = _update_grads(make_cfg, ["algo.micro_batch_size=2"])
    for name in want:
        torch.testing.assert_close(grads[name], want[name], atol=1e-5, rtol=0, msg=name)


def test_bf16_autocast_runs_the_forwards_in_bf16_and_keeps_fp32_weights(make_cfg):
    agent, grads, metrics = _update_grads(make_cfg, ["hardware.autocast=bf16"])
    assert all(p.dtype == torch.float32 for p in agent.model.parameters())
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads.values())
    ids = torch.tensor([[1, 2, 3]])
    assert agent.model(input_ids=ids).logits.dtype == torch.bfloat16
    assert metrics["loss"] == pytest.approx(metrics["loss"])        # finite


def test_a_smoke_run_with_every_memory_option(make_cfg):
    result = run(make_cfg(["debug=smoke", "algo.max_new_tokens=8", "hardware.gradient_checkpointing=true",
                           "hardware.autocast=bf16", "algo.micro_batch_size=3"]))
    assert result["steps"] == 2
