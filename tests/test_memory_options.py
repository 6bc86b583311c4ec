"""Memory options: gradient checkpointing (hardware.*, with agents.* as an alias), bf16 autocast,
and micro-batches; each changes what is stored, not what is learned."""

import pytest
import torch

from magrpo.algos.magrpo import MAGRPO
from magrpo.cli.train import run
from magrpo.models.agents import load_agents
from magrpo.rollout.record import Sampling, generate
from magrpo.tasks import build_task
from magrpo.validation.checks import validate


def _update_grads(make_cfg, overrides):
    cfg = validate(make_cfg(["optimizer.max_grad_norm=1e9", *overrides]))
    agents = load_agents(cfg.agents, cfg.hardware, 1, need_reference=False)
    algo = MAGRPO(cfg, agents, build_task(cfg.task, cfg.reward))
    torch.manual_seed(0)
    gen = generate(agents[0], ["explain bees", "a longer prompt about the water cycle"], Sampling(3, 10))
    metrics = algo._update(0, gen, torch.linspace(-1, 1, 6))
    grads = {n: p.grad.clone() for n, p in agents[0].model.named_parameters() if p.grad is not None}
    return agents[0], grads, metrics


def test_gradient_checkpointing_recomputes_the_same_gradients(make_cfg):
    agent, grads, _ = _update_grads(make_cfg, ["hardware.gradient_checkpointing=true"])
    assert agent.model.is_activation_checkpointing
    _, want, _ = _update_grads(make_cfg, [])
    for name in want:
        torch.testing.assert_close(grads[name], want[name], atol=1e-5, rtol=0, msg=name)


def test_micro_batches_bound_the_rows_per_forward(make_cfg):
    _, want, _ = _update_grads(make_cfg, ["algo.micro_batch_size=64"])
    _, grads, _ = _update_grads(make_cfg, ["algo.micro_batch_size=2"])
    for name in want:
        torch.testing.assert_close(grads[name], want[name], atol=1e-5, rtol=0, msg=name)


# hardware.cpu_bf16: auto widens the products where the CPU has no bf16 unit; native runs torch's own
# bf16 kernels on any CPU (emulated, and slow, without a bf16 unit); widen widens on any CPU.
CPU_BF16 = ["auto", "native", "widen"]


@pytest.mark.parametrize("cpu_bf16", CPU_BF16)
def test_bf16_autocast_runs_the_forwards_in_bf16_and_keeps_fp32_weights(make_cfg, cpu_bf16):
    from magrpo.models.cpu_bf16 import Bf16Linear, widens

    agent, grads, metrics = _update_grads(make_cfg, ["hardware.autocast=bf16", f"hardware.cpu_bf16={cpu_bf16}"])
    assert any(type(m) is Bf16Linear for m in agent.model.modules()) is widens(cpu_bf16)
    assert all(p.dtype == torch.float32 for p in agent.model.parameters())
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads.values())
    ids = torch.tensor([[1, 2, 3]])
    assert agent.model(input_ids=ids).logits.dtype == torch.bfloat16
    assert metrics["loss"] == pytest.approx(metrics["loss"])        # finite
    # Both sampling paths: the shared-prompt decoder (its lean step) and model.generate.
    prompts = ["explain bees", "a longer prompt about the water cycle"]
    for share in (True, False):
        gen = generate(agent, prompts, Sampling(3, 10, share_prompt=share))
        assert gen.completion_ids.shape[0] == 6 and gen.completion_mask.sum() > 0, share


@pytest.mark.parametrize("cpu_bf16", CPU_BF16)
def test_a_smoke_run_with_every_memory_option(make_cfg, cpu_bf16):
    result = run(make_cfg(["debug=smoke", "algo.max_new_tokens=8", "hardware.gradient_checkpointing=true",
                           "hardware.autocast=bf16", f"hardware.cpu_bf16={cpu_bf16}", "algo.micro_batch_size=3"]))
    assert result["steps"] == 2
