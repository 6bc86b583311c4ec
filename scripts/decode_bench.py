#!/usr/bin/env python
"""Decoding speed of the shared-prompt sampler's one-token steps (`algo.decode_step`), and whether
they agree: lean (eager), static (fixed shapes) and graph (the static step replayed as a CUDA graph),
and transformers' `model.generate` (--steps generate) as the reference point.

    python scripts/decode_bench.py                                  # builtin "small" on the CPU
    python scripts/decode_bench.py --model qwen3-1.7b-shape --device cuda --dtype bfloat16 --lora 8

A `*-shape` model (magrpo.models.tiny.SHAPES) is built from its config directly on the device with random
weights (no 3.4 GB cache write); any other builtin or a local directory is loaded. Each step kind
decodes --prompts prompts x --gens samples, --tokens new tokens (no EOS stop), greedily, --repeats
times; the median pass gives ms per decoded token (one token for every row). The lean step's
tokens are the reference: a decode step whose greedy tokens differ from them fails the run (exit
1); `generate`'s agreement is reported, not required (in bf16 its own order of reductions can
flip a near-tie).
On a GPU the JSON line also gives the memory-bandwidth floor per token: the bytes of the weights
read once per step over the card's bandwidth (--bandwidth-tb-s, known for H100/H200/A100 by name),
and how far each step is from it. One JSON line, last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

# dense memory bandwidth by device name, TB/s (SXM parts; the PCIe H100 is 2.0)
BANDWIDTH = {"H100": 3.35, "H200": 4.8, "A100": 2.0}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small", help="builtin name (small, tiny, qwen3-1.7b-shape, ...) or a directory")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--gens", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt-length", type=int, default=96, help="tokens of the longest prompt (others are shorter)")
    p.add_argument("--steps", default="lean,static,graph",
                   help="comma-separated decode steps to time (algo.decode_step's, and generate: model.generate)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lora", type=int, default=0, help="wrap the model in a PEFT LoRA adapter of this rank (0 = none)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--bandwidth-tb-s", type=float, default=None, help="the device's memory bandwidth (TB/s)")
    args = p.parse_args(argv)
    from magrpo.models.sampler import DECODE_STEPS

    bad = [s for s in args.steps.split(",") if s not in (*DECODE_STEPS, "generate")]
    if bad:
        p.error(f"--steps: {bad} not among {[*DECODE_STEPS, 'generate']}")
    if min(args.prompts, args.gens, args.tokens, args.prompt_length, args.repeats) < 1:
        p.error("--prompts, --gens, --tokens, --prompt-length and --repeats must be >= 1")
    return args


def load_model(args):
    import torch
    from transformers import AutoModelForCausalLM

    from magrpo.models.tiny import SHAPES, builtin_config

    dtype = getattr(torch, args.dtype)
    if args.model in SHAPES:
        from transformers import Qwen2Config, Qwen3Config

        arch = dict(SHAPES[args.model])
        kind = arch.pop("model_type")
        arch.pop("dtype", None)
        cfg = {"qwen2": Qwen2Config, "qwen3": Qwen3Config}[kind](**arch, bos_token_id=0, eos_token_id=0, pad_token_id=0)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(0)
        with torch.device(args.device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    elif Path(args.model).is_dir():
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(args.device)
    else:
        from magrpo.models.agents import resolve_model_path

        builtin_config(args.model)          # an unknown name: the error that lists the builtins
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:" + args.model), dtype=dtype)
        model = model.to(args.device)
    if args.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora, lora_alpha=2 * args.lora,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    return model.eval()


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from magrpo.models.sampler import LeanDecoder, sample_shared_prompt

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args)
    dev = torch.device(args.device)
    vocab = min(model.get_output_embeddings().weight.shape[0], 512)
    torch.manual_seed(1)
    ids = torch.randint(1, vocab, (args.prompts, args.prompt_length), device=dev)
    mask = torch.ones_like(ids)
    for b in range(args.prompts):            # left-padded prompts of different lengths
        mask[b, :b * args.prompt_length // (2 * args.prompts)] = 0

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    rows, tokens, times = args.prompts * args.gens, {}, {}
    wide_ids, wide_mask = ids.repeat_interleave(args.gens, 0), mask.repeat_interleave(args.gens, 0)

    def decode(step: str):
        if step == "generate":      # transformers' own loop, every row carrying its prompt
            return model.generate(input_ids=wide_ids, attention_mask=wide_mask, do_sample=False,
                                  max_new_tokens=args.tokens, min_new_tokens=args.tokens, pad_token_id=0,
                                  eos_token_id=None)[:, ids.shape[1]:]
        return sample_shared_prompt(model, ids, mask, args.gens, args.tokens, [], 0, do_sample=False,
                                    decode_step=step)

    for step in args.steps.split(","):
        runs = []
        for _ in range(args.repeats + 1):       # the first pass warms up (allocator, kernels)
            sync()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = decode(step)
            sync()
            runs.append(time.perf_counter() - t0)
        tokens[step], times[step] = out, statistics.median(runs[1:])
    ref = tokens.get("lean", next(iter(tokens.values())))
    agree = {s: bool(torch.equal(t, ref)) for s, t in tokens.items()}
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    result = {"model": args.model, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
              "dtype": args.dtype, "lora": args.lora, "rows": rows, "new_tokens": args.tokens,
              "lean_step_serves": LeanDecoder.of(model) is not None,
              "ms_per_token": {s: 1000 * t / args.tokens for s, t in times.items()},
              "tokens_per_s": {s: rows * args.tokens / t for s, t in times.items()},
              "greedy_tokens_equal_lean": agree, "weight_gb": params / 1e9}
    bw = args.bandwidth_tb_s or next((v for k, v in BANDWIDTH.items() if k in result["device"]), None)
    if bw:
        floor = params / (bw * 1e12) * 1000
        result["bandwidth_floor_ms"] = floor
        result["x_from_floor"] = {s: ms / floor for s, ms in result["ms_per_token"].items()}
    print(json.dumps(result))
    # generate is a reference point: in bf16 its own reductions may flip a near-tie, so only the
    # decode steps must agree with the lean step
    return 0 if all(ok for s, ok in agree.items() if s != "generate") else 1


if __name__ == "__main__":
    sys.exit(main())
