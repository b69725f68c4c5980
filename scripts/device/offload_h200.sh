#!/usr/bin/env bash
# [offload] weight offload (--cpu-offload-gb), the host KV tier and swap preemption on one H200, each part
# under its own limit (<= ~300 s in all):
#   1. tests/gpu/test_offload_gpu.py: greedy identical with and without offload, CUDA graphs on (bf16,
#      int8, rtn-int4 on a 6-layer tiny Qwen3; Qwen3-0.6B-shaped dummy), the KV room, the host KV tier,
#      --preemption-mode swap; test_offload_interactions_gpu.py: quantized offloaded layers with graphs,
#      seeded n + logprobs, a host slot filled twice in a step, fp8 KV through the tier, page-lock failure <= 150 s
#   2. benchmarks/offload.py: Llama-3.1-8B dummy bf16, 8 GiB offloaded, decode ms/step at batch 1 and 32
#      against the bound (on-GPU step + offloaded bytes / measured host-to-device GB/s); JSON
#      rewritten after each engine, so a timeout keeps what finished                       <= what is left of 165 s
#   3. benchmarks/host_kv_tier.py: Llama-3.1-8B dummy bf16, GPU pool forced to 386 blocks, 6 GiB host tier:
#      TTFT of a 4k-token prefix recomputed, hit on the GPU, hit in host memory (target: host <= 0.5 x
#      recompute), with the counters that prove each path; JSON rewritten after each repeat   <= 130 s
# Results: ONE tarball, $OUT/offload.tgz, with offload_h200.json, host_kv_tier_h200.json, gpu.txt, the logs
# and summary.txt.
# From the repository root on the GPU machine (wheels in .whl/ as for scripts/device/regression.sh):
#   bash scripts/device/offload_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run

part gpu_tests 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_offload_gpu.py tests/gpu/test_offload_interactions_gpu.py
LEFT=$((165 - SECONDS))
cd benchmarks || exit 2
part offload_bench "$LEFT" python3 offload.py --output "$RES/offload_h200.json"
part host_kv_tier_bench 130 python3 host_kv_tier.py --output "$RES/host_kv_tier_h200.json"
cd .. || exit 2
cat "$RES/summary.txt"
tar -czf "$OUT/offload.tgz" -C "$RES" .
echo "packed $OUT/offload.tgz"
