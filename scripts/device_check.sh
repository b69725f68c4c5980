#!/usr/bin/env bash
# Run on the GPU machine from the repository root: GPU tests, benchmarks and the doctor capture,
# results collected under $OUT (default ./out). Usage: bash scripts/device_check.sh [quick]
# Needs fastapi/uvicorn/pydantic/optuna wheels in .whl/ when they are missing there (see README).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
mode=${1:-full}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tee "$OUT/gpu_tests.txt" | tail -5
if [ "$mode" = quick ]; then
  python3 benchmarks/throughput.py --num-requests 64 --hf-requests 0 --output "$OUT/throughput_quick.json" 2>&1 | tail -3
  exit 0
fi
python3 benchmarks/throughput.py --output "$OUT/throughput_h200.json" 2>&1 | tail -3
python3 benchmarks/profile_step.py --output "$OUT/profile_step_h200.json" 2>&1 | grep -v Warn | head -12
python3 benchmarks/decode_latency.py --output "$OUT/decode_latency_h200.json" 2>&1 | tail -8
python3 benchmarks/prefix_caching.py --output "$OUT/prefix_caching_h200.json" 2>&1 | tail -3
python3 benchmarks/attention_kernels.py --no-sweep --output "$OUT/attention_kernels.json" 2>&1 | tail -25
