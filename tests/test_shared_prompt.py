"""Shared prompts: each prompt runs once for its G samples, in generation and in the update, and
nothing changes but the cost -- the same tokens under greedy decoding, the same sampling rule, and
log-probs, hidden states and gradients equal to the one-prompt-per-row path."""

import logging
from dataclasses import replace

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from magrpo.algos.aggregation import LOSS_AGG, AggContext
from magrpo.algos.logprobs import RowBatch, row_chunks, row_logprobs, sequence_forward
from magrpo.algos.magrpo import MAGRPO
from magrpo.models.agents import load_agents
from magrpo.models.sampler import filter_logits, next_tokens, shares_prompt
from magrpo.rollout.record import Generation, Sampling, completion_mask, generate
from magrpo.tasks import build_task
from magrpo.validation.checks import validate

# Prompts of different lengths, so the batch is left-padded.
PROMPTS = ["explain", "a much longer prompt about the water cycle, bees and honey", "chess and the moon"]
G = 3
ATOL = 1e-5


def _agents(make_cfg, overrides=()):
    cfg = validate(make_cfg(list(overrides)))
    return cfg, load_agents(cfg.agents, cfg.hardware, cfg.agents.num_agents, need_reference=cfg.algo.beta > 0)


def _generation(agent, tokens=10) -> Generation:
    """A sampled generation with an early EOS in two rows and garbage after it (post-EOS tokens)."""
    torch.manual_seed(0)
    gen = generate(agent, PROMPTS, Sampling(G, tokens, share_prompt=False))
    ids = gen.completion_ids.clone()
    eos = agent.tokenizer.eos_token_id
    ids[1, 3], ids[4, 0] = eos, eos
    ids[1, 4:] = torch.randint(0, 300, (ids.shape[1] - 4,))
    ids[4, 1:] = torch.randint(0, 300, (ids.shape[1] - 1,))
    return Generation(gen.prompt_ids, gen.prompt_mask, ids, completion_mask(ids, [eos]), gen.texts, G, 0.0)


def _loss_grads(model, gen, chunks, share, agg, adv):
    """Gradient of a loss_agg over micro-batches `chunks`, and the [n, C] log-probs."""
    model.zero_grad(set_to_none=True)
    mask = gen.completion_mask
    ctx = AggContext(mask.shape[0], int(mask.sum()), mask.shape[1])
    parts = []
    for mb in chunks:
        logp, _ = row_logprobs(model, gen, mb, 0.7, "cpu", share)
        LOSS_AGG[agg](-adv[mb].unsqueeze(-1) * logp, mask[mb], ctx).backward()
        parts.append(logp.detach())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return torch.cat(parts), grads


def _assert_close(a: dict, b: dict):
    assert a.keys() == b.keys() and a
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=ATOL, rtol=0, msg=k)


def test_prompts_are_left_padded_and_post_eos_tokens_present(make_cfg):
    _, agents = _agents(make_cfg)
    gen = _generation(agents[0])
    assert (gen.prompt_mask == 0).any() and gen.prompt_mask[:, -1].all()
    assert (gen.completion_mask == 0).any()


@pytest.mark.parametrize("agg", sorted(LOSS_AGG))
def test_shared_prompt_logprobs_and_gradients_equal_the_unshared_ones(make_cfg, agg):
    _, agents = _agents(make_cfg)
    model = agents[0].model
    model.train()
    gen = _generation(agents[0])
    adv = torch.tensor([1.0, -2.0, 0.5, 0.3, -0.1, 1.2, 0.7, -0.4, 0.9])
    ref_logp, ref = _loss_grads(model, gen, [slice(None)], False, agg, adv)
    mask = gen.completion_mask
    # whole batch, whole groups per micro-batch, and micro-batches that split a group (4 rows, G = 3)
    for chunks in ([slice(None)], row_chunks(9, 6, G), row_chunks(9, 4, 1)):
        logp, grads = _loss_grads(model, gen, chunks, True, agg, adv)
        torch.testing.assert_close(logp * mask, ref_logp * mask, atol=ATOL, rtol=0)
        _assert_close(grads, ref)


def test_shared_prompt_with_lora_adapters_on_a_shared_base(make_cfg):
    _, agents = _agents(make_cfg, ["agents=tiny_lora"])
    adv = torch.linspace(-1, 1, 9)
    for agent in agents:
        agent.activate()
        agent.model.train()
        gen = _generation(agent)
        _, ref = _loss_grads(agent.model, gen, [slice(None)], False, "seq_sum", adv)
        _, got = _loss_grads(agent.model, gen, row_chunks(9, 4, 1), True, "seq_sum", adv)
        assert all("lora" in k for k in ref)          # only the adapter trains
        _assert_close(got, ref)


def test_hidden_states_for_a_value_head_and_a_critic_backbone(make_cfg):
    from transformers import AutoModel

    from magrpo.models.agents import resolve_model_path

    _, agents = _agents(make_cfg)
    gen = _generation(agents[0])
    rows = RowBatch.of(gen, slice(None), "cpu")
    backbone = AutoModel.from_pretrained(resolve_model_path("builtin:tiny"))
    for model, lm in ((agents[0].model, True), (backbone, False)):
        outs = [sequence_forward(model, rows.prompt_ids, rows.prompt_mask, rows.completion_ids, rows.completion_mask,
                                 rows.prompt_index, share, with_hidden=True, lm=lm) for share in (False, True)]
        m = gen.completion_mask.unsqueeze(-1)
        torch.testing.assert_close(outs[1][1] * m, outs[0][1] * m, atol=ATOL, rtol=0)
        if lm:
            torch.testing.assert_close(outs[1][0] * m, outs[0][0] * m, atol=ATOL, rtol=0)


@pytest.mark.parametrize("extra", [[], ["algo.loss=clip", "algo.num_iterations=2", "algo.loss_agg=token_mean"], ["algo.beta=0.1"]])
def test_magrpo_update_gives_the_same_gradients_with_and_without_sharing(make_cfg, extra):
    grads = []
    for share in (False, True):
        cfg, agents = _agents(make_cfg, [f"algo.share_prompt={str(share).lower()}", "algo.micro_batch_size=4",
                                         "optimizer.max_grad_norm=1e9", *extra])
        algo = MAGRPO(cfg, agents, build_task(cfg.task, cfg.reward))
        gen = _generation(agents[0])
        metrics = algo._update(0, gen, torch.linspace(-1, 1, 9))
        grads.append(({n: p.grad.clone() for n, p in agents[0].model.named_parameters() if p.grad is not None},
                      metrics))
    _assert_close(grads[1][0], grads[0][0])
    for k in ("loss", "kl", "entropy", "clip_frac"):
        assert grads[1][1][k] == pytest.approx(grads[0][1][k], abs=1e-5), k


def test_gradient_checkpointing_falls_back_with_one_log_line(make_cfg, caplog, monkeypatch):
    import magrpo.models.sampler

    monkeypatch.setattr(magrpo.models.sampler, "_FALLBACK_LOGGED", set())   # once per process: start afresh
    _, agents = _agents(make_cfg)
    model = agents[0].model
    model.gradient_checkpointing_enable()
    model.train()
    with caplog.at_level(logging.INFO, logger="magrpo.models.sampler"):
        assert not shares_prompt(model, True)
        assert not shares_prompt(model, True)
    assert len([r for r in caplog.records if "gradient checkpointing" in r.message]) == 1
    model.eval()
    assert shares_prompt(model, True)          # generation (no gradients) still shares the prompt


# --- sampling --------------------------------------------------------------------------------------


def test_filter_logits_equals_the_transformers_warper_chain():
    torch.manual_seed(0)
    logits = torch.randn(16, 200) * 3
    for T, k, p in ((1.0, 0, 1.0), (0.7, 20, 1.0), (1.3, 0, 0.8), (0.6, 50, 0.9), (1.0, 1, 0.5)):
        want = TemperatureLogitsWarper(T)(None, logits.clone()) if T != 1.0 else logits.clone()
        if k:
            want = TopKLogitsWarper(k)(None, want)
        if p < 1.0:
            want = TopPLogitsWarper(p)(None, want)
        assert torch.equal(filter_logits(logits, T, k, p), want), (T, k, p)


def test_sampled_tokens_follow_the_filtered_distribution():
    torch.manual_seed(1)
    logits = torch.randn(1, 40) * 2
    probs = filter_logits(logits, 0.8, 10, 0.9).softmax(-1)[0]
    n = 40_000
    draws = next_tokens(logits.expand(n, -1), True, 0.8, 10, 0.9)
    freq = torch.bincount(draws, minlength=40).float() / n
    assert (freq[probs == 0] == 0).all()                     # a removed token is never drawn
    assert 0.5 * (freq - probs).abs().sum() < 0.015          # total variation distance


def test_top_k_zero_means_no_top_k_on_both_sampling_paths(make_cfg):
    # transformers' generate reads top_k=None as "the model's default": a real model ships one (Qwen3's
    # generation_config.json has top_k=20), so 0 must reach generate as off.
    _, agents = _agents(make_cfg)
    agents[0].model.generation_config.top_k = 20
    torch.manual_seed(0)
    for share in (False, True):
        gen = generate(agents[0], PROMPTS[:1], Sampling(256, 1, temperature=3.0, top_k=0, share_prompt=share))
        first = gen.completion_ids[:, 0]
        assert len(set(first.tolist())) > 50, share        # the random model is near-uniform at T=3
        gen = generate(agents[0], PROMPTS[:1], Sampling(256, 1, temperature=3.0, top_k=5, share_prompt=share))
        assert len(set(gen.completion_ids[:, 0].tolist())) <= 5, share


def test_greedy_shared_prompt_decoding_gives_the_tokens_of_model_generate(make_cfg):
    _, agents = _agents(make_cfg)
    outs = [generate(agents[0], PROMPTS, Sampling(G, 12, do_sample=False, share_prompt=s)) for s in (False, True)]
    assert torch.equal(outs[0].completion_ids, outs[1].completion_ids)
    assert outs[0].texts == outs[1].texts


def test_encoded_prompts_equal_the_tokenizer_batch(make_cfg):
    _, agents = _agents(make_cfg)
    agent = agents[0]
    tok = agent.tokenizer
    tok.truncation_side = "left"
    for max_length in (1024, 6):
        enc = tok([agent.format_prompt(p) for p in PROMPTS], return_tensors="pt", padding=True, truncation=True,
                  max_length=max_length, add_special_tokens=False)
        ids, mask, _ = agent.encode_prompts(PROMPTS, max_length)
        assert torch.equal(ids, enc.input_ids) and torch.equal(mask, enc.attention_mask)


@pytest.mark.parametrize("algo_name,extra", [("ippo", []), ("mappo", []), ("ippo", ["algo.critic=model"])],
                         ids=["ippo", "mappo", "ippo-critic-model"])
def test_actor_critic_updates_give_the_same_gradients_with_and_without_sharing(make_cfg, algo_name, extra):
    from magrpo.algos import ALGOS
    from magrpo.rollout.record import team_rollout

    got = []
    for share in (False, True):
        cfg, agents = _agents(make_cfg, [f"algo={algo_name}", f"algo.share_prompt={str(share).lower()}",
                                         "algo.micro_batch_size=4", "algo.batch_size=3", "algo.max_new_tokens=8",
                                         "optimizer.max_grad_norm=1e9", "algo.ppo_epochs=1", *extra])
        task = build_task(cfg.task, cfg.reward)
        algo = ALGOS[algo_name](cfg, agents, task)
        if extra:       # a critic model (a headless body) runs each prompt once too
            assert shares_prompt(algo.critics[0].backbone, True)
        torch.manual_seed(0)
        rollout = team_rollout(agents, task, task.load("train")[:3], Sampling(G, 8, share_prompt=False))
        rollout.score(task)
        batch, stats = algo._prepare(0, rollout.samples[0], rollout.returns(0).flatten(),
                                     algo.critic_prompts(rollout, 0))
        stats.update(algo._update(0, batch))
        params = list(agents[0].model.named_parameters()) + list(algo.critics[0].named_parameters())
        got.append(({n: p.grad.clone() for n, p in params if p.grad is not None}, stats))
    _assert_close(got[1][0], got[0][0])
    for k in ("value_mean", "loss", "value_loss", "entropy"):
        assert got[1][1][k] == pytest.approx(got[0][1][k], abs=1e-5), k


# --- the lean decoding step ------------------------------------------------------------------------

def _random_lm(kind: str, attn: str = "sdpa"):
    """A two-layer random model of each Llama-family architecture, grouped-query attention."""
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    configs = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}
    extra = {"sliding_window": None} if kind == "mistral" else {}
    cfg = configs[kind](hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=128, vocab_size=300, max_position_embeddings=512, **extra)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval()


def _prompt_batch(padded: bool):
    torch.manual_seed(1)
    ids = torch.randint(3, 300, (3, 9))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :4] = 0
        mask[2, :2] = 0
    return ids, mask


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("padded", [True, False])
def test_lean_step_gives_the_greedy_tokens_of_model_generate(kind, padded):
    from magrpo.models.sampler import LeanDecoder, sample_shared_prompt

    model = _random_lm(kind)
    assert LeanDecoder.of(model) is not None
    ids, mask = _prompt_batch(padded)
    got = sample_shared_prompt(model, ids, mask, 2, 20, [], 0, do_sample=False)
    want = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=20,
                          min_new_tokens=20, pad_token_id=0, eos_token_id=None)[:, ids.shape[1]:]
    assert got.shape == (6, 20)
    assert torch.equal(got, want.repeat_interleave(2, dim=0))


def _decode_both_ways(model, ids, mask, monkeypatch, **kw):
    """Sampled tokens through the lean step and through the plain model(...) step, same seed."""
    from magrpo.models import sampler

    out = []
    for lean in (True, False):
        with monkeypatch.context() as m:
            if not lean:
                m.setattr(sampler.LeanDecoder, "of", classmethod(lambda cls, model: None))
            torch.manual_seed(3)
            out.append(sampler.sample_shared_prompt(model, ids, mask, 4, 16, [7], 0, **kw))
    return out


@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_lean_step_samples_the_same_tokens_as_the_plain_step(kind, monkeypatch):
    # Same logits bit for bit, so the same draws from the same generator, EOS stops included.
    model = _random_lm(kind)
    ids, mask = _prompt_batch(True)
    lean, plain = _decode_both_ways(model, ids, mask, monkeypatch, do_sample=True, temperature=1.3, top_p=0.9)
    assert torch.equal(lean, plain)


def test_the_lean_step_still_serves_a_model_after_a_forward_that_asked_for_hidden_states():
    # transformers puts output-capturing hooks on the layers at the first forward that asks for hidden
    # states (a PPO value head's) and keeps them; outside a collecting forward they do nothing, so the
    # lean step keeps the model. A hook of anyone else's still sends it to the plain step.
    from magrpo.models.sampler import LeanDecoder

    model = _random_lm("qwen2")
    ids, mask = _prompt_batch(False)
    assert not any(m._forward_hooks for m in model.modules())
    model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert any(m._forward_hooks for m in model.model.layers)
    assert LeanDecoder.of(model) is not None
    handle = model.model.layers[0].register_forward_hook(lambda module, args, out: None)
    try:
        assert LeanDecoder.of(model) is None
    finally:
        handle.remove()


def test_lean_step_serves_the_builtin_model_and_lora_agents(make_cfg, monkeypatch):
    from magrpo.models.sampler import LeanDecoder

    for agents_cfg in ("tiny", "tiny_lora"):
        _, agents = _agents(make_cfg, [f"agents={agents_cfg}"])
        for agent in agents:
            agent.activate()
            assert LeanDecoder.of(agent.model) is not None, agents_cfg
            ids, mask, _ = agent.encode_prompts(PROMPTS, 1024)
            lean, plain = _decode_both_ways(agent.model, ids, mask, monkeypatch, do_sample=True)
            assert torch.equal(lean, plain), agents_cfg


def test_models_the_lean_step_cannot_serve_take_the_plain_step(monkeypatch):
    from transformers import GPT2Config, GPT2LMHeadModel

    from magrpo.models.sampler import LeanDecoder, sample_shared_prompt

    assert LeanDecoder.of(_random_lm("qwen2", attn="eager")) is None
    assert LeanDecoder.of(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=300))) is None
    windowed = _random_lm("qwen2")
    windowed.config.layer_types = ["sliding_attention", "full_attention"]
    assert LeanDecoder.of(windowed) is None
    # A hook on a module the lean step would skip (what accelerate's offloading installs) must run.
    model = _random_lm("llama")
    calls = []
    handle = model.model.layers[1].register_forward_hook(lambda *a: calls.append(1))
    assert LeanDecoder.of(model) is None
    ids, mask = _prompt_batch(True)
    got = sample_shared_prompt(model, ids, mask, 2, 6, [], 0, do_sample=False)
    assert len(calls) == 6                                       # the prefill and five decoding steps
    handle.remove()
    assert torch.equal(got, sample_shared_prompt(model, ids, mask, 2, 6, [], 0, do_sample=False))


# --- the lean step under bf16 autocast (hardware.autocast=bf16) -----------------------------------

# (device, widened products): torch's own bf16 kernels (`hardware.cpu_bf16=native`) and the widened
# ones (`widen`) on the CPU; a GPU, where there is one, has bf16 GEMMs of its own.
AUTOCAST_DEVICES = [("cpu", False), ("cpu", True), *([("cuda", False)] if torch.cuda.is_available() else [])]


def _autocast_lm(kind: str, device: str, widen: bool):
    """A random model whose forward runs under bf16 autocast, as magrpo.models.agents._with_autocast wraps it;
    on a CPU, with torch's own bf16 products (`hardware.cpu_bf16=native`) or widened ones (`widen`)."""
    from magrpo.models.cpu_bf16 import use_float32_products

    model = _random_lm(kind).to(device)
    if widen:
        assert use_float32_products(model) > 0
    model.forward = torch.autocast(device, dtype=torch.bfloat16)(model.forward)
    return model


@pytest.mark.parametrize(("device", "widen"), AUTOCAST_DEVICES,
                         ids=[f"{d}-{'widen' if w else 'native'}" for d, w in AUTOCAST_DEVICES])
@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_lean_step_under_bf16_autocast_follows_model_generate(kind, widen, device):
    """The lean step, fed the tokens that `model.generate` chose, gives generate's logits: the prompt's
    cache holds bf16 values (computed under the forward's autocast) and the step runs under the same
    autocast, so query, keys and values meet in bf16, as in the model's own attention."""
    from magrpo.models.sampler import LeanDecoder

    model = _autocast_lm(kind, device, widen)
    ids, mask = (t.to(device) for t in _prompt_batch(True))
    T = 12
    want = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=T, min_new_tokens=T,
                          pad_token_id=0, eos_token_id=None, output_logits=True, return_dict_in_generate=True)
    tokens = want.sequences[:, ids.shape[1]:]
    lean = LeanDecoder.of(model)
    assert lean is not None
    with torch.no_grad():
        out = lean.prefill(model, input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1,
                           position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
        assert out.past_key_values.layers[0].values.dtype == torch.bfloat16     # v_proj's output under autocast
        assert lean.start(out.past_key_values, mask, 1, T)
        got = [out.logits[:, -1]] + [lean.step(tokens[:, t], t) for t in range(T - 1)]
    assert all(g.dtype == torch.bfloat16 for g in got)          # the step's lm_head ran under autocast too
    got, ref = torch.stack(got).float(), torch.stack(want.logits).float()
    # Both paths run the same bf16 products (float32 accumulation, one rounding to bf16 each); only
    # the order of a kernel's sums may differ between them (the lean step packs a query's heads per
    # key/value head). A reordered sum rounds to a neighbouring bf16 value: one bf16 unit, 2^-7 of
    # the value. The rounded tensors a step's difference passes through on the way to its logits
    # (the attention output, o_proj, the MLP's product and down_proj, lm_head) are five, so the
    # logits stay within 5 units of their scale. (On this machine the bits are the same; a step that
    # misses autocast fails the dtype check above, or raises in the attention.)
    scale = ref.abs().max()
    assert (got - ref).abs().max() <= 5 * 2 ** -7 * scale


def test_the_cache_goes_by_the_name_this_transformers_uses():
    """transformers 5.2x names the key/value cache `cache` and warns on `past_key_values`; older
    versions know only the latter. The decoder asks the model's forward which one it takes."""
    import inspect

    from magrpo.models.agents import load_agents
    from magrpo.models.sampler import cache_keyword
    from magrpo.validation.checks import validate
    from tests.conftest import compose_cfg

    cfg = validate(compose_cfg(["debug=smoke", "output_dir=unused"]))
    agent = load_agents(cfg.agents, cfg.hardware, 1, need_reference=False)[0]
    params = inspect.signature(type(agent.model).forward).parameters
    assert cache_keyword(agent.model) == ("cache" if "cache" in params else "past_key_values")
    assert cache_keyword(agent.model) in params


# --- what the decoding pass records for the update ---------------------------------------------------

@pytest.mark.parametrize("kind", ["llama", "qwen3"])
@pytest.mark.parametrize("lean", [True, False])
def test_decoding_records_the_logprobs_and_hidden_states_a_forward_gives(kind, lean, monkeypatch):
    # The PPO family takes the rollout policy's log-probs and a value head's input from the
    # decoding pass instead of a forward over the rows. A cached one-token step adds the same
    # products as the whole-sequence forward in another order, so they agree to float32 rounding:
    # ATOL relative to the size of the numbers (log-probs of a 300-token vocabulary are ~6).
    from magrpo.algos.logprobs import token_logprobs
    from magrpo.models import sampler

    if not lean:
        monkeypatch.setattr(sampler.LeanDecoder, "of", classmethod(lambda cls, model: None))
    model = _random_lm(kind)
    ids, mask = _prompt_batch(True)
    record = {"logprobs": None, "hidden": None}
    torch.manual_seed(4)
    with torch.no_grad():
        tokens = sampler.sample_shared_prompt(model, ids, mask, 4, 12, [7], 0, temperature=0.7, record=record)
        cmask = completion_mask(tokens, [7])
        logp, _, hidden = token_logprobs(model, ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0), tokens,
                                         cmask, 0.7, with_hidden=True)
    assert record["logprobs"].shape == tokens.shape and record["hidden"].shape == hidden.shape
    for got, want in ((record["logprobs"], logp), (record["hidden"], hidden)):
        m = cmask if got.dim() == 2 else cmask.unsqueeze(-1)
        scale = max(1.0, float((want.abs() * m).max()))
        torch.testing.assert_close(got * m, want * m, atol=ATOL * scale, rtol=0)
    # a real difference (another temperature) is far outside it
    with torch.no_grad():
        other = token_logprobs(model, ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0), tokens, cmask, 1.0)[0]
    assert float(((record["logprobs"] - other).abs() * cmask).max()) > 100 * ATOL


def test_the_ppo_family_takes_the_rollout_logprobs_and_values_from_decoding(make_cfg):
    # IPPO's _prepare reads the recorded log-probs and head values: they equal a rollout forward's
    # to float32 rounding, and a generation without a record (model.generate) still gets them.
    from magrpo.algos import ALGOS
    from magrpo.algos.logprobs import rollout_logprobs, row_chunks
    from magrpo.rollout.record import team_rollout

    cfg, agents = _agents(make_cfg, ["algo=ippo", "algo.batch_size=3", "algo.max_new_tokens=8"])
    task = build_task(cfg.task, cfg.reward)
    algo = ALGOS["ippo"](cfg, agents, task)
    assert algo.sampling.record == ("logprobs", "hidden")
    items = task.load("train")[:3]
    outs = []
    for record in (algo.sampling.record, ()):
        torch.manual_seed(0)
        rollout = team_rollout(agents, task, items, replace(algo.sampling, record=record))
        rollout.score(task)
        gen = rollout.samples[0]
        assert (gen.logprobs is not None) == bool(record)
        batch, _ = algo._prepare(0, gen, rollout.returns(0).flatten(), None)
        outs.append((gen, batch))
    (gen, recorded), (_, forward) = outs
    assert torch.equal(gen.completion_ids, outs[1][0].completion_ids)      # same seed, same tokens
    m = gen.completion_mask
    torch.testing.assert_close(recorded.old_logp * m, forward.old_logp * m, atol=ATOL * 10, rtol=0)
    torch.testing.assert_close(recorded.old_values * m, forward.old_values * m, atol=ATOL, rtol=0)
    want = rollout_logprobs(agents[0].model, gen, row_chunks(m.shape[0], 64, G), 1.0, "cpu", True)
    torch.testing.assert_close(recorded.old_logp * m, want * m, atol=ATOL * 10, rtol=0)


# --- the fixed-shape step (algo.decode_step=static|graph) --------------------------------------------

@pytest.mark.parametrize("kind", ["llama", "qwen3"])
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("decode_step", ["static", "graph"])
def test_static_and_graph_steps_give_the_greedy_tokens_of_the_lean_step(kind, padded, decode_step):
    # The fixed-shape step a CUDA graph replays; on a CPU "graph" runs it uncaptured. Its attention
    # reads the whole buffer under a mask, so only the order of float additions differs from the
    # lean step: the same greedy tokens, and logits within float32 rounding.
    from magrpo.models.sampler import sample_shared_prompt

    model = _random_lm(kind)
    ids, mask = _prompt_batch(padded)
    got_rec, want_rec = {"logprobs": None, "hidden": None}, {"logprobs": None, "hidden": None}
    got = sample_shared_prompt(model, ids, mask, 2, 20, [], 0, do_sample=False, decode_step=decode_step,
                               record=got_rec)
    want = sample_shared_prompt(model, ids, mask, 2, 20, [], 0, do_sample=False, record=want_rec)
    assert got.shape == (6, 20) and torch.equal(got, want)
    torch.testing.assert_close(got_rec["logprobs"], want_rec["logprobs"], atol=ATOL * 10, rtol=0)
    torch.testing.assert_close(got_rec["hidden"], want_rec["hidden"], atol=ATOL * 10, rtol=0)
    gen = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=20,
                         min_new_tokens=20, pad_token_id=0, eos_token_id=None)[:, ids.shape[1]:]
    assert torch.equal(got, gen.repeat_interleave(2, dim=0))


def test_static_step_samples_and_stops_as_the_lean_step():
    # Sampling, an EOS stop and the row mask: the same draws from the same generator.
    from magrpo.models.sampler import sample_shared_prompt

    model = _random_lm("qwen2")
    ids, mask = _prompt_batch(True)
    out = []
    for step in ("lean", "static"):
        torch.manual_seed(3)
        out.append(sample_shared_prompt(model, ids, mask, 4, 16, [7], 0, temperature=1.3, top_p=0.9,
                                        decode_step=step))
    assert torch.equal(out[0], out[1])


def test_decode_step_is_an_algo_key_with_named_choices(make_cfg, tmp_path):
    from magrpo.core.schema import ConfigError
    from magrpo.models.sampler import sample_shared_prompt

    cfg = validate(make_cfg(["algo.decode_step=static"]))
    assert cfg.algo.decode_step == "static" and Sampling.from_algo(cfg.algo).decode_step == "static"
    with pytest.raises(ConfigError, match="decode_step.*'fast'.*graph"):
        validate(make_cfg(["algo.decode_step=fast"]))
    ids, mask = _prompt_batch(False)
    with pytest.raises(ValueError, match="'fast'.*lean"):
        sample_shared_prompt(_random_lm("llama"), ids, mask, 2, 4, [], 0, decode_step="fast")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("norm", ["qwen3", "llama"])
def test_the_steps_fused_rms_norm_gives_the_modules_bits(dtype, norm):
    """The decoding steps' RMSNorm (torch's fused kernel; in bf16/fp16 normalised in float32 and
    rounded before the weight, as the module) equals the model's own module bit for bit."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    from magrpo.models.sampler import _rms_norm

    torch.manual_seed(0)
    for d, shape in ((64, (5, 1, 64)), (128, (6, 1, 4, 128)), (96, (3, 7, 96))):
        module = (Qwen3RMSNorm if norm == "qwen3" else LlamaRMSNorm)(d, eps=1e-6).to(dtype)
        with torch.no_grad():
            module.weight.normal_()
        x = (torch.randn(*shape) * 3).to(dtype)
        assert torch.equal(_rms_norm(module, x), module(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_additive_mask_made_once_per_step_attends_as_the_boolean_one(dtype):
    """scaled_dot_product_attention turns a boolean mask into 0 / -inf in every call; the steps
    make that additive mask once per step: the same attention output, bit for bit."""
    import torch.nn.functional as F

    from magrpo.models.sampler import _additive

    torch.manual_seed(0)
    q = torch.randn(4, 2, 3, 16).to(dtype)
    k, v = torch.randn(4, 2, 9, 16).to(dtype), torch.randn(4, 2, 9, 16).to(dtype)
    mask = torch.rand(4, 1, 1, 9) > 0.4
    mask[..., 0] = True                                  # every row attends somewhere
    bias = _additive(mask, dtype)
    assert bias.dtype == dtype and set(bias.unique().tolist()) <= {0.0, float("-inf")}
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
                       F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert _additive(None, dtype) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_query_and_key_heads_normed_together_give_each_norms_bits(dtype):
    """The steps normalise a qwen3 layer's query and key heads in one call, each head with its
    own norm's weight (`_joint_qk_norm`): bit for bit what q_norm and k_norm give apart."""
    from magrpo.models.sampler import _joint_qk_norm, _normed

    model = _random_lm("qwen3").to(dtype)
    attn = model.model.layers[0].self_attn
    with torch.no_grad():
        attn.q_norm.weight.normal_()
        attn.k_norm.weight.normal_()
    weight = _joint_qk_norm(attn, attn.q_norm, attn.k_norm)
    heads, kv_heads, d = 4, 2, attn.head_dim
    assert weight.shape == (heads + kv_heads, d)
    torch.manual_seed(0)
    qk = (torch.randn(5, 1, heads + kv_heads, d) * 3).to(dtype)
    got = _normed(qk, weight, attn.q_norm.variance_epsilon)
    with torch.no_grad():
        assert torch.equal(got[:, :, :heads], attn.q_norm(qk[:, :, :heads]))
        assert torch.equal(got[:, :, heads:], attn.k_norm(qk[:, :, heads:]))
    attn.k_norm.variance_epsilon = 1e-3        # two epsilons: each head goes through its own norm
    assert _joint_qk_norm(attn, attn.q_norm, attn.k_norm) is None

