#!/usr/bin/env bash
# Gemma 2 and Phi-3 / Phi-4 on one GPU (~4 min; each part under a limit), the tests session 46 wrote and could
# not run (no machine came):
#   1. tests/gpu/test_kernels_gpu.py: paged attention against the reference, the soft-cap at Gemma 2's head
#      dim (prefill, decode, split-KV, window) among them                                        <= 70 s
#   2. tests/gpu/test_families_gpu.py -k "gemma or phi": bf16 against transformers, CUDA graphs against eager,
#      Phi-3's longrope in bf16; tests/runtime/embed/test_gpu.py's Gemma 2 capped embeddings (graphs asked
#      for, eager used, = the CPU's vectors)                                                        <= 110 s
#   3. tests/gpu/test_engine_gpu.py: the other families' bf16 agreement, after the kernel change    <= 120 s
# Carry ".whl" (the server's packages). Logs in $OUT/families_gpu.tgz.
#   bash scripts/device/families_gpu.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
part kernels 70 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_gpu.py
part families 110 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_families_gpu.py tests/runtime/embed/test_gpu.py \
  -k "gemma or phi"
part engine 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_engine_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/families_gpu.tgz" -C "$RES" .
echo "wrote $OUT/families_gpu.tgz"
