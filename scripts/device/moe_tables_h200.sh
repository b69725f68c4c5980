#!/usr/bin/env bash
# Tile tables for the MoE models and their effect, on one H200 (<= ~520 s), ONE tarball $OUT/moe_tables.tgz:
#   1. benchmarks/moe_kernels.py --sweep: fused-MoE tiles per expert shape and token bucket for
#      Qwen3-30B-A3B, DeepSeek-V2-Lite, Mixtral-8x7B -> moe_tiles.json (written after each case)   <= 190 s
#   2. benchmarks/quant_kernels.py --sweep --kinds bf16 --models qwen3-30b-a3b: our bf16 program vs
#      cuBLAS for the attention projections and the router -> merged into a copy of quant_tiles.json <= 110 s
#   3. benchmarks/decode_latency.py Qwen3-30B-A3B at batch 1, 64, 256 with both tables, profiled     <= 100 s
#   4. STRUCT=1: py-spy (--subprocesses --threads --idle, raw stacks) over benchmarks/structured.py at
#      64 requests: where the step loop's time goes when every row is masked                    <= 140 s
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
export PATH=/tmp/site/bin:$PATH  # py-spy
ROOT=$PWD
cd benchmarks || exit 2
part moe_sweep 190 python3 moe_kernels.py --sweep --models qwen3-30b-a3b deepseek-v2-lite mixtral-8x7b \
  --tokens 64 256 --tiles-output "$RES/moe_tiles.json" --output "$RES/moe_kernels_swept_h200.json"
cp "$ROOT/model_optimizer/runtime/kernels/quant_tiles.json" "$RES/quant_tiles.json"
part dense_sweep 110 python3 quant_kernels.py --sweep --kinds bf16 --methods bf16 bf16_table --models qwen3-30b-a3b \
  --tiles-output "$RES/quant_tiles_qwen3_30b_a3b.json" --merge-into "$RES/quant_tiles.json" \
  --output "$RES/quant_kernels_qwen3_30b_a3b_h200.json"
MOPT_MOE_TILES="$RES/moe_tiles.json" MOPT_QUANT_TILES="$RES/quant_tiles.json" part decode 100 python3 decode_latency.py \
  --models qwen3-30b-a3b --batch-sizes 1 64 256 --profile --output "$RES/decode_qwen3_30b_a3b_tables_h200.json"
if [ "${STRUCT:-0}" = 1 ]; then
  part structured_pyspy 140 py-spy record --subprocesses --threads --idle --format raw --rate 200 \
    -o "$RES/structured_c64.pyspy.txt" -- python3 structured.py --bpe-from configs/qwen3-0.6b --concurrency 64 \
    --output-len 128 --output "$RES/structured_pyspy_h200.json" -- --load-format dummy --dtype bfloat16
fi
cd "$ROOT" || exit 2
cat "$RES/summary.txt"
tar -czf "$OUT/moe_tables.tgz" -C "$RES" .
echo "packed $OUT/moe_tables.tgz"
