"""Accuracy of our quantization against llm-compressor's on the built-in reference model (CPU).

    PYTHONPATH=. python3 benchmarks/quant_accuracy.py --peer-site DIR [--num-calib-samples 32] [--num-eval-samples 16]

Same calibration windows (built-in calibration text) for both tools' AWQ; every folder, ours and
llm-compressor's, is scored by the same code (our engine, `mopt quantize --eval-only`'s path) on the
same held-out windows. llm-compressor 0.14 pins transformers 5.17, so it runs in a child process with
its packages from --peer-site (`pip install --target DIR llmcompressor==0.14.0.1 transformers==5.17.0 ...`),
leaving our environment alone; on a machine without an accelerator its calibration cache calls
Tensor.pin_memory, which the child replaces by a no-op for that run only.
Writes benchmarks/results/quant_accuracy_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OURS = ("fp8", "int8", "rtn-int4", "awq")
# llm-compressor's recipe per row: (modifier, scheme); W8A16 is its int8 preset (groups of 128)
PEERS = {
    "fp8": ("QuantizationModifier", "FP8_DYNAMIC"),
    "int8": ("QuantizationModifier", "W8A16"),
    "rtn-int4": ("QuantizationModifier", "W4A16_ASYM"),
    "awq": ("AWQModifier", "W4A16_ASYM"),
}

PEER_CHILD = r"""
import json, sys, torch
torch.Tensor.pin_memory = lambda self, *a, **k: self  # no accelerator: llm-compressor's cache pins anyway
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from llmcompressor.modifiers.awq import AWQModifier
spec = json.loads(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(spec["model"])
windows = spec["windows"]
# a ready DataLoader: the datasets library's fingerprinting cannot pickle pyarrow 26's types here
ds = DataLoader([{"input_ids": torch.tensor(w), "attention_mask": torch.ones(len(w), dtype=torch.long)} for w in windows], batch_size=1)
cls = {"QuantizationModifier": QuantizationModifier, "AWQModifier": AWQModifier}[spec["modifier"]]
recipe = [cls(targets=["Linear"], scheme=spec["scheme"], ignore=["lm_head"])]
if spec["modifier"] == "AWQModifier":
    oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=spec["seq_len"],
            num_calibration_samples=len(windows), shuffle_calibration_samples=False)
else:
    oneshot(model=model, recipe=recipe)
model = model.to(torch.bfloat16)
model.save_pretrained(spec["output"], save_compressed=True)
tok.save_pretrained(spec["output"])
"""


def run_peer(name: str, model: Path, windows: list[list[int]], seq_len: int, out: Path, site: Path) -> float:
    modifier, scheme = PEERS[name]
    spec = dict(model=str(model), windows=windows, seq_len=seq_len, output=str(out), modifier=modifier, scheme=scheme)
    env = {
        **os.environ,
        "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "CUDA_VISIBLE_DEVICES": "",
    }
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEER_CHILD, json.dumps(spec)], env=env, stderr=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"llm-compressor failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-site", type=Path, required=True, help="folder with llm-compressor's packages")
    parser.add_argument("--num-calib-samples", type=int, default=32)
    parser.add_argument("--calib-seq-len", type=int, default=512)
    parser.add_argument("--num-eval-samples", type=int, default=16)
    parser.add_argument("--eval-seq-len", type=int, default=512)
    parser.add_argument("--methods", default=",".join(OURS))
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "quant_accuracy_cpu.json")
    args = parser.parse_args()

    from common import environment, write_json

    from model_optimizer.assets import reference_model_path
    from model_optimizer.model.quantize.calibration import read_documents, token_windows
    from model_optimizer.model.quantize.job import QuantizeOptions
    from model_optimizer.model.quantize.pipeline import eval_only, quantize
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    model = reference_model_path()
    tok = load_tokenizer(model)
    calib = token_windows(tok, read_documents(None, "calibration"), args.num_calib_samples, args.calib_seq_len)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="quant_accuracy_"))
    common_opts = dict(
        num_calib_samples=args.num_calib_samples,
        calib_seq_len=args.calib_seq_len,
        num_eval_samples=args.num_eval_samples,
        eval_seq_len=args.eval_seq_len,
        device="cpu",
    )
    for name in args.methods.split(","):
        t0 = time.perf_counter()
        ours = quantize(QuantizeOptions(model=model, method=name, output=work / f"ours-{name}", **common_opts))
        row = {"method": name, "ours": ours["accuracy"], "ours_seconds": round(time.perf_counter() - t0, 1)}
        row["ours_weights_bytes"] = ours["weights_bytes"]
        try:
            peer_dir = work / f"llmcompressor-{name}"
            seconds = run_peer(name, model, calib, args.calib_seq_len, peer_dir, args.peer_site)
            method = "awq" if name == "awq" else name
            peer = eval_only(
                peer_dir, model, QuantizeOptions(model=model, method=method, output=peer_dir, **common_opts)
            )
            row.update(
                llmcompressor=peer["accuracy"],
                llmcompressor_seconds=round(seconds, 1),
                llmcompressor_scheme=f"{PEERS[name][0]} {PEERS[name][1]}",
            )
        except (RuntimeError, ValueError) as exc:
            row["llmcompressor_error"] = str(exc)
        rows.append(row)
        print(json.dumps(row), flush=True)
        result = {
            "model": "pydoc-qwen3 (built-in reference model, bf16)",
            "calibration": {"text": "built-in", "num_samples": len(calib), "seq_len": args.calib_seq_len},
            "evaluation": {
                "text": "built-in held-out",
                "num_samples": args.num_eval_samples,
                "seq_len": args.eval_seq_len,
            },
            "environment": environment(),
            "rows": rows,
        }
        write_json(args.output, result)  # after every row: a long run that stops early keeps what it measured


if __name__ == "__main__":
    main()
