"""Training FLOPs, counted rather than timed: what a training step's passes through the models cost
by the usual count for a transformer (Kaplan et al. 2020, "Scaling Laws for Neural Language Models",
section 2.1), from the tokens each pass runs and the parameters of the model that runs it.

A weight matrix W of d_in x d_out costs 2 d_in d_out FLOPs per token it multiplies (a multiply and
an add per weight); so a forward pass costs 2 N per token, N the model's weights that enter a
product, and a backward pass costs as much again for the gradient of the activations (the same
products with W transposed) plus 2 N_trainable for the gradient of the weights that train: 6 N per
token in all when every weight trains, about 4 N with LoRA adapters on frozen weights.

What a step counts (`counting`, around the algorithm's step; the training loop logs it):

  generation    every sampled sequence of every model that plays (the policies, a seated
                partner): 2 N_body per prompt token prefilled (once per distinct prompt when the
                prompt is shared, once per sample otherwise) and 2 (N_body + N_head) per generated
                token (magrpo.rollout.record);
  scoring       every log-prob or value pass (the rollout's log-probs, the reference model's, the
                population's members', a critic's): 2 N_body per prompt and completion token, plus
                2 N_head per completion token whose logits it computes (magrpo.algos.logprobs);
  update        the same pass with gradients: the forward as above, then the backward, as much
                again plus 2 N_trainable per token (PPO epochs count once each).

N_body is every parameter but the input embedding (a lookup, no product) and the output head;
N_head the head's (vocabulary x width, tied to the embedding or not). What it leaves out: attention's
own products (the scores q k^T and their weighted sum of v, 4 x layers x width x context per token:
the term quadratic in the length, small next to 2N for short contexts), the norms, activations and
softmax, the optimizer's update, recomputation under gradient checkpointing, the padding and the
finished rows a batch still computes, the evaluations, and models outside the step (an expert
feedback model, a reward model behind an API). The biases and norm weights in N_body are counted
as if they were products (a negligible excess), and so are every LoRA adapter the model holds, the
inactive ones included (rank x width each: small). Under torchrun each rank counts its own passes;
the loop sums them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Count:
    """The FLOPs counted so far inside one `counting()`."""
    flops: float = 0.0


_ACTIVE: Count | None = None


@contextlib.contextmanager
def counting() -> Iterator[Count]:
    """Count the FLOPs of the passes made inside (the training step); outside, nothing is counted."""
    global _ACTIVE
    outer, _ACTIVE = _ACTIVE, Count()
    try:
        yield _ACTIVE
    finally:
        _ACTIVE = outer


def active() -> bool:
    """Whether a count is open: the callers skip working out token counts otherwise."""
    return _ACTIVE is not None


@dataclass(frozen=True)
class Sizes:
    """The parameters of a model that the count reads."""
    body: int             # every parameter but the input embedding and the output head
    head: int             # the output head's (0: a backbone without one, a critic)
    body_trainable: int   # those of `body` that train
    head_trainable: bool


def sizes(model: Any) -> Sizes:
    """The model's parameter counts: `Sizes`. A parameter shared by two modules counts once."""
    emb_module = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head_module = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    emb = getattr(emb_module, "weight", None)
    head = getattr(head_module, "weight", None)
    body = body_trainable = 0
    for p in model.parameters():
        if p is emb or p is head:
            continue
        body += p.numel()
        body_trainable += p.numel() if p.requires_grad else 0
    return Sizes(body, 0 if head is None else head.numel(), body_trainable, bool(head is not None and head.requires_grad))


def pass_flops(s: Sizes, tokens: float, head_tokens: float, backward: bool) -> float:
    """FLOPs of a pass over `tokens` tokens whose head runs at `head_tokens` of them: the forward,
    and with `backward` the backward too (activation gradients through every weight, weight
    gradients for the trainable ones)."""
    forward = 2.0 * (s.body * tokens + s.head * head_tokens)
    if not backward:
        return forward
    return 2.0 * forward + 2.0 * (s.body_trainable * tokens + (s.head if s.head_trainable else 0) * head_tokens)


def add_pass(model: Any, tokens: float, head_tokens: float) -> None:
    """Count a log-prob or value pass of `model` over `tokens` tokens (prompt and completion), its
    head computed at `head_tokens`; with a backward when gradients are on and some weight trains."""
    if _ACTIVE is None:
        return
    s = sizes(model)
    backward = torch.is_grad_enabled() and (s.body_trainable > 0 or s.head_trainable)
    _ACTIVE.flops += pass_flops(s, tokens, head_tokens, backward)


def add_generation(model: Any, prompt_tokens: float, new_tokens: float) -> None:
    """Count a sampling call: `prompt_tokens` prefilled, `new_tokens` generated (each one a forward
    of one position through the body and the head)."""
    if _ACTIVE is None:
        return
    s = sizes(model)
    _ACTIVE.flops += 2.0 * s.body * (prompt_tokens + new_tokens) + 2.0 * s.head * new_tokens
