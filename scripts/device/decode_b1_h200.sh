#!/usr/bin/env bash
# Batch-1 decode on one H200: kernel sweeps, GPU tests, and decode with each graph's kernels (what a
# fusion removes and adds), this tree against an older one ($BEFORE, default .ab/before:
# `git archive OLD model_optimizer ':!model_optimizer/assets' | tar -x -C .ab/before`, ignored by git,
# named in the call's carry).
# PARTS (space-separated, default "grid moe_sweep kernel_tests") picks among:
#   grid          benchmarks/attention_kernels.py --decode-grid (batch 1 and 8, contexts 512 and 2048, three
#                 models' head shapes, every split count, two key tiles), for each of SIDES      <= 150 s each
#   moe_sweep     benchmarks/moe_kernels.py --sweep at one token for Qwen3-30B-A3B, DeepSeek-V2-Lite and
#                 Mixtral-8x7B -> moe_tiles_one_token.json, then the fused kernel at 1 and 8 tokens <= 150 s
#   norm_route    benchmarks/norm_route.py: a sparse layer's norm + router + routing in one launch at each
#                 launch shape against the three launches; exports the best at Qwen3-30B-A3B's one row
#                 as MOPT_NORM_ROUTE_TILES for the parts after it                                  <= 150 s
#   kernel_tests  tests/gpu/test_kernels_gpu.py, test_graphs_gpu.py, test_warmup_gpu.py             <= 200 s
#   engine_tests  tests/gpu/test_engine_gpu.py, test_families_gpu.py (bf16 against transformers)    <= 540 s
#                 (a fresh machine compiles every family's kernels: 13 of 35 tests fit in 300 s)
#   attention     benchmarks/attention_kernels.py --no-sweep (paged attention; rotary + store in one launch
#                 against two)                                                                    <= 100 s
#   moe_kernels   benchmarks/moe_kernels.py at 1, 8 and 64 tokens (Qwen3-30B-A3B's experts)           <= 60 s
#   decode        benchmarks/decode_latency.py --profile at batch 1 for DECODE_MODELS (default Qwen3-30B-A3B,
#                 Qwen3-0.6B, Llama-3.1-8B), for each of SIDES (default "after before"; "after2 before2" repeat;
#                 another NAME runs the tree in .ab/NAME),
#                 then ab.txt: ms/step, graph ms and the launches of each side's decode graph          <= 100 s each
#   sampler_tests tests/gpu/test_nonfinite_gpu.py, test_perf_gpu.py, test_structured_gpu.py          <= 200 s
#   quick_tests   tests/gpu/test_nonfinite_gpu.py, test_sampling_gpu.py and the MoE routing tests of
#                 test_families_gpu.py (norm + router launch, Qwen3-MoE and Mixtral against transformers) <= 300 s
#   pyspy         py-spy (threads, idle, raw stacks) over Qwen3-0.6B batch-1 decode of 3,000 steps: the host's
#                 share of a step                                                                 <= 150 s
#   affinity      Qwen3-0.6B batch 1 with the process on the GPU's own NUMA node's cores, then on the other
#                 node's (taskset; the node from /sys, nvidia-smi topo -m logged), twice each: is the
#                 host's jitter (ms/step 0.94-1.25 over one 0.84 ms graph) where the process runs?  <= 200 s
# The GPU tests stop a test after 240 s (pytest-timeout, from .whl) with every thread's stack in the log.
# MOPT_MOE_TILES, when set, applies to every part. Results: ONE tarball, $OUT/decode_b1.tgz.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
PARTS=" ${PARTS:-grid moe_sweep kernel_tests} "
BEFORE=${BEFORE:-.ab/before}
SIDES=${SIDES:-after before}
root_of() {  # a side's tree: after = this one, before = $BEFORE, NAME = .ab/NAME; a trailing 2 repeats a side
  case ${1%2} in after) echo "$PWD" ;; before) echo "$PWD/$BEFORE" ;; *) echo "$PWD/.ab/${1%2}" ;; esac
}

if [[ $PARTS == *" grid "* ]]; then
  for side in $SIDES; do
    part "grid_$side" 150 env PYTHONPATH="$(root_of "$side"):$PYTHONPATH" python3 benchmarks/attention_kernels.py \
      --decode-grid --output "$RES/attention_grid_$side.json"
    grep -E "^heads" "$RES/grid_$side.log" | sed "s/^/$side /" >> "$RES/summary.txt"
  done
fi
if [[ $PARTS == *" moe_sweep "* ]]; then
  part moe_sweep 150 python3 benchmarks/moe_kernels.py --sweep --sweep-tokens 1 --tokens 1 8 \
    --models qwen3-30b-a3b deepseek-v2-lite mixtral-8x7b --tiles-output "$RES/moe_tiles_one_token.json" \
    --output "$RES/moe_kernels_one_token_h200.json"
  grep -E "tokens:" "$RES/moe_sweep.log" >> "$RES/summary.txt"
fi
if [[ $PARTS == *" norm_route "* ]]; then
  part norm_route 150 python3 benchmarks/norm_route.py --output "$RES/norm_route_h200.json"
  grep -E "rows" "$RES/norm_route.log" >> "$RES/summary.txt"
  BEST=$(sed -n 's/^qwen3-30b-a3b rows 1: .* fused best \([0-9,]*\) .*/\1/p' "$RES/norm_route.log")
  [ -n "$BEST" ] && export MOPT_NORM_ROUTE_TILES=$BEST && echo "MOPT_NORM_ROUTE_TILES=$BEST" >> "$RES/summary.txt"
fi
if [[ $PARTS == *" kernel_tests "* ]]; then
  part kernel_tests 200 python3 -m pytest -q -p no:cacheprovider --durations=5 tests/gpu/test_kernels_gpu.py \
    tests/gpu/test_graphs_gpu.py tests/gpu/test_warmup_gpu.py
fi
if [[ $PARTS == *" engine_tests "* ]]; then
  part engine_tests 540 python3 -m pytest -q -p no:cacheprovider --timeout 240 --timeout-method=thread \
    --durations=5 tests/gpu/test_engine_gpu.py \
    tests/gpu/test_families_gpu.py
fi
if [[ $PARTS == *" attention "* ]]; then
  part attention 100 python3 benchmarks/attention_kernels.py --no-sweep --output "$RES/attention_kernels_h200.json"
fi
if [[ $PARTS == *" moe_kernels "* ]]; then
  part moe_kernels 60 python3 benchmarks/moe_kernels.py --models qwen3-30b-a3b --tokens 1 8 64 \
    --output "$RES/moe_kernels_h200.json"
fi
if [[ $PARTS == *" decode "* ]]; then
  for model in ${DECODE_MODELS:-qwen3-30b-a3b qwen3-0.6b llama-3.1-8b}; do
    for side in $SIDES; do
      part "decode_${side}_$model" 100 env PYTHONPATH="$(root_of "$side"):$PYTHONPATH" python3 \
        benchmarks/decode_latency.py --models "$model" --batch-sizes ${BATCHES:-1} --profile \
        --output "$RES/decode_${side}_$model.json"
      grep -E "ms/step" "$RES/decode_${side}_$model.log" | sed "s/^/$side /" >> "$RES/summary.txt"
    done
  done
  decode_table "$RES" > "$RES/ab.txt" 2>&1
  cat "$RES/ab.txt" >> "$RES/summary.txt"
fi
if [[ $PARTS == *" sampler_tests "* ]]; then
  part sampler_tests 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_nonfinite_gpu.py \
    tests/gpu/test_perf_gpu.py tests/gpu/test_structured_gpu.py
fi
if [[ $PARTS == *" quick_tests "* ]]; then
  part quick_tests 300 python3 -m pytest -q -p no:cacheprovider --timeout 240 --timeout-method=thread \
    --durations=5 tests/gpu/test_nonfinite_gpu.py \
    tests/gpu/test_sampling_gpu.py tests/gpu/test_families_gpu.py -k "not test_bf16_agrees or qwen3_moe"
fi
if [[ $PARTS == *" pyspy "* ]]; then  # where the host's time per step goes at batch 1 (Qwen3-0.6B: ms/step > graph)
  export PATH=/tmp/site/bin:$PATH
  part pyspy 150 py-spy record --threads --idle --format raw --rate 500 -o "$RES/decode_qwen3_0.6b_b1.pyspy.txt" -- \
    python3 benchmarks/decode_latency.py --models qwen3-0.6b --batch-sizes 1 --decode-steps 3000 \
    --output "$RES/decode_pyspy_qwen3-0.6b.json"
  grep -E "ms/step" "$RES/pyspy.log" | sed "s/^/pyspy /" >> "$RES/summary.txt"
fi
if [[ $PARTS == *" affinity "* ]]; then
  nvidia-smi topo -m > "$RES/topo.txt" 2>&1
  bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-Z' 'a-z')
  bus="0000:${bus#*:}"  # nvidia-smi's 8-digit PCI domain, sysfs's 4
  node=$(cat "/sys/bus/pci/devices/$bus/numa_node" 2>/dev/null || echo -1)
  echo "GPU $bus on NUMA node $node; nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | xargs -n1 basename)" \
    | tee -a "$RES/summary.txt"
  for other in /sys/devices/system/node/node*; do
    cpus=$(cat "$other/cpulist"); name=$(basename "$other")
    [ "$name" = "node$node" ] && side=local || side=remote
    for round in 1 2; do
      part "affinity_${side}_${name}_r$round" 100 taskset -c "$cpus" python3 benchmarks/decode_latency.py \
        --models qwen3-0.6b --batch-sizes 1 --output "$RES/decode_affinity_${side}_${name}_r$round.json"
      grep -E "ms/step" "$RES/affinity_${side}_${name}_r$round.log" | sed "s/^/$side $name cpus $cpus r$round /" \
        >> "$RES/summary.txt"
    done
  done
fi
cat "$RES/summary.txt"
tar -czf "$OUT/decode_b1.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/decode_b1.tgz"
