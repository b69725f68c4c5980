#!/usr/bin/env bash
# [structured] figures and GPU tests on one H200 (~4 min), each part under its own time limit:
#   1. benchmarks/structured.py: `mopt serve` on Qwen3-0.6B dummy bf16 with a generated 151k-token
#      byte-level BPE tokenizer; `mopt bench` at concurrency 1 and 64, unconstrained vs --json-schema:
#      TPOT ratio, the mask's host time per masked step (server counters), a jsonschema-checked sample,
#      and the in-process per-step mask time distribution at 1 and 64 rows               <= 200 s
#   2. tests/gpu/test_structured_gpu.py: fused kernel mask vs torch, a split launch with no sync,
#      constrained generation with CUDA graphs (sync and async scheduling)               <= 100 s
# Everything (JSON, logs, summary.txt) is packed into ONE tarball, $OUT/structured.tgz.
# The GPU machine lacks llguidance (and maybe fastapi/uvicorn/pydantic/msgspec/pyzmq/jsonschema):
# put their cp312 wheels in .whl/ (llguidance-1.9.1-cp39-abi3-manylinux_2_31_x86_64.whl is in
# /tmp/grammar/wheels312/), then from the repository root:
#   bash scripts/device/structured_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
RES=$(mktemp -d)
QWEN=(--load-format dummy --dtype bfloat16)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RES/gpu.txt" 2>&1 || true
python3 -c "import llguidance; print('llguidance', llguidance.__version__)" > "$RES/llguidance.txt" 2>&1 \
  || echo "llguidance missing: put its wheel in .whl/" | tee -a "$RES/summary.txt"

cd benchmarks || exit 2
part structured_bench 200 python3 structured.py --bpe-from configs/qwen3-0.6b --concurrency 1 64 \
  --output-len 256 --output "$RES/structured_h200.json" -- "${QWEN[@]}"
cd .. || exit 2
part gpu_tests 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_structured_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/structured.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/structured.tgz"
