"""Which checkpoint keys the engine's model will consume, which it lacks, which have the wrong shape.

The model is built from config.json by the engine's own registry, on torch's meta device (no
memory, no weights), and each header key goes through the engine loader's renaming, fused-shard
mapping and the parameter's own `weight_loader` with a meta tensor of the header's shape. So
what inspect predicts is what `load_weights` will do, without reading a byte of tensor data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path


@dataclass
class LoadCheck:
    """The engine loader's verdict on a set of (name, shape) pairs."""

    architecture: str | None = None
    model_class: str | None = None
    error: str | None = None
    """Why the model cannot be built at all (unsupported architecture, rope type, config key)."""
    consumed: int = 0
    unexpected: list[str] = field(default_factory=list)
    """Checkpoint keys the model has no parameter for: the loader fails on the first."""
    missing: list[str] = field(default_factory=list)
    """Parameters (or shards of fused ones, as `name[q]`) no key fills: the loader fails on them."""
    misshapen: list[str] = field(default_factory=list)
    """'key: reason' for keys whose shape the parameter's weight_loader rejects."""
    skipped: list[str] = field(default_factory=list)
    """Keys the loader skips on purpose (rotary caches, a tied lm_head)."""
    quantized: list[str] = field(default_factory=list)
    """Keys a quantized layer takes in its own dtype (codes, scales, zero points): never cast, never --fix'ed."""
    quantization: str | None = None
    """The weight format as the engine will load it ('awq int4 (autoawq layout)'); None for float weights."""
    num_params: int | None = None
    """Parameters the model stands for (a quantized linear counts as its out x in weight)."""
    tied_embeddings: bool = False
    """The engine's model ties lm_head to the embedding (its own default where config.json says nothing:
    Gemma 3 ties); config.json's flag when the model cannot be built."""

    @property
    def loads(self) -> bool:
        return self.error is None and not (self.unexpected or self.missing or self.misshapen)


def build_meta_model(
    config: dict, dtype_name: str = "bfloat16", tensor_parallel_size: int = 1, expert_parallel: bool = False
):
    """The engine's model class for this config.json, its parameters on the meta device (no memory).

    Parameters move to meta as each module registers them; buffers (rotary tables, a few MB) stay
    on the CPU. Building under `torch.device("meta")` instead would run the rotary arithmetic
    through torch's Python reference ops, whose first use imports torch._dynamo: 2-3 s. The model
    is cached per config: the checks and the memory plan of one inspection share it (nothing
    writes to it: a weight_loader's copy into a meta parameter is a no-op).

    With `tensor_parallel_size` N > 1 it is rank 0's shard as a worker of N builds it (every rank's
    shapes are the same): the layers size themselves from `get_tp()`, so the engine's own rules
    (KV heads replicated when fewer than N, vocabulary padded to a multiple of N) apply unchanged,
    and a size the model cannot split raises the engine's ValueError. `expert_parallel`: whole experts
    per rank, as EngineConfig.enable_expert_parallel makes them."""
    return _cached_meta_model(json.dumps(config, sort_keys=True), dtype_name, tensor_parallel_size, expert_parallel)


@lru_cache(maxsize=8)
def _cached_meta_model(config_json: str, dtype_name: str, tensor_parallel_size: int = 1, expert_parallel: bool = False):
    import torch

    from model_optimizer.runtime.models.loader import build_model
    from model_optimizer.runtime.models.model_config import DecoderArgs
    from model_optimizer.runtime.models.registry import resolve_model_class

    args = DecoderArgs.from_dict(json.loads(config_json))
    model_cls = resolve_model_class(args.architecture)
    # long contexts: the CPU rotary tables would take GBs (10 M positions: 12.7 GB and 42 s), so pay the
    # 2-3 s of building them on meta; their sizes, which the memory plan counts, are the same
    where = torch.device("meta" if _rotary_table_bytes(args) > MAX_CPU_ROTARY_BYTES else "cpu")
    with parameters_on_meta(), as_tensor_parallel_rank0(tensor_parallel_size, expert_parallel):
        return build_model(lambda: model_cls(args), getattr(torch, dtype_name), where)


MAX_CPU_ROTARY_BYTES = 64 << 20
"""Above this, build_meta_model builds the rotary tables on the meta device rather than the CPU."""


def _rotary_table_bytes(args) -> int:
    """float32 cos and sin of every position (angle_tables), as config.json's context and head size make them:
    an estimate (an MLA model's rope dimension is smaller), large only where the context is."""
    return 4 * max(int(args.max_position_embeddings), 0) * max(int(args.head_dim), 0)


def _loading_model(config: dict):
    """The meta model as the engine's loader fills it: for a quantized checkpoint (quantization_config),
    a private copy with each linear's quantization attached, so the checkpoint's own tensor names
    (qweight, weight_packed, weight_scale ...) are parameters with the loader's weight_loaders; an
    unsupported format raises the loader's ValueError."""
    import torch

    from model_optimizer.runtime.layers.quantization.attach import attach_quantization
    from model_optimizer.runtime.layers.quantization.spec import resolve_spec

    spec = resolve_spec(config, None)
    if spec is None and not is_encoder_config(config):
        return build_meta_model(config)
    model = private_meta_model(config)
    if spec is not None:
        attach_quantization(model, spec, torch.bfloat16)
    return model


def private_meta_model(
    config: dict, dtype_name: str = "bfloat16", tensor_parallel_size: int = 1, expert_parallel: bool = False
):
    """The engine's model of config.json, an encoder (BERT family) or a decoder (built as build_meta_model
    builds it), on the meta device, as a copy of the caller's own: for one that edits it (attaches
    quantization), which the cached one of build_meta_model must never be."""
    if is_encoder_config(config):
        return _encoder_meta_model(config)
    config_json = json.dumps(config, sort_keys=True)
    return _cached_meta_model.__wrapped__(config_json, dtype_name, tensor_parallel_size, expert_parallel)


def encoder_architecture(config: dict) -> str | None:
    """The encoder (BERT family) config.json names, in `architectures` or, as older BERT folders do, by
    `model_type` alone (read_config's rule); None for anything else. Encoders are loaded by the embedding
    engine (runtime/embed), not the decoder loader."""
    from model_optimizer.runtime.models.registry import ENCODER_ARCHITECTURES, MODEL_TYPES

    archs = config.get("architectures")
    arch = archs[0] if archs else MODEL_TYPES.get(config.get("model_type"))
    return arch if arch in ENCODER_ARCHITECTURES else None


_LAYER_INDEX = re.compile(r"\.layers?\.(\d+)\.")


def _layers_held(names: Iterable[str]) -> int:
    """Decoder (or encoder) layers the tensor names number: the highest index plus one, 0 for none."""
    indices = [int(m.group(1)) for name in names if (m := _LAYER_INDEX.search(name))]
    return max(indices) + 1 if indices else 0


def is_encoder_config(config: dict) -> bool:
    return encoder_architecture(config) is not None


def _encoder_meta_model(config: dict):
    """The encoder as runtime/embed/backbone.py builds it, its parameters on the meta device."""
    import torch

    from model_optimizer.runtime.models.bert import BertArgs, BertModel
    from model_optimizer.runtime.models.loader import build_model

    config = {**config, "architectures": [encoder_architecture(config)]}
    try:
        args = BertArgs.from_dict(config)
    except KeyError as exc:
        raise ValueError(f"config.json lacks {exc.args[0]!r}, which a {config['architectures'][0]} needs") from None
    with parameters_on_meta():
        return build_model(lambda: BertModel(args), torch.float32, torch.device("cpu"))


def _staged_params(model) -> set[int]:
    """ids of the parameters that stage a quantized checkpoint's own tensors (sources.StagedSource slots)."""
    from model_optimizer.runtime.layers.linear import Linear
    from model_optimizer.runtime.layers.quantization.sources import StagedSource

    out = set()
    for module in model.modules():
        source = getattr(getattr(module, "quant_method", None), "source", None)
        if isinstance(module, Linear) and isinstance(source, StagedSource):
            out.update(id(module._parameters[name]) for name in source.slots)
    return out


@contextmanager
def as_tensor_parallel_rank0(size: int, expert_parallel: bool = False) -> Iterator[None]:
    """Layers built inside see themselves as rank 0 of `size` (runtime/distributed.py's `get_tp()`), with no
    process group: building only reads the rank and size, collectives run in forward, never here."""
    if size < 1:
        raise ValueError(f"tensor_parallel_size must be at least 1, got {size}")
    from model_optimizer.runtime import distributed as state

    saved = state._current
    state._current = state.TensorParallel(0, size, expert_parallel)
    try:
        yield
    finally:
        state._current = saved


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every nn.Parameter registered inside moves to the meta device (CPU storage is allocated by
    torch.empty without touching its pages, then dropped); a parameter already on meta is shared
    as is, so tied weights stay tied."""
    from torch import nn

    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    nn.Module.register_parameter = register  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def check_loading(config: dict, tensors: Iterable[tuple[str, tuple[int, ...]]]) -> LoadCheck:
    """Run the loader's rules over (name, shape) pairs, collecting every problem instead of the first."""
    import torch

    from model_optimizer.runtime.layers.linear import default_weight_loader
    from model_optimizer.runtime.layers.quantization.summary import summarize_weights
    from model_optimizer.runtime.models.loader import _expected_shards, _target_name, skipped_on_purpose
    from model_optimizer.runtime.models.model_config import check_settings, tied_embeddings

    archs = config.get("architectures") or []
    check = LoadCheck(architecture=archs[0] if archs else None)
    check.tied_embeddings = tied_embeddings(config)
    try:  # the engine checks these first (read_config): a rope_theta of "x" stopped generate, not inspect
        check_settings(config, Path("config.json"))
    except ValueError as exc:
        check.error = str(exc).removeprefix("config.json: ")  # the findings name the file
        return check
    tensors = list(tensors)
    declared, held = config.get("num_hidden_layers"), _layers_held(name for name, _ in tensors)
    if isinstance(declared, int) and held and declared > 2 * held + 16:
        # a typo such as 1,000,000 would have the meta model built layer by layer for hours
        check.error = f"config.json's num_hidden_layers is {declared:,}, but the weights hold {held} layers"
        return check
    try:
        model = _loading_model(config)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        # RuntimeError: torch refusing a size from config.json (a negative max_position_embeddings'
        # rotary table, a vocab_size whose embedding cannot be allocated even before it moves to meta)
        check.error = f"missing config key {exc}" if isinstance(exc, KeyError) else str(exc)
        return check
    check.model_class = type(model).__name__
    summary = summarize_weights(model)
    check.quantization, check.num_params = summary.quantization, summary.num_params
    params = dict(model.named_parameters(remove_duplicate=False))
    staged = _staged_params(model)
    stacked = getattr(model, "stacked_params", {})
    tied = check.tied_embeddings = bool(getattr(model.args, "tie_word_embeddings", False))
    rename = getattr(model, "checkpoint_name", None)  # names the model maps itself (an encoder's, Gemma 3's)
    loaded: set[tuple[str, str | None]] = set()
    for name, shape in tensors:
        ours = rename(name) if rename is not None else name
        if ours is None or skipped_on_purpose(model, ours) or (tied and ours == "lm_head.weight"):
            check.skipped.append(name)
            continue
        target, shard = _target_name(ours, stacked)
        param = params.get(target)
        if param is None:
            check.unexpected.append(name)
            continue
        loader = getattr(param, "weight_loader", default_weight_loader)
        try:  # RuntimeError from torch.empty: a header shape whose size overflows (a corrupt header)
            probe = torch.empty(shape, dtype=param.dtype, device="meta")
            loader(param, probe, shard) if shard else loader(param, probe)
        except (ValueError, RuntimeError) as exc:
            check.misshapen.append(f"{name}: {exc}")
            loaded.add((target, shard))  # there, of the wrong shape: reported as such, not also as missing
            continue
        loaded.add((target, shard))
        check.consumed += 1
        if id(param) in staged:
            check.quantized.append(name)
    expected = _expected_shards(params, stacked)
    check.missing = sorted(
        f"{p}[{s}]" if s else p for p, s in expected - loaded if not (tied and p == "lm_head.weight")
    )
    check.misshapen += _staged_shape_errors(model)
    return check


def _staged_shape_errors(model) -> list[str]:
    """'layer: reason' for each quantized layer whose staged tensors the engine's converter refuses by shape
    (scales of another group size than quantization_config's, codes of another width). The weight_loader
    only stashes such tensors; their shapes are checked when the layer is finished after loading, so the
    converter runs here on the meta probes. weight_shape is a value, not a shape: it is taken as right.
    A layer missing a tensor is left to `missing`; an op meta tensors cannot run proves nothing and is
    passed over."""
    import torch

    from model_optimizer.runtime.layers.linear import Linear
    from model_optimizer.runtime.layers.quantization.sources import StagedSource

    errors = []
    for name, layer in model.named_modules():
        method = getattr(layer, "quant_method", None)
        source = getattr(method, "source", None)
        if not (isinstance(layer, Linear) and isinstance(source, StagedSource) and layer.staged):
            continue
        offsets = getattr(layer, "shard_offsets", {None: (0, layer.out_features)})
        staged = dict(layer.staged)
        for slot, shard in staged:
            if slot == "weight_shape":
                rows = offsets.get(shard, (0, layer.out_features))[1]
                staged[(slot, shard)] = torch.tensor([rows, layer.in_features])
        saved, layer.staged = layer.staged, staged
        try:
            with torch.device("meta"):  # the converter's own tensors (torch.arange, torch.full) on meta too
                source.finish(layer, method)
        except ValueError as exc:
            if not str(exc).startswith("checkpoint lacks"):  # reported as missing parameters
                errors.append(f"{name}: {exc}")
        except (RuntimeError, NotImplementedError, TypeError, IndexError):
            pass
        finally:
            layer.staged = saved
    return errors
