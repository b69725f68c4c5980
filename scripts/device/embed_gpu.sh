#!/usr/bin/env bash
# Embeddings on one GPU (issue 5): the GPU embed tests, then benchmarks/embeddings.py for the
# Qwen3-Embedding-0.6B shape (random bf16) and all-MiniLM-L6-v2 (random fp32), each against
# sentence-transformers on the same weights. Results under $OUT. Bounded: under 4 minutes in all.
#
# Here, once (MiniLM's config/tokenizer files, 0.7 MB; the 90 MB checkpoint is not needed):
#   .venv/bin/python benchmarks/embeddings.py --save-minilm-files build/minilm-files
# On the GPU machine, from the repository root:
#   carry: build/minilm-files
#   command: bash scripts/device/embed_gpu.sh
# Without build/minilm-files the MiniLM part is skipped (and says so).
#
# Expected: about 3.5 minutes (tests <= 85 s, qwen3 <= 115 s, MiniLM <= 35 s, each under its own timeout).
# Writes:
#   $OUT/gpu.txt                     GPU name, driver, memory
#   $OUT/embed_gpu_tests.txt         pytest output of tests/embed/test_gpu.py
#   $OUT/embeddings_h200_qwen3.json  batch 1, 64, 512 x length 16, 128, 512, mixed (16..512); points of <= 8192
#                                    tokens also timed with CUDA graphs (ours_cuda_graphs, speedup_cuda_graphs)
#   $OUT/embeddings_h200_minilm.json the same grid, MiniLM random fp32
#   $OUT/profile_qwen3_b{1,64,512}_L16.txt, profile_qwen3_b512_L512.txt  torch.profiler tables of one call
#                                    (top ops by host time and by GPU time)
#   $OUT/embed_gpu.log               everything the benchmarks printed
# Each JSON is rewritten after every point ("complete": false until the end), so a timeout keeps what was measured.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
mkdir -p "$OUT"
export COLUMNS=200 PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PYTHON="${PYTHON:-python3}"
MINILM_FILES="${MINILM_FILES:-build/minilm-files}"
GRID=(--device cuda --batch-sizes 1,64,512 --lengths 16,128,mixed,512 --min-seconds 0.3 --min-rounds 3)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true

timeout 85 "$PYTHON" -m pytest -q -p no:cacheprovider --durations=8 tests/embed/test_gpu.py > "$OUT/embed_gpu_tests.txt" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -E "passed|failed|error|skipped" "$OUT/embed_gpu_tests.txt" | tail -1)" | tee "$OUT/embed_gpu.log"

timeout 115 "$PYTHON" benchmarks/embeddings.py --models qwen3 "${GRID[@]}" --cuda-graph-max-tokens 8192 \
    --profile 1x16,64x16,512x16,512x512 \
    --output "$OUT/embeddings_h200_qwen3.json" >> "$OUT/embed_gpu.log" 2>&1
echo "qwen3 rc=$? at ${SECONDS}s" | tee -a "$OUT/embed_gpu.log"

if [[ -f "$MINILM_FILES/config.json" ]]; then
    timeout 35 "$PYTHON" benchmarks/embeddings.py --models minilm --minilm-random --minilm-files "$MINILM_FILES" "${GRID[@]}" \
        --output "$OUT/embeddings_h200_minilm.json" >> "$OUT/embed_gpu.log" 2>&1
    echo "minilm rc=$? at ${SECONDS}s" | tee -a "$OUT/embed_gpu.log"
else
    echo "minilm skipped: $MINILM_FILES/config.json missing (carry build/minilm-files)" | tee -a "$OUT/embed_gpu.log"
fi
grep -E "texts/s|x[0-9]" "$OUT/embed_gpu.log" | tail -30
