#!/usr/bin/env bash
# [spec] speculative decoding on one H200, each part under its own time limit, continuing when one fails:
#   1. benchmarks/spec_decode.py --quick: Llama-3.1-8B dummy bf16 with a Llama-3.2-1B-shaped draft and
#      n-gram proposals (k = 4): tokens/s at 1 and 64 requests against none (adaptive policy), a long
#      64-request run (3 x 64 requests, fresh policy, no warm-up run), acceptance 1 forced at one request,
#      the per-step device-time profile, the host profile of spec_host_overhead.py and the step timeline of
#      spec_step_timeline.py on the same engine, and its per-step record at 64 requests (n-gram forced
#      on, then adaptive: rows, verify, graphed, cycle of every step); its JSON is rewritten after the
#      engine, so a timeout keeps what finished                                             <= 165 s
#      then targets.txt: (a) n-gram at acceptance 1, one request, >= 3x; (b) 64 requests adaptive >= 0.97x,
#      and the long rows' speculative steps from their per-step record (index, ms, steady)
#   2. tests/gpu/test_spec_gpu.py: greedy tokens identical with and without speculation with CUDA graphs
#      (n-gram, the target as its own draft, another draft), graphed = eager, seeded sampling
#      reproducible; SKIP_TESTS=1 leaves it out                                                <= 90 s
# Results: ONE tarball, $OUT/spec.tgz, with spec_decode_h200.json, gpu.txt, the logs and summary.txt.
# From the repository root on the GPU machine (wheels in .whl/ as for scripts/device/regression.sh):
#   bash scripts/device/spec_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run

cd benchmarks || exit 2
part spec_decode 165 python3 spec_decode.py --quick --output "$RES/spec_decode_h200.json"
cd .. || exit 2
python3 - "$RES/spec_decode_h200.json" > "$RES/targets.txt" 2>&1 <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in rows:
    a = r["concurrency"] == 1 and r.get("acceptance") == 1.0
    b = r["concurrency"] == 64 and r.get("adaptive") is None and r["mode"] != "off"
    if a or b:
        goal = 3.0 if a else 0.97
        print(f"{'(a)' if a else '(b)'} {r['proposer']:>6} c={r['concurrency']} long={r.get('long')} "
              f"speedup {r.get('speedup') or 0:.3f} (goal {goal}) steps {r['steps']} verifying {r['verifying_request_steps']}")
for r in rows:  # the long rows' learning: every speculative step, and the policy's verdict at 64
    if r.get("per_step"):
        spec = [(i, ms, steady) for i, (n, sp, steady, ms, t) in enumerate(r["per_step"]) if sp]
        print(f"long {r['proposer']}: {len(spec)} of {len(r['per_step'])} steps speculated "
              f"(index, ms, steady): {spec[:12]}{' ...' if len(spec) > 12 else ''}; "
              f"policy at 64: {(r.get('policy') or {}).get('64')}")
prof = json.load(open(sys.argv[1]))["step_profile_ms"].get("draft_small", {}).get("timeline_c64", {})
for label, t in prof.items():
    v = t.get("verify", {})
    print(f"c=64 {label}: {t.get('steps')} steps ({t.get('prompt_steps')} with prompt), verifying {v.get('steps')} "
          f"graphed share {v.get('graphed_share')} (goal 1.0) graphed cycle {v.get('graphed_cycle_ms')} ms "
          f"eager cycle {v.get('eager_cycle_ms')} ms")
PY
cat "$RES/targets.txt" >> "$RES/summary.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  part gpu_tests 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_spec_gpu.py
fi
cat "$RES/summary.txt"
tar -czf "$OUT/spec.tgz" -C "$RES" .
echo "packed $OUT/spec.tgz"
