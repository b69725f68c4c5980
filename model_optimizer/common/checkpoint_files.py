"""Which files of a model folder hold its weights, by the loader's rule (no torch: `mopt inspect` reads
headers with it, the loader and the embedder's metadata read tensors)."""

from __future__ import annotations

from pathlib import Path

from model_optimizer.common.fileio import names_a_file_inside, read_json


def safetensors_files(model_dir: Path) -> list[Path]:
    """The checkpoint's weight files: the shards its index names (each inside the folder and present),
    else every *.safetensors file; FileNotFoundError when there is none."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        content = read_json(index)
        weight_map = content.get("weight_map") if isinstance(content, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index} has no 'weight_map' object of tensor name -> shard file name")
        outside = sorted({name for name in weight_map.values() if not names_a_file_inside(name)})
        if outside:  # an index may not send the loader to read files elsewhere ("../x", "/etc/passwd")
            raise ValueError(
                f"{index} names shards outside the checkpoint folder: {', '.join(outside[:3])}; "
                "a shard is a file name relative to the folder"
            )
        files = sorted({model_dir / name for name in weight_map.values()})
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} lists shards that are missing: {', '.join(missing)}")
        return files
    files = sorted(p for p in model_dir.glob("*.safetensors") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no *.safetensors file in {model_dir}")
    return files
