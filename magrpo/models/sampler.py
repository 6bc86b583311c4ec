"""Sampling G completions per prompt with the prompt processed once (shared-prompt decoding).

`model.generate(num_return_sequences=G)` copies every prompt G times before the first forward, so
the prefill costs B*G prompt passes. Here the B prompts are prefilled once, their key/value cache
is repeated to the B*G rows, and a plain decoding loop continues every row:

    prefill:  cache, logits = model(prompts)                      [B, P]
    expand:   cache, logits, mask repeated G times per prompt     [B*G, ...]
    step t:   token_t ~ softmax(top_p(top_k(logits / T)))         (argmax when not sampling)
              a finished row (its EOS already sampled) gets the pad token
              logits = model(token_t, cache)                      [B*G, 1]

The sampling rule is transformers' own warper chain in its order (temperature, top-k, top-p; a
token is removed by top-p when the probability mass above it already reaches top_p, and the most
likely token is always kept), and position ids and the attention mask follow the left-padded
prompt exactly as in `generate`, so the rows are draws from the same distribution, and with
greedy decoding the same tokens (tests/test_shared_prompt.py). `model.generate` remains the path
for `algo.share_prompt=false` and for models without a standard key/value cache.

Decoding one token through `model(...)` costs far more than its arithmetic on a small model: the
causal mask is rebuilt, the cache grows by concatenation (each step copies all of it), and every
layer passes through several wrappers. For the Llama family (llama, mistral, qwen2, qwen3) the
step is `LeanDecoder`: the same submodules called in the same order (so LoRA adapters, quantised
linears and the model's own rotary embedding still apply), a key/value buffer written in place, a
mask built once, and attention by the same `scaled_dot_product_attention` call as transformers'
sdpa path. It gives the tokens of `model(...)` bit for bit on float32 (the tests compare with
`model.generate`); any other model, attention kernel or hooked module takes the plain step. A
forward wrapped in autocast (`hardware.autocast=bf16`) computes the prompt's cache under it, and the
lean step, which calls the layers without that forward, runs under the same autocast.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)
_FALLBACK_LOGGED: set[tuple[str, str]] = set()


def _log_once(model, reason: str) -> None:
    key = (type(model).__name__, reason)
    if key not in _FALLBACK_LOGGED:
        _FALLBACK_LOGGED.add(key)
        log.info("algo.share_prompt: %s %s; each completion row carries its own prompt", key[0], reason)


def shares_prompt(model, requested: bool) -> bool:
    """Whether `model` can run a prompt once and continue it for several rows (`requested` = the
    `algo.share_prompt` key), in generation and in the update (magrpo.algos.logprobs). A model that
    cannot falls back to one prompt per row, with one log line."""
    if not requested:
        return False
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        _log_once(model, "is not a decoder-only transformers model")
        return False
    checkpointing = getattr(base, "is_activation_checkpointing", None)     # transformers >= 5.x
    if checkpointing is None:
        checkpointing = getattr(base, "is_gradient_checkpointing", False)
    if checkpointing and base.training:
        # Checkpointed layers drop the key/value cache (a replayed cache write would append twice).
        _log_once(model, "trains with gradient checkpointing, which drops the key/value cache")
        return False
    supports = getattr(base, "_supports_default_dynamic_cache", None)
    # a headless body (a critic model) has no generating class of its own: what its loader recorded
    if not (supports() if supports is not None else base.__dict__.get(_KV_CACHE, False)):
        _log_once(model, "has no standard key/value cache")
        return False
    return True


_KV_CACHE = "_magrpo_kv_cache"


def set_kv_cache(model, supports: bool) -> None:
    """Record on a headless transformers body (a critic model, loaded without its LM head) whether it
    runs the standard key/value cache: transformers states that on the causal LM class
    (`_supports_default_dynamic_cache`), which the body is not, so its loader asks that class."""
    object.__setattr__(model, _KV_CACHE, bool(supports))


# --- the tokenizer's vocabulary ------------------------------------------------------------------
#
# A model may have more embedding rows than its tokenizer has tokens (the real Qwen checkpoints:
# 151936 rows, 151665 tokens; the builtin shapes: 151936 rows, 512 tokens). The ids past the
# tokenizer are no tokens: generation never samples them and log-probabilities are normalised
# over the tokenizer's ids only, in the shared-prompt sampler, in `model.generate` and in the
# update alike (one distribution for sampling and scoring, so ratios and KL are exact).

_VOCAB_LIMIT = "_magrpo_vocab_limit"


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


# --- the key/value cache's name ---------------------------------------------------------------------
# transformers 5.2x calls the cache `cache` (forward's keyword and the output's field) and warns on
# every use of the older `past_key_values`; earlier versions know only `past_key_values`.
_CACHE_KW: dict[type, str] = {}


def cache_keyword(model) -> str:
    """The forward keyword that passes a key/value cache to `model`: `cache` or `past_key_values`."""
    cls = type(_base(model))
    if cls not in _CACHE_KW:
        params: Mapping[str, inspect.Parameter]
        try:
            params = inspect.signature(cls.forward).parameters
        except (TypeError, ValueError):
            params = {}
        _CACHE_KW[cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_KW[cls]


def output_cache(out):
    """The key/value cache a forward returned, under either name."""
    fields = getattr(type(out), "__dataclass_fields__", {})
    return getattr(out, "cache", None) if "cache" in fields else getattr(out, "past_key_values", None)


def set_vocab_limit(model, tokenizer) -> None:
    """Record len(tokenizer) on `model` (and on its base, under a peft wrapper)."""
    for m in {id(model): model, id(_base(model)): _base(model)}.values():
        object.__setattr__(m, _VOCAB_LIMIT, len(tokenizer))


def vocab_limit(model) -> int | None:
    """The number of ids `model` may produce (len of its tokenizer), or None when unrecorded."""
    limit = model.__dict__.get(_VOCAB_LIMIT)
    return limit if limit is not None else _base(model).__dict__.get(_VOCAB_LIMIT)


def limit_vocab(logits: torch.Tensor, limit: int | None) -> torch.Tensor:
    """The logits of the first `limit` ids (a view); all of them when `limit` is None or covers them."""
    return logits[..., :limit] if limit is not None and limit < logits.shape[-1] else logits


class VocabLimitProcessor:
    """A `model.generate` logits processor: ids >= `limit` get -inf, so they are never chosen."""

    def __init__(self, limit: int):
        self.limit = limit

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        scores[:, self.limit:] = float("-inf")
        return scores


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """logits / T, then top-k (0 = off), then top-p (1 = off); removed tokens get -inf."""
    if temperature != 1.0:
        logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove = cum <= 1 - top_p            # the mass of the tokens below already covers 1 - top_p
        remove[..., -1:] = False            # keep the most likely token
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits


def next_tokens(logits: torch.Tensor, do_sample: bool, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """One token per row: the argmax, or a draw from softmax(filter_logits(...)).

    The draw inverts the CDF: the first token whose cumulative probability exceeds u ~ U[0, mass)
    (u scaled by the row's total, so rounding can never select a removed, zero-mass token). It is
    a draw from the same categorical as torch.multinomial, at a twentieth of its cost on a CPU.
    """
    if not do_sample:
        return logits.argmax(-1)
    cdf = filter_logits(logits.float(), temperature, top_k, top_p).softmax(-1).cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)


# --- the one-token step ----------------------------------------------------------------------------

LEAN_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DECODE_STEPS = ("lean", "static", "graph")     # algo.decode_step: see sample_shared_prompt
# RoPE variants whose cos/sin depend only on the position (the "dynamic" ones rescale with the length seen).
_STATIC_ROPE = ("default", "linear", "llama3", "yarn")
_RMS_NORMS = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")


def _rms_norm(module, x: torch.Tensor) -> torch.Tensor:
    """These models' RMSNorm, weight * (x / sqrt(mean(x^2) + eps)), with torch's fused kernel: in
    float32 one call; in bf16/fp16 the module normalises in float32 and rounds to x's dtype before
    its weight multiply, so here too (4 kernels where the module launches 7; the same bits)."""
    if type(module).__name__ not in _RMS_NORMS or torch.is_autocast_enabled(x.device.type):
        return module(x)
    return _normed(x, module.weight, module.variance_epsilon)


def _normed(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The arithmetic of `_rms_norm` over x's last dimension. `weight` is the norm's own ([d]: in
    float32 fused into the one call) or one row per head ([heads, d], `_joint_qk_norm`: multiplied
    after it, which rounds the same)."""
    d = x.shape[-1]
    if x.dtype == torch.float32:
        return F.rms_norm(x, (d,), weight, eps) if weight.dim() == 1 else weight * F.rms_norm(x, (d,), eps=eps)
    return weight * F.rms_norm(x.float(), (d,), eps=eps).to(x.dtype)


def _joint_qk_norm(attn, q_norm, k_norm) -> torch.Tensor | None:
    """The weight that lets one RMSNorm call normalise a layer's query and key heads together
    ([heads + kv_heads, head_dim]: q_norm's weight on each query head, k_norm's on each key head),
    or None when `_rms_norm` would not take its fused path on both (another norm, two epsilons,
    two dtypes). Built per decoding call, from the weights as they are then."""
    config = getattr(attn, "config", None)
    heads, kv_heads = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    if not (heads and kv_heads) or any(type(m).__name__ not in _RMS_NORMS for m in (q_norm, k_norm)) or \
            q_norm.variance_epsilon != k_norm.variance_epsilon or q_norm.weight.dtype != k_norm.weight.dtype or \
            q_norm.weight.shape != (attn.head_dim,) or k_norm.weight.shape != (attn.head_dim,):
        return None
    d = attn.head_dim
    return torch.cat((q_norm.weight.detach().expand(heads, d), k_norm.weight.detach().expand(kv_heads, d)))


def _additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean attention mask as the additive one (0 where attended, -inf elsewhere) that
    scaled_dot_product_attention makes of it in every call: made once per step, not once per layer."""
    if mask is None:
        return None
    return torch.zeros((), dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    # The models' RoPE, x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1], written as
    # x * cos + [x2, x1] * [-sin1, sin2]: one roll instead of a negation, two slices and a cat,
    # and the same bits (a sign flip is exact).
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin


# transformers installs these on a model's layers the first time a forward asks for hidden states or
# attentions, and keeps them; each returns at once unless that model's own forward is collecting.
_IDLE_HOOKS = ("transformers.utils.output_capturing",)


def _plain(module) -> bool:
    """No hook would run on `module` that a step calling its parts directly would skip. transformers'
    output-capturing hooks do not count: outside a forward that collects they do nothing (without
    this, one `output_hidden_states=True` forward, which the PPO family's value head makes, sent
    every later decoding step of that model down the slow `model(...)` path)."""
    hooks = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
    return all(getattr(getattr(h, "func", h), "__module__", None) in _IDLE_HOOKS for h in hooks)


def _linear(module):
    """`module` as a callable; a plain nn.Linear becomes F.linear on its weights (what its forward
    does, without the module call's overhead). LoRA, quantised and widened-bf16 layers
    (magrpo.models.cpu_bf16.Bf16Linear, which picks its product by row count) stay modules."""
    if type(module) is torch.nn.Linear and _plain(module):
        weight, bias = module.weight, module.bias
        return lambda x: F.linear(x, weight, bias)
    return module


_GATED_MLPS = ("LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP")


def _mlp(module):
    """down_proj(act(gate_proj(x)) * up_proj(x)), these models' MLP, with its linears as `_linear`."""
    if type(module).__name__ not in _GATED_MLPS or not _plain(module) or not _plain(module.act_fn):
        return module
    gate, up, down = _linear(module.gate_proj), _linear(module.up_proj), _linear(module.down_proj)
    act = F.silu if type(module.act_fn).__name__ in ("SiLUActivation", "SiLU") else module.act_fn
    return lambda x: down(act(gate(x)) * up(x))


class LeanDecoder:
    """The decoding step of a Llama-family causal LM without `model(...)`'s per-call overhead.

    Per layer, as the model's own forward: h = x + o_proj(attn(rope(q), rope(k), v)) over
    input_layernorm(x), then x = h + mlp(post_attention_layernorm(h)); logits = lm_head(norm(x)).
    Key/values go into a [rows, kv_heads, P + T, head_dim] buffer per layer, written in place.
    """

    def __init__(self, lm):
        self.lm, self.body = lm, lm.model
        self.keep_hidden = False          # record the normed last hidden state of each step (`hidden`)
        self.hidden: torch.Tensor | None = None
        self.layers = list(self.body.layers)
        self.lm_head = _linear(lm.lm_head)
        # Per layer: its modules, plain linears and the MLP as direct calls (see _linear).
        # qwen3 also normalises each head's query and key (q_norm, k_norm); looked up once, not per step.
        self.blocks = [(layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm,
                        *(_linear(getattr(layer.self_attn, f"{x}_proj")) for x in "qkvo"), _mlp(layer.mlp),
                        (layer.self_attn.q_norm, layer.self_attn.k_norm) if hasattr(layer.self_attn, "q_norm")
                        else None)
                       for layer in self.layers]
        self._autocast_state = None      # (device type, enabled, dtype) for the steps to enter (prefill)
        self.qk_weights: list = [None] * len(self.layers)   # per layer, `_joint_qk_norm` (start)

    @classmethod
    def of(cls, model) -> LeanDecoder | None:
        """The lean step for `model` (a causal LM, or a peft model over one), or None when the plain
        `model(...)` step must run: another architecture or attention kernel, sliding-window or
        length-dependent RoPE layers, prompt-learning adapters, sharded (fsdp) weights, or hooks on
        the modules the lean step does not call."""
        lm = model
        if hasattr(model, "get_base_model"):
            config = getattr(model, "peft_config", {}).get(getattr(model, "active_adapter", None))
            if config is None or getattr(config, "is_prompt_learning", False):
                return None
            lm = model.get_base_model()
        config = getattr(lm, "config", None)
        body = getattr(lm, "model", None)
        if (config is None or body is None or getattr(config, "model_type", None) not in LEAN_MODEL_TYPES
                or getattr(config, "_attn_implementation", None) != "sdpa"
                or any(t != "full_attention" for t in (getattr(config, "layer_types", None) or []))
                or getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
                or not all(hasattr(body, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb"))
                or not hasattr(lm, "lm_head")
                or getattr(body.rotary_emb, "rope_type", None) not in _STATIC_ROPE):
            return None
        for layer in body.layers:
            attn = getattr(layer, "self_attn", None)
            if not all(hasattr(layer, a) for a in ("input_layernorm", "post_attention_layernorm", "mlp")) or \
                    not all(hasattr(attn, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")):
                return None
        # The modules whose forward the lean step replaces, norms included (fused above).
        skipped = [model, lm, body, body.norm, *body.layers]
        for layer in body.layers:
            skipped += [layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm,
                        getattr(layer.self_attn, "q_norm", None), getattr(layer.self_attn, "k_norm", None)]
        if any(m is not None and not _plain(m) for m in skipped):   # accelerate offload...
            return None
        if any(type(m).__name__.startswith("FSDP") for m in model.modules()):
            return None
        return cls(lm)

    def prefill(self, model, **kwargs):
        """`model(**kwargs)`, noting the autocast state that the model's forward runs its layers under.

        A forward wrapped in autocast (`hardware.autocast=bf16` wraps it so; so does accelerate's
        mixed precision) leaves bf16 values in the cache, and under autocast the attention casts
        query, keys and values to bf16. The lean step calls the layers directly, without that
        forward: it runs under the same state (`step`), else its query would be float32 against
        the bf16 values written in place."""
        embed = self.body.embed_tokens
        dev = embed.weight.device.type
        seen = []

        def note(module, args):
            seen.append((torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev)))

        handle = embed.register_forward_pre_hook(note)
        try:
            out = model(**kwargs)
        finally:
            handle.remove()
        here = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        # None: the steps run under the caller's state, which is the forward's own.
        self._autocast_state = (dev, *seen[0]) if seen and seen[0] != here else None
        return out

    def _autocast(self):
        if self._autocast_state is None:
            return contextlib.nullcontext()
        dev, enabled, dtype = self._autocast_state
        return torch.autocast(dev, dtype=dtype, enabled=enabled)

    def start(self, cache, attention_mask: torch.Tensor, num_generations: int, max_new_tokens: int,
              static: bool = False) -> bool:
        """Take over the prefill's key/value cache ([B, kv_heads, P, head_dim] per layer), repeated
        to B*G rows; False (nothing changed) when it is not one plain tensor pair per layer.
        `static`: the buffers are zeroed and a mask is always built, for `static_step`."""
        layers = getattr(cache, "layers", None)
        if layers is None or len(layers) != len(self.layers) or \
                any(getattr(c, "keys", None) is None or c.keys.dim() != 4 for c in layers):
            return False
        G, P = num_generations, attention_mask.shape[1]
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        for c in layers:
            for src, out in ((c.keys, self.keys), (c.values, self.values)):
                shape = (src.shape[0] * G, src.shape[1], P + max_new_tokens, src.shape[3])
                # static: the step reads every column (masked), so no column may hold NaN garbage
                buf = src.new_zeros(shape) if static else src.new_empty(shape)
                buf[:, :, :P] = src.repeat_interleave(G, dim=0)
                out.append(buf)
        n, dev = attention_mask.shape[0] * G, attention_mask.device
        self.P, self.total = P, P + max_new_tokens
        # As transformers' sdpa path: no mask at all when no prompt is padded (a lone query token
        # sees every key), else a boolean row mask.
        self.mask: torch.Tensor | None = None
        if static or not bool(attention_mask.all()):
            self.mask = torch.ones(n, 1, 1, P + max_new_tokens, dtype=torch.bool, device=dev)
            self.mask[:, 0, 0, :P] = attention_mask.repeat_interleave(G, dim=0).bool()
        # Position of new token t: the row's prompt length + t. cos/sin of every position, once.
        positions = attention_mask.long().sum(-1).repeat_interleave(G).unsqueeze(1) + \
            torch.arange(max_new_tokens, device=dev)
        probe = self.keys[0].new_zeros(1)
        # q_norm and k_norm as one call per layer (qwen3), with the weights as they are now.
        self.qk_weights = [_joint_qk_norm(b[0], *b[-1]) if b[-1] is not None else None for b in self.blocks]
        cos, sin = self.body.rotary_emb(probe, positions)          # [n, T, head_dim]
        half = sin.shape[-1] // 2
        self.cos, self.sin = cos.unsqueeze(1), torch.cat((-sin[..., :half], sin[..., half:]), -1).unsqueeze(1)
        return True

    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        """Logits [n, V] after new token t ([n]) of every row, under the prefill's autocast state."""
        with self._autocast():
            return self._step(tokens, t)

    def static_step(self, tokens: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """`step` with every shape fixed, the form a CUDA graph replays: the new token's position
        `t` is a one-element tensor (not a Python int), its key/value are written by index, and
        attention reads the whole [P + T] buffer under a mask that hides the columns past it (a
        hidden column adds exp(-inf) = 0 to the softmax, so the result is `step`'s but for the
        order of float additions). Needs `start(..., static=True)`."""
        with self._autocast():
            return self._static_step(tokens, t)

    def _static_step(self, tokens: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if self.mask is None:
            raise RuntimeError("LeanDecoder.static_step needs start(..., static=True) first (it builds the mask)")
        n = tokens.shape[0]
        col = self.P + t                                             # [1] the new token's column
        seen = torch.arange(self.total, device=tokens.device) <= col   # columns written so far
        mask = _additive(self.mask & seen, self.keys[0].dtype)

        def write(keys, values, k, v):
            keys.index_copy_(2, col, k)
            values.index_copy_(2, col, v)

        def attend(attn, q, keys, values):
            return F.scaled_dot_product_attention(q.reshape(n, keys.shape[1], -1, attn.head_dim), keys, values,
                                                  attn_mask=mask, scale=attn.scaling)

        return self._layers(tokens, self.cos.index_select(2, t), self.sin.index_select(2, t), write, attend)

    def _step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        n, end = tokens.shape[0], self.P + t + 1
        mask = _additive(self.mask[..., :end] if self.mask is not None else None, self.keys[0].dtype)

        def write(keys, values, k, v):
            keys[:, :, end - 1:end] = k
            values[:, :, end - 1:end] = v

        def attend(attn, q, keys, values):
            dropout = getattr(attn, "attention_dropout", 0.0) if attn.training else 0.0
            if mask is None:
                return F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], dropout_p=dropout,
                                                      scale=attn.scaling, enable_gqa=q.shape[1] != keys.shape[1])
            # One query token: its heads become kv_heads x group queries against the shared
            # key/value heads (transformers' pack_gqa), with the row mask broadcast over them.
            return F.scaled_dot_product_attention(q.reshape(n, keys.shape[1], -1, attn.head_dim), keys[:, :, :end],
                                                  values[:, :, :end], attn_mask=mask, dropout_p=dropout,
                                                  scale=attn.scaling)

        return self._layers(tokens, self.cos[:, :, t:t + 1], self.sin[:, :, t:t + 1], write, attend)

    def _layers(self, tokens: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, write, attend) -> torch.Tensor:
        """The decoder's layers on one new token per row: `write(keys, values, k, v)` stores its
        key/value, `attend(attn, q, keys, values)` reads the cache (the lean and the static step
        differ only in these two)."""
        n = tokens.shape[0]
        x = self.body.embed_tokens(tokens.unsqueeze(1))             # [n, 1, hidden]
        autocast = torch.is_autocast_enabled(x.device.type)
        for (attn, norm1, norm2, q_proj, k_proj, v_proj, o_proj, mlp, qk_norm), qk_weight, keys, values in \
                zip(self.blocks, self.qk_weights, self.keys, self.values):
            d = attn.head_dim
            h = _rms_norm(norm1, x)
            q, k = q_proj(h), k_proj(h)
            if q.dtype == k.dtype and (qk_norm is None or qk_weight is not None and not autocast
                                       and q.dtype in (torch.float32, qk_weight.dtype)):
                # Query and key heads side by side: one norm and one rotation for both (each
                # element's arithmetic unchanged, so the same bits, in fewer kernels).
                heads = q.shape[-1] // d
                qk = torch.cat((q, k), -1).view(n, 1, -1, d)
                if qk_norm is not None:
                    qk = _normed(qk, qk_weight, qk_norm[0].variance_epsilon)
                qk = _rotate(qk.transpose(1, 2), cos, sin)           # [n, heads + kv_heads, 1, head_dim]
                q, k = qk[:, :heads], qk[:, heads:]
            else:
                q, k = q.view(n, 1, -1, d), k.view(n, 1, -1, d)
                if qk_norm is not None:
                    q, k = _rms_norm(qk_norm[0], q), _rms_norm(qk_norm[1], k)
                q, k = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin)
            write(keys, values, k, v_proj(h).view(n, 1, -1, d).transpose(1, 2))
            x = x + o_proj(attend(attn, q, keys, values).reshape(n, 1, -1))
            x = x + mlp(_rms_norm(norm2, x))
        x = _rms_norm(self.body.norm, x)
        if self.keep_hidden:
            self.hidden = x[:, -1]
        return self.lm_head(x)[:, -1]


class GraphStep:
    """`LeanDecoder.static_step` captured as a CUDA graph (as gpt-fast decodes): each decoding step
    copies the token and its position into static input tensors and replays the recorded kernels,
    so a step costs its kernels' time and no Python or launch overhead. Captured per
    `sample_shared_prompt` call (the buffers' shapes are that call's), at its first step: that step
    runs eagerly on a side stream, which is the warm-up a capture needs (lazy cuBLAS / cuDNN /
    allocator set-up must not be captured), and its logits are the first step's (the computation the
    graph then replays). Off CUDA it is the static step itself, uncaptured
    (as with `capture=False`)."""

    def __init__(self, lean: LeanDecoder, n: int, device, capture: bool = True):
        self.lean = lean
        self.graph: torch.cuda.CUDAGraph | None = None
        self.tokens = torch.zeros(n, dtype=torch.long, device=device)
        self.t = torch.zeros(1, dtype=torch.long, device=device)
        self.capture = capture and torch.device(device).type == "cuda"

    def _record(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The first step, eagerly on a side stream, then the capture (which executes nothing: the
        step's key/value writes are the eager run's)."""
        device = self.tokens.device
        main, stream = torch.cuda.current_stream(device), torch.cuda.Stream(device)
        stream.wait_stream(main)
        with torch.cuda.stream(stream):
            logits, hidden = self.lean.static_step(self.tokens, self.t), self.lean.hidden
            first = logits.clone(), None if hidden is None else hidden.clone()
        main.wait_stream(stream)
        for x in first:
            if x is not None:
                x.record_stream(main)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.lean.static_step(self.tokens, self.t)
            self.hidden = self.lean.hidden
        return first

    def __call__(self, tokens: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.tokens.copy_(tokens)
        self.t.fill_(t)
        if not self.capture:
            return self.lean.static_step(self.tokens, self.t), self.lean.hidden
        if self.graph is None:
            return self._record()
        self.graph.replay()      # outputs live in the graph's memory: copies, before the next replay
        return self.logits.clone(), None if self.hidden is None else self.hidden.clone()


@torch.no_grad()
def sample_shared_prompt(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_generations: int,
                         max_new_tokens: int, eos_token_ids: list[int], pad_token_id: int, do_sample: bool = True,
                         temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                         record: dict | None = None, decode_step: str = "lean") -> torch.Tensor | None:
    """[B*G, C] completion ids (C <= max_new_tokens; rows of prompt b are b*G .. b*G+G-1), padded
    with `pad_token_id` after each row's first EOS. None when the model's forward returns no
    key/value cache that can be repeated (the caller then uses `model.generate`). Only ids below
    `vocab_limit(model)` are ever chosen.

    `record` (a dict, filled in place): with key "logprobs" requested, the log-probability of each
    chosen token under the decoding step's own logits, log softmax(limit_vocab(logits) / T)
    ([B*G, C] float32, as `algos.logprobs.token_logprobs` computes it from a whole-sequence forward:
    the same numbers up to the order of float additions, since a cached step and a full forward
    add the same products in other orders); with "hidden" requested, the final-normed hidden state
    at the position that predicts each token ([B*G, C, H], what a value head reads). Request a key
    by setting it to None before the call.

    `decode_step` (`algo.decode_step`) picks the one-token step of a Llama-family model: "lean"
    (`LeanDecoder.step`), "static" (`LeanDecoder.static_step`: fixed shapes) or "graph" (the static
    step replayed as a CUDA graph, `GraphStep`; the static step off CUDA). Greedy decoding gives the
    same tokens on each, but for a near-tie that another order of float additions flips."""
    if decode_step not in DECODE_STEPS:
        raise ValueError(f"decode_step={decode_step!r} is not one of {list(DECODE_STEPS)}")
    G = num_generations
    limit = vocab_limit(model)
    dev = input_ids.device
    prompt_len = attention_mask.long().sum(-1)
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    lean = LeanDecoder.of(model)
    recorded: dict = record if record is not None else {}      # `record`, filled in place
    want_logp, want_hidden = "logprobs" in recorded, "hidden" in recorded
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                  logits_to_keep=1, **({"output_hidden_states": True} if want_hidden else {}))
    out = lean.prefill(model, **inputs) if lean is not None else model(**inputs)
    cache = output_cache(out)
    if cache is None or not hasattr(cache, "batch_repeat_interleave"):
        return None
    logits = out.logits[:, -1].repeat_interleave(G, dim=0)
    hidden = out.hidden_states[-1][:, -1].repeat_interleave(G, dim=0) if want_hidden else None
    n, P = logits.shape[0], input_ids.shape[1]
    static = decode_step != "lean"
    step: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor | None]]
    if lean is not None and lean.start(cache, attention_mask, G, max_new_tokens, static=static):
        lean.keep_hidden = want_hidden
        if static:      # one decoded token needs no step at all: nothing to capture
            step = GraphStep(lean, n, dev, capture=decode_step == "graph" and max_new_tokens > 1)
        else:
            decoder = lean

            def lean_step(tok: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor | None]:
                return decoder.step(tok, t), decoder.hidden

            step = lean_step
    else:
        cache.batch_repeat_interleave(G)
        # The attention mask of the whole sequence, written once; step t reads its first P + t + 1 columns.
        attn = torch.ones(n, P + max_new_tokens, dtype=attention_mask.dtype, device=dev)
        attn[:, :P] = attention_mask.repeat_interleave(G, dim=0)
        next_pos = prompt_len.repeat_interleave(G).unsqueeze(1)       # position of the first new token

        def model_step(tok: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor | None]:
            o = model(input_ids=tok.unsqueeze(1), attention_mask=attn[:, :P + t + 1], position_ids=next_pos + t,
                      use_cache=True, **{cache_keyword(model): cache},
                      **({"output_hidden_states": True} if want_hidden else {}))
            return o.logits[:, -1], o.hidden_states[-1][:, -1] if want_hidden else None

        step = model_step
    tokens = torch.full((n, max_new_tokens), pad_token_id, dtype=input_ids.dtype, device=dev)
    logps: list[torch.Tensor] = []
    hiddens: list[torch.Tensor] = []
    eos = torch.tensor(eos_token_ids, dtype=input_ids.dtype, device=dev)
    done = torch.zeros(n, dtype=torch.bool, device=dev)
    steps = 0
    for t in range(max_new_tokens):
        logits = limit_vocab(logits, limit)
        tok = next_tokens(logits, do_sample, temperature, top_k, top_p)
        tok = tok.masked_fill(done, pad_token_id)
        tokens[:, t] = tok
        if want_logp:      # as token_logprobs: float32, then / T, then log softmax
            scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
            logps.append(F.log_softmax(scaled, dim=-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1))
        if want_hidden:
            if hidden is None:
                raise RuntimeError("sample_shared_prompt: the decoding step gave no hidden state (record['hidden'])")
            hiddens.append(hidden)
        steps = t + 1
        if eos.numel():
            done |= torch.isin(tok, eos)
        if t + 1 == max_new_tokens or bool(done.all()):
            break
        logits, hidden = step(tok, t)
    if want_logp:
        recorded["logprobs"] = torch.stack(logps, 1)
    if want_hidden:
        recorded["hidden"] = torch.stack(hiddens, 1)
    return tokens[:, :steps]
