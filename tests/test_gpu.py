"""The GPU paths, on a CUDA device: `make test-gpu` (pytest -m gpu). `make test` never runs them, and
without CUDA they are skipped; MAGRPO_TEST_DEVICE=cpu runs the same checks on the CPU (a dry run of
the file, not a GPU check).

Covered: bf16 weights and `hardware.autocast=bf16` through both generation paths (the shared-prompt
decoder and `model.generate`); one MAGRPO and one IPPO step; checkpoint and resume; `hardware=multi_gpu`
with every agent on the one device there is; LoRA adapters on one shared base.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

from magrpo.cli.train import run
from magrpo.models.agents import load_agents
from magrpo.rollout.record import Sampling, generate
from magrpo.validation.checks import validate
from tests.conftest import run_and_resume, train_rows

DEVICE = os.environ.get("MAGRPO_TEST_DEVICE", "cuda")
ON_CUDA = DEVICE.startswith("cuda")
ONE = "cuda:0" if ON_CUDA else DEVICE

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(ON_CUDA and not torch.cuda.is_available(), reason="needs a CUDA device")]

FAST = ["algo.max_new_tokens=12", "eval.num_items=4", "eval.num_samples=2", "algo.batch_size=2", "logger=none"]
HW = ["hardware=gpu"] if ON_CUDA else [f"hardware.device={DEVICE}"]
PROMPTS = ["explain", "a much longer prompt about the water cycle, bees and honey", "chess and the moon"]


def _finite_losses(row: dict) -> list[float]:
    losses = [v for k, v in row.items() if k.startswith("train/agent_") and k.endswith("/loss")]
    assert losses and all(math.isfinite(v) for v in losses), row
    return losses


def _assert_gpu_memory_logged(row: dict) -> None:
    if ON_CUDA:
        assert 0 < row["memory/peak_cuda_gb"] <= row["memory/peak_cuda_reserved_gb"]


@pytest.mark.parametrize("dtype, autocast", [("bfloat16", "none"), ("float32", "bf16")])
def test_bf16_generation_through_both_paths(make_cfg, dtype, autocast):
    cfg = validate(make_cfg([*HW, f"agents.models.0.dtype={dtype}", f"hardware.autocast={autocast}"]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    agent = agents[0]
    assert agent.device.type == torch.device(DEVICE).type
    weight = next(agent.model.parameters())
    assert weight.dtype == getattr(torch, dtype) and weight.device.type == agent.device.type
    outs = {}
    for share in (False, True):
        torch.manual_seed(0)
        gen = generate(agent, PROMPTS, Sampling(3, 10, share_prompt=share))
        assert gen.completion_ids.shape[0] == 3 * len(PROMPTS) and gen.completion_ids.shape[1] <= 10
        assert gen.completion_ids.device.type == agent.device.type
        assert int(gen.completion_ids.max()) < agent.model.config.vocab_size
        assert len(gen.texts) == 3 * len(PROMPTS)
        outs[share] = gen
    # the update's forward on what was sampled: bf16 products, finite log-probs
    gen = outs[True]
    ids = torch.cat([gen.prompt_ids.repeat_interleave(3, 0), gen.completion_ids], 1)
    mask = torch.cat([gen.prompt_mask.repeat_interleave(3, 0), gen.completion_mask], 1)
    with torch.autocast(agent.device.type, dtype=torch.bfloat16, enabled=autocast == "bf16"):
        logits = agent.model(input_ids=ids, attention_mask=mask).logits
    assert logits.dtype == torch.bfloat16 or autocast == "none" and dtype == "float32"
    assert torch.isfinite(logits.float()).all()


def test_greedy_decoding_is_the_same_on_both_paths_in_float32(make_cfg):
    cfg = validate(make_cfg([*HW, "agents.models.0.dtype=float32", "hardware.autocast=none"]))
    agent = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)[0]
    outs = [generate(agent, PROMPTS, Sampling(2, 12, do_sample=False, share_prompt=s)) for s in (False, True)]
    assert torch.equal(outs[0].completion_ids, outs[1].completion_ids)


@pytest.mark.parametrize("algo", ["magrpo", "ippo"])
def test_one_training_step(make_cfg, tmp_path, algo):
    out = tmp_path / algo
    result = run(make_cfg([*HW, f"algo={algo}", "max_steps=1", "save_final=false", *FAST], out=str(out)))
    assert result["steps"] == 1
    row = train_rows(out)[1]
    _finite_losses(row)
    assert row["train/agent_1/grad_norm"] > 0
    _assert_gpu_memory_logged(row)


def test_checkpoint_and_resume(make_cfg, tmp_path):
    common = [*HW, "max_steps=3", "save_every=2", "eval.every=0", *FAST]
    full, resumed = run_and_resume(make_cfg, tmp_path, common)
    assert sorted(resumed) == [3]
    # The restored random state draws the same samples, hence the same rewards; the losses may
    # differ by the order of the GPU's floating-point reductions.
    assert full[3]["train/reward_mean"] == resumed[3]["train/reward_mean"]
    for a, b in zip(_finite_losses(full[3]), _finite_losses(resumed[3])):
        assert a == pytest.approx(b, rel=1e-3, abs=1e-5)
    assert (tmp_path / "resumed" / "checkpoints" / "step_3" / "trainer_state.pt").exists()


def test_multi_gpu_preset_with_every_agent_on_one_device(make_cfg, tmp_path):
    hw = ["hardware=multi_gpu", f"hardware.agent_devices=[{ONE},{ONE}]"] if ON_CUDA else \
        [f"hardware.agent_devices=[{ONE},{ONE}]"]
    cfg = validate(make_cfg(hw))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    assert [str(a.device) for a in agents] == [ONE, ONE]
    out = tmp_path / "multi"
    run(make_cfg([*hw, "max_steps=1", "save_final=false", *FAST], out=str(out)))
    row = train_rows(out)[1]
    assert len(_finite_losses(row)) == 2
    _assert_gpu_memory_logged(row)


def test_lora_adapters_on_one_shared_base(make_cfg, tmp_path):
    cfg = validate(make_cfg([*HW, "agents=tiny_lora"]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    assert agents[0].model is agents[1].model                    # one base in memory, two adapters
    assert all(a.device.type == torch.device(DEVICE).type for a in agents)
    out = tmp_path / "lora"
    run(make_cfg([*HW, "agents=tiny_lora", "max_steps=2", *FAST], out=str(out)))
    row = train_rows(out)[2]
    assert len(_finite_losses(row)) == 2
    _assert_gpu_memory_logged(row)
    for k in (1, 2):
        assert any((out / "checkpoints" / "step_2" / f"agent_{k}").rglob("adapter_model.safetensors")), k


@pytest.mark.skipif(not ON_CUDA, reason="the attention backends are a CUDA setting")
@pytest.mark.parametrize("on", [False, True])
def test_hardware_cudnn_attention_sets_torchs_backend(make_cfg, on):
    cfg = validate(make_cfg([*HW, f"hardware.cudnn_attention={str(on).lower()}"]))
    load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    assert torch.backends.cuda.cudnn_sdp_enabled() is on


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_graph_decoding_gives_the_greedy_tokens_of_the_lean_step(make_cfg, dtype):
    # algo.decode_step=graph: the static step captured once per call and replayed per token; greedy
    # tokens equal to the lean step's (a replay that read a stale token or position would part from
    # them), the recorded log-probs within rounding of its own.
    from magrpo.models.sampler import sample_shared_prompt

    cfg = validate(make_cfg([*HW, f"agents.models.0.dtype={dtype}"]))
    agent = load_agents(cfg.agents, cfg.hardware, 1, need_reference=False)[0]
    ids, mask, _ = agent.encode_prompts(PROMPTS, 1024)
    ids, mask = ids.to(agent.device), mask.to(agent.device)
    out, recs = {}, {}
    for step in ("lean", "graph"):
        recs[step] = {"logprobs": None}
        with torch.no_grad():
            out[step] = sample_shared_prompt(agent.model, ids, mask, 2, 16, [], agent.tokenizer.pad_token_id,
                                             do_sample=False, decode_step=step, record=recs[step])
    assert torch.equal(out["graph"], out["lean"])
    tol = 1e-4 if dtype == "float32" else 5e-2
    torch.testing.assert_close(recs["graph"]["logprobs"], recs["lean"]["logprobs"], atol=tol, rtol=0)
