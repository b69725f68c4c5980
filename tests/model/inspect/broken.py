"""Build broken checkpoints from a clean tiny one: each function breaks it in one of the ways
checkpoints arrive from training. All edits are on real files."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_tensors(folder: Path, edit: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> None:
    """Rewrite the single model.safetensors with `edit(state_dict)`."""
    path = folder / "model.safetensors"
    save_file({k: v.contiguous() for k, v in edit(load_file(str(path))).items()}, str(path), metadata={"format": "pt"})


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text()) if path.is_file() else {}
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data, indent=1))


def add_prefix(prefix: str) -> Callable[[dict], dict]:
    return lambda sd: {prefix + k: v for k, v in sd.items()}


def add_optimizer_state(sd: dict) -> dict:
    extra = {
        f"optimizer.state.{i}.exp_avg": torch.zeros_like(v) for i, (k, v) in enumerate(sd.items()) if "q_proj" in k
    }
    return {**sd, **extra, "optimizer.step": torch.tensor([10.0])}


def add_ema(sd: dict) -> dict:
    return {**sd, **{f"ema.{k}": v.clone() for k, v in sd.items() if "mlp" in k}}


def lora_factors(sd: dict, rank: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """lora_A / lora_B for every q_proj and v_proj, non-zero so a missing merge changes the output."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in sd.items():
        if k.endswith(("q_proj.weight", "v_proj.weight")):
            base = k.removesuffix(".weight")
            out[f"{base}.lora_A.weight"] = torch.randn(rank, v.shape[1], generator=gen) * 0.3
            out[f"{base}.lora_B.weight"] = torch.randn(v.shape[0], rank, generator=gen) * 0.3
    return out


def merged(sd: dict, factors: dict, scale: float) -> dict:
    """The reference merge, written independently of modelio: W + scale * B @ A, in float32."""
    out = dict(sd)
    for k in sd:
        base = k.removesuffix(".weight")
        if f"{base}.lora_A.weight" in factors:
            a, b = factors[f"{base}.lora_A.weight"], factors[f"{base}.lora_B.weight"]
            out[k] = (sd[k].float() + scale * (b.float() @ a.float())).to(sd[k].dtype)
    return out


def to_dtype(dtype: torch.dtype, match: str) -> Callable[[dict], dict]:
    return lambda sd: {k: v.to(dtype) if match in k else v for k, v in sd.items()}
