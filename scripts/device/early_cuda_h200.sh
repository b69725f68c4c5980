#!/usr/bin/env bash
# The CUDA context made during the core's imports (runtime/cuda_context.py), on one H200, and the GPU tests
# of the paths the decode graphs' sampling changed. ONE tarball, $OUT/early_cuda.tgz:
#   warm      `mopt serve` (Qwen3-0.6B dummy) to /ready from one warm Triton cache (the first run fills it),
#             MOPT_EARLY_CUDA=1 then 0, ROUNDS times alternated (default 2), two measured starts each;
#             then each start's phase lines side by side                                   <= 90 s a run
#   tests     TESTS (default: the early context, sampling, graphs, non-finite logits, speculative
#             decoding, structured outputs, prompt logprobs), 240 s a test                   <= 420 s
# PARTS (default "warm tests") picks among them.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
PARTS=" ${PARTS:-warm tests} "
ROUNDS=${ROUNDS:-2}
TESTS=${TESTS:-tests/gpu/test_cuda_context_gpu.py tests/gpu/test_sampling_gpu.py tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_nonfinite_gpu.py tests/gpu/test_spec_gpu.py tests/gpu/test_structured_gpu.py \
  tests/gpu/test_prompt_logprobs_gpu.py}
QWEN_SERVE=(-- --model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16)
if [[ $PARTS == *" warm "* ]]; then
  CACHE=$(mktemp -d)
  cd benchmarks || exit 2
  for round in $(seq "$ROUNDS"); do
    for early in 1 0; do
      part "warm_early${early}_r$round" 90 env MOPT_EARLY_CUDA=$early python3 cold_start.py --no-llm --no-tokenizer \
        --warm-only --reuse-warm --runs 2 --cache-dir "$CACHE" --output "$RES/warm_early${early}_r$round.json" "${QWEN_SERVE[@]}"
    done
  done
  cd .. || exit 2
  python3 - "$RES" <<'PY' | tee -a "$RES/summary.txt"
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("warm_early*.json")):
    d = json.loads(f.read_text())
    for run in d.get("serve", {}).get("warm", {}).get("runs", []):
        phases = " ".join(f"{k} {v:.2f}" for k, v in run.get("phases", {}).items())
        print(f"{f.stem:20s} ready {run.get('ready_s', float('nan')):.2f} s  {phases}")
PY
fi
if [[ $PARTS == *" tests "* ]]; then
  # shellcheck disable=SC2086  # TESTS is a list of paths
  part tests 420 python3 -m pytest -q -p no:cacheprovider --timeout 240 --timeout-method=thread --durations=8 $TESTS
fi
cat "$RES/summary.txt"
tar -czf "$OUT/early_cuda.tgz" -C "$RES" .
echo "packed $OUT/early_cuda.tgz"
