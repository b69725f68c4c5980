#!/usr/bin/env bash
# `mopt tune` on one H200: a study against vLLM auto_tune's method (a grid over max_num_seqs x
# max_num_batched_tokens) on Qwen3-0.6B with dummy weights and a chat-like workload
# (prompt ~ normal(512,128), output ~ normal(128,32)) under ttft_p99=300ms,tpot_p99=20ms.
#
# On the GPU machine, from the repository root (when the machine lacks optuna, fastapi, uvicorn ...,
# put their wheels in .whl/ as for regression.sh):
#   bash scripts/device/tune_h200.sh study     the study, 8 minutes of trials (~9 min with the report)
#   bash scripts/device/tune_h200.sh grid      9 grid points (~5-6 min: ~30 s a trial, cold start included)
#   bash scripts/device/tune_h200.sh summary   compare the two (seconds); run after both
# Each step is under the 10-minute limit of one device command; `all` runs the three (~15 min).
# Results land in $OUT: study/ and grid/ (study.db, results.json, report.html, best.yaml, commands.txt,
# one folder per trial with the server log and bench runs), *.log, and tune_h200_summary.json.
# Knobs of the load: CONCURRENCY (default 64 in flight, closed loop), NUM_REQUESTS (512), STUDY_TIME (8m),
# GRID_SEQS and GRID_TOKENS (the grid's values), STEP_TIMEOUT (seconds a step may take, 570).
# Why 64 in flight: at 256 every setting misses ttft_p99=300ms on the start-up burst alone (256 prompts of
# ~512 tokens queue behind each other; measured p99 TTFT 2.1 s with the defaults), so goodput is ~0 for all.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 COLUMNS=200
MISSING=$(python3 - <<'EOF'
import importlib.util
mods = ["optuna", "fastapi", "uvicorn", "httpx", "rich", "yaml", "matplotlib", "prometheus_client", "pynvml",
        "tokenizers", "transformers"]
print(" ".join(m for m in mods if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$MISSING" ]; then echo "missing python packages: $MISSING (put their wheels in .whl/)" >&2; exit 2; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true

# The Qwen3-0.6B config with dummy weights, plus a word-per-id tokenizer of the model's vocabulary: without a
# tokenizer the server streams no text, and mopt bench counts tokens (TTFT, TPOT) by the chunks that carry text.
MODEL="$OUT/qwen3-0.6b"
if [ ! -f "$MODEL/tokenizer.json" ]; then
  python3 - benchmarks/configs/qwen3-0.6b "$MODEL" <<'PY'
import json, shutil, sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
config = json.loads((src / "config.json").read_text())
shutil.copy(src / "config.json", out / "config.json")
vocab = {f"w{i}": i for i in range(config["vocab_size"])}
tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
eos = config.get("eos_token_id")
eos = eos[0] if isinstance(eos, list) else eos
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=None if eos is None else f"w{eos}").save_pretrained(str(out))
print(f"{out}: config.json and a {len(vocab)}-word tokenizer")
PY
fi
SLO="ttft_p99=300ms,tpot_p99=20ms"
HARDWARE=()
[ -f benchmarks/results/doctor_h200.json ] && HARDWARE=(--hardware benchmarks/results/doctor_h200.json)
COMMON=(--model "$MODEL" --fix load_format=dummy --fix max_model_len=2048 --fix log_level=warning
        --prompt-len normal:512:128 --output-len normal:128:32 --slo "$SLO"
        --concurrency "${CONCURRENCY:-64}" --num-requests "${NUM_REQUESTS:-512}"
        --ready-timeout 300 --trial-timeout 240 --seed 0 "${HARDWARE[@]}")

study() {
  cat > "$OUT/study_space.yaml" <<'EOF'
max_num_seqs: [32, 64, 128, 256, 512]
max_num_batched_tokens: [1024, 2048, 4096, 8192, 16384]
block_size: [16, 32]
gpu_memory_utilization: [0.3, 0.6, 0.9]
kv_cache_dtype: [auto, fp8]
enable_prefix_caching: [true, false]
enforce_eager: [false, true]
async_scheduling: [true, false]
EOF
  rm -rf "$OUT/study"
  # trial 0 is the engine's defaults (the baseline); the budget is wall time
  timeout -s INT -k 30 "${STEP_TIMEOUT:-570}" python3 -m model_optimizer.cli.main tune "${COMMON[@]}" --space "$OUT/study_space.yaml" \
      --time "${STUDY_TIME:-8m}" --output-dir "$OUT/study" > "$OUT/study.log" 2>&1
  echo "[$SECONDS s] study exit $?"; tail -25 "$OUT/study.log"
}

grid() {
  cat > "$OUT/grid_space.yaml" <<EOF
max_num_seqs: [${GRID_SEQS:-64, 128, 256}]
max_num_batched_tokens: [${GRID_TOKENS:-2048, 4096, 8192}]
EOF
  rm -rf "$OUT/grid"
  timeout -s INT -k 30 "${STEP_TIMEOUT:-570}" python3 -m model_optimizer.cli.main tune "${COMMON[@]}" --space "$OUT/grid_space.yaml" \
      --sampler grid --output-dir "$OUT/grid" > "$OUT/grid.log" 2>&1
  echo "[$SECONDS s] grid exit $?"; tail -25 "$OUT/grid.log"
}

summary() {
  python3 - <<'EOF'
import json, os
from pathlib import Path
from model_optimizer.fileio import atomic_write

out = Path(os.environ["OUT"])
def trials(name):
    path = out / name / "results.json"
    return json.loads(path.read_text())["trials"] if path.is_file() else []
def goodput(t):
    return (t.get("measured") or {}).get("goodput") or 0.0 if t["state"] == "COMPLETE" else 0.0
study, grid = trials("study"), trials("grid")
measured = [t for t in study if t["state"] in ("COMPLETE", "FAIL")]
grid_best = max(map(goodput, grid), default=0.0)
baseline = next((goodput(t) for t in study if t.get("baseline")), None)
best = max(map(goodput, study), default=0.0)
reach = next((i + 1 for i, t in enumerate(measured) if grid_best and goodput(t) >= 0.95 * grid_best), None)
result = {
    "slo": "ttft_p99=300ms,tpot_p99=20ms", "workload": "prompt normal(512,128), output normal(128,32), closed loop",
    "defaults_goodput": baseline, "study_best_goodput": best, "grid_best_goodput": grid_best,
    "study_measured_trials": len(measured), "study_skipped_by_predictor": sum(t["state"] == "PRUNED" for t in study),
    "grid_trials": sum(t["state"] in ("COMPLETE", "FAIL") for t in grid),
    "study_trials_to_95pct_of_grid_best": reach,
    "study_vs_grid": best / grid_best if grid_best else None,
    "study_vs_defaults": best / baseline if baseline else None,
    "prediction_error": json.loads((out / "study" / "results.json").read_text())["prediction_error"]
    if (out / "study" / "results.json").is_file() else None,
}
atomic_write(out / "tune_h200_summary.json", json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
EOF
}

case "${1:-all}" in
  study) study ;;
  grid) grid ;;
  summary) summary ;;
  all) study; grid; summary ;;
  *) echo "usage: $0 study|grid|summary|all" >&2; exit 2 ;;
esac
