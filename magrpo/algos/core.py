"""Pieces shared by the policy-gradient algorithms, each chosen by name from a small registry.

- ADVANTAGES: group-relative baselines over a sibling set of returns (last dim = the group).
- SCALES: optional division by a standard deviation.
- LOSS_AGG: how per-token losses become one scalar; each entry is written so that the sum of its
  value over micro-batches equals its value on the whole batch (gradient accumulation is exact).
- token_logprobs: log pi(token | prefix) over completion tokens; the completion mask from
  magrpo.rollout zeroes padding and everything after the first EOS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# --- advantages: A = R - b(R) over the group (SPEC §3) -------------------------------------------


def _mean(R: torch.Tensor) -> torch.Tensor:
    return R - R.mean(-1, keepdim=True)  # MAGRPO (paper): A_j = R_j - mean_k R_k


def _rloo(R: torch.Tensor) -> torch.Tensor:
    G = R.shape[-1]  # MARLOO: A_j = R_j - (sum_k R_k - R_j) / (G - 1)
    return R - (R.sum(-1, keepdim=True) - R) / (G - 1)


def _max(R: torch.Tensor) -> torch.Tensor:
    return R - R.max(-1, keepdim=True).values  # MAReMax: A_j = R_j - max_k R_k


def _raw(R: torch.Tensor) -> torch.Tensor:
    return R.clone()  # MAREINFORCE: A_j = R_j


ADVANTAGES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mean": _mean, "rloo": _rloo, "max": _max, "raw": _raw,
}

STD_EPS = 1e-4
SCALES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "none": lambda A, R: A,
    "group": lambda A, R: A / (R.std(-1, keepdim=True, unbiased=False) + STD_EPS),
    "batch": lambda A, R: A / (R.std(unbiased=False) + STD_EPS),
}


def advantages(returns: torch.Tensor, estimator: str = "mean", scale: str = "none") -> torch.Tensor:
    """returns: [..., G] sibling groups -> advantages of the same shape."""
    return SCALES[scale](ADVANTAGES[estimator](returns), returns)


# --- loss aggregation ----------------------------------------------------------------------------


@dataclass
class AggContext:
    """Whole-batch sizes, so micro-batch losses add up to the full-batch loss."""

    num_sequences: int
    num_tokens: int
    max_new_tokens: int


def _seq_sum(loss, mask, ctx):  # reference code: sum of token terms per sequence, mean over sequences
    return (loss * mask).sum() / ctx.num_sequences


def _seq_mean_token_mean(loss, mask, ctx):  # GRPO: mean over each sequence's tokens, then over sequences
    return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum() / ctx.num_sequences


def _token_mean(loss, mask, ctx):  # DAPO: mean over every completion token of the batch
    return (loss * mask).sum() / max(ctx.num_tokens, 1)


def _dr_grpo(loss, mask, ctx):  # Dr. GRPO: sequence sums over a constant, max_completion_length
    return (loss * mask).sum() / (ctx.num_sequences * ctx.max_new_tokens)


LOSS_AGG: dict[str, Callable[[torch.Tensor, torch.Tensor, AggContext], torch.Tensor]] = {
    "seq_sum": _seq_sum,
    "seq_mean_token_mean": _seq_mean_token_mean,
    "token_mean": _token_mean,
    "dr_grpo": _dr_grpo,
}


# --- log-probabilities ---------------------------------------------------------------------------


def token_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                   completion_mask: torch.Tensor, temperature: float = 1.0,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(c_t | prompt, c_<t) for every completion token: [n, C] (and per-token entropy).

    The prompt is left-padded and the completion right-padded; position ids follow the attention
    mask, as in generation, so these log-probs match the sampling distribution (logits / T).
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attn = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)
    position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
    P = prompt_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids,
                   use_cache=False).logits[:, P - 1:-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0
