#!/usr/bin/env bash
# [perf] figures on one H200, each part under its own time limit, continuing when one fails (~6 min):
#   1. cold start, Qwen3-0.6B dummy bf16: `mopt serve` to /ready, one cold and one warm start
#      (benchmarks/cold_start.py)                                                           <= 120 s
#   2. serving, Qwen3-0.6B dummy: 1000 requests 512/128 at rate inf, without and with logprobs=5
#      (benchmarks/serving.py)                                                              <= 120 s
#   3. tests/gpu/test_perf_gpu.py (logprobs without a sync, compile caches, eager without inductor)
#      and tests/gpu/test_startup_log_gpu.py                                                <= 110 s
#   4. cold start, Llama-3.1-8B dummy bf16, warm only, in what is left of 360 s (skipped under 60 s)
# Results: $OUT/cold_start_h200.json, serving_h200.json, cold_start_llama8b_h200.json, logs, and
# summary.txt. From the repository root on the GPU machine, with wheels of fastapi/uvicorn/pydantic
# in .whl/ when the machine lacks them (see scripts/device/regression.sh):
#   bash scripts/device/perf_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
QWEN=(--model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16)
LLAMA=(--model benchmarks/configs/llama-3.1-8b --load-format dummy --dtype bfloat16)
RES=$OUT  # part() logs there
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true

cd benchmarks || exit 2
part cold_start_qwen 120 python3 cold_start.py --runs 1 --no-llm --output "$OUT/cold_start_h200.json" -- "${QWEN[@]}"
part serving_qwen 120 python3 serving.py --num-requests 1000 --prompt-len 512 --output-len 128 \
  --with-and-without-logprobs --logprobs 5 --output "$OUT/serving_h200.json" -- "${QWEN[@]}"
cd .. || exit 2
part gpu_tests 110 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_perf_gpu.py tests/gpu/test_startup_log_gpu.py
LEFT=$((360 - SECONDS))
if [ "$LEFT" -ge 60 ]; then
  cd benchmarks || exit 2
  part cold_start_llama8b "$LEFT" python3 cold_start.py --runs 1 --no-llm --warm-only --no-tokenizer \
    --output "$OUT/cold_start_llama8b_h200.json" -- "${LLAMA[@]}"
  cd .. || exit 2
else
  echo "[$SECONDS s] cold_start_llama8b: skipped (time)" | tee -a "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
