#!/usr/bin/env bash
# The [archs] families and the fused MoE kernel on one H200, everything packed in $OUT/archs.tgz.
#
# From the repository root on the GPU machine (no wheels needed: LLM imports no server package):
#   bash scripts/device/archs_h200.sh          # ~6 min: the GPU tests, kernel vs loop, Qwen3-30B-A3B decode
#   bash scripts/device/archs_h200.sh extra    # ~6 min more: plan check, tile sweep, Mixtral-8x7B decode
#
# Default parts, each under its own time limit (the script goes on when one fails or times out):
#   gpu_tests  tests/gpu/test_families_gpu.py: bf16 against transformers for Qwen3-MoE (two layouts),
#              Mixtral, GLM-4 and Gemma 3 on tiny configs, CUDA graphs against eager, the fused
#              kernel against the per-expert loop at Qwen3-30B-A3B's and a Mixtral-like shape
#   moe_kernels  benchmarks/moe_kernels.py: fused kernel against the loop of dense matmuls (target >= 3x
#              at 64 tokens), Qwen3-30B-A3B's experts at 1/64/512 tokens, Mixtral-8x7B's at 1/64
#   decode     benchmarks/decode_latency.py: Qwen3-30B-A3B config, dummy bf16 weights, batch 1 and 64
#              (targets: <= 3.0 ms/step at batch 1, batch 64 <= 2x batch 1)
# Extra parts: the memory plan against the engine's KV blocks for Qwen3-30B-A3B (within 3%), the tile
# sweep of the fused kernel (writes moe_tiles.json: commit it as model_optimizer/runtime/kernels/
# moe_tiles.json to make it the H200 default), and Mixtral-8x7B decode at batch 1 and 64.
# Each part logs to <part>.log (and writes <part>.json); summary.txt has one line per part.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
MODE=${1:-default}
WORK=$(mktemp -d)
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200 PYTHONPATH=".:${PYTHONPATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$WORK/gpu.txt" 2>&1 || true
git rev-parse HEAD > "$WORK/commit.txt" 2>/dev/null || true

part() {  # part NAME SECONDS COMMAND...: run with a time limit (SIGTERM, then SIGKILL 15 s later), log, go on
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -k 15 "$limit" "$@" > "$WORK/$name.log" 2>&1
  echo "[$SECONDS s] $name: exit $? after $((SECONDS - start)) s" | tee -a "$WORK/summary.txt"
}

if [ "$MODE" = extra ]; then
  part plan_check 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_memory_plan.py -k qwen3-30b
  tail -3 "$WORK/plan_check.log" >> "$WORK/summary.txt"
  part moe_sweep 150 python3 benchmarks/moe_kernels.py --sweep --models qwen3-30b-a3b --sweep-tokens 1 64 512 4096 \
    --tokens 1 64 512 --tiles-output "$WORK/moe_tiles.json" --output "$WORK/moe_sweep.json"
  part decode_mixtral 170 python3 benchmarks/decode_latency.py --models mixtral-8x7b --batch-sizes 1 64 \
    --output "$WORK/decode_mixtral.json"
  grep -hE "tokens:|ms/step" "$WORK/moe_sweep.log" "$WORK/decode_mixtral.log" >> "$WORK/summary.txt" 2>/dev/null
else
  part gpu_tests 180 python3 -m pytest -q -p no:cacheprovider --durations=12 tests/gpu/test_families_gpu.py
  tail -5 "$WORK/gpu_tests.log" >> "$WORK/summary.txt"
  part moe_kernels 60 python3 benchmarks/moe_kernels.py --models qwen3-30b-a3b --tokens 1 64 512 \
    --output "$WORK/moe_kernels.json"
  part moe_kernels_mixtral 30 python3 benchmarks/moe_kernels.py --models mixtral-8x7b --tokens 1 64 \
    --output "$WORK/moe_kernels_mixtral.json"
  part decode 150 python3 benchmarks/decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile \
    --output "$WORK/decode_qwen3_30b_a3b.json"
  grep -hE "tokens:|ms/step|GPU memory|KV cache" "$WORK"/moe_kernels*.log "$WORK/decode.log" >> "$WORK/summary.txt" 2>/dev/null
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$WORK/summary.txt" 2>&1 || true
cat "$WORK/summary.txt"
tar -czf "$OUT/archs.tgz" -C "$WORK" .
