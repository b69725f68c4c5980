"""`mopt inspect --fix OUT`: write a cleaned copy of a checkpoint, never touching the input.

One dtype for every floating tensor, wrapper prefixes stripped, optimizer state and EMA copies
dropped, LoRA merged (W + scale * B @ A in float32), vocab_size set to the embedding's rows,
eos / bos / pad aligned across the files, a chat template added when asked. The folder is built
beside OUT under a temporary name and renamed into place, so OUT is either complete or absent.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from model_optimizer.common.fileio import publish_dir, run_lock, staging_dir
from model_optimizer.model.inspect import cleaning
from model_optimizer.model.inspect.checkpoint import Checkpoint, read_checkpoint
from model_optimizer.model.inspect.headers import CAST_DTYPES as DTYPES
from model_optimizer.model.inspect.headers import TensorInfo
from model_optimizer.model.inspect.rules_weights import LINEAR_KINDS, lora_scale
from model_optimizer.model.inspect.token_alignment import aligned_ids, apply_ids
from model_optimizer.runtime.models.chat_templates import load_template

WEIGHT_FILES = {"adapter_config.json", "trainer_state.json"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".ot", ".gguf", ".onnx")
"""The original's weights in any framework's format (and shard indexes, `*.index.json`): a copy that
carried them would hold stale weights beside its own."""
TRAINING_STATE_PREFIXES = ("optimizer", "scheduler", "rng_state")
MAX_SHARD_BYTES = 4 << 30


@dataclass
class FixOptions:
    dtype: str | None = None
    """bfloat16, float16 or float32; None: the dtype most linear weights have."""
    chat_template: str | None = None
    """A shipped template name or a .jinja file; None keeps the tokenizer's."""


@dataclass
class FixResult:
    out: Path
    dtype: str
    num_tensors: int
    dropped: list[str] = field(default_factory=list)
    merged_lora: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pad_token: str | None = None
    """The tokenizer's new pad token, when pad had to move off an eos id."""


def quantization_tensors(checkpoint: Checkpoint) -> set[str]:
    """Cleaned names of the tensors a quantized layer reads in their own dtype (codes, scales, zero
    points): --fix keeps them as they are, or it would destroy the quantization."""
    from model_optimizer.model.inspect.consumption import check_loading

    return set(check_loading(cleaning.clean_config(checkpoint), cleaning.clean_keys(checkpoint)).quantized)


def main_dtype(checkpoint: Checkpoint) -> str:
    """The float dtype most weights the engine casts have (quantization tensors left out)."""
    from model_optimizer.model.inspect.census import tensor_kind

    own_dtype = quantization_tensors(checkpoint)
    counts: dict[str, int] = {}
    for name, info in cleaning.kept_tensors(checkpoint).items():
        if name not in own_dtype and tensor_kind(info) in LINEAR_KINDS:
            counts[info.dtype_name] = counts.get(info.dtype_name, 0) + info.numel
    floats = {d: n for d, n in counts.items() if d in DTYPES}
    return max(floats, key=floats.get) if floats else "bfloat16"


def fix_checkpoint(src: str | Path, out: str | Path, options: FixOptions) -> FixResult:
    checkpoint = read_checkpoint(src)
    if checkpoint.config.get("text_of"):
        raise ValueError(
            f"--fix does not rewrite a {checkpoint.config['text_of']} checkpoint (image and text): its config and "
            "tensors keep the image-and-text layout that other tools load; the engine serves it as it is"
        )
    out = Path(out).expanduser().resolve()
    _check_target(checkpoint.folder.resolve(), out)
    _check_complete(checkpoint)
    if options.dtype is not None and options.dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}; got {options.dtype!r}")
    template = load_template(options.chat_template) if options.chat_template else None
    cleaning.check_lora(checkpoint)
    dtype = options.dtype or main_dtype(checkpoint)
    with run_lock(out.with_name(f".{out.name}.lock"), out, "mopt inspect --fix", "--fix"):  # one run at a time per OUT
        _check_target(checkpoint.folder.resolve(), out)  # again: a run that held the lock may have filled it
        return _write_copy(checkpoint, out, dtype, template)


def _write_copy(checkpoint: Checkpoint, out: Path, dtype: str, template: str | None) -> FixResult:
    """Build the cleaned copy in a staging folder beside `out` and move it in whole."""
    tmp = staging_dir(out)
    try:
        result = FixResult(out, dtype, 0)
        _write_weights(checkpoint, tmp, dtype, result)
        _write_configs(checkpoint, tmp, dtype, result)
        _copy_tokenizer_and_rest(checkpoint, tmp, template, result)
        publish_dir(tmp, out)  # with the umask's modes: a server running as another user reads it
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def _check_complete(checkpoint: Checkpoint) -> None:
    """ValueError, before anything is written, for a weights file cut short: copying it would fail
    half-way with safetensors' own error, which names no file."""
    from model_optimizer.model.inspect.headers import checkpoint_files, layout_error
    from model_optimizer.runtime.models.checkpoint_reader import check_safetensors_header

    for path in checkpoint_files(checkpoint.folder):
        try:
            check_safetensors_header(path)
        except ValueError as exc:
            raise ValueError(f"--fix cannot clean {checkpoint.folder}: {exc}") from None
        error = layout_error(path, [t for t in checkpoint.tensors if t.file == path.name])
        if error is not None:  # safetensors' own error would name no file and come as a traceback
            raise ValueError(f"--fix cannot clean {checkpoint.folder}: {path.name}: {error}")


def _check_target(src: Path, out: Path) -> None:
    if out == src or src in out.parents:
        raise ValueError(
            f"--fix {out}: the output must be outside the input folder {src} (the input is never modified)"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--fix {out} already exists and is not empty; choose a new folder")
    if out.exists():
        out.rmdir()  # an empty folder: os.replace needs the name free


def _write_weights(checkpoint: Checkpoint, tmp: Path, dtype: str, result: FixResult) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    target = getattr(torch, dtype)
    kept = cleaning.kept_tensors(checkpoint)
    own_dtype = quantization_tensors(checkpoint)
    loras = cleaning.lora_pairs(checkpoint)
    scale, _ = lora_scale(checkpoint.adapter_config)
    kept_names = {info.name for info in kept.values()}
    result.dropped = [t.name for t in checkpoint.tensors if t.name not in kept_names and not _is_lora(t, loras)]
    handles: dict[str, object] = {}

    def tensor(info: TensorInfo) -> torch.Tensor:
        if info.file not in handles:
            handles[info.file] = safe_open(str(checkpoint.folder / info.file), framework="pt")
        return handles[info.file].get_tensor(info.name)  # type: ignore[attr-defined]

    shards = _plan_shards(list(kept.items()), dtype)
    weight_map: dict[str, str] = {}
    for index, names in enumerate(shards):
        file = "model.safetensors" if len(shards) == 1 else f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        state = {}
        for name in names:
            value = tensor(kept[name])
            if name in loras:
                a, b = (tensor(x) for x in loras[name])  # type: ignore[arg-type]
                value = value.float() + scale * (b.float() @ a.float())  # (out, r) @ (r, in) -> (out, in)
                result.merged_lora.append(name)
            cast = value.is_floating_point() and name not in own_dtype  # fp8 codes and their scales stay
            state[name] = value.to(target).contiguous() if cast else value.contiguous()
            weight_map[name] = file
        save_file(state, str(tmp / file), metadata={"format": "pt"})
        result.num_tensors += len(state)
    if len(shards) > 1:
        total = sum(_bytes_at(kept[n], dtype) for n in weight_map)
        (tmp / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
        )


def _is_lora(info: TensorInfo, loras: dict) -> bool:
    return any(info in pair for pair in loras.values())


def _bytes_at(info: TensorInfo, dtype: str) -> int:
    return (
        info.numel * {"bfloat16": 2, "float16": 2, "float32": 4}[dtype]
        if info.dtype.startswith(("F", "BF"))
        else info.nbytes
    )


def _plan_shards(items: list[tuple[str, TensorInfo]], dtype: str) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for name, info in items:
        nbytes = _bytes_at(info, dtype)
        if shards[-1] and size + nbytes > MAX_SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def _write_configs(checkpoint: Checkpoint, tmp: Path, dtype: str, result: FixResult) -> None:
    config = cleaning.clean_config(checkpoint)
    if config.get("vocab_size") != checkpoint.config.get("vocab_size"):
        result.notes.append(
            f"vocab_size {checkpoint.config.get('vocab_size')} -> {config['vocab_size']} (the embedding's rows)"
        )
    config["torch_dtype"] = dtype
    if "dtype" in config:
        config["dtype"] = dtype
    gen = dict(checkpoint.generation_config) if checkpoint.generation_config is not None else None
    ids = aligned_ids(checkpoint)
    apply_ids(config, gen, ids)
    result.notes.extend(ids.notes)
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if gen is not None:
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    if ids.pad_token is not None:
        result.notes.append(f"tokenizer pad token -> {ids.pad_token!r}")
    result.pad_token = ids.pad_token


def carried_files(folder: Path, rewritten: set[str]) -> list[Path]:
    """The files a derived copy of `folder` (--fix's, or `mopt quantize`'s) takes over as they are: all
    but the weights, their shard index, training state and the `rewritten` names the copy writes itself.
    Tokenizers come in many formats (tokenizer.model, *.tiktoken) and trust_remote_code models need
    the .py files config.json's auto_map names, so nothing is picked by suffix: a missing one would
    leave a copy that does not load as the original does."""
    return [
        path
        for path in sorted(folder.iterdir())
        if path.is_file()
        and path.name not in rewritten | WEIGHT_FILES
        and not path.name.endswith((*WEIGHT_SUFFIXES, ".index.json"))
        and not path.name.startswith(TRAINING_STATE_PREFIXES)
    ]


def _copy_tokenizer_and_rest(checkpoint: Checkpoint, tmp: Path, template: str | None, result: FixResult) -> None:
    for path in carried_files(checkpoint.folder, {"config.json", "generation_config.json"}):
        shutil.copy2(path, tmp / path.name)
    tok_config = tmp / "tokenizer_config.json"
    data = json.loads(tok_config.read_text()) if tok_config.is_file() else None
    if data is not None and result.pad_token:
        data["pad_token"] = result.pad_token
    if template is not None:
        (tmp / "chat_template.jinja").write_text(template)
        (tmp / "chat_template.json").unlink(missing_ok=True)
        if data is not None:
            data.pop("chat_template", None)  # one template, in the file transformers 5 reads first
        result.notes.append("chat template written to chat_template.jinja")
    if data is not None:
        tok_config.write_text(json.dumps(data, indent=2) + "\n")
