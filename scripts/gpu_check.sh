#!/usr/bin/env bash
# The GPU checks in one call (docs/scaling.md): decoding at the 1.7B shape through every decode
# step and model.generate, `pytest -m gpu`, MAGRPO's graph step at the 1.7B shape against the bare
# loop and comlrl (when comlrl imports; else the graph step alone), and decoding through LoRA
# layers. Each part has its own time limit and writes its output under OUT (default
# outputs/gpu_check); a part that fails does not stop the next.
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
# In GPU.md's order of importance where time is short: decoding (the headline), the gpu tests,
# MAGRPO against comlrl and the bare loop at the 1.7B shape, then decoding through LoRA layers.
part decode 100 $PY scripts/decode_bench.py --model qwen3-1.7b-shape --device cuda --dtype bfloat16 \
  --prompts 8 --gens 4 --tokens 64 --steps lean,static,graph,generate
part test_gpu 110 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py
# The shape's cache, built with its random weights drawn on the GPU (seconds, where the CPU takes
# about 90 s; the weights differ from a CPU build's, which no timing depends on).
part build 120 $PY -c "import torch; from magrpo.models.tiny import build_builtin; torch.set_default_device('cuda'); build_builtin('qwen3-1.7b-shape')"
B="scripts/bench.py --model builtin:qwen3-1.7b-shape --device cuda --dtype bfloat16 --agents 2 --prompts 8 --batch 8 --gens 4 --tokens 64"
# comlrl imports wandb and datasets: carry them with it (wandb 0.22 reads protobuf 3-6 only).
if why=$($PY -c "import comlrl.trainers.reinforce" 2>&1); then
  part bench_compare 200 $PY $B --mode compare --override algo.decode_step=graph
else
  echo "comlrl does not import here (${why##*$'\n'}): MAGRPO's graph step alone"
  part bench_graph 90 $PY $B --repeats 2 --override algo.decode_step=graph
fi
part decode_lora 80 $PY scripts/decode_bench.py --model qwen3-1.7b-shape --device cuda --dtype bfloat16 \
  --prompts 8 --gens 4 --tokens 64 --lora 8 --steps lean,graph
