"""Pieces shared by the algorithms, each chosen by name from a small registry where there is a choice.

- ADVANTAGES: group-relative baselines over a sibling set of returns (last dim = the group).
- SCALES: optional division by a standard deviation.
- LOSS_AGG: how per-token losses become one scalar; each entry is written so that the sum of its
  value over micro-batches equals its value on the whole batch (gradient accumulation is exact).
- token_logprobs: log pi(token | prefix) over completion tokens; the completion mask from
  magrpo.rollout zeroes padding and everything after the first EOS.
- clipped_surrogate, k3_kl: the PPO objective and the KL estimator of every algorithm.
- gae, masked_whiten, clipped_value_loss, AdaptiveKLController: the actor-critic pieces (PPO family).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# --- advantages: A = R - b(R) over the group (paper, Sec. 4) ---------------------------------------


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
                   completion_mask: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False,
                   with_hidden: bool = False, entropy_grad: bool = False):
    """log pi(c_t | prompt, c_<t) for every completion token: [n, C] (and per-token entropy).

    The prompt is left-padded and the completion right-padded; position ids follow the attention
    mask, as in generation, so these log-probs match the sampling distribution (logits / T).
    The entropy carries a gradient only with `entropy_grad` (an entropy bonus). With `with_hidden`, also returns the last hidden state at the position that predicts each
    completion token (the state s_t a value head reads): (logp, entropy, hidden [n, C, H]).
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attn = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)
    position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
    P = prompt_ids.shape[1]
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids, use_cache=False,
                output_hidden_states=with_hidden)
    logits = out.logits[:, P - 1:-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    if with_hidden:
        return logp, entropy, out.hidden_states[-1][:, P - 1:-1]
    return logp, entropy


def row_chunks(rows: int, size: int) -> list[slice]:
    """Micro-batches of at most `size` rows: the unit of one forward/backward."""
    return [slice(s, min(s + size, rows)) for s in range(0, rows, size)]


@torch.no_grad()
def rollout_logprobs(model, gen, chunks: list[slice], temperature: float, device) -> torch.Tensor:
    """[n*G, C] log-probs of a Generation's completions under `model` (the rollout or reference policy)."""
    parts = []
    for mb in chunks:
        p_ids, p_mask = gen.prompt_rows(mb)
        logp, _ = token_logprobs(model, p_ids.to(device), p_mask.to(device), gen.completion_ids[mb].to(device),
                                 gen.completion_mask[mb].to(device), temperature)
        parts.append(logp)
    return torch.cat(parts)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


# --- the PPO objective -----------------------------------------------------------------------------


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float,
                      eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A), r = pi/pi_old; and where it clipped.

    At r = 1 (the first pass over a fresh rollout) its gradient is the plain policy gradient -A grad log pi.
    """
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    loss = -torch.minimum(ratio * adv, clipped * adv)
    return loss, (ratio != clipped).float()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / (std + 1e-8) over the masked entries; masked-out entries come back as 0."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        out = out + mean
    return out * mask


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's valid tokens (Schulman et al., 2016).

    delta_t = r_t + gamma * V_{t+1} - V_t,  A_t = sum_l (gamma * lam)^l delta_{t+l},  returns = A + V;
    V after a row's last valid token is 0 (the episode ends there), and masked positions give 0.
    rewards, values, mask: [n, C] -> (advantages, returns), each [n, C].
    """
    values = values * mask
    rewards = rewards * mask
    C = rewards.shape[1]
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(C)):
        next_v = values[:, t + 1] if t + 1 < C else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = (delta + gamma * lam * last) * mask[:, t]
        adv[:, t] = last
    return adv, (adv + values) * mask


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2), and where clipping won."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    a, b = (values - returns) ** 2, (clipped - returns) ** 2
    return 0.5 * torch.maximum(a, b), (b > a).float()


class AdaptiveKLController:
    """KL coefficient of RLHF PPO (Ziegler et al., 2019): beta <- beta * (1 + clip(KL/target - 1, +-0.2) * n/horizon).

    With target None the coefficient stays fixed.
    """

    def __init__(self, init: float, target: float | None, horizon: int):
        self.value, self.target, self.horizon = init, target, horizon

    def update(self, kl: float, n_steps: int) -> None:
        if self.target is None:
            return
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]
