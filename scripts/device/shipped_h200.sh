#!/usr/bin/env bash
# A "fresh machine" start of `mopt serve` from kernels built ahead of time, on one H200, <= ~200 s,
# ONE tarball $OUT/shipped.tgz:
#   1. `mopt compile-cache build` for Qwen3-0.6B (dummy bf16) without the GPU (CUDA_VISIBLE_DEVICES=),
#      8 worker processes, timed                                                                  <= 120 s
#   2. cold_start.py --no-llm --shipped-only: two `mopt serve` starts, each from a fresh copy of that
#      folder: their time to /ready and the kernels they still compiled (0 expected)                <= 70 s
#   bash scripts/device/shipped_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
QWEN=(--model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16)
W=$(mktemp -d)
part build 120 env CUDA_VISIBLE_DEVICES= python3 -m model_optimizer.cli.main compile-cache build "${QWEN[@]}" \
  --jobs 8 --output "$W/aot_cache"
[ -f "$W/aot_cache/aot_manifest.json" ] && cp "$W/aot_cache/aot_manifest.json" "$RES/aot_manifest.json"
part serve_shipped 70 python3 benchmarks/cold_start.py --no-llm --no-tokenizer --runs 2 --shipped-only \
  --shipped-cache "$W/aot_cache" --cache-dir "$W/caches" --output "$RES/cold_start_shipped_serve_h200.json" \
  -- "${QWEN[@]}"
rm -rf "$W"
cat "$RES/summary.txt"
tar -czf "$OUT/shipped.tgz" -C "$RES" .
echo "packed $OUT/shipped.tgz"
