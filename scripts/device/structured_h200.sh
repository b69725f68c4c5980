#!/usr/bin/env bash
# [structured] figures and GPU tests on one H200 (~7 min; limits add up to 550 s), each part under a limit:
#   0. the 151k-token byte-level BPE tokenizer of Qwen3-0.6B's config (bpe_tokenizer_model.py), once  <= 90 s
#   1. benchmarks/structured.py: `mopt serve` on Qwen3-0.6B dummy bf16 with that tokenizer; `mopt bench`
#      at concurrency 1 and 64, unconstrained vs --json-schema: TPOT ratio (target <= 1.1 at 64), the
#      mask's host time per masked step and the part the step loop waited for (server counters), a
#      jsonschema-checked sample, the in-process per-step mask time at 1 and 64 rows          <= 240 s
#   2. benchmarks/structured_mask.py: 64 rows walking the same schema, per-step mask fill per way of
#      filling (rows one by one + lane bound, one shared lexer vs lanes, pools of 4/8/12/14 threads,
#      4 lanes per thread): whether MAX_FILL_THREADS (8) should rise on the host's 16 cores   <= 120 s
#   3. tests/gpu/test_structured_gpu.py: fused kernel mask vs torch, a split launch with no sync,
#      constrained generation with CUDA graphs (sync and async scheduling)               <= 100 s
# Everything (JSON, logs, summary.txt) is packed into ONE tarball, $OUT/structured.tgz.
# The GPU machine lacks llguidance (and maybe fastapi/uvicorn/pydantic/msgspec/pyzmq/jsonschema):
# put their cp312 wheels in .whl/ (llguidance-1.9.1-cp39-abi3-manylinux_2_31_x86_64.whl is in
# /tmp/grammar/wheels312/), then from the repository root:
#   bash scripts/device/structured_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
QWEN=(--load-format dummy --dtype bfloat16)
python3 -c "import llguidance; print('llguidance', llguidance.__version__)" > "$RES/llguidance.txt" 2>&1 \
  || echo "llguidance missing: put its wheel in .whl/" | tee -a "$RES/summary.txt"

MODEL=$(mktemp -d)
cd benchmarks || exit 2
part bpe_tokenizer 90 python3 bpe_tokenizer_model.py configs/qwen3-0.6b "$MODEL"
part structured_bench 240 python3 structured.py --model "$MODEL" --concurrency 1 64 \
  --output-len 256 --output "$RES/structured_h200.json" -- "${QWEN[@]}"
part structured_mask 120 python3 structured_mask.py --model "$MODEL" --rows 64 --steps 200 \
  --threads 4 8 12 14 --lanes-per-thread 4 --output "$RES/structured_mask_h200.json"
cd .. || exit 2
rm -rf "$MODEL"
part gpu_tests 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_structured_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/structured.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/structured.tgz"
