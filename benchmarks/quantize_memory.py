"""Peak host memory of `mopt quantize` on a bf16 checkpoint, per method, for one or more source trees.

Builds a random Qwen2-style checkpoint stored in bf16 (its size set by --hidden-size and --layers), runs
`python -m model_optimizer.cli.main quantize` on the CPU (phase "command"), or only its load, AWQ search
and rounding (phase "rounding"), once per method and tree, each in a child process of its own, and takes
the child's peak resident set (getrusage's ru_maxrss, from os.wait4). A tree is a
folder holding a `model_optimizer` package (the checkout, or an older one unpacked with `git archive`),
so a change is measured side by side with the code before it:

    git archive dfb34d5 model_optimizer | tar -x -C /tmp/before
    python benchmarks/quantize_memory.py --trees /tmp/before . --methods awq rtn-int4

Writes benchmarks/results/quantize_memory_cpu.json (or --output): the checkpoint's bytes and, per tree and
method, the peak in MiB and the exit code.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

from common import RESULTS, environment, write_json  # noqa: E402


def build_source(folder: Path, hidden: int, layers: int) -> Path:
    """A random Qwen2 checkpoint with the test tokenizer, saved in bf16."""
    import torch
    import transformers

    from tests import tiny_checkpoints as tiny

    config = transformers.Qwen2Config(
        vocab_size=tiny.TOKENIZER_VOCAB + 8,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4 // 128 * 128,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        max_position_embeddings=512,
        tie_word_embeddings=True,
        torch_dtype=torch.bfloat16,
    )
    tiny.build_checkpoint(folder, config, seed=0)
    from safetensors.torch import load_file, save_file

    for shard in folder.glob("*.safetensors"):
        weights = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(str(shard)).items()}
        save_file(weights, str(shard), metadata={"format": "pt"})
    return folder


ROUNDING_ONLY = """
import sys
from pathlib import Path
from model_optimizer.model.quantize.job import Progress, QuantizeOptions
from model_optimizer.model.quantize.pipeline import model_tokenizer, quantized_model, text_windows
source, method, out = sys.argv[1:4]
opts = QuantizeOptions(Path(source), method, Path(out), num_calib_samples=4, calib_seq_len=64, device="cpu")
windows = text_windows(model_tokenizer(opts.model), opts, "calibration", Progress()) if method == "awq" else []
quantized_model(opts, windows, Progress())
"""
"""The load, AWQ search and rounding alone (pipeline.quantized_model), without writing or evaluating."""


def peak_mib(tree: Path, source: Path, method: str, out: Path, phase: str) -> tuple[float, int, float]:
    """(peak resident MiB, exit code, seconds) of one run with `tree` first on the path: the whole `mopt
    quantize` command (phase "command", evaluating in bf16: on the CPU `auto` evaluates in float32, a peak
    of its own), or its load, search and rounding alone (phase "rounding")."""
    if phase == "rounding":
        argv = [sys.executable, "-c", ROUNDING_ONLY, str(source), method, str(out)]
    else:
        argv = [sys.executable, "-m", "model_optimizer.cli.main", "quantize", str(source), "--method", method]
        argv += ["--output", str(out), "--device", "cpu", "--num-eval-samples", "2", "--eval-seq-len", "64"]
        argv += ["--eval-dtype", "bfloat16"]
        if method == "awq":
            argv += ["--num-calib-samples", "4", "--calib-seq-len", "64"]
    env = {**os.environ, "PYTHONPATH": f"{tree.resolve()}:{ROOT}"}
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(child.stderr.read().decode()[-2000:] if child.stderr else "", file=sys.stderr)
    return usage.ru_maxrss / 1024, code, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", nargs="+", default=["."], help="folders holding a model_optimizer package")
    parser.add_argument("--methods", nargs="+", default=["awq", "rtn-int4", "int8"])
    parser.add_argument("--phases", nargs="+", default=["rounding", "command"], choices=["rounding", "command"])
    parser.add_argument("--hidden-size", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--output", default=str(RESULTS / "quantize_memory_cpu.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = build_source(Path(tmp) / "bf16", args.hidden_size, args.layers)
        size = sum(p.stat().st_size for p in source.glob("*.safetensors"))
        runs = []
        for phase in args.phases:
            for method in args.methods:
                for tree in args.trees:
                    out = Path(tmp) / f"{method}-{len(runs)}"
                    mib, code, seconds = peak_mib(Path(tree), source, method, out, phase)
                    run = {"phase": phase, "tree": tree, "method": method, "peak_rss_mib": round(mib, 1)}
                    runs.append(run | {"exit_code": code, "seconds": round(seconds, 1)})
                    print(
                        f"{phase:8s} {method:9s} {tree:24s} peak {mib:8.1f} MiB exit {code} {seconds:.1f} s", flush=True
                    )
    payload = {
        "environment": environment(),
        "checkpoint": {"hidden_size": args.hidden_size, "layers": args.layers, "bf16_bytes": size},
        "runs": runs,
    }
    print(f"wrote {write_json(args.output, payload)}")


if __name__ == "__main__":
    main()
