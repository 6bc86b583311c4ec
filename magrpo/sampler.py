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
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)
_FALLBACK_LOGGED: set[tuple[str, str]] = set()


def _log_once(model, reason: str) -> None:
    key = (type(model).__name__, reason)
    if key not in _FALLBACK_LOGGED:
        _FALLBACK_LOGGED.add(key)
        log.info("algo.share_prompt: %s %s; each completion row carries its own prompt", key[0], reason)


def shares_prompt(model, requested: bool) -> bool:
    """Whether `model` can run a prompt once and continue it for several rows (`requested` = the
    `algo.share_prompt` key), in generation and in the update (magrpo.algos.core). A model that
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
    if supports is None or not supports():
        _log_once(model, "has no standard key/value cache")
        return False
    return True


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


@torch.no_grad()
def sample_shared_prompt(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_generations: int,
                         max_new_tokens: int, eos_token_ids: list[int], pad_token_id: int, do_sample: bool = True,
                         temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor | None:
    """[B*G, C] completion ids (C <= max_new_tokens; rows of prompt b are b*G .. b*G+G-1), padded
    with `pad_token_id` after each row's first EOS. None when the model's forward returns no
    key/value cache that can be repeated (the caller then uses `model.generate`)."""
    G = num_generations
    dev = input_ids.device
    prompt_len = attention_mask.long().sum(-1)
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                logits_to_keep=1)
    cache = out.past_key_values
    if cache is None or not hasattr(cache, "batch_repeat_interleave"):
        return None
    cache.batch_repeat_interleave(G)
    logits = out.logits[:, -1].repeat_interleave(G, dim=0)
    n, P = logits.shape[0], input_ids.shape[1]
    # The attention mask of the whole sequence, written once; step t reads its first P + t + 1 columns.
    attn = torch.ones(n, P + max_new_tokens, dtype=attention_mask.dtype, device=dev)
    attn[:, :P] = attention_mask.repeat_interleave(G, dim=0)
    next_pos = prompt_len.repeat_interleave(G).unsqueeze(1)       # position of the first new token
    tokens = torch.full((n, max_new_tokens), pad_token_id, dtype=input_ids.dtype, device=dev)
    eos = torch.tensor(eos_token_ids, dtype=input_ids.dtype, device=dev)
    done = torch.zeros(n, dtype=torch.bool, device=dev)
    steps = 0
    for t in range(max_new_tokens):
        tok = next_tokens(logits, do_sample, temperature, top_k, top_p)
        tok = tok.masked_fill(done, pad_token_id)
        tokens[:, t] = tok
        steps = t + 1
        if eos.numel():
            done |= torch.isin(tok, eos)
        if t + 1 == max_new_tokens or bool(done.all()):
            break
        out = model(input_ids=tok.unsqueeze(1), attention_mask=attn[:, :P + t + 1], position_ids=next_pos + t,
                    past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1]
    return tokens[:, :steps]
