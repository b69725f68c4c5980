"""Read a checkpoint's config.json into the few numbers a decoder needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from model_optimizer.common.fileio import read_json


@dataclass
class DecoderArgs:
    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    """The longest context the model serves (`context_length`): what max_model_len defaults to and is capped by,
    and what the rotary tables cover."""
    tie_word_embeddings: bool
    attention_bias: bool
    layer_windows: tuple[int | None, ...]
    """Each decoder layer's sliding window, None where it attends to the whole context (`layer_windows`)."""
    torch_dtype: str
    hf: dict
    """The raw config.json, for model-specific keys (rope parameters and the like)."""
    qkv_bias: bool = False
    """A bias on the q, k and v projections even without attention_bias (Qwen2)."""
    qk_norm: bool = False
    """RMSNorm on each head's queries and keys before rotary (Qwen3)."""
    mlp_bias: bool = False
    """A bias on the MLP's gate, up and down projections (Llama's `mlp_bias`)."""
    host_layer_ids: frozenset[int] = frozenset()
    """Decoder layers to build in host memory: those cpu_offload_gb keeps there (runner/weight_offload.py)."""
    max_model_len: int | None = None
    """The engine's max_model_len when it was given one (None: max_position_embeddings): what longrope picks
    its factors by (layers/longrope_rotary.py)."""

    @classmethod
    def from_dict(cls, hf: dict, source: str = "config.json") -> DecoderArgs:
        """ValueError naming `source` (the config file) when a setting is missing or not a number."""
        archs = hf.get("architectures") or []
        if not archs:
            raise ValueError(f"{source} has no 'architectures' list; cannot tell which model this is")
        for key in REQUIRED_INTS:
            value = hf.get(key)
            if value is None:
                raise ValueError(f"{source} lacks {key!r}, which a {archs[0]} needs")
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{source}: {key!r} must be a positive integer, got {value!r}")
        num_heads = hf["num_attention_heads"]
        hidden = hf["hidden_size"]
        arch = archs[0]
        return cls(
            architecture=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hidden // num_heads,
            intermediate_size=hf["intermediate_size"],
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            max_position_embeddings=context_length(hf),
            tie_word_embeddings=tied_embeddings(hf),
            attention_bias=bool(hf.get("attention_bias", False)) and arch not in NO_ATTENTION_BIAS,
            layer_windows=layer_windows(hf, arch, hf["num_hidden_layers"], source),
            torch_dtype=str(hf.get("torch_dtype") or hf.get("dtype") or "float32"),
            hf=hf,
            mlp_bias=bool(hf.get("mlp_bias", False)) and arch in MLP_BIAS,
        )


NO_ATTENTION_BIAS = ("MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Phi3ForCausalLM")
"""Architectures whose transformers class reads no `attention_bias` (Qwen2's q/k/v bias is always on:
models/qwen2.py; Phi-3 has none, though Phi-4-mini's config.json says `attention_bias`), so the key is ignored
as transformers ignores it."""
MLP_BIAS = ("LlamaForCausalLM",)
"""Architectures whose transformers class reads `mlp_bias` (DeepSeek-V2's is refused: models/deepseek.py)."""
TIED_BY_DEFAULT = ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "gemma2", "gemma3_text")
"""Classes (or model types) whose transformers config ties lm_head to the embedding when config.json says
nothing; every other family the engine loads defaults to untied."""
WINDOW_SWITCH = {
    "MistralForCausalLM": None,
    "MixtralForCausalLM": None,
    "Qwen3MoeForCausalLM": False,
    "Qwen2ForCausalLM": False,
    "Qwen3ForCausalLM": False,
    "Phi3ForCausalLM": None,
}
"""Architectures whose transformers class applies `sliding_window` -> the default of their `use_sliding_window`
switch (None: no switch, the window applies whenever set). Others have no window, whatever their config.json
says (Llama, GLM, DeepSeek), or place their own (Gemma 3: models/gemma3.py)."""
LAYERED_WINDOWS = ("Qwen2ForCausalLM", "Qwen3ForCausalLM")
"""Of those, the ones whose window covers only the layers `layer_types` calls "sliding_attention", or without
that list the layers from `max_window_layers` on (MAX_WINDOW_LAYERS by default), as transformers places it."""
MAX_WINDOW_LAYERS = 28
"""transformers' Qwen2Config and Qwen3Config default."""


def tied_embeddings(hf: dict) -> bool:
    """Whether lm_head is the token embedding: config.json's tie_word_embeddings, else its class's default in
    transformers (TIED_BY_DEFAULT). The one rule for the engine, inspect and the tuner's cost model."""
    if hf.get("tie_word_embeddings") is not None:
        return bool(hf["tie_word_embeddings"])
    arch = (hf.get("architectures") or [None])[0]
    return arch in TIED_BY_DEFAULT or hf.get("model_type") in TIED_BY_DEFAULT


def layer_windows(hf: dict, arch: str, num_layers: int, source: str = "config.json") -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention) as transformers' class for `arch` places it; ValueError
    naming `source` for a window that is not a positive integer or a `layer_types` list that does not fit."""
    window, switch = hf.get("sliding_window"), WINDOW_SWITCH.get(arch)
    if arch not in WINDOW_SWITCH or not window or (switch is not None and not hf.get("use_sliding_window", switch)):
        return (None,) * num_layers
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise ValueError(f"{source}: 'sliding_window' must be a positive integer or null, got {window!r}")
    if arch not in LAYERED_WINDOWS:
        return (window,) * num_layers
    types = hf.get("layer_types")
    if types is None:
        first = hf.get("max_window_layers", MAX_WINDOW_LAYERS)
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise ValueError(f"{source}: 'max_window_layers' must be a non-negative integer, got {first!r}")
        return tuple(window if i >= first else None for i in range(num_layers))
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != num_layers or any(t not in kinds for t in types):
        raise ValueError(f"{source}: 'layer_types' must list {num_layers} of {', '.join(kinds)}, got {types!r}")
    return tuple(window if t == "sliding_attention" else None for t in types)


def context_length(hf: dict) -> int:
    """config.json's `max_position_embeddings` (4096 when absent or null), or where YaRN rope scaling says
    how far it stretches its pretraining length, `original_max_position_embeddings` x `factor` when that is
    longer: vLLM's rule, so Qwen2.5's 32,768 with YaRN factor 4 serves 131,072 tokens. Other scalings keep
    max_position_embeddings (Llama 3.1's, Gemma 3's and Phi-3's longrope already say their scaled length)."""
    base = hf.get("max_position_embeddings") or 4096
    rope = {
        k: v for key in ("rope_parameters", "rope_scaling") if isinstance(hf.get(key), dict) for k, v in hf[key].items()
    }
    original = hf.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
    factor = rope.get("factor")
    numbers = all(isinstance(x, (int, float)) and x > 0 for x in (original, factor))
    if rope.get("rope_type", rope.get("type")) != "yarn" or not numbers:
        return base  # malformed settings are the rope's own error (RopeConfig, inspect's findings)
    return max(base, int(original * factor))


REQUIRED_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
OPTIONAL_INTS = ("num_key_value_heads", "head_dim", "max_position_embeddings")
FLOATS = ("rms_norm_eps", "layer_norm_eps", "rope_theta")
ROPE_KEYS = ("rope_scaling", "rope_parameters")


def check_settings(hf: dict, path: Path) -> None:
    """ValueError naming `path` for a size, epsilon or rope setting of the wrong JSON type (a string, a
    list, a negative size): torch or transformers would otherwise fail on it later with their own words."""
    for key in REQUIRED_INTS + OPTIONAL_INTS:  # both encoders and decoders have these
        value = hf.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ValueError(f"{path}: {key!r} must be a positive integer, got {value!r}")
    for key in FLOATS:
        value = hf.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"{path}: {key!r} must be a positive number, got {value!r}")
    for key in ROPE_KEYS:
        value = hf.get(key)
        if value and not isinstance(value, dict):  # false and {} mean none, as the rope code reads them
            raise ValueError(f"{path}: {key!r} must be an object of rope settings (or null / false), got {value!r}")


def read_config(model_dir: str | Path) -> dict:
    """config.json as a dict with an `architectures` list (taken from `model_type` when absent, as in
    older BERT checkpoints); ValueError naming the file when it is not JSON or names no model, so a
    broken config is reported as itself and not as whatever fails next (the tokenizer, say)."""
    from model_optimizer.runtime.models.registry import MODEL_TYPES, supported_architectures

    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: a model folder needs config.json (and *.safetensors)")
    hf = read_json(path)
    if not isinstance(hf, dict):
        raise ValueError(f"{path} holds a JSON {type(hf).__name__}, not an object of model settings")
    check_settings(hf, path)
    archs = hf.get("architectures")
    if archs is None:
        model_type = hf.get("model_type")
        if model_type not in MODEL_TYPES:
            said = f"model_type {model_type!r} is not one we know" if model_type else "no 'model_type' either"
            raise ValueError(
                f"{path} has no 'architectures' list and {said}, so the model class is unknown; "
                f'add e.g. "architectures": ["Qwen3ForCausalLM"] (supported: {", ".join(supported_architectures())})'
            )
        return {**hf, "architectures": [MODEL_TYPES[model_type]]}
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise ValueError(f"{path}: 'architectures' must be a non-empty list of class names, got {archs!r}")
    return text_model_config(hf, path)


def text_model_config(hf: dict, path: Path) -> dict:
    """The config of an image-and-text checkpoint's language model, as a text checkpoint of it would hold
    (registry.TEXT_OF_MULTIMODAL: Gemma 3 4B-27B), its `text_of` naming the architecture it came from;
    any other config as it is."""
    from model_optimizer.runtime.models.registry import TEXT_OF_MULTIMODAL

    arch = hf["architectures"][0]
    if arch not in TEXT_OF_MULTIMODAL:
        return hf
    text_arch, model_type, defaults = TEXT_OF_MULTIMODAL[arch]
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise ValueError(f"{path}: a {arch} config needs a 'text_config' object (its language model's settings)")
    carried = ("torch_dtype", "dtype", "quantization_config", "eos_token_id", "tie_word_embeddings")
    flat = defaults | text | {k: hf[k] for k in carried if k in hf}
    flat |= {"architectures": [text_arch], "model_type": model_type, "text_of": arch}
    check_settings(flat, path)  # the text config's values, as a text checkpoint's are checked
    return flat


def is_embedding_folder(model_dir: Path) -> bool:
    """A folder that only embeds: an encoder (registry.is_encoder: the BERT family) or a decoder saved without
    its LM head (registry.DECODER_BASE_NAMES: Qwen3-Embedding's Qwen3Model, bge-multilingual-gemma2's
    Gemma2Model). An unknown architecture counts as a decoder, whose loader names it. The one rule for LLM,
    `mopt serve`, `mopt generate` and `mopt quantize`; it lives here, beside the config reader, so that the
    registry reads no files."""
    from model_optimizer.runtime.models.registry import DECODER_BASE_NAMES, is_encoder

    hf = read_config(model_dir)  # a broken config.json is reported as itself
    if (hf.get("architectures") or [None])[0] in DECODER_BASE_NAMES:
        return True
    try:
        return is_encoder(hf)
    except ValueError:
        return False
