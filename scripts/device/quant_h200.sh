#!/usr/bin/env bash
# Quantized kernels on one GPU: correctness tests, kernel timings at model shapes, decode per method.
# From the repository root on the GPU machine (with .whl/ holding wheels the machine lacks, as in
# regression.sh):
#   bash scripts/device/quant_h200.sh          tests + kernel benchmark + engine decode (~7 min)
#   bash scripts/device/quant_h200.sh sweep    tile sweep at decode shapes (to tune choose_tiles, ~3 min)
# Each part runs under its own timeout and writes into $OUT as soon as it finishes (the benchmarks
# rewrite their JSON after every case), so a part that fails or runs out of time costs only itself.
# A summary table comes last (also in $OUT/summary.txt).
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
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
    part gpu_tests 150 python3 -m pytest -q -p no:cacheprovider --junitxml="$OUT/gpu_tests.xml" \
      tests/gpu/test_quant_kernels_gpu.py
    part kernels 110 python3 benchmarks/quant_kernels.py --output "$OUT/quant_kernels.json"
    # the issue's targets first (int4 and fp8 against bf16 at batch 1): a timeout cuts int8 first
    part decode_llama 150 python3 benchmarks/decode_latency.py --models llama-3.1-8b \
      --quantization rtn-int4 fp8 none int8 --output "$OUT/decode_llama.json"
    part decode_qwen 60 python3 benchmarks/decode_latency.py --models qwen3-0.6b \
      --quantization rtn-int4 fp8 none int8 --output "$OUT/decode_qwen.json"
    ;;
  sweep)
    part sweep 400 python3 benchmarks/quant_kernels.py --models llama-3.1-8b --methods bf16 --m 1 8 --sweep \
      --output "$OUT/quant_sweep.json"
    ;;
  *) echo "usage: $0 [all|sweep]" >&2; exit 2 ;;
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
for name in ("quant_sweep.json",):
    if (out / name).exists():
        data = json.loads((out / name).read_text())
        for key in sorted({(r["kind"], r["linear"], r["m"]) for r in data.get("sweep", []) if "ms" in r}):
            group = [r for r in data["sweep"] if "ms" in r and (r["kind"], r["linear"], r["m"]) == key]
            best = min(group, key=lambda r: r["ms"])
            default = next((r for r in group if r["default"]), None)
            print(f"== sweep {key}: best {best['tiles']} {best['ms'] * 1e3:.1f} us; default "
                  + (f"{default['ms'] * 1e3:.1f} us" if default else "not timed"))
for name in ("decode_llama.json", "decode_qwen.json"):
    if (out / name).exists():
        rows = json.loads((out / name).read_text()).get("rows", [])
        print(f"== {name}: engine decode ms/step (forward graph ms), context 512")
        for r in rows:
            print(f"  {r['model']:13s} {r.get('quantization', 'none'):9s} batch {r['batch']:3d} "
                  f"{r['ms_per_step']:7.3f} ms ({r['graph_ms']:.3f}) {r['achieved_gbps']:6.0f} GB/s")
EOF
