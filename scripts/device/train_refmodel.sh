#!/usr/bin/env bash
# Train the built-in reference model (pydoc-qwen3) on one GPU and put the results under $OUT.
#
# Run from the repository root on the GPU machine, with the pre-tokenized corpus and the tokenizer
# (built on any machine by scripts/build_corpus.py and scripts/train_tokenizer.py; about 6 MB
# together) copied to .data/tokens and .data/tokenizer:
#
#   bash scripts/device/train_refmodel.sh
#
# Extra arguments go to scripts/train_reference_model.py (e.g. --max-seconds 200).
# Expected: about 4 to 5 minutes (240 s of training plus start, evaluation and samples).
# Writes (7 files, each under 16 MiB):
#   $OUT/train.log                 everything printed, one JSON line per logged step
#   $OUT/metrics.json              perplexities, unigram baseline, sweep, samples, timings
#   $OUT/model/config.json, generation_config.json,
#   $OUT/model/model-0000N-of-0000M.safetensors, model.safetensors.index.json
# Then, here: python scripts/install_reference_model.py --from <returned folder>
set -euo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-.}"
PYTHON="${PYTHON:-python3}"

for path in .data/tokens/train.bin .data/tokens/val.bin .data/tokens/meta.json .data/tokenizer/tokenizer.json; do
    [[ -f "$path" ]] || { echo "missing $path: copy .data/tokens and .data/tokenizer to this machine" >&2; exit 2; }
done
work="$(mktemp -d)"
"$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())' | tee "$OUT/train.log"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/train.log" || true

"$PYTHON" scripts/train_reference_model.py --device cuda --output-dir "$work" "$@" 2>&1 | tee -a "$OUT/train.log"

mkdir -p "$OUT/model"
cp "$work/metrics.json" "$OUT/"
cp "$work/model/config.json" "$work/model/generation_config.json" "$work"/model/*.safetensors "$OUT/model/"
if [[ -f "$work/model/model.safetensors.index.json" ]]; then
    cp "$work/model/model.safetensors.index.json" "$OUT/model/"
fi
too_big="$(find "$OUT" -type f -size +16M)"
if [[ -n "$too_big" ]]; then
    echo "files over 16 MiB will not come back: $too_big (lower --max-shard-size)" >&2
    exit 3
fi
ls -l "$OUT" "$OUT/model"
