"""Train the small Qwen3 reference model on the pre-tokenized Python-docs corpus.

Plain PyTorch: AdamW, linear warmup then cosine decay, bf16 autocast on CUDA (fp32 on
CPU), random 512-token windows from ``train.bin``. The corpus is small (about 2.7M
tokens), so the run is a small sweep: one fresh model per step budget in ``--sweep-steps``
(shortest first), each with its own full schedule, and the one with the lowest
validation perplexity is kept. Every run stops at its step budget or at its share of
``--max-seconds``, whichever comes first; the learning-rate schedule follows whichever
limit is nearer, so a run cut short by time still ends with a decayed learning rate.

Writes to ``--output-dir``::

    model/          config.json, generation_config.json, safetensors (sharded past
                    --max-shard-size), tokenizer files: loads with AutoModelForCausalLM
    metrics.json    sizes, steps, time, validation and unigram perplexity, samples

GPU run (what ``scripts/device/train_refmodel.sh`` does)::

    python scripts/train_reference_model.py --output-dir /tmp/refmodel --max-seconds 240

CPU smoke test (a tiny model, a few steps)::

    python scripts/train_reference_model.py --output-dir /tmp/rm --device cpu \\
        --sweep-steps 20 --batch-size 4 --seq-len 128 --num-layers 2 --hidden-size 128 \\
        --intermediate-size 256 --num-heads 2 --num-kv-heads 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class TrainConfig:
    """Everything one training run depends on."""

    tokens_dir: Path = Path(".data/tokens")
    tokenizer_dir: Path = Path(".data/tokenizer")
    output_dir: Path = Path("out/refmodel")
    device: str = "auto"
    seed: int = 0
    # model
    hidden_size: int = 384
    num_layers: int = 8
    num_heads: int = 6
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 896
    max_position_embeddings: int = 2048
    # optimisation
    seq_len: int = 512
    batch_size: int = 64
    lr: float = 2e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    sweep_steps: list[int] = field(default_factory=lambda: [500, 1000, 2000, 4000])
    max_seconds: float = 240.0
    eval_every: int = 250
    log_every: int = 50
    max_shard_size: str = "15MB"
    sample_tokens: int = 48
    cpu_threads: int = 1  # torch threads on the CPU; more spin-wait badly on a busy machine


def resolve_device(name: str):
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA device")
    return torch.device(name)


def load_tokens(path: Path):
    import torch

    if not path.is_file():
        raise ValueError(f"{path} not found; run scripts/train_tokenizer.py first")
    return torch.from_numpy(np.fromfile(path, dtype=np.uint16).astype(np.int64))


def build_model(cfg: TrainConfig, vocab_size: int, special_ids: dict[str, int]):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if cfg.num_heads % cfg.num_kv_heads:
        raise ValueError("--num-heads must be a multiple of --num-kv-heads")
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=special_ids["<|im_end|>"],
        pad_token_id=special_ids["<|endoftext|>"],
    )
    return Qwen3ForCausalLM(config)


def lr_at(progress: float, step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warmup over the first steps, then cosine from ``lr`` to ``min_lr_ratio * lr``."""
    warmup = min(cfg.warmup_steps, max(1, total_steps // 10))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


def random_batch(tokens, cfg: TrainConfig, generator, device):
    """``batch_size`` random windows: inputs and next-token targets, each (batch, seq_len)."""
    import torch

    starts = torch.randint(0, tokens.numel() - cfg.seq_len - 1, (cfg.batch_size,), generator=generator)
    offsets = torch.arange(cfg.seq_len + 1)
    windows = tokens[starts[:, None] + offsets[None, :]].to(device, non_blocking=True)
    return windows[:, :-1], windows[:, 1:]


def evaluate_nll(model, tokens, seq_len: int, device, batch_size: int = 32) -> float:
    """Mean next-token NLL over non-overlapping windows that cover ``tokens[1:]`` once."""
    import torch
    import torch.nn.functional as F

    windows = [tokens[s : s + seq_len + 1] for s in range(0, tokens.numel() - 1, seq_len)]
    full = [w for w in windows if w.numel() == seq_len + 1]
    groups = [torch.stack(full[i : i + batch_size]) for i in range(0, len(full), batch_size)]
    groups += [w[None] for w in windows if 1 < w.numel() <= seq_len]  # the shorter tail
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), autocast(device):
        for group in groups:
            group = group.to(device)  # (batch, seq_len + 1)
            logits = model(input_ids=group[:, :-1]).logits.float()
            total += F.cross_entropy(logits.flatten(0, 1), group[:, 1:].flatten(), reduction="sum").item()
            count += group[:, 1:].numel()
    model.train()
    return total / count


def unigram_nll(train_tokens, val_tokens, vocab_size: int) -> float:
    """NLL of ``val_tokens[1:]`` under add-one-smoothed unigram counts of the training tokens."""
    counts = np.bincount(train_tokens.numpy(), minlength=vocab_size).astype(np.float64) + 1.0
    log_probs = np.log(counts / counts.sum())
    return float(-log_probs[val_tokens[1:].numpy()].mean())


def autocast(device):
    import contextlib

    import torch

    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_optimizer(model, cfg: TrainConfig, device):
    """AdamW with weight decay on matrices only (not on norms)."""
    import torch

    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")


def train_step(model, optimizer, inputs, targets, cfg: TrainConfig, device):
    """One optimizer step on a batch; returns the loss tensor (no host sync)."""
    import torch
    import torch.nn.functional as F

    with autocast(device):
        logits = model(input_ids=inputs).logits  # (batch, seq_len, vocab)
    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    return loss


def train_one(cfg: TrainConfig, num_steps: int, seconds: float, data: dict, log) -> dict:
    """Trains one fresh model for ``num_steps`` or ``seconds``; returns the model and its record."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    torch.manual_seed(cfg.seed)
    device = data["device"]
    model = build_model(cfg, data["vocab_size"], data["special_ids"]).to(device)
    optimizer = make_optimizer(model, cfg, device)
    generator = torch.Generator().manual_seed(cfg.seed)
    history, start, step, progress = [], time.perf_counter(), 0, 0.0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(f"training ({num_steps} steps)", total=num_steps)
        while step < num_steps and progress < 1.0:
            for group in optimizer.param_groups:
                group["lr"] = lr = lr_at(progress, step, cfg, num_steps)
            inputs, targets = random_batch(data["train"], cfg, generator, device)
            loss = train_step(model, optimizer, inputs, targets, cfg, device)
            step += 1
            bar.update(task, completed=step)
            elapsed = time.perf_counter() - start
            progress = max(step / num_steps, elapsed / seconds)
            last = step == num_steps or progress >= 1.0
            if step % cfg.log_every == 0 or last:
                record = {"step": step, "seconds": round(elapsed, 2), "lr": lr, "loss": round(loss.item(), 4)}
                if step % cfg.eval_every == 0 or last:
                    record["val_loss"] = round(evaluate_nll(model, data["val"], cfg.seq_len, device), 4)
                history.append(record)
                log(json.dumps(record))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return {
        "model": model,
        "run": summarize_run(model, cfg, data, num_steps, step, time.perf_counter() - start, history),
    }


def summarize_run(model, cfg: TrainConfig, data: dict, num_steps: int, steps: int, seconds: float, history) -> dict:
    """The record of one sweep run: steps, time, epochs, validation perplexities."""
    device = data["device"]
    val_loss = evaluate_nll(model, data["val"], cfg.seq_len, device)
    has_chat = data["val_chat"].numel() > 1
    chat_loss = evaluate_nll(model, data["val_chat"], cfg.seq_len, device) if has_chat else None
    tokens_seen = steps * cfg.batch_size * cfg.seq_len
    return {
        "step_budget": num_steps,
        "steps": steps,
        "seconds": round(seconds, 1),
        "tokens_seen": tokens_seen,
        "epochs": round(tokens_seen / data["train"].numel(), 2),
        "val_loss": round(val_loss, 4),
        "val_perplexity": round(math.exp(val_loss), 3),
        "val_chat_perplexity": None if chat_loss is None else round(math.exp(chat_loss), 3),
        "history": history,
    }


PROMPTS = ["The Python language is", "def fibonacci(n):", "The json module", "To open a file for reading,"]
CHAT_QUESTIONS = ["What does json.dumps() do?", "What is the exception KeyError?"]


def sample_generations(model, tokenizer, device, max_new_tokens: int = 48) -> list[dict]:
    """Greedy and sampled continuations of fixed prompts, and chat answers, via ``generate``."""
    import torch

    samples = []
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in CHAT_QUESTIONS
    ]
    for kind, prompt in [("text", p) for p in PROMPTS] + [("chat", c) for c in chats]:
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
        for mode, kwargs in (
            ("greedy", {"do_sample": False}),
            ("sampled", {"do_sample": True, "temperature": 0.8, "top_p": 0.95}),
        ):
            torch.manual_seed(0)
            out = model.generate(ids, max_new_tokens=max_new_tokens, **kwargs)
            text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=False)
            samples.append({"kind": kind, "mode": mode, "prompt": prompt, "completion": text})
    return samples


def save_model_folder(model, cfg: TrainConfig, special_ids: dict[str, int]) -> Path:
    """Saves the bf16 model, generation config and tokenizer files as one HF folder."""
    import torch

    folder = cfg.output_dir / "model"
    if folder.exists():
        shutil.rmtree(folder)
    model = model.to(torch.bfloat16)
    gen = model.generation_config
    gen.bos_token_id = None
    gen.eos_token_id = [special_ids["<|im_end|>"], special_ids["<|endoftext|>"]]
    gen.pad_token_id = special_ids["<|endoftext|>"]
    model.save_pretrained(str(folder), max_shard_size=cfg.max_shard_size)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["torch_dtype"] = config["dtype"] = "bfloat16"  # older readers look for torch_dtype
    write_json(config_path, config)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(cfg.tokenizer_dir / name, folder / name)
    return folder


def write_json(path: Path, data) -> None:
    """Writes JSON through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def train(cfg: TrainConfig) -> dict:
    """Runs the sweep, keeps the best model, writes the folder and metrics; returns metrics."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    t0 = time.perf_counter()
    device = resolve_device(cfg.device)
    if device.type == "cpu":
        torch.set_num_threads(cfg.cpu_threads)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if not (cfg.tokens_dir / "meta.json").is_file():
        raise ValueError(f"{cfg.tokens_dir / 'meta.json'} not found; run scripts/train_tokenizer.py first")
    if not (cfg.tokenizer_dir / "tokenizer.json").is_file():
        raise ValueError(f"no tokenizer.json in {cfg.tokenizer_dir}; run scripts/train_tokenizer.py first")
    meta = json.loads((cfg.tokens_dir / "meta.json").read_text())
    data = {
        "device": device,
        "vocab_size": meta["vocab_size"],
        "special_ids": meta["special_token_ids"],
        "train": load_tokens(cfg.tokens_dir / "train.bin"),
        "val": load_tokens(cfg.tokens_dir / "val.bin"),
        "val_chat": load_tokens(cfg.tokens_dir / "val_chat.bin"),
    }
    log = lambda line: print(line, flush=True)  # noqa: E731
    total_steps = sum(cfg.sweep_steps)
    best, runs = None, []
    for num_steps in sorted(cfg.sweep_steps):
        remaining = cfg.max_seconds - (time.perf_counter() - t0)
        seconds = max(1.0, remaining * num_steps / total_steps)
        total_steps -= num_steps
        log(f"# run: {num_steps} steps, at most {seconds:.0f} s")
        result = train_one(cfg, num_steps, seconds, data, log)
        runs.append(result["run"])
        if best is None or result["run"]["val_loss"] < best["run"]["val_loss"]:
            best = {"model": result["model"].cpu(), "run": result["run"]}
    model = best["model"].to(device)
    folder = save_model_folder(model, cfg, data["special_ids"])
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    samples = sample_generations(model.eval(), tokenizer, device, cfg.sample_tokens)
    unigram = unigram_nll(data["train"], data["val"], data["vocab_size"])
    shipped_loss = evaluate_nll(model, data["val"], cfg.seq_len, device)  # the bf16 weights
    weights = sorted(folder.glob("*.safetensors"))
    metrics = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "weights_bytes": sum(p.stat().st_size for p in weights),
        "weight_files": [p.name for p in weights],
        "num_train_tokens": int(data["train"].numel()),
        "num_val_tokens": int(data["val"].numel()),
        "best_run": {k: v for k, v in best["run"].items() if k != "history"},
        "val_perplexity": round(math.exp(shipped_loss), 3),
        "unigram_val_perplexity": round(math.exp(unigram), 3),
        "perplexity_ratio_to_unigram": round(math.exp(shipped_loss - unigram), 4),
        "runs": runs,
        "samples": samples,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "total_seconds": round(time.perf_counter() - t0, 1),
    }
    write_json(cfg.output_dir / "metrics.json", metrics)
    return metrics


def parse_train_args(argv: list[str]) -> TrainConfig:
    """Flags generated from ``TrainConfig``'s fields (``--sweep-steps 500,1000``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = TrainConfig()
    for name, value in asdict(defaults).items():
        if isinstance(value, list):
            kind = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
        else:
            kind = type(value)
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=value)
    args = parser.parse_args(argv)
    cfg = TrainConfig(**vars(args))
    if not cfg.sweep_steps or min(cfg.sweep_steps) < 1:
        parser.error("--sweep-steps needs positive step counts, e.g. 500,1000")
    if cfg.seq_len > cfg.max_position_embeddings:
        parser.error("--seq-len may not exceed --max-position-embeddings")
    return cfg


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cfg = parse_train_args(argv)
    try:
        metrics = train(cfg)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = {
        k: metrics[k]
        for k in (
            "val_perplexity",
            "unigram_val_perplexity",
            "perplexity_ratio_to_unigram",
            "weights_bytes",
            "total_seconds",
        )
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
