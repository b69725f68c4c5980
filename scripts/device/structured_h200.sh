#!/usr/bin/env bash
# [structured] the c=64 TPOT ratio and where a masked step's time goes, on one H200 (~5 min; limits add up
# to 600 s, the parts usually take ~260 s), each part under a limit:
#   0. the 151k-token byte-level BPE tokenizer of Qwen3-0.6B's config (bpe_tokenizer_model.py), once  <= 60 s
#   1. benchmarks/structured_step_host.py --full: Qwen3-0.6B (bf16, dummy weights) in process, 64 rows
#      decoding, unconstrained vs the order schema: per step, the loop thread's phases (schedule,
#      prepare, launch, collect, update, take, fill start, mask wait, sample, other), the step's length
#      (its ratio is the masked step's cost without prefills), and the mask chain: `lead` (tokens on
#      the host -> the fill running) and `fill_thread` (the masks' computing)                  <= 120 s
#   2. benchmarks/structured.py at c=64: `mopt serve` + `mopt bench`, unconstrained vs --json-schema,
#      and unconstrained again with the structured run's own output lengths (tpot_ratio_matched_lengths:
#      new requests join at the same rate in both), three alternating pairs of those two (their median
#      ratio: one pair moves by ~0.2x between runs on this host); the server's grammar counters  <= 150 s
#   3. the same with --schema order-unbounded (no maxLength: every string mask the cheap one a real model
#      mostly meets): the engine's mask chain apart from llguidance's walk under a bound        <= 150 s
#   4. tests/gpu/test_structured_gpu.py: fused kernel mask vs torch, a split launch with no sync,
#      constrained generation with CUDA graphs (sync and async scheduling); with the sampler's and
#      the graphs' GPU tests                                                                  <= 180 s
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
part bpe_tokenizer 60 python3 bpe_tokenizer_model.py configs/qwen3-0.6b "$MODEL"
part step_host 120 python3 structured_step_host.py --full --rows 64 --tokens 128 --label h200 \
  --output "$RES/structured_step_host_h200.json"
part structured_bench 150 python3 structured.py --model "$MODEL" --concurrency 64 --output-len 256 \
  --offline-steps 100 --repeats 3 --output "$RES/structured_h200.json" -- "${QWEN[@]}"
part structured_unbounded 150 python3 structured.py --model "$MODEL" --schema order-unbounded \
  --concurrency 64 --output-len 256 --offline-steps 100 --repeats 3 --output "$RES/structured_unbounded_h200.json" -- "${QWEN[@]}"
cd .. || exit 2
rm -rf "$MODEL"
part gpu_tests 180 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_structured_gpu.py \
  tests/gpu/test_sampling_gpu.py tests/gpu/test_graphs_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/structured.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/structured.tgz"
