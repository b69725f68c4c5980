#!/usr/bin/env bash
# Gemma 2, Phi-3 / Phi-4, GLM-4.7-Flash and gpt-oss on one GPU (~5 min; each part under a limit), the tests
# sessions 46 and 47 wrote and could not run (no machine came):
#   1. tests/gpu/test_kernels_gpu.py: paged attention against the reference, the soft-cap at Gemma 2's head
#      dim and the attention sinks at gpt-oss's (prefill, decode, split-KV, window) among them   <= 80 s
#   2. tests/gpu/test_families_gpu.py -k "gemma or phi or glm4_moe_lite or gpt_oss": bf16 against
#      transformers, CUDA graphs against eager, Phi-3's longrope in bf16; tests/runtime/embed/test_gpu.py's
#      Gemma 2 capped embeddings (graphs asked for, eager used, = the CPU's vectors)               <= 160 s
#   3. tests/gpu/test_engine_gpu.py: the other families' bf16 agreement, after the kernel change    <= 120 s
# Carry ".whl" (the server's packages). Logs in $OUT/families_gpu.tgz.
#   bash scripts/device/families_gpu.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
part kernels 80 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_gpu.py
part families 160 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_families_gpu.py tests/runtime/embed/test_gpu.py \
  -k "gemma or phi or glm4_moe_lite or gpt_oss"
part engine 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_engine_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/families_gpu.tgz" -C "$RES" .
echo "wrote $OUT/families_gpu.tgz"
