"""The builtin shapes of the real models (magrpo.models.tiny.SHAPES), a model vocabulary larger than its
tokenizer's, and the lean decoding step at real dimensions.

Fast: the shapes' configs have the documented dimensions (built on the meta device, no weights),
and a tiny model whose vocabulary (1024) exceeds its tokenizer's (512) never produces an id past the
tokenizer in either generation path, and its log-probabilities are normalised over the tokenizer's ids.
Slow (`make test-slow`): the lean step against `model.generate` at 1.7B dimensions, fp32 and bf16
(torch's bf16 products, and the widened ones of magrpo.models.cpu_bf16).
"""

from __future__ import annotations

import pytest
import torch

from magrpo.algos.logprobs import token_logprobs
from magrpo.models.agents import load_agents
from magrpo.models.sampler import sample_shared_prompt, vocab_limit
from magrpo.models.tiny import SHAPES, TOKENIZER_VOCAB, builtin_config
from magrpo.rollout.record import Sampling, generate
from magrpo.validation.checks import validate

# Hand-computed from the public configs: embedding V*h (tied: the LM head adds nothing) + per layer
# (q, k, v, o projections [+ q/k/v bias on qwen2] [+ q_norm, k_norm on qwen3] + 3*h*i MLP + 2 norms)
# + the final norm. The published totals: 1.7B (1.4B non-embedding), 3.09B (2.77B), 1.54B (1.31B).
PARAMS = {
    "qwen3-1.7b-shape": 151936 * 2048 + 28 * (2048 * 2048 * 2 + 2048 * 1024 * 2 + 2 * 128 + 3 * 2048 * 6144
                                              + 2 * 2048) + 2048,
    "qwen2.5-coder-3b-shape": 151936 * 2048 + 36 * (2048 * 2048 * 2 + 2048 + 2 * (2048 * 256 + 256)
                                                    + 3 * 2048 * 11008 + 2 * 2048) + 2048,
    "qwen2.5-coder-1.5b-shape": 151936 * 1536 + 28 * (1536 * 1536 * 2 + 1536 + 2 * (1536 * 256 + 256)
                                                      + 3 * 1536 * 8960 + 2 * 1536) + 1536,
}
DIMS = {   # model_type, layers, hidden, heads, kv heads, head_dim, intermediate, max positions
    "qwen3-1.7b-shape": ("qwen3", 28, 2048, 16, 8, 128, 6144, 40960),
    "qwen2.5-coder-3b-shape": ("qwen2", 36, 2048, 16, 2, 128, 11008, 32768),
    "qwen2.5-coder-1.5b-shape": ("qwen2", 28, 1536, 12, 2, 128, 8960, 32768),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_configs_have_the_documented_dimensions(name):
    from transformers import AutoModelForCausalLM

    config = builtin_config(name)
    kind, layers, hidden, heads, kv, head_dim, inter, positions = DIMS[name]
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.num_key_value_heads, config.intermediate_size, config.max_position_embeddings) == \
        (kind, layers, hidden, heads, kv, inter, positions)
    assert config.vocab_size == 151936 and config.tie_word_embeddings
    assert config.rope_parameters["rope_theta"] == 1e6 and config.rms_norm_eps == 1e-6
    assert all(t == "full_attention" for t in config.layer_types)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    attn = model.model.layers[0].self_attn
    assert attn.head_dim == head_dim and attn.q_proj.out_features == heads * head_dim
    assert attn.k_proj.out_features == kv * head_dim
    assert hasattr(attn, "q_norm") == (kind == "qwen3")                   # Qwen3's per-head qk-norm
    assert (attn.q_proj.bias is not None) == (kind == "qwen2")            # Qwen2's qkv bias
    assert model.lm_head.weight is model.model.embed_tokens.weight          # tied
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name]
    assert next(model.parameters()).dtype == torch.bfloat16


def _wide_agents(make_cfg, extra=()):
    cfg = validate(make_cfg(["agents.models.0.name_or_path=builtin:tiny-wide", *extra]))
    return load_agents(cfg.agents, cfg.hardware, cfg.agents.num_agents, need_reference=False)


@pytest.mark.parametrize("share_prompt", [True, False])
@pytest.mark.parametrize("lora", [False, True])
def test_ids_past_the_tokenizer_are_never_sampled(make_cfg, share_prompt, lora):
    agents = _wide_agents(make_cfg, ["agents=tiny_lora"] if lora else [])
    agent = agents[0]
    assert agent.model.get_output_embeddings().weight.shape[0] == 1024
    assert len(agent.tokenizer) == TOKENIZER_VOCAB == vocab_limit(agent.model)
    prompts = ["explain the water cycle", "bees", "a longer prompt about chess, the moon and coffee"]
    for do_sample in (True, False):
        torch.manual_seed(0)
        gen = generate(agent, prompts, Sampling(4, 24, do_sample=do_sample, share_prompt=share_prompt))
        assert int(gen.completion_ids.max()) < TOKENIZER_VOCAB


def test_without_the_limit_the_wide_model_does_produce_those_ids(make_cfg):
    # The check above means something: unmasked, random weights put half the mass past id 512.
    agent = _wide_agents(make_cfg)[0]
    ids, mask, _ = agent.encode_prompts(["explain the water cycle", "bees"], 1024)
    del agent.model.__dict__["_magrpo_vocab_limit"]
    torch.manual_seed(0)
    out = sample_shared_prompt(agent.model, ids, mask, 4, 24, [], 0)
    assert int(out.max()) >= TOKENIZER_VOCAB


def test_logprobs_are_normalised_over_the_tokenizer_ids(make_cfg):
    agent = _wide_agents(make_cfg)[0]
    ids, mask, _ = agent.encode_prompts(["explain the water cycle", "bees"], 1024)
    torch.manual_seed(0)
    comp = sample_shared_prompt(agent.model, ids, mask, 2, 8, [], 0)
    pid, pmask = ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)
    cmask = torch.ones_like(comp, dtype=torch.float32)
    logp, entropy = token_logprobs(agent.model, pid, pmask, comp, cmask, 0.7, with_entropy=True)
    full = torch.cat([pid, comp], 1)
    attn = torch.cat([pmask, cmask.long()], 1)
    logits = agent.model(input_ids=full, attention_mask=attn,
                         position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits[:, ids.shape[1] - 1:-1]
    want = torch.log_softmax(logits[..., :TOKENIZER_VOCAB].float() / 0.7, -1)
    torch.testing.assert_close(logp, want.gather(-1, comp.unsqueeze(-1)).squeeze(-1), atol=1e-5, rtol=0)
    assert torch.isfinite(entropy).all() and float(entropy.max()) <= float(torch.log(torch.tensor(512.0))) + 1e-4


# --- the lean step at real dimensions (slow) -------------------------------------------------------

# bf16 criterion. Both paths run the same bf16 weights through differently fused kernels (the lean
# step's in-place key/value buffer and direct linears vs the model's forward), so their logits may
# differ by bf16 rounding. Tokens: the free-running lean sampler may leave `model.generate`'s greedy
# tokens only at a step whose top-2 logit gap (in `generate`) is within BF16_TIE, a near tie that
# rounding may flip; after a flip the continuations legitimately differ. Log-probs: the lean step
# teacher-forced on generate's tokens sees the same prefixes, so |lean - generate| <= BF16_LOGP_ATOL
# at every step. fp32: the tokens are equal everywhere and the log-probs agree to 1e-4.
BF16_TIE = 0.25
BF16_LOGP_ATOL = 0.1


def _greedy_both(model, ids, mask, tokens):
    got = sample_shared_prompt(model, ids, mask, 1, tokens, [], 0, do_sample=False)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=tokens,
                         min_new_tokens=tokens, pad_token_id=0, eos_token_id=None, output_logits=True,
                         return_dict_in_generate=True, temperature=None, top_p=None, top_k=None)
    want = out.sequences[:, ids.shape[1]:]
    logits = torch.stack(out.logits, 1).float()                              # [B, T, V]
    return got, want, logits


def _lean_logits(model, ids, mask, tokens, completion):
    """The logits the lean step computes for `completion` (teacher-forced through LeanDecoder)."""
    from magrpo.models.sampler import LeanDecoder

    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    lean = LeanDecoder.of(model)
    assert lean is not None and lean.start(out.past_key_values, mask, 1, tokens)
    rows = [out.logits[:, -1]]
    for t in range(tokens - 1):
        rows.append(lean.step(completion[:, t], t))
    return torch.stack(rows, 1).float()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bfloat16-widened"])
def test_lean_step_equals_generate_at_real_dims(dtype):
    """bfloat16-widened: the linear products a CPU without a bf16 unit trains with (magrpo.models.cpu_bf16)."""
    from transformers import AutoModelForCausalLM

    from magrpo.models.cpu_bf16 import use_float32_products
    from magrpo.models.tiny import build_builtin

    torch.set_num_threads(max(torch.get_num_threads(), 2))
    model = AutoModelForCausalLM.from_pretrained(build_builtin("qwen3-1.7b-shape"),
                                                 dtype=getattr(torch, dtype.split("-")[0]))
    if dtype.endswith("widened"):
        use_float32_products(model)
    model.eval()
    torch.manual_seed(0)
    ids = torch.randint(1, 500, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0                                                          # left-padded rows
    mask[2, :2] = 0
    tokens = 16
    with torch.no_grad():
        got, want, gen_logits = _greedy_both(model, ids, mask, tokens)
        lean_logits = _lean_logits(model, ids, mask, tokens, want)
    V = gen_logits.shape[-1]
    lp_gen = torch.log_softmax(gen_logits, -1).gather(-1, want.unsqueeze(-1)).squeeze(-1)
    lp_lean = torch.log_softmax(lean_logits[..., :V], -1).gather(-1, want.unsqueeze(-1)).squeeze(-1)
    print(f"\n{dtype}: max |logp lean - logp generate| over all steps {float((lp_lean - lp_gen).abs().max()):.3g}, "
          f"tokens equal {bool(torch.equal(got, want))}")
    if dtype == "float32":
        assert torch.equal(got, want)
        torch.testing.assert_close(lp_lean, lp_gen, atol=1e-4, rtol=0)
        return
    top2 = gen_logits.topk(2, -1).values
    gap = top2[..., 0] - top2[..., 1]                                        # [B, T]
    for b in range(ids.shape[0]):
        apart = (got[b] != want[b]).nonzero()
        upto = int(apart[0]) if len(apart) else tokens                      # equal before the first flip
        assert upto == tokens or gap[b, upto] <= BF16_TIE, (b, got[b], want[b], gap[b])
        diff = (lp_lean[b] - lp_gen[b]).abs().max()
        print(f"  row {b}: same tokens for {upto}/{tokens} steps, max |dlogp| over all {float(diff):.3g}")
        assert diff <= BF16_LOGP_ATOL, (b, float(diff))


# --- what fits where (magrpo.models.memory) ---------------------------------------------------------------

def test_memory_arithmetic_on_a_hand_computed_case():
    from magrpo.models.memory import GB, Arch, Setting, activation_bytes, estimate, kv_cache_bytes

    a = Arch(layers=1, hidden=4, intermediate=8, heads=2, kv_heads=1, head_dim=2, vocab=10)
    # 10*4 embedding (tied) + q,o 2*4*4 + k,v 2*4*2 + MLP 3*4*8 + 2 norms 2*4 + final norm 4
    assert a.params() == 40 + 32 + 16 + 96 + 8 + 4 == 196
    assert a.lora_params(1) == (4 + 4) * 2 + (4 + 2) * 2 + (4 + 8) * 3 == 64
    s = Setting(batch=1, generations=2, prompt=3, completion=2, checkpointing=False)
    # T = 2 rows * 5 tokens; a = 2*(4*4 + 3*4 + 2*2 + 4*8) + 4*2*4 = 160 per token and layer;
    # LM head 2 rows * 3 positions * 10 * 14
    assert activation_bytes(a, s) == 10 * 160 + 2 * 3 * 10 * 14 == 2440
    assert kv_cache_bytes(a, s) == 2 * 5 * 1 * 2 * 2 * 2
    full = estimate([a, a], s)
    assert (full.weights, full.gradients, full.optimizer, full.reference, full.total) == \
        (784, 784, 1568, 0, 784 * 4 + 2440)
    assert estimate([a, a], s, reference=True).reference == 784          # a frozen bf16 copy per agent
    lora = estimate([a, a], s, lora_r=1)
    assert (lora.weights, lora.gradients, lora.optimizer, lora.total) == (392 + 512, 512, 1024, 904 + 1536 + 2440)
    assert lora.fits(1e-5) and not lora.fits(1e-6)      # 4880 B against 0.92 * 10 kB and 0.92 * 1 kB
    assert GB == 1e9


def test_memory_archs_match_the_shapes():
    from magrpo.models.memory import Arch, table

    for name, n in PARAMS.items():
        assert Arch.of(name).params() == n
    assert "qwen2.5_coder_3b (preset)" in table()


@pytest.mark.parametrize("preset", ["qwen3_1.7b", "qwen2.5_coder_3b", "heterogeneous"])
def test_presets_take_a_builtin_model_override(make_cfg, preset):
    # One preset, one meaning: a shape (here tiny, for speed) replaces the hub model by an override;
    # chat_template_kwargs are harmless with the builtin tokenizer, which has no chat template.
    overrides = [f"agents={preset}", "hardware.gradient_checkpointing=false"]
    overrides += [f"agents.models.{k}.name_or_path=builtin:tiny" for k in range(2 if preset == "heterogeneous" else 1)]
    overrides += [f"agents.models.{k}.dtype=float32" for k in range(2 if preset == "heterogeneous" else 1)]
    cfg = validate(make_cfg(overrides))
    agents = load_agents(cfg.agents, cfg.hardware, cfg.agents.num_agents, need_reference=False)
    assert len(agents) == 2
    for agent in agents:
        assert agent.format_prompt("explain bees") == "explain bees"
        gen = generate(agent, ["explain bees"], Sampling(2, 4))
        assert gen.completion_ids.shape[0] == 2


# --- one real step per case (slow: minutes to an hour per case on a CPU) ----------------------------

def _script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "real_shapes.py"
    spec = importlib.util.spec_from_file_location("real_shapes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("case", ["1.7b-lora", "1.7b-lora-beta", "1.7b-lora-ckpt", "3b-lora"])
def test_a_step_eval_checkpoint_and_resume_at_real_dims(case, tmp_path):
    import os

    result = _script().run_case(case, tmp_path, os.cpu_count() or 1, timeout=7200)
    assert result["ok"], result["reason"]
    assert {"generate", "update", "save", "resume", "resumed_update"} <= set(result["seconds"])
