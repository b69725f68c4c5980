#!/usr/bin/env bash
# Embeddings on one GPU against sentence-transformers, most important first, each part under its own time limit:
#   1. benchmarks/fused_ops.py: the compiled element-wise ops, token-dim-only vs all-dynamic compile
#   2. tests/runtime/embed/test_gpu.py
#   3. benchmarks/embeddings.py, Qwen3-Embedding-0.6B's shape (random bf16), CUDA graphs up to the
#      default 2048 tokens, a profile of the 512 x 512 point
#   4. the same for all-MiniLM-L6-v2 (random weights from its config): ours in float16 (what `auto`
#      picks on CUDA for its float32 checkpoint) against sentence-transformers in float32, then both float32
#   5. tests/gpu (the engine's GPU tests; the compiled ops are shared with it)
# Everything lands in $OUT/results.tgz, re-packed after each part, so a run cut short keeps what it measured.
# tokenizers runs with its default parallelism on both sides (TOKENIZERS_PARALLELISM unset).
#
# Here, once (MiniLM's config/tokenizer files, 0.7 MB; the 90 MB checkpoint does not fit the transfer):
#   .venv/bin/python benchmarks/embeddings.py --save-minilm-files build/minilm-files
# Then on the GPU machine, from the repository root, with build/minilm-files and (when the machine lacks
# fastapi/uvicorn/pydantic) their wheels in .whl/ copied along:
#   bash scripts/device/embed_gpu.sh                       (about 9 minutes)
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
RESULTS=$(mktemp -d)
source "$(dirname "$0")/common.sh"
install_wheels
export COLUMNS=200 PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PYTHON="${PYTHON:-python3}"
MINILM_FILES="${MINILM_FILES:-build/minilm-files}"
GRID=(--device cuda --batch-sizes 1,64,512 --lengths 16,128,mixed,512 --min-seconds 0.3 --min-rounds 3)
pack() { tar czf "$OUT/results.tgz" -C "$RESULTS" . ; echo "[$SECONDS s] $1" | tee -a "$RESULTS/embed_gpu.log"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RESULTS/gpu.txt" 2>&1 || true

if [[ "${FP8_PROBE:-0}" == 1 ]]; then  # diagnosis of tests/gpu/test_fp8_kv_cache_stays_close
  for way in current eager; do
    timeout 100 "$PYTHON" scripts/device/fp8_probe.py $way >> "$RESULTS/fp8_probe.log" 2>&1
  done
  pack "fp8 probe: $(grep -c seed "$RESULTS/fp8_probe.log") lines"
fi

timeout 100 "$PYTHON" benchmarks/fused_ops.py --output "$RESULTS/fused_ops_h200.json" > "$RESULTS/fused_ops.log" 2>&1
pack "fused ops rc=$?"

timeout 90 "$PYTHON" -m pytest -q -p no:cacheprovider --durations=5 tests/runtime/embed/test_gpu.py > "$RESULTS/embed_gpu_tests.txt" 2>&1
pack "embed tests rc=$?: $(tail -1 "$RESULTS/embed_gpu_tests.txt")"

timeout 150 "$PYTHON" benchmarks/embeddings.py --models qwen3 "${GRID[@]}" --cuda-graph-max-tokens 2048 \
    --profile 512x512 --output "$RESULTS/embeddings_h200_qwen3.json" >> "$RESULTS/embed_gpu.log" 2>&1
pack "qwen3 rc=$?"

if [[ -f "$MINILM_FILES/config.json" ]]; then
  MINILM=(--models minilm --minilm-random --minilm-files "$MINILM_FILES" "${GRID[@]}")
  timeout 60 "$PYTHON" benchmarks/embeddings.py "${MINILM[@]}" --ours-dtype float16 --cuda-graph-max-tokens 2048 \
      --output "$RESULTS/embeddings_h200_minilm_fp16.json" >> "$RESULTS/embed_gpu.log" 2>&1
  pack "minilm fp16 rc=$?"
  timeout 50 "$PYTHON" benchmarks/embeddings.py "${MINILM[@]}" \
      --output "$RESULTS/embeddings_h200_minilm_fp32.json" >> "$RESULTS/embed_gpu.log" 2>&1
  pack "minilm fp32 rc=$?"
else
  pack "minilm skipped: $MINILM_FILES/config.json missing (copy build/minilm-files to the GPU machine)"
fi

timeout $(( SECONDS < 560 ? 590 - SECONDS : 30 )) "$PYTHON" -m pytest -q -p no:cacheprovider tests/gpu > "$RESULTS/gpu_tests.txt" 2>&1
pack "gpu tests rc=$?: $(tail -1 "$RESULTS/gpu_tests.txt")"
grep -E "texts/s|GB/s" "$RESULTS"/*.log | tail -60
