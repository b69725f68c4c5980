"""Install a trained reference model into the package and write its model card.

Takes what ``scripts/train_reference_model.py`` wrote (on the GPU machine: the files
``scripts/device/train_refmodel.sh`` puts under ``$OUT``), merges sharded safetensors
into one ``model.safetensors``, copies config, generation config and tokenizer files
(from ``--tokenizer-dir`` when the run did not return them), keeps the metrics as
``training_metrics.json`` and renders ``README.md`` (the model card) from them.

Run::

    python scripts/install_reference_model.py --from /work/.device/.../out \\
        --to model_optimizer/assets/pydoc-qwen3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

MAX_WEIGHTS_BYTES = 30_000_000
COPIED_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def find_model_dir(source: Path) -> Path:
    """The folder holding config.json: ``source/model`` or ``source`` itself."""
    for candidate in (source / "model", source):
        if (candidate / "config.json").is_file():
            return candidate
    raise ValueError(f"no config.json under {source} or {source / 'model'}")


def merge_weights(model_dir: Path, target: Path) -> int:
    """Writes all tensors of the folder's safetensors file(s) into ``target``; returns its size."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"no .safetensors files in {model_dir}")
    tensors = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                if name in tensors:
                    raise ValueError(f"tensor {name} appears in more than one shard")
                tensors[name] = f.get_tensor(name)
    tmp = target.with_name(target.name + ".tmp")
    save_file(dict(sorted(tensors.items())), str(tmp), metadata={"format": "pt"})
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target.stat().st_size


def write_atomic(path: Path, data: bytes) -> None:
    """Writes bytes through a temporary file in the same folder and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def copy_files(model_dir: Path, tokenizer_dir: Path, target_dir: Path) -> None:
    """Copies config and tokenizer files, preferring those that came with the model."""
    for name in COPIED_FILES:
        source = model_dir / name if (model_dir / name).is_file() else tokenizer_dir / name
        if not source.is_file():
            raise ValueError(f"{name} is neither in {model_dir} nor in {tokenizer_dir}")
        write_atomic(target_dir / name, source.read_bytes())


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def fmt(value, spec: str = "") -> str:
    """Formats a number, or says TODO when the metric is missing."""
    return "TODO" if value is None else format(value, spec)


def sample_section(samples: list[dict]) -> list[str]:
    lines = []
    for s in samples:
        prompt = s["prompt"].replace("\n", "\\n")
        lines += [
            f"**{s['kind']}, {s['mode']}**, prompt `{prompt}`",
            "",
            "```text",
            s["prompt"] + s["completion"] if s["kind"] == "text" else s["completion"],
            "```",
            "",
        ]
    return lines or ["TODO: sample generations from the GPU run.", ""]


def sweep_table(runs: list[dict]) -> list[str]:
    lines = [
        "| step budget | steps run | seconds | epochs | val perplexity | val chat perplexity |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        lines.append(
            f"| {r['step_budget']} | {r['steps']} | {r['seconds']} | {r['epochs']} | "
            f"{r['val_perplexity']} | {fmt(r.get('val_chat_perplexity'))} |"
        )
    return lines


def render_card(metrics: dict, config: dict, corpus: dict, weights_bytes: int | None) -> str:
    """The model card, from the training metrics, the model config and the corpus stats."""
    cfg = metrics.get("config", {})
    best = metrics.get("best_run", {})
    ratio = metrics.get("perplexity_ratio_to_unigram")
    on_cpu = metrics.get("device_name") == "cpu"
    precision = "fp32" if on_cpu else "bf16 autocast with fp32 master weights"
    lines = [
        "# pydoc-qwen3: a small reference model trained on the Python documentation",
        "",
        "A tiny Qwen3-architecture causal language model, trained from scratch by this project so",
        "that demos and tests have real text to generate and quantization has something to hurt.",
        "It writes Python-documentation-like English. It is not a useful assistant: it knows",
        "only the Python 3.11 docs, has no instruction tuning beyond API question/answer pairs,",
        "and makes up facts.",
        "",
        "## Model",
        "",
        f"- Architecture: `Qwen3ForCausalLM`, {config.get('num_hidden_layers')} layers, hidden size "
        f"{config.get('hidden_size')}, {config.get('num_attention_heads')} query heads and "
        f"{config.get('num_key_value_heads')} key/value heads (GQA) of dimension {config.get('head_dim')}, "
        f"MLP {config.get('intermediate_size')}, tied input/output embeddings, RoPE, "
        f"max positions {config.get('max_position_embeddings')} (trained on "
        f"{fmt(cfg.get('seq_len'))}-token windows).",
        f"- Parameters: {fmt(metrics.get('num_parameters'), ',')}; weights in bfloat16, "
        f"`model.safetensors` is {fmt(weights_bytes and weights_bytes / 1e6, '.1f')} MB.",
        f"- Tokenizer: byte-level BPE, vocabulary {config.get('vocab_size')}, special tokens "
        "`<|endoftext|>` (document end, padding), `<|im_start|>`, `<|im_end|>` (end of a chat turn, eos); "
        "ChatML chat template in `tokenizer_config.json`. Generation stops at `<|im_end|>` or `<|endoftext|>`.",
        "",
        "## Data",
        "",
        "The HTML of Debian's `python3.11-doc` package (`/usr/share/doc/python3.11/html`), main page",
        "bodies converted to plain text (`scripts/build_corpus.py`), paragraphs deduplicated, "
        f"{fmt(corpus.get('num_val_documents'))} of {fmt(corpus.get('num_pages'))} pages "
        f"({fmt(corpus.get('val_fraction'))}, seeded) held out for validation. Training text: "
        f"{fmt(corpus.get('train_chars'), ',')} characters, {fmt(metrics.get('num_train_tokens'), ',')} tokens, "
        f"including {fmt(corpus.get('num_train_chats'), ',')} one-turn ChatML question/answer pairs made "
        'from the documented API entries ("What does json.dumps() do?" answered by the signature '
        f"and first paragraph). Validation: {fmt(metrics.get('num_val_tokens'), ',')} tokens of held-out pages.",
        "",
        "## Training",
        "",
        f"Plain PyTorch on {metrics.get('device_name', 'TODO')} (torch {metrics.get('torch_version', 'TODO')}, "
        f"transformers {metrics.get('transformers_version', 'TODO')}): AdamW (lr {fmt(cfg.get('lr'))}, "
        f"betas 0.9/0.95, weight decay {fmt(cfg.get('weight_decay'))}), warmup then cosine decay, {precision}, batch {fmt(cfg.get('batch_size'))} x {fmt(cfg.get('seq_len'))} "
        "tokens. The corpus is small, so one run trains a fresh model for each step budget and keeps the "
        f"one with the lowest validation perplexity. The kept model ran {fmt(best.get('steps'))} steps in "
        f"{fmt(best.get('seconds'))} s ({fmt(best.get('epochs'))} epochs); the whole run took "
        f"{fmt(metrics.get('total_seconds'))} s.",
        "",
        *sweep_table(metrics.get("runs", [])),
        "",
        "## Evaluation",
        "",
        "| held-out pages | perplexity |",
        "| --- | ---: |",
        f"| this model | {fmt(metrics.get('val_perplexity'))} |",
        f"| unigram model (train counts, add-one smoothing) | {fmt(metrics.get('unigram_val_perplexity'))} |",
        f"| ratio (target: at most 0.1) | {fmt(ratio)} |",
        "",
        "## Sample generations",
        "",
        "Up to 48 new tokens with transformers' `generate`; sampled: temperature 0.8, top-p 0.95, seed 0.",
        "",
        *sample_section(metrics.get("samples", [])),
        "## Reproduce",
        "",
        'See the project README, section "The reference model": `scripts/build_corpus.py`,',
        "`scripts/train_tokenizer.py`, then",
        "`scripts/device/train_refmodel.sh` on one GPU and `scripts/install_reference_model.py`.",
        "Full numbers: `training_metrics.json`.",
        "",
    ]
    return "\n".join(lines)


def install(source: Path, target_dir: Path, tokenizer_dir: Path, corpus_stats: Path) -> dict:
    """Builds the asset folder; returns a short summary."""
    model_dir = find_model_dir(source)
    target_dir.mkdir(parents=True, exist_ok=True)
    weights_bytes = merge_weights(model_dir, target_dir / "model.safetensors")
    if weights_bytes > MAX_WEIGHTS_BYTES:
        raise ValueError(f"model.safetensors is {weights_bytes} bytes, over the {MAX_WEIGHTS_BYTES} limit")
    copy_files(model_dir, tokenizer_dir, target_dir)
    metrics = read_json(source / "metrics.json")
    if metrics:
        write_atomic(target_dir / "training_metrics.json", (source / "metrics.json").read_bytes())
    config = read_json(target_dir / "config.json")
    card = render_card(metrics, config, read_json(corpus_stats), weights_bytes)
    write_atomic(target_dir / "README.md", card.encode("utf-8"))
    return {
        "target": str(target_dir),
        "weights_bytes": weights_bytes,
        "val_perplexity": metrics.get("val_perplexity"),
        "ratio_to_unigram": metrics.get("perplexity_ratio_to_unigram"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        required=True,
        help="folder with model/ (or the model files) and metrics.json",
    )
    parser.add_argument("--to", dest="target", type=Path, default=Path("model_optimizer/assets/pydoc-qwen3"))
    parser.add_argument("--tokenizer-dir", type=Path, default=Path(".data/tokenizer"))
    parser.add_argument("--corpus-stats", type=Path, default=Path(".data/corpus/stats.json"))
    args = parser.parse_args(argv)
    try:
        summary = install(args.source, args.target, args.tokenizer_dir, args.corpus_stats)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
