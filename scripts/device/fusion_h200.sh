#!/usr/bin/env bash
# Decode kernels side by side on one H200: this tree against an older one, with the kernels of each decode
# graph (what a fusion removes and what it adds), and the GPU tests of the kernels and engine. Each part
# under a limit, continuing when one fails. Two calls fit the device's 10-minute limit:
#   PARTS=tests   bash scripts/device/fusion_h200.sh    GPU tests and kernel benchmarks (~8 min)
#   PARTS=decode  bash scripts/device/fusion_h200.sh    decode A/B, this tree against $BEFORE (~2.5 min)
# tests:
#   kernel_tests  tests/gpu/test_kernels_gpu.py (rotary + KV store against the two launches in a CUDA graph
#                 replayed on new inputs, ...), test_graphs_gpu.py, test_warmup_gpu.py      <= 200 s
#   engine_tests  tests/gpu/test_engine_gpu.py, test_families_gpu.py (bf16 against transformers)  <= 300 s
#   attention     benchmarks/attention_kernels.py --no-sweep (paged attention; rotary + store in one launch
#                 against two)                                                               <= 100 s
#   moe_kernels   benchmarks/moe_kernels.py at 1, 8 and 64 tokens (Qwen3-30B-A3B's experts)      <= 60 s
# decode: benchmarks/decode_latency.py --profile at batch 1 (kernels per replay) for Qwen3-30B-A3B,
#   Qwen3-0.6B and Llama-3.1-8B, dummy bf16, for each of SIDES ("after before"): `before` imports the
#   package from $BEFORE (default .ab/before: `git archive OLD model_optimizer ':!model_optimizer/assets'`
#   there, ignored by git, named in the device call's carry), so both sides run in one call <= 100 s each
# Results: ONE tarball, $OUT/fusion_$PARTS.tgz (JSON per part, side and model, logs, summary.txt, ab.txt).
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
PARTS=${PARTS:-tests}
BEFORE=${BEFORE:-.ab/before}

if [ "$PARTS" = tests ]; then
  part kernel_tests 200 python3 -m pytest -q -p no:cacheprovider --durations=8 tests/gpu/test_kernels_gpu.py \
    tests/gpu/test_graphs_gpu.py tests/gpu/test_warmup_gpu.py
  part engine_tests 300 python3 -m pytest -q -p no:cacheprovider --durations=8 tests/gpu/test_engine_gpu.py \
    tests/gpu/test_families_gpu.py
  part attention 100 python3 benchmarks/attention_kernels.py --no-sweep --output "$RES/attention_kernels_h200.json"
  part moe_kernels 60 python3 benchmarks/moe_kernels.py --models qwen3-30b-a3b --tokens 1 8 64 \
    --output "$RES/moe_kernels_h200.json"
else
  for model in qwen3-30b-a3b qwen3-0.6b llama-3.1-8b; do
    for side in ${SIDES:-after before}; do
      root=$PWD
      [ "$side" = before ] && root=$PWD/$BEFORE
      part "decode_${side}_$model" 100 env PYTHONPATH="$root:$PYTHONPATH" python3 benchmarks/decode_latency.py \
        --models "$model" --batch-sizes ${BATCHES:-1} --profile --output "$RES/decode_${side}_$model.json"
    done
  done
  python3 - "$RES" > "$RES/ab.txt" 2>&1 <<'PY'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
for f in sorted(res.glob("decode_*.json")):
    d = json.loads(f.read_text())
    for r in d["rows"]:
        print(f"{f.stem:36s} b{r['batch']:<3} {r['ms_per_step']:.3f} ms/step  graph {r['graph_ms']:.3f} ms")
    for name, ks in d.get("kernels", {}).items():
        launches = sum(k["calls_per_replay"] for k in ks)
        print(f"  {name}: {launches:.0f} launches per replay; " + ", ".join(
            f"{k['kernel'][:26]} {k['calls_per_replay']:.0f}x{k['us_per_call']:.1f}" for k in ks[:14]))
PY
  cat "$RES/ab.txt" >> "$RES/summary.txt"
fi
cat "$RES/summary.txt"
tar -czf "$OUT/fusion_$PARTS.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/fusion_$PARTS.tgz"
