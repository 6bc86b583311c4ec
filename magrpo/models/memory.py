"""What fits where: the device memory of a team's training step, by arithmetic (docs/scaling.md, "What fits where").

    python -m magrpo.models.memory            # the table of docs/scaling.md, "What fits where" (markdown)

Per agent model of P parameters (magrpo.models.model_shapes.SHAPES gives the architectures), bytes:

  weights      full fine-tuning: P * w          (w = 2 for bf16 weights, 4 for fp32)
               shared base + LoRA: P * w once for the whole team, plus each adapter's p_lora * 4
               (peft keeps adapters in fp32)
  gradients    full: P * w;   LoRA: p_lora * 4 per adapter (the base is frozen)
  optimizer    torch AdamW keeps m and v in the parameter's dtype: full 2 * P * w; LoRA 8 * p_lora.
               (bf16 weights therefore mean bf16 AdamW states and no fp32 master copy: 8 B/param;
               `dtype=float32` with `hardware.autocast=bf16` is the classic mixed precision: 16 B/param)
  reference    algo.beta > 0: full fine-tuning loads a frozen copy, P * w per agent; LoRA uses the
               base with the adapter disabled: 0
  activations  of ONE agent's update (agents update one after another), micro-batch of R rows of
               S = prompt + completion tokens, T = R * S tokens, L layers, bf16 activations:
                 per token and layer  a = 2 * (4h + 3 q + 2 kv + 4i) + 4 * 2h
                   (layer input, norm outputs, q/k/v (q = heads*head_dim, kv = kv_heads*head_dim),
                   attention output, o_proj input, gate/up/act/product of the MLP; the RMSNorms'
                   float32 upcasts)
                 checkpointed: T * L * w * h (each layer's input, in the weights' dtype) + T * a (one layer recomputed)
                 not:          T * L * a
               plus the LM head over the completion positions: R * (C + 1) * V * 14
                 (bf16 logits 2 + their float32 copy 4 + log_softmax 4 + its gradient 4)
  generation   the key/value cache of the B*G rows, R * S * L * 2 * kv * 2 (below the update peak
               at these settings; the larger of the two counts)

  total = weights + gradients + optimizer + reference + max(activations, generation)

A device "fits" when the total is at most 92% of its memory (the rest: CUDA context, allocator
fragmentation, the reward). These are estimates (activations within about +-30%); the measured CPU
rows of docs/scaling.md (scripts/real_shapes.py, peak RSS) check them at short settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from magrpo.models.model_shapes import SHAPES

GB = 1e9
DEVICES = {"24 GB": 24, "80 GB (H100)": 80, "141 GB (H200)": 141}
USABLE = 0.92


@dataclass(frozen=True)
class Arch:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    qkv_bias: bool = False
    qk_norm: bool = False
    tied: bool = True

    @classmethod
    def of(cls, name: str) -> Arch:
        s = SHAPES[name]
        return cls(s["num_hidden_layers"], s["hidden_size"], s["intermediate_size"], s["num_attention_heads"],
                   s["num_key_value_heads"], s.get("head_dim", s["hidden_size"] // s["num_attention_heads"]),
                   s["vocab_size"], qkv_bias=s["model_type"] == "qwen2", qk_norm=s["model_type"] == "qwen3",
                   tied=s["tie_word_embeddings"])

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim

    def params(self) -> int:
        h, i = self.hidden, self.intermediate
        layer = 2 * h * self.q + 2 * h * self.kv + 3 * h * i + 2 * h
        layer += (self.q + 2 * self.kv) if self.qkv_bias else 0
        layer += 2 * self.head_dim if self.qk_norm else 0
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h

    def lora_params(self, r: int) -> int:
        """A rank-r adapter on every linear layer of the blocks (peft's all-linear: not the LM head)."""
        h, i = self.hidden, self.intermediate
        per_layer = (h + self.q) * 2 + (h + self.kv) * 2 + (h + i) * 3
        return r * per_layer * self.layers


@dataclass(frozen=True)
class Setting:
    batch: int = 2              # items per update (algo.batch_size)
    generations: int = 4        # G
    prompt: int = 256           # prompt tokens (assumed)
    completion: int = 256       # algo.max_new_tokens
    checkpointing: bool = True
    weight_bytes: int = 2       # bf16 weights (the presets' dtype)

    @property
    def rows(self) -> int:
        return self.batch * self.generations


def activation_bytes(arch: Arch, s: Setting) -> float:
    h, L = arch.hidden, arch.layers
    T = s.rows * (s.prompt + s.completion)
    per = 2 * (4 * h + 3 * arch.q + 2 * arch.kv + 4 * arch.intermediate) + 4 * 2 * h
    body = T * L * s.weight_bytes * h + T * per if s.checkpointing else T * L * per
    head = s.rows * (s.completion + 1) * arch.vocab * 14
    return body + head


def kv_cache_bytes(arch: Arch, s: Setting) -> float:
    return s.rows * (s.prompt + s.completion) * arch.layers * 2 * arch.kv * 2


@dataclass(frozen=True)
class Estimate:
    weights: float
    gradients: float
    optimizer: float
    reference: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.reference + self.activations

    def fits(self, device_gb: float) -> bool:
        return self.total <= USABLE * device_gb * GB


def estimate(archs: list[Arch], setting: Setting, lora_r: int | None = None, reference: bool = False) -> Estimate:
    """Bytes of a team step: one model per entry of `archs` (full fine-tuning), or with `lora_r`
    one shared base (archs[0]) carrying len(archs) rank-r adapters (module docstring)."""
    w = setting.weight_bytes
    act = max(max(activation_bytes(a, setting), kv_cache_bytes(a, setting)) for a in archs)
    if lora_r is None:
        P = sum(a.params() for a in archs)
        return Estimate(P * w, P * w, 2 * P * w, P * w if reference else 0.0, act)
    base, n = archs[0], len(archs)
    p = base.lora_params(lora_r) * n
    return Estimate(base.params() * w + 4 * p, 4 * p, 8 * p, 0.0, act)


# The rows of docs/scaling.md: each agents preset at the paper's settings (conf/recipe: tldr for qwen3_1.7b,
# coophumaneval for qwen2.5_coder_3b and the heterogeneous team), G = 4, 256 new tokens.
TLDR = Setting(batch=1)
CODING = Setting(batch=2)
ROWS = [
    ("qwen3_1.7b (preset): 2 x full, bf16", ["qwen3-1.7b-shape"] * 2, TLDR, None, False),
    ("qwen3_1.7b: 2 x full, bf16, + reference (beta > 0)", ["qwen3-1.7b-shape"] * 2, TLDR, None, True),
    ("qwen3_1.7b: 2 x full, fp32 weights + bf16 autocast", ["qwen3-1.7b-shape"] * 2,
     Setting(batch=1, weight_bytes=4), None, False),
    ("qwen3_1.7b: shared base + 2 LoRA r=32", ["qwen3-1.7b-shape"] * 2, TLDR, 32, False),
    ("qwen2.5_coder_3b (preset): shared base + 2 LoRA r=32", ["qwen2.5-coder-3b-shape"] * 2, CODING, 32, False),
    ("qwen2.5_coder_3b: 2 x full, bf16", ["qwen2.5-coder-3b-shape"] * 2, CODING, None, False),
    ("heterogeneous (preset): coder-1.5B + qwen3-1.7B, full, bf16",
     ["qwen2.5-coder-1.5b-shape", "qwen3-1.7b-shape"], CODING, None, False),
]


def table(rows=ROWS) -> str:
    head = ["team (paper settings)", "weights", "grads", "AdamW", "ref", "activations", "total"] + list(DEVICES)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, names, setting, r, ref in rows:
        e = estimate([Arch.of(n) for n in names], setting, r, ref)
        cells = [f"{x / GB:.1f}" for x in (e.weights, e.gradients, e.optimizer, e.reference, e.activations, e.total)]
        cells += ["fits" if e.fits(gb) else "no" for gb in DEVICES.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
