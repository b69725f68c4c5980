#!/usr/bin/env bash
# [kernels] / [archs]: fewer launches per decode layer (the split-KV merge inside paged attention, the
# KV store inside the rotary kernel, the MoE's sum over k inside the down GEMM), on one H200, each part
# under a limit, continuing when one fails:
#   gpu_tests   the GPU tests of the kernels these touch (fused vs unfused and the references, CUDA-graph
#               replays on new inputs)                                                       <= 200 s
#   attention   benchmarks/attention_kernels.py --no-sweep: the paged-attention kernel's times with the
#               split-KV merge inside the launch                                             <= 120 s
#   moe_tests   tests/gpu/test_families_gpu.py's MoE tests (the sum over k inside the down GEMM, bit-equal
#               to the separate launch in a graph replayed on new routes; bf16 against transformers) <= 150 s
#   moe_compile the summing GEMM compiles for sm_90 (acq_rel atomic, .cg loads, barrier)      <= 60 s
#   moe_kernels benchmarks/moe_kernels.py: fused_ms (separate sum) vs fused_local_ms (sum in the GEMM) <= 60 s
#   decode_*    benchmarks/decode_latency.py --profile at batch 1 (kernels per replay): Qwen3-30B-A3B,
#               Qwen3-0.6B and Llama-3.1-8B, dummy bf16; with SIDES="after before" also the tree in
#               $BEFORE (default .ab/before: `git archive OLD model_optimizer` there, the folder named
#               in the device call's carry) in the same run, for a side-by-side ratio        <= 150 s each
# Results: ONE tarball, $OUT/fusion.tgz (JSON per side and model, logs, summary.txt).
#   SIDES="after" bash scripts/device/fusion_h200.sh           # tests + the new tree
#   SKIP_PARTS=gpu_tests SIDES="before after" bash scripts/device/fusion_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
BEFORE=${BEFORE:-.ab/before}

part gpu_tests 200 python3 -m pytest -q -p no:cacheprovider --durations=8 tests/gpu/test_kernels_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_warmup_gpu.py ${EXTRA_TESTS:-}
part attention 120 python3 benchmarks/attention_kernels.py --no-sweep --output "$RES/attention_kernels.json"
part moe_tests 150 python3 -m pytest -q -p no:cacheprovider --durations=8 tests/gpu/test_families_gpu.py \
  -k "moe or mixtral or fused or down_gemm"
part moe_compile 60 python3 -m pytest -q -p no:cacheprovider tests/runtime/kernels/test_moe_compile_sm90.py
part moe_kernels 60 python3 benchmarks/moe_kernels.py --models qwen3-30b-a3b --tokens 1 8 64 \
  --output "$RES/moe_kernels_combine_h200.json"
for side in ${SIDES:-after}; do
  root=$PWD
  [ "$side" = before ] && root=$PWD/$BEFORE
  for model in qwen3-30b-a3b qwen3-0.6b llama-3.1-8b; do
    part "decode_${side}_$model" 150 env PYTHONPATH="$root:$PYTHONPATH" python3 benchmarks/decode_latency.py \
      --models "$model" --batch-sizes ${BATCHES:-1} --profile --output "$RES/decode_${side}_$model.json"
  done
done
python3 - "$RES" > "$RES/ab.txt" 2>&1 <<'PY'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
for f in sorted(res.glob("decode_*.json")):
    d = json.loads(f.read_text())
    for r in d["rows"]:
        print(f"{f.stem:40s} b{r['batch']:<3} {r['ms_per_step']:.3f} ms/step  graph {r['graph_ms']:.3f} ms")
    for name, ks in d.get("kernels", {}).items():
        launches = sum(k["calls_per_replay"] for k in ks)
        print(f"  {name}: {launches:.0f} launches per replay; " + ", ".join(
            f"{k['kernel'][:28]} {k['calls_per_replay']:.0f}x{k['us_per_call']:.1f}" for k in ks[:12]))
PY
cat "$RES/ab.txt" | tee -a "$RES/summary.txt"
tar -czf "$OUT/fusion.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/fusion.tgz"
