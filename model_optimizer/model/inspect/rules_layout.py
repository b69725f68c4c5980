"""Findings about how the weights are laid out: dtype codes, byte ranges, the shard index against the
shards' own headers, and an lm_head the config ties away."""

from __future__ import annotations

from pathlib import PurePosixPath

from model_optimizer.environment.findings import Finding
from model_optimizer.model.inspect.context import InspectContext

MAX_LISTED = 8


def dtype_codes(ctx: InspectContext) -> list[Finding]:
    """A header dtype that is no safetensors code ("Q4", "float16"): the safetensors library refuses the
    file, and the byte counts here would guess one byte an element."""
    from model_optimizer.common.safetensors_dtypes import DTYPE_BYTES

    unknown = sorted({t.dtype for t in ctx.checkpoint.tensors if t.dtype not in DTYPE_BYTES})
    if not unknown:
        return []
    names = [t.name for t in ctx.checkpoint.tensors if t.dtype not in DTYPE_BYTES]
    return [
        Finding(
            "weights.unknown_dtype",
            "error",
            f"{len(names)} tensors have a dtype that is no safetensors dtype ({', '.join(unknown)}): {_some(names)}",
            f"The engine cannot read them; safetensors' dtypes are {', '.join(DTYPE_BYTES)}.",
            {"any": ["Save the weights again with safetensors (the header was written or edited by hand)"]},
            {"dtypes": unknown, "tensors": names},
        )
    ]


def byte_ranges(ctx: InspectContext) -> list[Finding]:
    """Headers whose data_offsets the safetensors library refuses (missing, overlapping, with gaps, bytes
    past the last tensor): the engine fails on them at load ("not a readable safetensors file")."""
    from model_optimizer.model.inspect.headers import layout_error

    by_file: dict[str, list] = {}
    for t in ctx.checkpoint.tensors:
        by_file.setdefault(t.file, []).append(t)
    findings = []
    for file, tensors in by_file.items():
        error = layout_error(ctx.checkpoint.folder / file, tensors)
        if error is not None:
            findings.append(
                Finding(
                    "weights.bad_offsets",
                    "error",
                    f"{file}: {error}",
                    "The safetensors library refuses the file, so the engine stops at load (and --fix cannot read it).",
                    {"any": [f"Download or save {file} again"]},
                    {"file": file},
                )
            )
    return findings


def shard_index(ctx: InspectContext) -> list[Finding]:
    """model.safetensors.index.json's weight_map against the headers. The engine reads every tensor of each
    shard the index lists, whatever the map says, but transformers and other loaders go by the map: a
    tensor mapped to a shard that does not hold it (or held nowhere), or one the map leaves out, is an
    index edited or written apart from its shards."""
    from model_optimizer.common.fileio import read_json

    index = ctx.checkpoint.folder / "model.safetensors.index.json"
    if not index.is_file():
        return []
    weight_map = read_json(index)["weight_map"]  # checked by headers.checkpoint_files when the shards were read
    held = {t.name: t.file for t in ctx.checkpoint.tensors}
    elsewhere = sorted(n for n, f in weight_map.items() if n in held and PurePosixPath(f).name != held[n])
    nowhere = sorted(n for n in weight_map if n not in held)
    unlisted = sorted(n for n in held if n not in weight_map)
    if not (elsewhere or nowhere or unlisted):
        return []
    parts = [
        f"{len(names)} {what}: {_some(names)}"
        for names, what in (
            (elsewhere, "mapped to a shard that does not hold them"),
            (nowhere, "mapped but in no listed shard"),
            (unlisted, "in a shard but not in the map"),
        )
        if names
    ]
    return [
        Finding(
            "weights.index_mismatch",
            "warn",
            f"model.safetensors.index.json disagrees with the shards' headers: {'; '.join(parts)}",
            "The engine reads whole shards, so it goes by the headers; transformers and other loaders go by the "
            "index and fail or skip tensors.",
            {"any": ["Save the checkpoint again (save_pretrained writes the index from the shards)"]},
            {"elsewhere": elsewhere, "nowhere": nowhere, "unlisted": unlisted},
        )
    ]


def tied_lm_head(ctx: InspectContext) -> list[Finding]:
    """config.json ties lm_head to the embedding, yet the files hold an lm_head of their own: the engine
    skips it and uses the embedding, which is wrong if lm_head was trained apart from it."""
    if not ctx.raw_check.tied_embeddings:
        return []
    heads = [name for name in ctx.raw_check.skipped if name.endswith("lm_head.weight")]
    if not heads:
        return []
    return [
        Finding(
            "weights.tied_lm_head_ignored",
            "warn",
            f"the model ties lm_head to the embedding, so the checkpoint's {heads[0]} is ignored",
            "The engine (and transformers) compute the logits with the embedding matrix. If this lm_head equals "
            "the embedding (a tied model saved with both), nothing changes; if it was trained on its own (an "
            "untied fine-tune), the outputs are wrong.",
            {
                "any": [
                    'If lm_head was trained apart from the embedding, set "tie_word_embeddings": false in config.json'
                ]
            },
            {"tensors": heads},
        )
    ]


def _some(names: list[str]) -> str:
    more = f" (+{len(names) - MAX_LISTED} more)" if len(names) > MAX_LISTED else ""
    return ", ".join(names[:MAX_LISTED]) + more


RULES = (dtype_codes, byte_ranges, shard_index, tied_lm_head)
