#!/usr/bin/env bash
# Quantized inference on one H200: tile sweep, kernel timings, engine decode per method, fp8 throughput.
# From the repository root on the GPU machine (with .whl/ holding wheels the machine lacks, as in
# regression.sh):
#   bash scripts/device/quant_h200.sh          sweep + kernels, decode, throughput (~10 min: the sweep takes
#                                              up to SWEEP_LIMIT=400 s and keeps the shapes done when cut)
#   bash scripts/device/quant_h200.sh tests    tests/gpu for the quantized kernels and engine (~3 min)
#   bash scripts/device/quant_h200.sh summary  the summary table of what $OUT holds
# Order of `all`:
#   1. benchmarks/quant_kernels.py --sweep: every launch candidate per format, shape and row bucket
#      (compiled in parallel first, each checked against the dequantized product), the fastest per
#      case written to $OUT/quant_tiles.json; then the per-method linear timings with those tiles.
#   2. MOPT_QUANT_TILES=$OUT/quant_tiles.json from here on: engine decode ms/step at batch 1/8/64,
#      Llama-3.1-8B and Qwen3-0.6B, bf16 / fp8 / int8 / rtn-int4 (dummy weights, same W4A16 kernels as awq).
#   3. Offline throughput (nano-vllm's workload, Qwen3-0.6B): bf16, then fp8 weights + fp8 KV cache.
# Each part runs under its own timeout and writes into $OUT as soon as it finishes (the benchmarks
# rewrite their JSON after every case), so a part that fails or runs out of time costs only itself.
# A summary table comes last (also in $OUT/summary.txt). To keep the tuned tiles, commit
# $OUT/quant_tiles.json as model_optimizer/runtime/kernels/quant_tiles.json.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
if [ -z "${MOPT_SITE_READY:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then  # a caller that installed sets it
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1 COLUMNS=200 PYTHONPATH=".:${PYTHONPATH:-}" TRITON_DEFAULT_FP_FUSION=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true

part() {  # part NAME SECONDS COMMAND...: run one part under a timeout, log to $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "[$SECONDS s] $name: exit $rc after $((SECONDS - start)) s" | tee -a "$OUT/parts.txt"
}

case "${1:-all}" in
  all)
    part kernels "${SWEEP_LIMIT:-400}" python3 benchmarks/quant_kernels.py --sweep --tiles-output "$OUT/quant_tiles.json" \
      --m 1 8 64 --output "$OUT/quant_kernels.json"
    if [ -s "$OUT/quant_tiles.json" ]; then export MOPT_QUANT_TILES="$OUT/quant_tiles.json"; fi
    # the issue's targets first (int4 and fp8 against bf16): a timeout cuts int8 first
    part decode_llama 105 python3 benchmarks/decode_latency.py --models llama-3.1-8b \
      --quantization rtn-int4 fp8 none int8 --profile --output "$OUT/decode_llama.json"
    part decode_qwen 40 python3 benchmarks/decode_latency.py --models qwen3-0.6b \
      --quantization rtn-int4 fp8 none int8 --output "$OUT/decode_qwen.json"
    part throughput_bf16 45 python3 benchmarks/throughput.py --hf-requests 0 \
      --output "$OUT/throughput_bf16.json"
    part throughput_fp8 50 python3 benchmarks/throughput.py --hf-requests 0 --quantization fp8 \
      --kv-cache-dtype fp8 --output "$OUT/throughput_fp8.json"
    ;;
  tests)
    part gpu_tests 240 python3 -m pytest -q -p no:cacheprovider --junitxml="$OUT/gpu_tests.xml" \
      tests/gpu/test_quant_kernels_gpu.py tests/gpu/test_quant_engine_gpu.py
    ;;
  summary) ;;  # only the table below, of what $OUT holds
  *) echo "usage: $0 [all|tests|summary]" >&2; exit 2 ;;
esac

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path

out = Path(sys.argv[1])
print("== parts"); print((out / "parts.txt").read_text() if (out / "parts.txt").exists() else "none")
if (out / "gpu_tests.xml").exists():
    suite = ET.parse(out / "gpu_tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    print("== GPU tests:", {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")})
    for case in suite.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            print("  FAILED", case.get("name"), (bad.get("message") or "")[:300])
kernels = out / "quant_kernels.json"
if kernels.exists():
    data = json.loads(kernels.read_text())
    sweep = data.get("sweep", [])
    if sweep:
        bad = [r for r in sweep if "error" in r]
        print(f"== sweep: {len(sweep)} candidates timed, {len(bad)} rejected; compile errors: "
              f"{len(data.get('compile_errors', []))}; {data.get('sweep_s', 0):.0f} s")
        for r in bad[:8]:
            print(f"  rejected {r['kind']} {r['linear']} M={r['m']} {r['tiles']}: {r['error'][:150]}")
        for key in dict.fromkeys((r["model"], r["linear"], r["kind"], r["m"]) for r in sweep):
            group = [r for r in sweep if "ms" in r and (r["model"], r["linear"], r["kind"], r["m"]) == key]
            if not group:
                continue
            best = min(group, key=lambda r: r["ms"])
            default = next((r for r in group if r["default"]), None)
            t = best["tiles"]
            shape = "scaled_mm" if t["backend"] == "scaled_mm" else (
                f"m{t['block_m']} n{t['block_n']} k{t['block_k']} s{t['split_k']} w{t['num_warps']} st{t['num_stages']}"
                + ("" if t.get("planes", True) else " unpacked"))
            print(f"  {key[0]:13s} {key[1]:12s} {key[2]:4s} M={key[3]:<4d} best {best['ms'] * 1e3:7.1f} us "
                  f"{best['weight_gbps']:5.0f} GB/s [{shape}]; default "
                  + (f"{default['ms'] * 1e3:.1f} us" if default else "-"))
    for model, steps in data.get("per_step", {}).items():
        print(f"== {model}: linear ms per decode step (sum of one layer's linears x layers)")
        ms = sorted({r["m"] for r in steps})
        print("  method          " + "".join(f"M={m:<9d}" for m in ms))
        for method in dict.fromkeys(r["method"] for r in steps):
            cells = {r["m"]: r["ms_per_step"] for r in steps if r["method"] == method}
            print(f"  {method:15s} " + "".join(f"{cells[m]:<11.3f}" if m in cells else f"{'-':<11s}" for m in ms))
    rows = [r for r in data.get("rows", []) if r["m"] == 1]
    if rows:
        print("== M = 1: weight GB/s per linear")
        for r in rows:
            print(f"  {r['model']:13s} {r['linear']:13s} {r['method']:14s} {r['ms'] * 1e3:8.1f} us {r['weight_gbps']:6.0f} GB/s")
for name in ("decode_llama.json", "decode_qwen.json"):
    if (out / name).exists():
        rows = json.loads((out / name).read_text()).get("rows", [])
        print(f"== {name}: engine decode ms/step (forward graph ms), context 512")
        for r in rows:
            print(f"  {r['model']:13s} {r.get('quantization', 'none'):9s} batch {r['batch']:3d} "
                  f"{r['ms_per_step']:7.3f} ms ({r['graph_ms']:.3f}) {r['achieved_gbps']:6.0f} GB/s")
tput = {}
for name in ("bf16", "fp8"):
    path = out / f"throughput_{name}.json"
    if path.exists():
        ours = json.loads(path.read_text()).get("ours", {})
        if ours:
            tput[name] = ours.get("output_tok_per_s")
            print(f"== throughput {name}: {tput[name]:.0f} output tok/s, {ours.get('seconds', 0):.1f} s, "
                  f"{ours.get('num_kv_blocks')} KV blocks, {ours.get('preemptions')} preemptions")
if len(tput) == 2 and tput["bf16"]:
    print(f"== throughput fp8 (weights + KV) / bf16: {tput['fp8'] / tput['bf16']:.3f}x (target >= 1.15x)")
EOF
