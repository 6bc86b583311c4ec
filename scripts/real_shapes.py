"""One real MAGRPO step at the real models' dimensions (builtin shapes, random weights), per case.

    python scripts/real_shapes.py                      # every case (make real-shapes)
    python scripts/real_shapes.py --cases 1.7b-lora    # some of them; --list names them
    python scripts/real_shapes.py --cases 1.7b-full --set hardware=gpu --no-resume   # on a GPU

Each case runs `python -m magrpo.cli.train` (the real entry point) in its own process: one step, an
eval and a checkpoint (max_steps=1), then a second process resumes the run (resume=RUN max_steps=2:
one more step, eval and checkpoint). Short sequences keep it to minutes on a CPU: batch 2, G=2,
32 new tokens, 2 eval items x 1 sample, task length_ratio. One JSON line per case on stdout:

  ok / reason      whether both processes exited 0 (else the last error line)
  seconds          load (process start -> models loaded), eval (the initial eval), generate,
                   reward, update, step (the step's phases, from metrics.jsonl), final_eval, save
                   (the checkpoint), resume (the resuming process's start -> weights, optimizer and
                   random state restored), the resumed step's generate/reward/update, resumed_save
  peak_rss_gb      peak resident memory of the training process and of the resuming one
  peak_cuda_gb     on a GPU (--set hardware=gpu): the peak CUDA memory allocated (metrics.jsonl's
                   memory/peak_cuda_gb) of each process

Seconds come from the time each log line reaches this script (the child flushes every record), so
they include a few milliseconds of pipe latency. Nothing else should run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHORT = ["task=length_ratio", "algo.max_new_tokens=32", "algo.batch_size=2", "algo.num_generations=2",
         "eval.num_items=2", "eval.num_samples=1", "optimizer.lr=1e-5", "hardware.autocast=bf16",
         "logger=none"]
# Two agents as LoRA adapters (r=32, all linear layers) on one shared bf16 base: the
# qwen2.5_coder_3b preset with the base replaced by a builtin shape. The preset turns gradient
# checkpointing on; the plain cases turn it off so that the checkpointing case differs by it alone.
LORA = ["agents=qwen2.5_coder_3b"]
NO_CKPT = ["hardware.gradient_checkpointing=false"]
CKPT = ["hardware.gradient_checkpointing=true", "algo.micro_batch_size=1"]
CASES: dict[str, list[str]] = {
    "1.7b-lora": [*LORA, "agents.models.0.name_or_path=builtin:qwen3-1.7b-shape", *NO_CKPT],
    "1.7b-lora-beta": [*LORA, "agents.models.0.name_or_path=builtin:qwen3-1.7b-shape", *NO_CKPT, "algo.beta=0.04"],
    "1.7b-lora-ckpt": [*LORA, "agents.models.0.name_or_path=builtin:qwen3-1.7b-shape", *CKPT],
    "3b-lora": [*LORA, "agents.models.0.name_or_path=builtin:qwen2.5-coder-3b-shape", *NO_CKPT],
    # The paper's writing setting: two full bf16 copies of Qwen3-1.7B (the qwen3_1.7b preset, gradient
    # checkpointing on), G = 4 and 256 new tokens. A GPU case: pass --set hardware=gpu.
    "1.7b-full": ["agents=qwen3_1.7b", "agents.models.0.name_or_path=builtin:qwen3-1.7b-shape",
                  "algo.num_generations=4", "algo.max_new_tokens=256"],
}
MARKERS = {"loaded": "loaded ", "eval": "eval @ step", "saved": "saved checkpoint", "resumed": "resumed from "}


def run_process(args: list[str], timeout: float, env: dict) -> dict:
    """Run one training process; the arrival time of each marker line, its exit status, peak RSS."""
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    seen: dict[str, list[float]] = {k: [] for k in MARKERS}
    tail: list[str] = []
    timer = threading.Timer(timeout, proc.kill)      # a silent child is stopped too
    timer.start()
    for line in proc.stdout:
        now = time.monotonic() - t0
        for key, text in MARKERS.items():
            if text in line and (key != "loaded" or "agent(s)" in line):
                seen[key].append(now)
        tail = (tail + [line.rstrip()])[-40:]
    _, status, usage = os.wait4(proc.pid, 0)
    if not timer.is_alive():
        tail.append(f"timed out after {timeout:.0f} s")
    timer.cancel()
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    return {"code": code, "seen": seen, "tail": tail, "wall": time.monotonic() - t0,
            "peak_rss_gb": round(usage.ru_maxrss / 1024 ** 2, 2)}


def peak_cuda(row: dict) -> float | None:
    """A step's `memory/peak_cuda_gb` (GiB: its process's peak so far), None on a CPU."""
    return round(row["memory/peak_cuda_gb"], 2) if "memory/peak_cuda_gb" in row else None


def step_rows(run_dir: Path) -> dict[int, dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["step"]: r for r in rows if "time/step_s" in r}


def reason(proc: dict) -> str:
    errors = [line for line in proc["tail"] if "Error" in line or "error" in line or "timed out" in line]
    return (errors or proc["tail"] or ["no output"])[-1][-400:]


def run_case(name: str, out: Path, threads: int, timeout: float, extra: list[str] = (), resume: bool = True) -> dict:
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # Every process also gets hydra.run.dir=RUN: Hydra's own log directory would otherwise be a new outputs/train/...
    base = [sys.executable, "-m", "magrpo.cli.train", *SHORT, *CASES[name], f"hardware.num_threads={threads}", *extra]
    result: dict = {"case": name, "overrides": [*CASES[name], *extra], "threads": threads, "ok": False, "reason": None,
                    "seconds": {}, "peak_rss_gb": {}, "peak_cuda_gb": {}}
    first = run_process([*base, "max_steps=1", f"output_dir={run_dir}", f"hydra.run.dir={run_dir}",
                         *([] if resume else ["save_final=false"])], timeout, env)
    result["peak_rss_gb"]["train"] = first["peak_rss_gb"]
    s, seen = result["seconds"], first["seen"]
    if seen["loaded"]:
        s["load"] = seen["loaded"][0]
    if seen["loaded"] and seen["eval"]:
        s["eval"] = seen["eval"][0] - seen["loaded"][-1]
    rows = step_rows(run_dir)
    if 1 in rows:
        for phase in ("generate", "reward", "update", "step"):
            s[phase] = rows[1][f"time/{phase}_s"]
        if (peak := peak_cuda(rows[1])) is not None:
            result["peak_cuda_gb"]["train"] = peak
    if len(seen["eval"]) >= 2 and "step" in s:
        s["final_eval"] = seen["eval"][1] - seen["eval"][0] - s["step"]
    if len(seen["eval"]) >= 2 and seen["saved"]:
        s["save"] = seen["saved"][0] - seen["eval"][1]
    if first["code"] != 0:
        result["reason"] = f"train exited {first['code']}: {reason(first)}"
        return result
    if not resume:
        result["ok"] = True
        return result
    # Resumed in place (output_dir= the same run), so its step and checkpoint land next to the first.
    second = run_process([*base, f"resume={run_dir}", "max_steps=2", f"output_dir={run_dir}", f"hydra.run.dir={run_dir}"],
                         timeout, env)
    result["peak_rss_gb"]["resume"] = second["peak_rss_gb"]
    if second["seen"]["resumed"]:
        s["resume"] = second["seen"]["resumed"][0]
    rows = step_rows(run_dir)
    if 2 in rows:
        for phase in ("generate", "reward", "update"):
            s[f"resumed_{phase}"] = rows[2][f"time/{phase}_s"]
        if (peak := peak_cuda(rows[2])) is not None:
            result["peak_cuda_gb"]["resume"] = peak
    if second["seen"]["eval"] and second["seen"]["saved"]:
        s["resumed_save"] = second["seen"]["saved"][-1] - second["seen"]["eval"][-1]
    if second["code"] != 0:
        result["reason"] = f"resume exited {second['code']}: {reason(second)}"
        return result
    result["ok"] = True
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, from: " + ", ".join(CASES))
    ap.add_argument("--out", default=None, help="run directories (default: a temporary one, removed after)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads per process")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per training process")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra override for every case, e.g. --set agents.models.0.dtype=float32 "
                         "--set hardware.autocast=none (the float32 rows of docs/scaling.md)")
    ap.add_argument("--no-resume", action="store_true",
                    help="one process per case: the step and its evals, no checkpoint and no resume (a full "
                         "fine-tune's checkpoint of weights and optimizer is tens of GB)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        print("\n".join(f"{k}: {' '.join(v)}" for k, v in CASES.items()))
        return 0
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="real-shapes-"))
    failed = 0
    try:
        for name in names:
            result = run_case(name, out, args.threads, args.timeout, args.set, resume=not args.no_resume)
            for k, v in list(result["seconds"].items()):
                result["seconds"][k] = None if v is None else round(v, 2)
            failed += not result["ok"]
            print(json.dumps(result), flush=True)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
