"""Pieces shared by the algorithms, each chosen by name from a small registry where there is a choice.

- ADVANTAGES: group-relative baselines over a sibling set of returns (last dim = the group).
- ADVANTAGE_SCALES: optional division of the advantages by a standard deviation.
- LOSS_AGG: how per-token losses become one scalar; each entry is written so that the sum of its
  value over micro-batches equals its value on the whole batch (gradient accumulation is exact).
- token_logprobs: log pi(token | prefix) over completion tokens; the completion mask from
  magrpo.rollout zeroes padding and everything after the first EOS.
- clipped_surrogate, k3_kl: the PPO objective and the KL estimator of every algorithm.
- POLICY_LOSSES: the per-token loss of a group-relative update: the plain policy gradient, PPO's
  token-clipped surrogate (with DAPO's clip-higher), GSPO's sequence-level ratio.
- gae, masked_whiten, clipped_value_loss, AdaptiveKLController: the actor-critic pieces (PPO family).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from magrpo import distributed
from magrpo.registry import Registry, registrar
from magrpo.sampler import (
    cache_keyword,
    limit_vocab,
    output_cache,
    shares_prompt,  # noqa: F401  (re-exported: the algorithms ask it)
    vocab_limit,
)

# --- advantages: A = R - b(R) over the group (paper, Sec. 4) -------------------------------------------


def _mean(R: torch.Tensor) -> torch.Tensor:
    return R - R.mean(-1, keepdim=True)  # MAGRPO (paper): A_j = R_j - mean_k R_k


def _rloo(R: torch.Tensor) -> torch.Tensor:
    G = R.shape[-1]  # MARLOO: A_j = R_j - (sum_k R_k - R_j) / (G - 1)
    return R - (R.sum(-1, keepdim=True) - R) / (G - 1)


def _max(R: torch.Tensor) -> torch.Tensor:
    return R - R.max(-1, keepdim=True).values  # MAReMax: A_j = R_j - max_k R_k


def _raw(R: torch.Tensor) -> torch.Tensor:
    return R.clone()  # MAREINFORCE: A_j = R_j


# An estimator maps a group's returns [..., G] to advantages of the same shape (register_advantage).
ADVANTAGES: Registry[Callable[[torch.Tensor], torch.Tensor]] = Registry("advantage estimator", "algo.advantage")
for _name, _fn in {"mean": _mean, "rloo": _rloo, "max": _max, "raw": _raw}.items():
    ADVANTAGES.register(_name, _fn)

STD_EPS = 1e-4


def _no_scale(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    return A


def _group_std(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    return A / (R.std(-1, keepdim=True, unbiased=False) + STD_EPS)


def _batch_std(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    return A / (R.std(unbiased=False) + STD_EPS)


# A scale maps (advantages, returns), both [..., G], to scaled advantages (register_scale).
ADVANTAGE_SCALES: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry(
    "advantage scale", "algo.scale")
for _name, _fn in {"none": _no_scale, "group": _group_std, "batch": _batch_std}.items():
    ADVANTAGE_SCALES.register(_name, _fn)


def advantages(returns: torch.Tensor, estimator: str = "mean", scale: str = "none") -> torch.Tensor:
    """returns: [..., G] sibling groups -> advantages of the same shape."""
    return ADVANTAGE_SCALES[scale](ADVANTAGES[estimator](returns), returns)


def keyed_advantages(returns: torch.Tensor, keys: torch.Tensor, estimator: str = "mean",
                     scale: str = "none") -> torch.Tensor:
    """[n] advantages of flat `returns`, each group being the entries that share a key (groups may
    differ in size, e.g. an item's samples over several sibling sets)."""
    out = torch.empty_like(returns)
    for k in torch.unique(keys):
        at = keys == k
        out[at] = advantages(returns[at].unsqueeze(0), estimator, scale).squeeze(0) if at.sum() > 1 else 0.0
    return out


# --- loss aggregation ----------------------------------------------------------------------------


@dataclass
class AggContext:
    """Whole-batch sizes, so micro-batch losses add up to the full-batch loss."""

    num_sequences: int
    num_tokens: int
    max_new_tokens: int

    @classmethod
    def of(cls, mask: torch.Tensor, max_new_tokens: int) -> AggContext:
        """The sizes of the whole batch, summed over data-parallel ranks: each rank's loss is then
        its share of the whole-batch loss, and summed gradients are the whole-batch gradient."""
        rows, tokens = distributed.sum_floats(mask.shape[0], mask.sum().item())
        return cls(int(rows), int(tokens), max_new_tokens)


def _seq_sum(loss, mask, ctx):  # reference code: sum of token terms per sequence, mean over sequences
    return (loss * mask).sum() / ctx.num_sequences


def _seq_mean_token_mean(loss, mask, ctx):  # GRPO: mean over each sequence's tokens, then over sequences
    return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum() / ctx.num_sequences


def _token_mean(loss, mask, ctx):  # DAPO: mean over every completion token of the batch
    return (loss * mask).sum() / max(ctx.num_tokens, 1)


def _dr_grpo(loss, mask, ctx):  # Dr. GRPO: sequence sums over a constant, max_completion_length
    return (loss * mask).sum() / (ctx.num_sequences * ctx.max_new_tokens)


# An aggregation maps (per-token loss [B, T], mask [B, T], AggContext) to one scalar (register_loss_agg).
LOSS_AGG: Registry[Callable[[torch.Tensor, torch.Tensor, AggContext], torch.Tensor]] = Registry(
    "loss aggregation", "algo.loss_agg")
for _name, _fn in {"seq_sum": _seq_sum, "seq_mean_token_mean": _seq_mean_token_mean, "token_mean": _token_mean,
                   "dr_grpo": _dr_grpo}.items():
    LOSS_AGG.register(_name, _fn)
register_advantage = registrar(ADVANTAGES)
register_scale = registrar(ADVANTAGE_SCALES)
register_loss_agg = registrar(LOSS_AGG)


# --- log-probabilities ---------------------------------------------------------------------------
#
# One forward gives log pi(c_t | prompt, c_<t) for every completion token. The G completions of an
# item share its prompt; with `share_prompt` the prompt runs ONCE (with gradients) and its
# key/value cache is gathered to the completion rows that continue it, so the prompt's cost is
# paid per item, not per sample, and the gradient of every completion flows back through the one
# shared prompt pass. Both paths compute the same function: the attention mask is
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
    logits = out.logits[:, :-1] if lm and logits else None
    hidden = _last_hidden(out)[:, P - 1:-1] if with_hidden or not lm else None
    return logits, hidden


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
    logits = first.logits[:, -1:][prompt_index] if want_logits else None
    hidden = _last_hidden(first)[:, -1:][prompt_index] if with_hidden or not lm else None
    if completion_ids.shape[1] > 1:
        c_mask = completion_mask[:, :-1].to(prompt_mask.dtype)
        attn = torch.cat([prompt_mask[prompt_index], c_mask], dim=1)
        # position ids continue the concatenated sequence's: count of attended tokens so far - 1
        c_pos = prompt_mask.long().sum(-1)[prompt_index].unsqueeze(1) + c_mask.long().cumsum(-1) - 1
        head = {"output_hidden_states": with_hidden, **({} if want_logits else {"logits_to_keep": 1})} if lm else {}
        rest = model(input_ids=completion_ids[:, :-1], attention_mask=attn, position_ids=c_pos,
                     use_cache=True, **{cache_keyword(model): cache}, **head)
        if want_logits:
            logits = torch.cat([logits, rest.logits], dim=1)
        if hidden is not None:
            hidden = torch.cat([hidden, _last_hidden(rest)], dim=1)
    return logits, hidden


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
    Over the ids the model's tokenizer has (magrpo.sampler.vocab_limit), as in sampling.
    The entropy carries a gradient only with `entropy_grad` (an entropy bonus). With `with_hidden`, also returns the last hidden state at the position that predicts each
    completion token (the state s_t a value head reads): (logp, entropy, hidden [n, C, H]).
    """
    logits, hidden = sequence_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask, prompt_index,
                                      share_prompt, with_hidden)
    # Normalised over the tokenizer's ids only, as the sampler draws them (magrpo.sampler.vocab_limit).
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
        # first-turn prompts next to long later ones (magrpo.turns.concat_generations).
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


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[n] log of GSPO's sequence ratio (arXiv 2507.18071, eq. 7): the mean over a completion's
    tokens of log pi - log pi_old, i.e. the log of the geometric mean of its token ratios."""
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)


# --- policy losses: the per-token loss of a group-relative update ----------------------------------
#
# A policy loss maps (logp [n, T] with gradient, old_logp [n, T] of the rollout policy pi_old,
# adv [n] one advantage per completion, mask [n, T], the `algo` config) to
# (per-token loss [n, T], where it clipped [n, T] as 0/1), before aggregation (LOSS_AGG) and
# before any KL term. On the first pass over a rollout old_logp == logp.detach(): ratio 1.
# `algo.loss` names one (register_policy_loss); null picks the one the ratio keys imply
# (magrpo.algos.magrpo.policy_loss_name).


def _reinforce_loss(logp, old_logp, adv, mask, algo):
    """The plain policy gradient (REINFORCE with a group baseline, MAGRPO's on-policy loss):
        L_t = -A * log pi(y_t | x, y_<t),   grad L_t = -A * grad log pi.
    No ratio: old_logp is not read, nothing clips (so it is for one pass over a rollout)."""
    return -adv.unsqueeze(-1) * logp, torch.zeros_like(logp)


def _clip_loss(logp, old_logp, adv, mask, algo):
    """PPO's token-level clipped surrogate (Schulman et al., arXiv 1707.06347), with DAPO's
    clip-higher (Yu et al., arXiv 2503.14476, eq. 8-10: eps_high > eps_low keeps low-probability
    tokens free to rise):
        r_t = pi(y_t) / pi_old(y_t),   L_t = -min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A)
    with eps_low = `algo.epsilon`, eps_high = `algo.epsilon_high`."""
    return clipped_surrogate(logp, old_logp, adv.unsqueeze(-1), algo.epsilon, algo.epsilon_high)


def _gspo_loss(logp, old_logp, adv, mask, algo):
    """GSPO's sequence-level clipped loss (Zheng et al., arXiv 2507.18071, eq. 5-7): one ratio per
    completion y, the geometric mean of its token ratios,
        s(y) = exp( (1/|y|) * sum_t [log pi(y_t) - log pi_old(y_t)] ),
        L(y) = -min(s A, clip(s, 1 - eps_low, 1 + eps_high) A),
    placed on each of y's tokens (with `loss_agg=seq_mean_token_mean` the batch loss is GSPO's
    (1/G) sum_i L(y_i)); a completion clips as a whole. Even on-policy (s = 1) its gradient carries
    the 1/|y| weighting: A * (1/|y|) * sum_t grad log pi(y_t)."""
    log_s = sequence_log_ratio(logp, old_logp, mask)
    seq_loss, clipped = clipped_surrogate(log_s, torch.zeros_like(log_s), adv, algo.epsilon, algo.epsilon_high)
    return seq_loss.unsqueeze(-1).expand_as(logp), clipped.unsqueeze(-1).expand_as(logp)


PolicyLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any],
                      tuple[torch.Tensor, torch.Tensor]]
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss", "algo.loss")
for _name, _fn in {"reinforce": _reinforce_loss, "clip": _clip_loss, "gspo": _gspo_loss}.items():
    POLICY_LOSSES.register(_name, _fn)
register_policy_loss = registrar(POLICY_LOSSES)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def global_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """masked_mean over the whole batch, i.e. over every data-parallel rank's rows."""
    total, count = distributed.sum_floats((x * mask).sum().item(), mask.sum().item())
    return torch.tensor(total / max(count, 1.0), dtype=x.dtype, device=x.device)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  min_std: float = 0.0) -> torch.Tensor:
    """(x - mean) / sqrt(max(var, min_std^2) + 1e-8) over the masked entries of the whole batch
    (every rank's); masked-out entries come back as 0.

    min_std > 0 stops the division from blowing a batch of near-equal values up to unit scale:
    once every return is the same, the advantages are the critic's errors, and dividing them by
    their own small spread turns that noise into full-size updates."""
    mean = global_masked_mean(x, mask)
    var = global_masked_mean((x - mean) ** 2, mask)
    out = (x - mean) * torch.rsqrt(var.clamp(min=min_std ** 2) + 1e-8)
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
        kl = distributed.sum_floats(kl)[0] / distributed.world().size     # the whole batch's KL
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]
