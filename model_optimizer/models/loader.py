"""Build a model from a checkpoint folder: safetensors (single or sharded) or dummy weights.

The loader only maps checkpoint names to parameters; each parameter's `weight_loader` puts the
tensor in place (a slice of a fused projection, say) and checks its shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from model_optimizer.layers.linear import default_weight_loader
from model_optimizer.models.model_config import DecoderArgs, read_config
from model_optimizer.models.registry import resolve_model_class

SKIPPED_SUFFIXES = ("rotary_emb.inv_freq",)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_dtype(requested: str, args: DecoderArgs, device: torch.device) -> torch.dtype:
    """`auto` takes the checkpoint's dtype, except float16 on the CPU, which becomes float32."""
    if requested != "auto":
        return DTYPES[requested]
    dtype = DTYPES.get(args.torch_dtype.replace("torch.", ""), torch.float32)
    if device.type == "cpu" and dtype == torch.float16:
        return torch.float32
    return dtype


def load_model(model_dir: str | Path, dtype: str, device: torch.device, load_format: str = "auto") -> nn.Module:
    """Instantiate the model named by config.json and fill its weights."""
    args = DecoderArgs.from_dict(read_config(model_dir))
    model_cls = resolve_model_class(args.architecture)
    model = build_model(lambda: model_cls(args), resolve_dtype(dtype, args, device), device)
    if load_format == "dummy":
        init_dummy_weights(model)
    else:
        load_weights(model, Path(model_dir))
    return model.eval()


def build_model(factory: Callable[[], nn.Module], dtype: torch.dtype, device: torch.device) -> nn.Module:
    """Run `factory` with parameters created directly on `device` in `dtype`."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return factory()
    finally:
        torch.set_default_dtype(default)


def init_dummy_weights(model: nn.Module, seed: int = 0) -> None:
    """Random weights from the config alone (for benchmarks): small uniform values, norms at one.
    Drawn on the parameter's own device, so an 8B model fills in seconds on a GPU."""
    with torch.no_grad():
        for i, (name, param) in enumerate(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            generator = torch.Generator(device=param.device).manual_seed(seed + i)
            param.uniform_(-1e-2, 1e-2, generator=generator)


def safetensors_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = sorted({model_dir / name for name in weight_map.values()})
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} lists shards that are missing: {', '.join(missing)}")
        return files
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors file in {model_dir}")
    return files


def iterate_checkpoint(model_dir: Path) -> Iterator[tuple[Path, str, torch.Tensor]]:
    for path in safetensors_files(model_dir):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield path, name, f.get_tensor(name)


def load_weights(
    model: nn.Module,
    model_dir: Path,
    rename: Callable[[str], str | None] | None = None,
    stacked: dict[str, tuple[str, str]] | None = None,
) -> None:
    """Copy every checkpoint tensor into its parameter; fail on unknown, misshapen or missing ones.

    `rename` maps a checkpoint name to the model's (None: skip the tensor); by default rotary
    caches and a tied lm_head are skipped. `stacked` declares fused projections (default: the
    model's `stacked_params`).
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    stacked = getattr(model, "stacked_params", {}) if stacked is None else stacked
    tied = getattr(getattr(model, "args", None), "tie_word_embeddings", False)
    rename = rename or (lambda name: None if name.endswith(SKIPPED_SUFFIXES) or (tied and name == "lm_head.weight") else name)
    expected_shards = _expected_shards(params, stacked)
    loaded: set[tuple[str, str | None]] = set()
    for path, name, tensor in iterate_checkpoint(model_dir):
        renamed = rename(name)
        if renamed is None:
            continue
        target, shard = _target_name(renamed, stacked)
        param = params.get(target)
        if param is None:
            raise ValueError(f"{path.name}: tensor {name!r} does not belong to {type(model).__name__}")
        loader = getattr(param, "weight_loader", default_weight_loader)
        try:
            with torch.no_grad():
                loader(param, tensor.to(param.dtype), shard) if shard else loader(param, tensor.to(param.dtype))
        except ValueError as exc:
            raise ValueError(f"{path.name}: tensor {name!r}: {exc}") from None
        loaded.add((target, shard))
    missing = sorted(f"{p}[{s}]" if s else p for p, s in expected_shards - loaded if not (tied and p == "lm_head.weight"))
    if missing:
        raise ValueError(f"checkpoint {model_dir} lacks weights for: {', '.join(missing[:10])}")


def _target_name(name: str, stacked: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
    for fragment, (replacement, shard) in stacked.items():
        if fragment in name:
            return name.replace(fragment, replacement), shard
    return name, None


def _expected_shards(params: dict[str, nn.Parameter], stacked: dict[str, tuple[str, str]]) -> set[tuple[str, str | None]]:
    expected: set[tuple[str, str | None]] = set()
    for name in params:
        shards = [s for frag, (rep, s) in stacked.items() if rep in name]
        expected.update((name, s) for s in shards) if shards else expected.add((name, None))
    return expected
