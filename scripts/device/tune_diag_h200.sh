#!/usr/bin/env bash
# One 2-GPU call (~9.5 min): the [tune] study and grid side by side, and serving / fp8-cache profiles.
#   GPU 1: scripts/device/tune_h200.sh grid (9 trials) into $W/tune.
#   GPU 0: scripts/device/tune_h200.sh study (4 trials: defaults, 2 predictor picks, defaults again) into
#          $W/tune, then: the serving path at 64 and 256 streams with py-spy on the server
#          (benchmarks/serving_overhead.py), kernel profiles of 256-sequence decode steps with a bf16 and
#          an fp8 KV cache (benchmarks/profile_step.py), a cProfile of a cold LLM(...).
# Both GPUs share the host's 32 cores: the grid's trials ran beside the study's, then beside profiles.
# Usage on the device, from the repository root: W=/tmp/w bash scripts/device/tune_diag_h200.sh
set -uo pipefail
W=${W:-/tmp/w}
mkdir -p "$W/tune" "$W/perf"
if ls .whl/*.whl >/dev/null 2>&1; then  # before anything starts: no step may reinstall under another's imports
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
fi
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 PATH=/tmp/site/bin:$PATH
log() { echo "[$SECONDS s] $*" | tee -a "$W/parts.txt"; }
part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$W/perf/$name.log" 2>&1; log "$name exit $?"
}
(CUDA_VISIBLE_DEVICES=1 STEP_TIMEOUT=${GRID_TIMEOUT:-520} OUT="$W/tune" bash scripts/device/tune_h200.sh grid \
  > "$W/tune/grid_run.log" 2>&1; log "grid done") &
CUDA_VISIBLE_DEVICES=0 STEP_TIMEOUT=${STUDY_TIMEOUT:-290} OUT="$W/tune" bash scripts/device/tune_h200.sh study \
  > "$W/tune/study_run.log" 2>&1; log "study done"

export CUDA_VISIBLE_DEVICES=0 PYTHONPATH="$PWD:/tmp/site"
model=/tmp/qwen3-word
python3 - benchmarks/configs/qwen3-0.6b "$model" <<'PY'
import json, shutil, sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
config = json.loads((src / "config.json").read_text())
shutil.copy(src / "config.json", out / "config.json")
tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(config["vocab_size"])}, unk_token="w0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(str(out))
PY
left() { echo $(( ${BUDGET:-555} - SECONDS )); }
part serving_overhead $(( $(left) < 150 ? $(left) : 150 )) python3 benchmarks/serving_overhead.py --model "$model" \
  --device-ms 0 --engine-args '{"load_format": "dummy", "dtype": "bfloat16"}' --max-num-seqs 256 \
  --concurrency 64 256 --repeats 1 --output-len 128 --py-spy --label h200
cd benchmarks || exit 2
for kv in fp8 auto; do
  [ "$(left)" -gt 30 ] && part profile_b256_kv_$kv $(( $(left) < 60 ? $(left) : 60 )) python3 profile_step.py \
    --profile-batch 256 --kv-cache-dtype $kv --output "$W/perf/profile_step_b256_kv_$kv.json"
done
cd ..
cat > /tmp/llm_start.py <<'PY'
from model_optimizer import LLM
LLM("benchmarks/configs/qwen3-0.6b", load_format="dummy", dtype="bfloat16")
PY
[ "$(left)" -gt 30 ] && part llm_cold_cprofile $(( $(left) - 5 )) env MOPT_COMPILE_CACHE_DIR=/tmp/coldcache \
  python3 -m cProfile -o "$W/perf/llm_cold.prof" /tmp/llm_start.py
wait
cp benchmarks/results/serving_overhead_gpu_h200* benchmarks/results/*pyspy* "$W/perf/" 2>/dev/null
OUT="$W/tune" PYTHONPATH="$PWD:/tmp/site" timeout 30 bash scripts/device/tune_h200.sh summary > "$W/tune/summary_run.log" 2>&1
python3 - "$W" <<'PY' > "$W/prof_summary.txt" 2>&1
import pstats, sys
try:
    st = pstats.Stats(f"{sys.argv[1]}/perf/llm_cold.prof")
    st.sort_stats("cumulative").print_stats(60)
except Exception as e:
    print(e)
PY
cat "$W/parts.txt"
