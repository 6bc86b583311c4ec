#!/usr/bin/env python
"""Throughput benchmark: MAGRPO on the length_ratio task (or `--task humaneval`, or the 8-agent
coordination game `--task crowd`), against a bare loop and comlrl.

    python scripts/bench.py --model builtin:small --agents 2 --prompts 32 --batch 8 --gens 4 --tokens 64
    python scripts/bench.py ... --mode bare        # the floor: generate + one REINFORCE update, nothing else
    python scripts/bench.py ... --mode comlrl      # comlrl's MAGRPOTrainer (pip install comlrl) on the same setup
    python scripts/bench.py ... --mode compare     # all three, each in its own process, plus the two ratios
    python scripts/bench.py ... --turns 2          # a two-turn step against a one-turn step
    python scripts/bench.py --task crowd --agents 8 --model builtin:tiny --gens 8 --tokens 4   # crowd's step

Every mode prints ONE JSON line last: prompts_per_s, tokens_per_s, the time shares of generation,
reward and update (share_other holds what the three do not cover, so the shares sum to 1),
peak_rss_mb (and peak_cuda_mb on a GPU), and the update's achieved TFLOP/s (update_tflops_per_s:
6 x matmul parameters x tokens through the update, over its seconds) and, where the device's bf16
peak is known (H100, H200, A100, or --peak-tflops), its model FLOP utilisation `mfu`. Model loading and `--warmup-steps` untimed steps are
excluded. With `--repeats R` the timed pass runs R times in the same process and the median
pass is reported (runs_prompts_per_s lists all of them). cpu_s / prompts_per_cpu_s give the same
pass in process CPU time: on a machine shared with other jobs, run with `--threads 1` and compare
those, since wall-clock figures then follow the other jobs' load (and several torch threads
contending for busy cores can be many times slower than one).

Modes:
- magrpo: the real trainer. The config is composed with Hydra over conf/ exactly as
  `magrpo-train` composes it, validated, and `MAGRPO.step` runs P/B times; the figures are sums of
  the per-step timings the algorithm itself returns.
- bare: per step and per agent, one batched `generate(num_return_sequences=G)` on the B prompts,
  one forward/backward of -A * log pi(completion) with a fixed dummy advantage, one AdamW step.
  It is what any GRPO-style trainer must at least do, so MAGRPO / bare is the overhead measure.
- comlrl: see scripts/bench_comlrl.py.

Turns: `--turns T` (T > 1) times the magrpo mode with T turns and `--feedback` between them, and
the same setup with one turn, each in its own process, and adds `one_turn_seconds`, `turns_over_one_turn`
(the step-time ratio), `turn_stats` (per turn of one step: joint actions, and the mean prompt
length in tokens, which grows with the history) and `feedback_s`. With the
default `--branches 1` every turn of the tree has as many nodes as turn 1 (one node per sibling set
is expanded), so a T-turn step does T turns' work and should cost about T one-turn steps plus
the feedback; `--branches 0` expands every node (G times more nodes per turn under aligned).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
# Idle OpenMP workers sleep instead of spinning. With spinning (the default), torch's threads on
# cores that other jobs also use ran generation 10-40x slower here; set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))           # run from a checkout without `pip install -e .`
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("magrpo", "bare", "comlrl")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="builtin:small", help="HF model directory, hub id, or builtin:NAME")
    p.add_argument("--agents", type=int, default=2, help="number of agents (1 = single-agent GRPO form)")
    p.add_argument("--prompts", type=int, default=32, help="timed prompts (items); steps = prompts / batch")
    p.add_argument("--batch", type=int, default=8, help="items per update")
    p.add_argument("--gens", type=int, default=4, help="G: samples per agent per item")
    p.add_argument("--tokens", type=int, default=64, help="max new tokens per completion")
    p.add_argument("--mode", default="magrpo", choices=[*MODES, "compare"],
                   help="magrpo: the framework's own trainer (with --algo); bare; comlrl; compare: all three")
    p.add_argument("--algo", default="magrpo", help="algorithm the framework mode trains (magrpo, grpo, ippo, "
                   "mappo, ppo): the same budget of --batch items x --gens samples per agent per update")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
    p.add_argument("--warmup-steps", type=int, default=1, help="untimed steps (of --batch items) before timing")
    p.add_argument("--repeats", type=int, default=1, help="timed passes in this process; the median is reported")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's choice, as magrpo-train with hardware.num_threads=null)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--turns", type=int, default=1, help="turns per episode (> 1: compared with one turn)")
    p.add_argument("--feedback", default="plain", help="feedback mode between turns (conf/feedback)")
    p.add_argument("--branches", type=int, default=1,
                   help="algo.max_branches of a multi-turn step: nodes expanded per sibling set (0 = all)")
    p.add_argument("--task", default="length_ratio", choices=["length_ratio", "humaneval", "crowd"],
                   help="humaneval: the coding reward, whose programs run in the sandbox, takes part "
                        "(with an untrained model most answers stop before the tests); crowd: the "
                        "coordination game of up to 8 agents (--agents 8 --model builtin:tiny --gens 8 --tokens 4 "
                        "is its default run's step)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's dense bf16 peak in TFLOP/s, for `mfu` (default: known for H100/H200/A100 "
                        "by the CUDA device's name; none on a CPU)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Hydra override for the magrpo config (repeatable)")
    args = p.parse_args(argv)
    if args.prompts < 1 or args.batch < 1 or args.prompts % args.batch:
        p.error(f"--prompts ({args.prompts}) must be a positive multiple of --batch ({args.batch})")
    if args.gens < 2:
        p.error("--gens must be >= 2 (a group needs two samples)")
    if args.turns < 1 or args.branches < 0:
        p.error("--turns must be >= 1 and --branches >= 0")
    if args.turns > 1 and args.mode != "magrpo":
        p.error("--turns > 1 times the framework's own trainer: use it with --mode magrpo")
    if args.task == "crowd" and not 1 <= args.agents <= 8:
        p.error("--agents must be 1 to 8 for crowd (8: its default run)")
    if args.task != "crowd" and args.agents not in (1, 2):
        p.error(f"--agents must be 1 or 2: the {args.task} task is written for a team of two "
                "(1 runs its single-agent form)")
    return args


# --- configuration and set-up (shared by every mode) ------------------------------------------


def bench_algo(args: argparse.Namespace) -> str:
    """The algorithm to time; one agent under the default means single-agent GRPO."""
    return "grpo" if args.algo == "magrpo" and args.agents == 1 else args.algo


def hydra_overrides(args: argparse.Namespace) -> list[str]:
    # length_ratio ships 48 topics: one is the (unused) eval split, a task needs one; larger runs cycle.
    # HumanEval's default train split (130 problems) is used as it is.
    task = [f"task.num_train={min(args.prompts, 47)}", "task.num_eval=1"] if args.task == "length_ratio" else []
    return [
        "output_dir=" + os.path.join(os.environ.get("TMPDIR", "/tmp"), "magrpo-bench"),
        f"task={args.task}", f"algo={bench_algo(args)}", "logger=none", *task,
        f"agents.num_agents={args.agents}",
        # A one-entry list serves every agent; the value is quoted since it may hold ':' and '/'.
        f"agents.models=[{{name_or_path:'{args.model}',dtype:{args.dtype}}}]",
        f"hardware.device={args.device}",
        f"seed={args.seed}",
        f"max_steps={args.prompts // args.batch + args.warmup_steps}",
        f"algo.batch_size={args.batch}", f"algo.num_generations={args.gens}",
        f"algo.max_new_tokens={args.tokens}", f"algo.temperature={args.temperature}",
        f"algo.top_p={args.top_p}", f"algo.top_k={args.top_k}",
        # one forward/backward per agent per step: every completion row in one micro-batch
        f"algo.micro_batch_size={args.batch * args.gens}",
        f"optimizer.lr={args.lr}",
        f"algo.num_turns={args.turns}", f"feedback={args.feedback if args.turns > 1 else 'none'}",
        f"algo.max_branches={args.branches if args.turns > 1 and args.branches else 'null'}",
        *args.override,
    ]


def compose_config(args: argparse.Namespace):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from magrpo.launch import CONF_DIR
    from magrpo.validation.checks import validate
    from magrpo.validation.store import register_schemas

    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=hydra_overrides(args))
    return validate(cfg)


def setup(args: argparse.Namespace):
    """Validated config, agents, task and the item stream (warm-up items first)."""
    import torch

    from magrpo.models.agents import load_agents, seed_everything
    from magrpo.tasks import build_task

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = compose_config(args)
    seed_everything(cfg.seed)
    task = build_task(cfg.task, cfg.reward, cfg.sandbox)
    train_items = task.load("train")
    t0 = time.perf_counter()
    from magrpo.algos import ALGOS

    team = ALGOS[cfg.algo.name].team(cfg)
    agents = load_agents(cfg.agents, cfg.hardware, team.num_policies, need_reference=team.reference)
    load_s = time.perf_counter() - t0
    n_warm = args.warmup_steps * args.batch
    stream = [train_items[k % len(train_items)] for k in range(n_warm + args.prompts)]
    return cfg, agents, task, stream[:n_warm], stream[n_warm:], load_s


def batches(items: list, size: int) -> list[list]:
    return [items[s:s + size] for s in range(0, len(items), size)]


def eos_token_ids(agent) -> list[int]:
    ids = agent.model.generation_config.eos_token_id
    ids = list(ids) if isinstance(ids, (list, tuple)) else ([] if ids is None else [ids])
    tok_eos = agent.tokenizer.eos_token_id
    return ids + [tok_eos] if tok_eos is not None and tok_eos not in ids else ids


def counted_tokens(completion_ids, eos_ids: list[int]) -> int:
    """Completion tokens as MAGRPO counts them: every row up to and including its first EOS."""
    import torch

    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device)).long()
    return int(((is_eos.cumsum(-1) - is_eos) == 0).sum().item())   # no EOS strictly before


def sync(agents) -> None:
    """Wait for queued GPU work so wall-clock timings cover it."""
    import torch

    if any(a.device.type == "cuda" for a in agents):
        torch.cuda.synchronize()


# --- mode: magrpo -------------------------------------------------------------------------------


def run_magrpo(args, cfg, agents, task, warm_items, timed_items) -> list[dict]:
    from magrpo.algos import ALGOS
    from magrpo.algos.base import StepInput

    algo = ALGOS[cfg.algo.name](cfg, agents, task)
    for batch in batches(warm_items, args.batch):
        algo.step(StepInput(batch))
    n_completions = args.batch * args.gens * len(agents)
    runs = []
    for _ in range(args.repeats):
        sums = dict(generate=0.0, reward=0.0, update=0.0, step=0.0, tokens=0.0, feedback=0.0)
        nodes: dict[str, float] = {}
        sync(agents)
        t0, c0 = time.perf_counter(), time.process_time()
        for batch in batches(timed_items, args.batch):
            m = algo.step(StepInput(batch))
            for k in ("generate", "reward", "update", "step", "feedback"):
                sums[k] += m.get(f"time/{k}_s", 0.0)
            sums["tokens"] += m.get("train/completions/tokens", m["train/completions/mean_length"] * n_completions)
            for key, value in m.items():
                if key.startswith("train/turn_") and key.endswith(("/nodes", "/prompt_tokens_mean")):
                    nodes[key[len("train/"):]] = nodes.get(key[len("train/"):], 0.0) + value
        sync(agents)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        # The contract: throughput from the algorithm's own step timings (their sum is the
        # step time, so share_other stays ~0; `wall_s` shows the loop around them).
        runs.append(dict(seconds=sums["step"], wall_s=wall, cpu_s=cpu, generate_s=sums["generate"],
                         reward_s=sums["reward"], update_s=sums["update"], completion_tokens=int(round(sums["tokens"])),
                         last_reward_mean=m["train/reward_mean"], feedback_s=sums["feedback"],
                         turn_stats={k: round(v / (args.prompts // args.batch), 2) for k, v in nodes.items()}))
    return runs


# --- mode: bare ---------------------------------------------------------------------------------


def run_bare(args, cfg, agents, task, warm_items, timed_items) -> list[dict]:
    import torch
    import torch.nn.functional as F

    G, T = args.gens, args.tokens
    optimizers = [torch.optim.AdamW(a.model.parameters(), lr=cfg.optimizer.lr) for a in agents]
    sample_kwargs = dict(do_sample=True, max_new_tokens=T, num_return_sequences=G, temperature=args.temperature,
                         top_p=args.top_p, top_k=args.top_k)   # 0 = off (None = the model's default of 50)

    def step(batch, times):
        prompts = [task.prompts(item, len(agents)) for item in batch]
        for i, (agent, opt) in enumerate(zip(agents, optimizers)):
            model, tok = agent.model, agent.tokenizer
            t0 = time.perf_counter()
            enc = tok([agent.format_prompt(p[i]) for p in prompts], return_tensors="pt", padding=True,
                      add_special_tokens=False).to(agent.device)
            with torch.no_grad():
                seqs = model.generate(**enc, pad_token_id=tok.pad_token_id, **sample_kwargs)
            sync(agents)
            t1 = time.perf_counter()
            # REINFORCE on the sampled rows: loss = -mean_rows(A_row * sum_t log pi(c_t | ...)),
            # with a fixed dummy advantage ramp in place of a reward.
            P, n = enc.input_ids.shape[1], seqs.shape[0]
            attn = torch.cat([enc.attention_mask.repeat_interleave(G, 0),
                              torch.ones_like(seqs[:, P:])], dim=1)
            logits = model(input_ids=seqs, attention_mask=attn, use_cache=False).logits[:, P - 1:-1]
            logp = F.log_softmax(logits.float(), -1).gather(-1, seqs[:, P:].unsqueeze(-1)).squeeze(-1)
            adv = torch.linspace(-1.0, 1.0, n, device=logp.device).unsqueeze(1)
            loss = -(adv * logp).sum() / n
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sync(agents)
            times["generate"] += t1 - t0
            times["update"] += time.perf_counter() - t1
            times["tokens"] += counted_tokens(seqs[:, P:], eos_token_ids(agent))

    for batch in batches(warm_items, args.batch):
        step(batch, dict(generate=0.0, update=0.0, tokens=0))
    runs = []
    for _ in range(args.repeats):
        times = dict(generate=0.0, update=0.0, tokens=0)
        t0, c0 = time.perf_counter(), time.process_time()
        for batch in batches(timed_items, args.batch):
            step(batch, times)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        runs.append(dict(seconds=wall, wall_s=wall, cpu_s=cpu, generate_s=times["generate"], reward_s=0.0,
                         update_s=times["update"], completion_tokens=int(times["tokens"])))
    return runs


# --- reporting ----------------------------------------------------------------------------------


def peak_memory(agents) -> dict:
    import torch

    # ru_maxrss is in KiB on Linux (bytes on macOS)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"peak_rss_mb": round(rss / (2**20 if sys.platform == "darwin" else 2**10), 1)}
    if any(a.device.type == "cuda" for a in agents):
        out["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) by a fragment of the CUDA device's name: the
# SXM parts' datasheet figures. A PCIe card or another one: give --peak-tflops.
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100 80GB HBM3": 989.4, "H100 PCIe": 756.0, "A100": 312.0}


def peak_tflops(args, agents) -> float | None:
    import torch

    if args.peak_tflops:
        return args.peak_tflops
    if agents[0].device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(agents[0].device)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def matmul_params(model) -> int:
    """Parameters that enter a matrix product for every token: all but the input embedding table,
    which is a lookup (it counts when the output head is tied to it, since the head's product uses it)."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    total = sum(p.numel() for p in model.parameters())
    return total if head is not None and head.weight is emb else total - emb.numel()


def update_flops(args, cfg, agents, task, items: list, completion_tokens: int) -> float | None:
    """Model FLOPs of the timed updates, by the usual convention: 6 * N per token through the update
    (forward 2N, backward 4N; N = matmul_params), over each role's G rows of prompt + completion.
    Attention's own products (the scores and their weighted sum) and recomputation under gradient
    checkpointing are not counted, so the utilisation is a slight under-estimate of the work done.
    None with LoRA adapters, where the backward skips the frozen weights' gradients and 6N overstates."""
    if any(getattr(a.model, "peft_config", None) for a in agents):
        return None
    n = [matmul_params(a.model) for a in agents]
    prompt = 0.0
    for item in items:
        for i, text in enumerate(task.prompts(item, args.agents)):
            agent = agents[i % len(agents)]
            _, mask, _ = agent.encode_prompts([text], cfg.algo.max_prompt_length)
            prompt += int(mask.sum()) * args.gens * n[i % len(agents)]
    mean_n = sum(n[i % len(n)] for i in range(args.agents)) / args.agents
    return 6.0 * (prompt + completion_tokens * mean_n)


def report(args, runs: list[dict], agents, load_s: float, extra: dict | None = None) -> dict:
    import torch

    median = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]   # lower median: a real run
    s = median["seconds"]
    parts = {k: median[f"{k}_s"] for k in ("generate", "reward", "update")}
    out = {
        "mode": args.mode,
        "prompts_per_s": round(args.prompts / s, 4),
        "tokens_per_s": round(median["completion_tokens"] / s, 2),
        **{f"share_{k}": round(v / s, 4) for k, v in parts.items()},
        "share_other": round(max(s - sum(parts.values()), 0.0) / s, 4),
        "seconds": round(s, 4),
        **{f"{k}_s": round(v, 4) for k, v in parts.items()},
        "wall_s": round(median["wall_s"], 4),
        # CPU seconds of this process over the timed passes: with --threads 1 it is what the
        # run would take on an idle core, so ratios of it survive a machine shared with others.
        "cpu_s": round(median["cpu_s"], 4),
        "prompts_per_cpu_s": round(args.prompts / median["cpu_s"], 4),
        "completion_tokens": median["completion_tokens"],
        "runs_prompts_per_s": [round(args.prompts / r["seconds"], 4) for r in runs],
        **peak_memory(agents),
        "load_s": round(load_s, 3),
        "model": args.model, "algo": bench_algo(args), "agents": args.agents, "prompts": args.prompts, "batch": args.batch,
        "gens": args.gens, "max_new_tokens": args.tokens, "warmup_steps": args.warmup_steps,
        "repeats": args.repeats, "seed": args.seed, "device": str(agents[0].device), "dtype": args.dtype,
        "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
        "torch_threads": torch.get_num_threads(), "loadavg_1m": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
    }
    flops = median.get("update_flops")
    if flops and median["update_s"] > 0:
        achieved = flops / median["update_s"] / 1e12
        out["update_tflops_per_s"] = round(achieved, 4)
        peak = peak_tflops(args, agents)
        if peak:
            out["peak_tflops"] = peak
            out["mfu"] = round(achieved / peak, 4)      # the update's model FLOP utilisation
    out.update(extra or {})
    return out


def run_mode(args: argparse.Namespace) -> dict:
    cfg, agents, task, warm, timed, load_s = setup(args)
    extra = {}
    if args.mode == "magrpo":
        runs = run_magrpo(args, cfg, agents, task, warm, timed)
        extra["last_reward_mean"] = round(runs[-1]["last_reward_mean"], 4)
        if args.turns > 1:
            median = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]
            extra.update(turns=args.turns, feedback=args.feedback, branches=args.branches,
                         feedback_s=round(median["feedback_s"], 4), turn_stats=median["turn_stats"])
    elif args.mode == "bare":
        runs = run_bare(args, cfg, agents, task, warm, timed)
    else:
        from bench_comlrl import run_comlrl

        runs, extra = run_comlrl(args, cfg, agents, task, warm, timed,
                                 lambda i, ids: counted_tokens(ids, eos_token_ids(agents[i])))
    if args.turns == 1:          # a later turn's prompt holds the history: the count below is one turn's
        for r in runs:
            r["update_flops"] = update_flops(args, cfg, agents, task, timed, r["completion_tokens"])
    return report(args, runs, agents, load_s, extra)


def run_compare(args: argparse.Namespace, argv: list[str]) -> dict:
    """Each mode in a fresh process, so peak RSS and allocator state are its own."""
    base = [a for a in argv if not a.startswith("--mode")]
    if "--mode" in argv:                 # drop "--mode compare" given as two words
        i = argv.index("--mode")
        base = argv[:i] + argv[i + 2:]
    results = {}
    for mode in MODES:
        proc = subprocess.run([sys.executable, __file__, *base, "--mode", mode], capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            results[mode] = {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]}
            continue
        results[mode] = json.loads(lines[-1])
    m = results["magrpo"]
    out = {"mode": "compare", **{k: m.get(k) for k in ("prompts_per_s", "tokens_per_s", "share_generate",
                                                      "share_reward", "share_update", "share_other",
                                                      "peak_rss_mb", "peak_cuda_mb", "update_tflops_per_s", "mfu")
                                                      if k in m}}
    for ref in ("bare", "comlrl"):
        if "prompts_per_s" in m and "prompts_per_s" in results[ref]:
            out[f"magrpo_over_{ref}"] = round(m["prompts_per_s"] / results[ref]["prompts_per_s"], 3)
            out[f"magrpo_over_{ref}_cpu"] = round(m["prompts_per_cpu_s"] / results[ref]["prompts_per_cpu_s"], 3)
    out.update(results)
    return out


def run_turns(args: argparse.Namespace, argv: list[str]) -> dict:
    """The T-turn step here, the one-turn step in a fresh process; their step-time ratio."""
    result = run_mode(args)
    base = [a for a in argv if not a.startswith("--turns")]
    if "--turns" in argv:                # "--turns T" given as two words
        i = argv.index("--turns")
        base = argv[:i] + argv[i + 2:]
    proc = subprocess.run([sys.executable, __file__, *base, "--turns", "1"], capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        result["one_turn_error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return result
    one = json.loads(lines[-1])
    result.update(one_turn_seconds=one["seconds"], one_turn_cpu_s=one["cpu_s"],
                  turns_over_one_turn=round(result["seconds"] / one["seconds"], 3),
                  turns_over_one_turn_cpu=round(result["cpu_s"] / one["cpu_s"], 3))
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.mode == "compare":
        result = run_compare(args, argv)
    else:
        result = run_turns(args, argv) if args.turns > 1 else run_mode(args)
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
