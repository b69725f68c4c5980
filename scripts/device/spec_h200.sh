#!/usr/bin/env bash
# [spec] speculative decoding on one H200, each part under its own time limit, continuing when one fails:
#   1. benchmarks/spec_decode.py --quick: Llama-3.1-8B dummy bf16 with a Llama-3.2-1B-shaped draft and
#      n-gram proposals (k = 4): tokens/s at 1 and 64 requests against none (adaptive policy), a long
#      64-request run (3 x 64 requests, fresh policy, no warm-up run), acceptance 1 forced at one request,
#      the per-step device-time profile and the host profile of spec_host_overhead.py on the same engine;
#      its JSON is rewritten after the engine, so a timeout keeps what finished              <= 150 s
#   2. tests/gpu/test_spec_gpu.py: greedy tokens identical with and without speculation with CUDA graphs
#      (n-gram, the target as its own draft, another draft), graphed = eager, seeded sampling
#      reproducible; SKIP_TESTS=1 leaves it out                                                <= 100 s
# Results: ONE tarball, $OUT/spec.tgz, with spec_decode_h200.json, gpu.txt, the logs and summary.txt.
# From the repository root on the GPU machine (wheels in .whl/ as for scripts/device/regression.sh):
#   bash scripts/device/spec_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run

cd benchmarks || exit 2
part spec_decode 150 python3 spec_decode.py --quick --output "$RES/spec_decode_h200.json"
cd .. || exit 2
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  part gpu_tests 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_spec_gpu.py
fi
cat "$RES/summary.txt"
tar -czf "$OUT/spec.tgz" -C "$RES" .
echo "packed $OUT/spec.tgz"
