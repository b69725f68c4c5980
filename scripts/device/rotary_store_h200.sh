#!/usr/bin/env bash
# [kernels] rotary + KV store in one launch (norm_rotate_store) on one H200, packed in $OUT/rotary_store.tgz.
#
# From the repository root on the GPU machine:
#   bash scripts/device/rotary_store_h200.sh     # ~8 min
#
# Part kernel_tests: fused vs norm_rotate + store_kv in a CUDA graph (bf16/fp8 caches, q/k norm on/off),
#   the store_kv and graph-replay tests beside it (tests/gpu/test_kernels_gpu.py).
# Part engine_tests: Qwen3 (tiny) bf16 vs transformers, graphs vs eager, fp8 KV cache, embeddings sharing
#   the decoder (tests/gpu/test_engine_gpu.py); Gemma 3 and GLM-4 (fused and unfused) in
#   tests/gpu/test_families_gpu.py; the warm-up test (the fused kernel compiled at start, bf16 and fp8).
# Part kernels: benchmarks/attention_kernels.py --no-sweep; its `rotary_store` rows time one launch against
#   the two it replaces (CUDA-graph medians, 1..8192 tokens).
# Part decode: benchmarks/decode_latency.py --profile at batch 1 for Qwen3-0.6B, Llama-3.1-8B and
#   Qwen3-30B-A3B: ms/step, and each graph's kernels (_norm_rotate_store_kernel, no _store_kv_kernel).
# summary.txt has one line per part; the JSON files sit beside it.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run

part kernel_tests 120 python3 -m pytest -q -p no:cacheprovider --junitxml="$RES/kernel_tests.xml" \
  tests/gpu/test_kernels_gpu.py -k "rotary_store or store_kv or cuda_graph"
part engine_tests 240 python3 -m pytest -q -p no:cacheprovider --junitxml="$RES/engine_tests.xml" \
  tests/gpu/test_engine_gpu.py tests/gpu/test_warmup_gpu.py tests/gpu/test_families_gpu.py -k "not moe and not deepseek"
part kernels 150 python3 benchmarks/attention_kernels.py --no-sweep --output "$RES/attention_kernels_h200.json"
part decode 240 python3 benchmarks/decode_latency.py --models qwen3-0.6b llama-3.1-8b qwen3-30b-a3b \
  --batch-sizes 1 --profile --output "$RES/decode_rotary_store_h200.json"
cat "$RES/summary.txt"
tar -czf "$OUT/rotary_store.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/rotary_store.tgz"
