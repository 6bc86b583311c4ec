"""bf16 linear layers on CPUs that have no bf16 matrix unit (no AVX512-BF16, no AMX).

On such a CPU torch multiplies bf16 matrices with a generic kernel whose speed depends on the
operands' layout. On a 2-core AVX2 machine (docs/scaling.md, "What fits where"): about 15 GFLOP/s for a
Linear's forward (x W^T, the weight read transposed), 0.3 GFLOP/s for its input gradient (dy W,
two row-major operands), against about 150 GFLOP/s in float32. A bf16 training step at 1.7B
dimensions then takes hours, nearly all of it in the backward through the frozen base and the
151936-row LM head.

A bf16 GEMM on a GPU reads bf16 operands, accumulates in float32 and rounds the result to bf16
once. Widening bf16 to float32 is exact, so multiplying the widened operands in float32 and
rounding the product computes the same thing, up to the order of the sums. `Bf16Linear` does each
product of a bf16 nn.Linear that way:

    forward   y  = x W^T + b
    backward  dx = dy W,   dW = dy^T x,   db = sum over rows of dy

bf16 in and out; the tensors saved for backward are the bf16 x and W, so activation memory is
that of a bf16 run, and the float32 copies live only for one product. Few rows (a decoding step,
memory-bound) keep torch's own bf16 product, which is faster there than widening the weight.

`use_float32_products(model)` turns every nn.Linear of a model into a `Bf16Linear` (the class
changes, nothing else: parameters, state dict, hooks and isinstance checks are as before). The
layer computes in bf16 when its input and weight are bf16, or under CPU bf16 autocast (which it
applies itself, as autocast would: operands cast to bf16, the cast differentiable to float32
master weights); any other dtype or device runs nn.Linear's forward unchanged.

`hardware.cpu_bf16` chooses (`widens`): `auto` widens on a CPU without a bf16 unit only, `widen` on
any CPU (the same products as on a plain CPU, where the CPU has a bf16 unit too), `native` never
(torch's own bf16 kernels on any CPU: fast with a bf16 unit, emulated and slow without one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from magrpo.config.schemas import CPU_BF16_MODES

# Below this many rows a product is memory-bound: torch's bf16 kernel reads half the bytes that a
# widened float32 weight would (the crossover on the AVX2 machine: about 32 rows, for a 2048 x 6144
# weight and for the 2048 x 151936 LM head alike).
MIN_ROWS = 32


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX)."""
    cpu = getattr(torch, "cpu", None)
    avx512, amx = getattr(cpu, "_is_avx512_bf16_supported", None), getattr(cpu, "_is_amx_tile_supported", None)
    if avx512 is None or amx is None:     # an older torch without the probes: assume the slow path is not there
        return True
    return bool(avx512() or amx())


MODES = CPU_BF16_MODES       # hardware.cpu_bf16


def widens(mode: str) -> bool:
    """Whether bf16 products on this CPU run widened to float32 under `hardware.cpu_bf16=mode`."""
    if mode not in MODES:
        raise ValueError(f"hardware.cpu_bf16={mode!r}; choose one of {', '.join(MODES)}")
    return mode == "widen" or (mode == "auto" and not cpu_has_native_bf16())


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])


class _Float32Products(torch.autograd.Function):
    """y = x W^T + b with bf16 x, W, b; every product widened to float32 and rounded to bf16."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        y = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dy32 = dy.float()
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = (dy32 @ weight.float()).to(x.dtype)                        # dx = dy W
        if ctx.needs_input_grad[1]:
            dw = (_rows(dy32).t() @ _rows(x).float()).to(weight.dtype)      # dW = dy^T x
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = _rows(dy32).sum(0).to(weight.dtype)                        # db = sum_rows dy
        return dx, dw, db


class Bf16Linear(nn.Linear):
    """An nn.Linear whose bf16 products run as float32 products of the widened operands (module doc)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight: torch.Tensor = self.weight
        bias: torch.Tensor | None = self.bias
        if x.device.type != "cpu":
            return super().forward(x)
        autocast = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        if autocast:        # autocast's own casts, since the product below runs with autocast off
            x, weight = x.to(torch.bfloat16), weight.to(torch.bfloat16)
            bias = None if bias is None else bias.to(torch.bfloat16)
        if x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
            return super().forward(x)
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                                  or (bias is not None and bias.requires_grad))
        if not needs_grad and x.numel() // x.shape[-1] < MIN_ROWS:
            return F.linear(x, weight, bias)
        with torch.autocast("cpu", enabled=False):
            return _Float32Products.apply(x, weight, bias)


def use_float32_products(model: nn.Module) -> int:
    """Make every nn.Linear of `model` a `Bf16Linear`; returns how many were changed."""
    changed = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = Bf16Linear
            changed += 1
    return changed
