#!/usr/bin/env bash
# Where the time goes, on a 2-GPU H200 machine in one call (~9 min): the profiles the [quantize] and
# [perf] targets that are still missed ask for.
#   GPU 0: scripts/device/quant_h200.sh (tile sweep, engine decode per method with each decode graph's
#          kernels, fp8 throughput), results in $W/quant.
#   GPU 1: the serving path at 64 and 256 streams on Qwen3-0.6B dummy weights with a word tokenizer
#          (benchmarks/serving_overhead.py, py-spy on the server: which thread holds the GIL doing what);
#          a cProfile of a cold `LLM(...)` (empty kernel caches); cold/warm start phases; the decode
#          graph's kernels at batch 1; the host phases of an offline run (benchmarks/profile_step.py).
# Usage on the device, from the repository root: W=/tmp/w bash scripts/device/diag_h200.sh
set -uo pipefail
W=${W:-/tmp/w}
mkdir -p "$W/quant" "$W/perf"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-} PATH=/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
log() { echo "[$SECONDS s] $*" | tee -a "$W/parts.txt"; }
part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$W/perf/$name.log" 2>&1; log "$name exit $?"
}

(CUDA_VISIBLE_DEVICES=0 OUT="$W/quant" bash scripts/device/quant_h200.sh all > "$W/quant/run.log" 2>&1; log "quant done") &

gpu1() {
  export CUDA_VISIBLE_DEVICES=1
  local model=/tmp/qwen3-word
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
  part serving_overhead 170 python3 benchmarks/serving_overhead.py --model "$model" --device-ms 0 \
    --engine-args '{"load_format": "dummy", "dtype": "bfloat16"}' --max-num-seqs 256 --concurrency 64 256 \
    --repeats 1 --output-len 128 --py-spy --label h200
  local caches=/tmp/coldcache
  rm -rf $caches; mkdir -p $caches
  part llm_cold_cprofile 75 env MOPT_COMPILE_CACHE_DIR=$caches \
    python3 -m cProfile -o "$W/perf/llm_cold.prof" -c \
    "from model_optimizer import LLM; LLM('benchmarks/configs/qwen3-0.6b', load_format='dummy', dtype='bfloat16')"
  part llm_warm_cprofile 45 env MOPT_COMPILE_CACHE_DIR=$caches \
    python3 -m cProfile -o "$W/perf/llm_warm.prof" -c \
    "from model_optimizer import LLM; LLM('benchmarks/configs/qwen3-0.6b', load_format='dummy', dtype='bfloat16')"
  cd benchmarks || return
  part cold_start 100 python3 cold_start.py --runs 1 --no-llm --output "$W/perf/cold_start_h200.json" -- \
    --model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16
  part decode_qwen_profile 55 python3 decode_latency.py --models qwen3-0.6b llama-3.1-8b --batch-sizes 1 64 --profile \
    --output "$W/perf/decode_profile_h200.json"
  part profile_step 50 python3 profile_step.py --output "$W/perf/profile_step_h200.json"
  cd ..
}
gpu1
wait
cp benchmarks/results/serving_overhead_gpu_h200* benchmarks/results/*pyspy* "$W/perf/" 2>/dev/null
python3 - "$W" <<'PY' > "$W/prof_summary.txt" 2>&1
import pstats, sys
for name in ("llm_cold", "llm_warm"):
    try:
        st = pstats.Stats(f"{sys.argv[1]}/perf/{name}.prof")
    except Exception as e:
        print(name, e); continue
    print("=====", name); st.sort_stats("cumulative").print_stats(45)
PY
cat "$W/parts.txt"
