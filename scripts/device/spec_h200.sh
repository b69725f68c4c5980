#!/usr/bin/env bash
# [spec] speculative decoding on one H200, each part under its own time limit, continuing when one fails (~6 min):
#   1. tests/gpu/test_spec_gpu.py: greedy tokens identical with and without speculation with CUDA graphs
#      (n-gram, the target as its own draft, another draft), the verify and draft graphs replayed,
#      graphed = eager, seeded sampling reproducible                                         <= 100 s
#   2. benchmarks/spec_decode.py: Llama-3.1-8B dummy bf16 with a Llama-3.2-1B-shaped draft and n-gram
#      proposals, then with itself as draft; tokens/s at 1, 8 and 64 requests against none, the policy
#      at 64 (adaptive and forced on), an acceptance sweep and a per-step device-time profile;
#      its JSON is rewritten after each engine, so a timeout keeps what finished         <= what is left of 350 s
# Results: ONE tarball, $OUT/spec.tgz, with spec_decode_h200.json, gpu.txt, the logs and summary.txt.
# From the repository root on the GPU machine (wheels in .whl/ as for scripts/device/regression.sh):
#   bash scripts/device/spec_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
RES=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RES/gpu.txt" 2>&1 || true

part gpu_tests 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_spec_gpu.py
LEFT=$((350 - SECONDS))
cd benchmarks || exit 2
part spec_decode "$LEFT" python3 spec_decode.py --output "$RES/spec_decode_h200.json"
cd .. || exit 2
cat "$RES/summary.txt"
tar -czf "$OUT/spec.tgz" -C "$RES" .
echo "packed $OUT/spec.tgz"
