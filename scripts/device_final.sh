#!/usr/bin/env bash
# The last full device run of a session: GPU tests, engine benchmarks and the embedding benchmark,
# each under its own time limit so one slow part cannot starve the others. Results under $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu tests/embed/test_gpu.py > "$OUT/gpu_tests.txt" 2>&1
tail -4 "$OUT/gpu_tests.txt"
timeout 140 python3 benchmarks/throughput.py --output "$OUT/throughput_h200.json" 2>&1 | grep -E "tok/s|failed"
timeout 120 python3 benchmarks/decode_latency.py --output "$OUT/decode_latency_h200.json" 2>&1 | grep ms/step
timeout 70 python3 benchmarks/prefix_caching.py --output "$OUT/prefix_caching_h200.json" 2>&1 | grep -o "'ttft_mean_ms': [0-9.]*"
timeout 90 python3 benchmarks/embeddings.py --models qwen3 --device cuda --batch-sizes 1,64,512 --lengths 16,128,512 \
    --output "$OUT/embeddings_h200.json" 2>&1 | tail -12
