"""Read what a sentence-transformers folder says about pooling, normalization and input length.

Files read (all optional; a plain transformers folder gives an empty `FolderSpec`):
- `modules.json`: the module chain; we support Transformer -> Pooling -> Normalize.
- `<pooling dir>/config.json`: `pooling_mode` (new format) or the `pooling_mode_*` booleans (old).
- `sentence_bert_config.json`: `max_seq_length` and `do_lower_case`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from model_optimizer.common.fileio import read_json

POOLING_MODES = ("mean", "cls", "last", "max", "mean_sqrt_len")
# sentence-transformers' names -> ours
_ST_MODES = {"mean": "mean", "cls": "cls", "lasttoken": "last", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len"}
_LEGACY_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
SUPPORTED_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclass
class FolderSpec:
    """The embedding recipe a model folder declares; None where it declares nothing."""

    pooling: str | None = None
    """One of POOLING_MODES."""
    normalize: bool | None = None
    """True when modules.json has a Normalize module (False when modules.json exists without one)."""
    max_seq_length: int | None = None
    do_lower_case: bool = False
    include_prompt: bool = True


def read_folder_spec(model_dir: str | Path) -> FolderSpec:
    model_dir = Path(model_dir)
    spec = FolderSpec()
    _read_sbert_config(model_dir / "sentence_bert_config.json", spec)
    modules_path = model_dir / "modules.json"
    if not modules_path.is_file():
        return spec
    modules = _load_json(modules_path)
    if not isinstance(modules, list):
        raise ValueError(f"{modules_path}: expected a JSON list of modules")
    spec.normalize = False
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in SUPPORTED_MODULES:
            raise ValueError(
                f"{modules_path}: module {module.get('type')!r} is not supported; supported: {', '.join(SUPPORTED_MODULES)}"
            )
        if kind == "Pooling":
            _read_pooling(model_dir / module.get("path", "1_Pooling") / "config.json", spec)
        elif kind == "Normalize":
            spec.normalize = True
    return spec


def _read_sbert_config(path: Path, spec: FolderSpec) -> None:
    if not path.is_file():
        return
    cfg = _load_json(path)
    if cfg.get("max_seq_length") is not None:
        spec.max_seq_length = int(cfg["max_seq_length"])
    spec.do_lower_case = bool(cfg.get("do_lower_case", False))


def _read_pooling(path: Path, spec: FolderSpec) -> None:
    cfg = _load_json(path)
    modes = cfg.get("pooling_mode")
    if modes is None:
        modes = [name for key, name in _LEGACY_KEYS.items() if cfg.get(key)]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1:
        raise ValueError(f"{path}: exactly one pooling mode is supported, the folder asks for {modes or 'none'}")
    if modes[0] not in _ST_MODES:
        raise ValueError(f"{path}: pooling mode {modes[0]!r} is not supported; supported: {', '.join(_ST_MODES)}")
    spec.pooling = _ST_MODES[modes[0]]
    spec.include_prompt = bool(cfg.get("include_prompt", True))


def _load_json(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (named by the sentence-transformers modules.json)")
    return read_json(path)
