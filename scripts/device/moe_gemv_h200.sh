#!/usr/bin/env bash
# The one-token MoE products (kernels/moe_gemv.py, off unless MOPT_MOE_GEMV=1) on one H200, <= ~230 s,
# ONE tarball $OUT/moe_gemv.tgz:
#   1. tests/gpu/test_families_gpu.py -k "one_token or fused_moe": both one-token paths against the loop,
#      eager and replayed from a CUDA graph on new routes                                              <= 90 s
#   2. benchmarks/moe_kernels.py --one-token: fused kernel (layer's call) vs the products at 5 tiles,
#      Qwen3-30B-A3B, DeepSeek-V2-Lite, Mixtral-8x7B at one token                                     <= 60 s
#   3. decode_latency.py Qwen3-30B-A3B batch 1, profiled, with MOPT_MOE_GEMV=0 and =1 (3.60 ms today)   <= 80 s
# If the products win, make them the default (moe_gemv.enabled) with the best tile as GemvTiles' default.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
part tests 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_families_gpu.py -k "one_token or fused_moe"
cd benchmarks || exit 2
part one_token 60 python3 moe_kernels.py --one-token --models qwen3-30b-a3b deepseek-v2-lite mixtral-8x7b \
  --tokens 1 --output "$RES/moe_one_token_h200.json"
for on in 0 1; do
  part "decode_gemv$on" 40 env MOPT_MOE_GEMV=$on python3 decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 \
    --profile --output "$RES/decode_qwen3_30b_a3b_gemv${on}_h200.json"
done
cd .. || exit 2
cat "$RES/summary.txt"
tar -czf "$OUT/moe_gemv.tgz" -C "$RES" .
echo "packed $OUT/moe_gemv.tgz"
