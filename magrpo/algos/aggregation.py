"""Loss aggregation: how per-token losses become one scalar, chosen by name (`algo.loss_agg`).

An aggregation maps (per-token loss [n, T], mask [n, T], AggContext) to one scalar. Each is written
so that the sum of its value over micro-batches equals its value on the whole batch (gradient
accumulation is exact): the sizes it divides by are the whole batch's (AggContext), summed over
data-parallel ranks. The batch is what one optimizer step sees: a group-relative update's every
row, a PPO mini-batch.

    seq_sum               sum_i sum_t l_it / B                    (the paper's reference code)
    seq_mean_token_mean   sum_i (sum_t l_it / |y_i|) / B          (GRPO)
    token_mean            sum_i sum_t l_it / sum_i |y_i|          (DAPO; the PPO family's)
    dr_grpo               sum_i sum_t l_it / (B * max_new_tokens) (Dr. GRPO)

`masked_mean` and `global_masked_mean` are the plain means over a mask the algorithms log with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from magrpo.core.registry import Registry, registrar
from magrpo.models import distributed


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


def _token_mean(loss, mask, ctx):  # DAPO and the PPO family: mean over every completion token of the batch
    return (loss * mask).sum() / max(ctx.num_tokens, 1)


def _dr_grpo(loss, mask, ctx):  # Dr. GRPO: sequence sums over a constant, max_completion_length
    return (loss * mask).sum() / (ctx.num_sequences * ctx.max_new_tokens)


LossAggregation = Callable[[torch.Tensor, torch.Tensor, AggContext], torch.Tensor]
LOSS_AGG: Registry[LossAggregation] = Registry("loss aggregation", "algo.loss_agg")
for _name, _fn in {"seq_sum": _seq_sum, "seq_mean_token_mean": _seq_mean_token_mean, "token_mean": _token_mean,
                   "dr_grpo": _dr_grpo}.items():
    LOSS_AGG.register(_name, _fn)
register_loss_agg = registrar(LOSS_AGG)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def global_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """masked_mean over the whole batch, i.e. over every data-parallel rank's rows."""
    total, count = distributed.sum_floats((x * mask).sum().item(), mask.sum().item())
    return torch.tensor(total / max(count, 1.0), dtype=x.dtype, device=x.device)
