"""What an embedding output file was made with, kept beside it as `<output>.meta.json`.

A resumed `mopt embed` appends to the file it finds. Vectors of another model, another length, or
another pooling, normalization, instruction or end token would land in the same file and look
just like the others, so the run that starts a file records what makes its vectors what they are,
and a run that continues it must match.

Why a sidecar and not a header line: the output stays a file of embedding rows only, so
every JSONL reader (pandas, DuckDB, `jq`) takes it as it is. The sidecar is written atomically
before the first row, so there is never a row without it.

What is compared (`settings`): a fingerprint of the model (config.json, each weights file's size,
header and samples of its data, the tokenizer files) rather than its path, so a moved model folder
still resumes and a different checkpoint at the same path does not; the vector length, pooling,
normalization, instruction and its template, the end token, lowercasing, and the length texts are
cut to with --truncate (a file made without truncation takes a run with it when none of its rows is longer:
adopt_truncation). What is only recorded (`info`): the path, dtype and device. A run in float16
and one in float32 give vectors that agree to about 1e-3, which is no reason to refuse a resume.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from model_optimizer.common.fileio import atomic_write, read_json

META_SUFFIX = ".meta.json"
SAMPLE_BYTES = 1 << 16
"""Bytes hashed at each of three places of a weights file's data: enough to tell two checkpoints
apart, while a 16 GB model is fingerprinted in milliseconds instead of a minute of full hashing."""
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
)
LABELS = {
    "model_fingerprint": "model",
    "dimensions": "vector length",
    "pooling": "pooling",
    "normalize": "normalize",
    "instruction": "instruction",
    "instruction_template": "instruction template",
    "end_token_id": "end token id",
    "do_lower_case": "lowercasing",
    "truncate_to": "truncation length",
}


def meta_path(output: Path) -> Path:
    return output.with_name(output.name + META_SUFFIX)


def describe(embedder: Any, dimensions: int | None, instruction: str | None, truncate: bool) -> dict[str, Any]:
    """The sidecar's contents for a run of `embedder` with these per-request options."""
    rules = embedder.rules
    settings = {
        "model_fingerprint": model_fingerprint(embedder.model_dir, embedder.tokenizer_dir, embedder.config.load_format),
        "dimensions": dimensions or embedder.hidden_size,
        "pooling": embedder.pooling,
        "normalize": embedder.normalize,
        "instruction": instruction,
        "instruction_template": rules.instruction_template if instruction else None,
        "end_token_id": rules.end_token_id,
        "do_lower_case": rules.do_lower_case,
        "truncate_to": rules.max_seq_length if truncate else None,
    }
    dtype = next(embedder.backbone.parameters()).dtype
    info = {
        "model": str(embedder.model_dir.resolve()),
        "load_format": embedder.config.load_format,
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(embedder.device),
    }
    return {"format": 1, "settings": settings, "info": info}


def model_fingerprint(model_dir: Path, tokenizer_dir: Path, load_format: str) -> str:
    """sha256 over config.json, the tokenizer files and, unless the weights are dummy ones (drawn from a
    fixed seed), each weights file's name, size, header and three samples of its data."""
    from model_optimizer.common.checkpoint_files import safetensors_files

    digest = hashlib.sha256()
    digest.update((model_dir / "config.json").read_bytes())
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            digest.update(name.encode() + b"\0" + (tokenizer_dir / name).read_bytes())
    if load_format == "dummy":
        digest.update(b"dummy weights")
        return digest.hexdigest()[:16]
    for path in safetensors_files(model_dir):
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode())
        with path.open("rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            digest.update(f.read(min(header_len, size)))
            for offset in (8 + header_len, (size + 8 + header_len) // 2, size - SAMPLE_BYTES):
                f.seek(max(0, offset))
                digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()[:16]


def read_meta(output: Path) -> dict[str, Any] | None:
    """The sidecar of `output`, or None when there is none."""
    path = meta_path(output)
    if not path.is_file():
        return None
    meta = read_json(path)
    if not isinstance(meta, dict) or not isinstance(meta.get("settings"), dict):
        raise ValueError(
            f"{path} is not an embedding output description (no 'settings' object); "
            f"remove it only if {output} holds vectors of this very model and settings"
        )
    return meta


def write_meta(output: Path, meta: dict[str, Any]) -> None:
    atomic_write(meta_path(output), json.dumps(meta, indent=2) + "\n")


def adopt_truncation(stored: dict[str, Any], current: dict[str, Any], longest_row: int | None) -> dict[str, Any]:
    """`stored` with this run's truncation length when the file was made without truncation and no row in it
    is longer than that length (`longest_row`: the most tokens a row read; None: unknown); else `stored`.

    Those rows were embedded whole, as a run with --truncate embeds them too (it cuts only longer ones), so
    their vectors are this run's: a run that stopped at an over-long row resumes with --truncate, as the
    error that stopped it advises."""
    old, new = stored["settings"], current["settings"]
    cut_to = new.get("truncate_to")
    if old.get("truncate_to") is not None or cut_to is None or longest_row is None or longest_row > cut_to:
        return stored
    return {**stored, "settings": {**old, "truncate_to": cut_to}}


def check_same(output: Path, stored: dict[str, Any], current: dict[str, Any]) -> None:
    """ValueError listing every setting in which this run differs from the one that wrote `output`."""
    old, new = stored["settings"], current["settings"]
    diffs = [
        f"{LABELS.get(key, key)}: {old.get(key)!r} in the file, {new.get(key)!r} now"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]
    if not diffs:
        return
    if old.get("model_fingerprint") != new.get("model_fingerprint"):
        diffs.append(
            f"(the file's model: {stored.get('info', {}).get('model', '?')}; this run's: {current['info']['model']})"
        )
    raise ValueError(
        f"{output} holds vectors made differently, and appending would mix incomparable vectors in one file: "
        + "; ".join(diffs)
        + f". Rerun with the settings in {meta_path(output).name}, or write to another --output."
    )
