"""Log-probabilities: one forward gives log pi(c_t | prompt, c_<t) for every completion token.

- sequence_forward, token_logprobs: logits (or hidden states) and token log-probs of prompt + completion
  rows; the completion mask from magrpo.rollout.record zeroes padding and everything after the first EOS;
- RowBatch, row_logprobs: the model inputs of some completion rows of a Generation, each distinct
  prompt run once when shared; row_chunks: micro-batches; rollout_logprobs: a whole Generation's
  log-probs without gradient (the rollout or the reference policy).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from magrpo.models import flops
from magrpo.models.sampler import cache_keyword, limit_vocab, output_cache, vocab_limit

# The G completions of an item share its prompt; with `share_prompt` the prompt runs ONCE (with
# gradients) and its key/value cache is gathered to the completion rows that continue it, so the
# prompt's cost is paid per item, not per sample, and the gradient of every completion flows back
# through the one shared prompt pass. Both paths compute the same function: the attention mask is
# [prompt mask | completion mask] and position ids follow it, in the shared path as in the
# concatenated one, so they agree to float rounding (tests/test_shared_prompt.py).


def _last_hidden(out):
    return out.hidden_states[-1] if getattr(out, "hidden_states", None) is not None else out.last_hidden_state


def _concat_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask, with_hidden, lm: bool,
                    logits: bool = True):
    """(logits or None, hidden or None) at the C positions that predict c_0 .. c_{C-1}."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attn = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)
    position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
    P, C = prompt_ids.shape[1], completion_ids.shape[1]
    kwargs = dict(input_ids=input_ids, attention_mask=attn, position_ids=position_ids, use_cache=False)
    if lm:
        # Only the C positions that predict completion tokens need the (vocabulary-wide) head;
        # a value head on the LM's hidden states needs none of it (one column, dropped).
        kwargs.update(logits_to_keep=C + 1 if logits else 1, output_hidden_states=with_hidden)
    out = model(**kwargs)
    token_logits = out.logits[:, :-1] if lm and logits else None
    hidden = _last_hidden(out)[:, P - 1:-1] if with_hidden or not lm else None
    return token_logits, hidden


def _shared_forward(model, prompt_ids, prompt_mask, prompt_index, completion_ids, completion_mask, with_hidden,
                    lm: bool, logits: bool = True):
    """The same outputs as `_concat_forward` on (prompt_ids[prompt_index], completion_ids), with each
    of the U distinct prompts run once: [U, P] prompt pass -> cache gathered to the n rows ->
    [n, C-1] completion pass (the last completion token predicts nothing we need)."""
    pos = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)
    kwargs = dict(logits_to_keep=1, output_hidden_states=with_hidden) if lm else {}
    # Prompts are left-padded, so column P-1 is every prompt's last token: it predicts c_0.
    first = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=pos, use_cache=True, **kwargs)
    cache = output_cache(first)
    cache.batch_select_indices(prompt_index)          # differentiable gather: [U, ...] -> [n, ...]
    want_logits = lm and logits
    token_logits = first.logits[:, -1:][prompt_index] if want_logits else None
    hidden = _last_hidden(first)[:, -1:][prompt_index] if with_hidden or not lm else None
    if completion_ids.shape[1] > 1:
        c_mask = completion_mask[:, :-1].to(prompt_mask.dtype)
        attn = torch.cat([prompt_mask[prompt_index], c_mask], dim=1)
        # position ids continue the concatenated sequence's: count of attended tokens so far - 1
        c_pos = prompt_mask.long().sum(-1)[prompt_index].unsqueeze(1) + c_mask.long().cumsum(-1) - 1
        head = {"output_hidden_states": with_hidden, **({} if want_logits else {"logits_to_keep": 1})} if lm else {}
        rest = model(input_ids=completion_ids[:, :-1], attention_mask=attn, position_ids=c_pos,
                     use_cache=True, **{cache_keyword(model): cache}, **head)
        if token_logits is not None:
            token_logits = torch.cat([token_logits, rest.logits], dim=1)
        if hidden is not None:
            hidden = torch.cat([hidden, _last_hidden(rest)], dim=1)
    return token_logits, hidden


def sequence_forward(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                     completion_mask: torch.Tensor, prompt_index: torch.Tensor | None = None,
                     share_prompt: bool = False, with_hidden: bool = False, lm: bool = True, logits: bool = True):
    """(logits [n, C, V], hidden [n, C, H] or None) at the positions that predict each completion token.

    prompt_ids/prompt_mask: left-padded prompts, one per completion row, or (with `prompt_index`,
    [n] -> prompt row) the distinct prompts the rows continue. `share_prompt` runs each distinct
    prompt once; otherwise each row is its prompt followed by its completion. `lm=False` is for a
    backbone without an LM head (a critic model): only hidden states come back. `logits=False`: an
    LM whose hidden states alone are wanted (a value head on the actor's backbone) computes its
    vocabulary-wide head at one position only, and returns None for the logits.
    """
    if flops.active():        # the prompt tokens this pass runs: each distinct prompt once when shared
        prompts = prompt_mask if prompt_index is None or share_prompt else prompt_mask[prompt_index]
        completion = completion_mask.sum().item()
        flops.add_pass(model, prompts.sum().item() + completion, completion if lm and logits else 0)
    if prompt_index is not None and share_prompt:
        return _shared_forward(model, prompt_ids, prompt_mask, prompt_index, completion_ids, completion_mask,
                               with_hidden, lm, logits)
    if prompt_index is not None:
        prompt_ids, prompt_mask = prompt_ids[prompt_index], prompt_mask[prompt_index]
    return _concat_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask, with_hidden, lm, logits)


def token_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                   completion_mask: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False,
                   with_hidden: bool = False, entropy_grad: bool = False, prompt_index: torch.Tensor | None = None,
                   share_prompt: bool = False):
    """log pi(c_t | prompt, c_<t) for every completion token: [n, C] (and per-token entropy).

    The prompt is left-padded and the completion right-padded; position ids follow the attention
    mask, as in generation, so these log-probs match the sampling distribution (logits / T).
    `prompt_index` / `share_prompt`: see `sequence_forward`.
    Over the ids the model's tokenizer has (magrpo.models.sampler.vocab_limit), as in sampling.
    The entropy carries a gradient only with `entropy_grad` (an entropy bonus). With `with_hidden`, also returns the last hidden state at the position that predicts each
    completion token (the state s_t a value head reads): (logp, entropy, hidden [n, C, H]).
    """
    logits, hidden = sequence_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask, prompt_index,
                                      share_prompt, with_hidden)
    # Normalised over the tokenizer's ids only, as the sampler draws them (magrpo.models.sampler.vocab_limit).
    logits = limit_vocab(logits, vocab_limit(model)).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    if with_hidden:
        return logp, entropy, hidden
    return logp, entropy


@dataclass
class RowBatch:
    """The model inputs of some completion rows of a Generation: the distinct prompts they continue
    (`prompt_index` maps each row to one) and the completions."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    prompt_index: torch.Tensor | None      # None: one prompt per row
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    @classmethod
    def of(cls, gen, rows: slice | torch.Tensor, device) -> RowBatch:
        r = torch.arange(gen.completion_ids.shape[0])[rows]
        items, index = torch.unique(r // gen.num_generations, return_inverse=True)
        ids, mask = gen.prompt_ids[items], gen.prompt_mask[items]
        # Left-padding columns none of these prompts uses are dropped: a multi-turn batch holds short
        # first-turn prompts next to long later ones (magrpo.rollout.turns.concat_generations).
        used = mask.any(0).nonzero()
        start = int(used[0]) if len(used) else 0
        return cls(ids[:, start:].to(device), mask[:, start:].to(device), index.to(device),
                   gen.completion_ids[r].to(device), gen.completion_mask[r].to(device))


def row_logprobs(model, gen, rows: slice | torch.Tensor, temperature: float, device, share_prompt: bool,
                 **kwargs):
    """token_logprobs of a Generation's completion rows `rows`, each distinct prompt run once when shared."""
    b = RowBatch.of(gen, rows, device)
    return token_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask, temperature,
                          prompt_index=b.prompt_index, share_prompt=share_prompt, **kwargs)


def row_chunks(rows: int, size: int, group: int = 1) -> list[slice]:
    """Micro-batches of at most `size` rows: the unit of one forward/backward. With `group` (G), a
    micro-batch holds whole groups where it can (size >= G), so each prompt runs once per step."""
    if group > 1 and size >= group:
        size -= size % group
    return [slice(s, min(s + size, rows)) for s in range(0, rows, size)]


@torch.no_grad()
def rollout_logprobs(model, gen, chunks: list[slice], temperature: float, device,
                     share_prompt: bool = False) -> torch.Tensor:
    """[n*G, C] log-probs of a Generation's completions under `model` (the rollout or reference policy)."""
    return torch.cat([row_logprobs(model, gen, mb, temperature, device, share_prompt)[0] for mb in chunks])
