#!/usr/bin/env bash
# The [kernels] issue on one H200, within ~8 minutes; everything lands in ONE tarball, $OUT/kernels.tgz.
# From the repository root on the GPU machine (pip packages the machine lacks installed beforehand):
#   bash scripts/device/kernels_h200.sh
# Parts, each under its own timeout (a part that fails or runs out of time costs only itself; the
# benchmarks rewrite their JSON after every case, so a cut part keeps what it finished):
#   1. sweep   benchmarks/quant_kernels.py --sweep: every launch candidate (CUDA-core GEMV, tensor-core
#              tiles, W8A8, dequantize + dense matmul) per format, Llama-3.1-8B / Qwen3-0.6B linear shape
#              and M = 1, 2, 4, ... 256, checked against the dequantized product, timed as GPU time from
#              CUDA-graph replays; the fastest per case -> $W/quant_tiles.json (commit it as
#              model_optimizer/runtime/kernels/quant_tiles.json). Then per-method timings with that table.
#   2. tests   the GPU tests this work added or touched (exact widening of every code, W8A8, the dequant
#              backend, CUDA graphs, engine decode per method, the fused element-wise kernels).
#   3. decode  benchmarks/decode_latency.py with the new table: Llama-3.1-8B bf16 / fp8 / int8 / rtn-int4 at
#              batch 1 / 8 / 64 / 256 (with each decode graph's kernels), Qwen3-0.6B bf16 at batch 1 / 64.
#   4. aot     `mopt compile-cache build` for Qwen3-0.6B with the GPU hidden (CUDA_VISIBLE_DEVICES=): the kernels of
#              a start compiled ahead of time for sm_90; then one LLM(...) start from a copy of that folder
#              (benchmarks/cold_start.py --shipped-cache): its start-up time and the kernels it still compiled
#              (what the build missed; 0 expected) in cold_start_shipped.json.
#   5. sass    benchmarks/quant_sass.py: the static SASS cost of the candidates (CPU only; here for the record).
# Triton's cache is one folder for parts 1-3, so the sweep's parallel compiles serve the tests and engines.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives kernels.tgz}"
W=${W:-/tmp/kernels_h200}
BUDGET=${BUDGET:-540}
rm -rf "$W" && mkdir -p "$W"
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 TRITON_DEFAULT_FP_FUSION=1
export PYTHONPATH="$PWD:${PYTHONPATH:-}" TRITON_CACHE_DIR="$W/triton_cache"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$W/gpu.txt" 2>&1 || true
git log --oneline -1 > "$W/commit.txt" 2>&1 || true

log() { echo "[$SECONDS s] $*" | tee -a "$W/parts.txt"; }
part() {  # part NAME SECONDS COMMAND...: capped by what is left of BUDGET, skipped under 15 s
  local name=$1 limit=$2 room=$((BUDGET - SECONDS))
  shift 2
  if [ "$room" -lt 15 ]; then log "$name skipped (time)"; return; fi
  [ "$limit" -gt "$room" ] && limit=$room
  timeout "$limit" "$@" > "$W/$name.log" 2>&1
  log "$name exit $? ($limit s allowed)"
}

# 4a, on one CPU core beside the GPU parts: the build sees no GPU and the sweep's table (the table changes
# which kernels a start compiles: the build and the start below both read the packaged one)
QWEN=(--model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16)
(env -u MOPT_QUANT_TILES CUDA_VISIBLE_DEVICES= timeout 400 python3 -m model_optimizer.cli.main compile-cache build \
  "${QWEN[@]}" --output "$W/aot_cache" > "$W/aot_build.log" 2>&1; echo "[$SECONDS s] aot_build exit $?" >> "$W/parts.txt") &
AOT_PID=$!
part sweep 200 python3 benchmarks/quant_kernels.py --sweep --m 1 2 4 8 16 32 64 128 256 \
  --tiles-output "$W/quant_tiles.json" --output "$W/quant_kernels.json"
[ -s "$W/quant_tiles.json" ] && export MOPT_QUANT_TILES="$W/quant_tiles.json"
part tests 100 python3 -m pytest -q -p no:cacheprovider --junitxml="$W/gpu_tests.xml" \
  tests/gpu/test_quant_kernels_gpu.py tests/gpu/test_quant_engine_gpu.py tests/gpu/test_fused_ops_gpu.py
part decode_llama 140 python3 benchmarks/decode_latency.py --models llama-3.1-8b \
  --quantization rtn-int4 fp8 none int8 --batch-sizes 1 8 64 256 --profile --output "$W/decode_llama.json"
part decode_qwen 40 python3 benchmarks/decode_latency.py --models qwen3-0.6b --batch-sizes 1 64 --profile \
  --output "$W/decode_qwen.json"
wait "$AOT_PID"  # the ahead-of-time build, started in the background at the beginning
[ -f "$W/aot_cache/aot_manifest.json" ] && cp "$W/aot_cache/aot_manifest.json" "$W/aot_manifest.json"
[ -f "$W/aot_cache/aot_manifest.json" ] && part aot_start 60 env -u MOPT_QUANT_TILES python3 benchmarks/cold_start.py --no-serve --runs 1 \
  --shipped-cache "$W/aot_cache" --shipped-only --no-tokenizer --cache-dir "$W/cold_start_caches" \
  --output "$W/cold_start_shipped.json" -- "${QWEN[@]}"
rm -rf "$W/cold_start_caches" "$W/aot_cache"
BUDGET=$((BUDGET + 60)) part sass 60 python3 benchmarks/quant_sass.py --output "$W/quant_sass_sm90.json"

python3 - "$W" <<'EOF' > "$W/summary.txt" 2>&1
import json, sys
from pathlib import Path

w = Path(sys.argv[1])
print((w / "parts.txt").read_text() if (w / "parts.txt").exists() else "no parts")
table = w / "quant_tiles.json"
if table.exists():
    data = json.loads(table.read_text())
    print(f"== tile table: {len(data['entries'])} entries")
    for key, us in sorted(data.get("us", {}).items()):
        t = data["entries"][key]
        kind = t["backend"] if t["backend"] != "triton" else ("w8a8" if t.get("w8a8") else ("gemv" if t["block_m"] == 1 else "mma"))
        print(f"  {key:24s} {us:8.1f} us  {kind:9s} m{t['block_m']} n{t['block_n']} k{t['block_k']} s{t['split_k']} w{t['num_warps']} st{t['num_stages']}")
for name in ("decode_llama.json", "decode_qwen.json"):
    if (w / name).exists():
        print(f"== {name}: ms/step (forward graph ms)")
        for r in json.loads((w / name).read_text()).get("rows", []):
            print(f"  {r['model']:13s} {r.get('quantization', 'none'):9s} batch {r['batch']:3d} "
                  f"{r['ms_per_step']:7.3f} ms ({r['graph_ms']:.3f}) {r['achieved_gbps']:6.0f} GB/s")
kernels = w / "quant_kernels.json"
if kernels.exists():
    for model, steps in json.loads(kernels.read_text()).get("per_step", {}).items():
        print(f"== {model}: linear ms per decode step (one layer's linears x layers)")
        for r in steps:
            print(f"  {r['method']:14s} M={r['m']:<4d} {r['ms_per_step']:8.3f}")
shipped = w / "cold_start_shipped.json"
if shipped.exists():
    runs = json.loads(shipped.read_text()).get("llm", {}).get("shipped", {}).get("runs", [])
    for r in runs:
        print(f"== LLM start from the ahead-of-time cache: {r['ready_s']:.2f} s, compiled at start: {r['compiled']}")
EOF
tar czf "$OUT/kernels.tgz" -C "$W" --exclude triton_cache .
log "packed $OUT/kernels.tgz"
