#!/usr/bin/env bash
# The GPU checks in one call (docs/scaling.md): decoding at the 1.7B shape through every decode
# step and model.generate, the same through LoRA layers, MAGRPO's step at the 1.7B shape with the
# lean and the graph step, and `pytest -m gpu`. Each part has its own time limit and writes its
# output under OUT (default outputs/gpu_check); a part that fails does not stop the next.
#   bash scripts/gpu_check.sh             # PY=python3 by default; OUT=... to choose the folder
set -u
PY=${PY:-python3}
OUT=${OUT:-outputs/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
part() {  # part NAME SECONDS CMD...: run CMD under a limit, its output in OUT/NAME.log, its JSON line in OUT/NAME.json
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  tail -n 1 "$OUT/$name.log" | grep '^{' > "$OUT/$name.json" || true
  echo "$name: exit $rc"; tail -n 3 "$OUT/$name.log"
}
part decode 100 $PY scripts/decode_bench.py --model qwen3-1.7b-shape --device cuda --dtype bfloat16 \
  --prompts 8 --gens 4 --tokens 64 --steps lean,static,graph,generate
part decode_lora 80 $PY scripts/decode_bench.py --model qwen3-1.7b-shape --device cuda --dtype bfloat16 \
  --prompts 8 --gens 4 --tokens 64 --lora 8 --steps lean,graph
B="scripts/bench.py --model builtin:qwen3-1.7b-shape --device cuda --dtype bfloat16 --agents 2 --prompts 8 --batch 8 --gens 4 --tokens 64"
part bench_lean 160 $PY $B
part bench_graph 90 $PY $B --override algo.decode_step=graph
part test_gpu 110 $PY -m pytest -q -m gpu -x -p no:cacheprovider
