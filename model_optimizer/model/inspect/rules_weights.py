"""Findings about the model and its weights: architecture, rope, leftovers, keys, dtypes, quantization."""

from __future__ import annotations

from collections import Counter

from model_optimizer.environment.findings import Finding
from model_optimizer.model.inspect.context import InspectContext
from model_optimizer.model.inspect.rules_quant import quant_spec_error, quantization

LINEAR_KINDS = ("attention", "mlp", "experts", "embedding", "lm_head", "other")
"""Kinds whose weights are matmuls in the model dtype; a router ("router") may be kept in float32 on purpose."""
MAX_LISTED = 8


def _some(names: list[str]) -> str:
    more = f" (+{len(names) - MAX_LISTED} more)" if len(names) > MAX_LISTED else ""
    return ", ".join(names[:MAX_LISTED]) + more


def architecture(ctx: InspectContext) -> list[Finding]:
    from model_optimizer.model.inspect.consumption import encoder_architecture
    from model_optimizer.runtime.models.registry import ARCHITECTURES

    archs = ctx.checkpoint.config.get("architectures") or []
    supported = sorted(ARCHITECTURES)
    if ctx.encoder:
        return _encoder_architecture(encoder_architecture(ctx.checkpoint.config))
    if not archs:
        return [
            Finding(
                "model.no_architecture",
                "error",
                "config.json has no 'architectures' list",
                "The engine picks the model class by this name and cannot load the checkpoint without it.",
                {"any": [f'Add "architectures": ["<one of {", ".join(supported)}>"] to config.json']},
            )
        ]
    if archs[0] not in ARCHITECTURES:
        return [
            Finding(
                "model.architecture_unsupported",
                "error",
                f"architecture {archs[0]} is not supported by the engine",
                f"Supported: {', '.join(supported)}. `mopt serve` would stop at load time.",
                {
                    "any": [
                        "Serve it with an engine that supports it, or convert it to one of the supported architectures"
                    ]
                },
                {"architecture": archs[0], "supported": supported},
            )
        ]
    return [
        Finding(
            "model.architecture",
            "ok",
            f"architecture {archs[0]} -> {ctx.raw_check.model_class or ARCHITECTURES[archs[0]][1]}",
            details={"supported": supported},
        )
    ]


def _encoder_architecture(arch: str) -> list[Finding]:
    """An encoder is a supported model of another kind: embeddings, not generation."""
    return [
        Finding(
            "model.encoder",
            "ok",
            f"architecture {arch}: an encoder, served for embeddings (`mopt embed`, `mopt serve`'s "
            "/v1/embeddings); the generation checks (rope, eos, chat template) do not apply",
            details={"architecture": arch},
        )
    ]


def truncated(ctx: InspectContext) -> list[Finding]:
    """A weights file shorter than its header's byte ranges (an interrupted download or copy): the engine's
    own check (the one generate, quantize and serve stop at), so inspect says what they would."""
    from model_optimizer.model.inspect.headers import checkpoint_files
    from model_optimizer.runtime.models.checkpoint_reader import check_safetensors_header

    findings = []
    for path in checkpoint_files(ctx.checkpoint.folder):
        try:
            check_safetensors_header(path)
        except ValueError as exc:
            findings.append(
                Finding(
                    "weights.truncated",
                    "error",
                    str(exc),
                    "The engine refuses the checkpoint at load time; --fix cannot clean what is not there.",
                    {"any": [f"Download or save {path.name} again"]},
                    {"file": path.name, "bytes": path.stat().st_size},
                )
            )
    return findings


def rope(ctx: InspectContext) -> list[Finding]:
    if ctx.encoder:  # learned absolute positions
        return []
    from model_optimizer.runtime.layers.rotary import ROPE_TYPES, RopeConfig
    from model_optimizer.runtime.layers.yarn_rotary import rope_parameters
    from model_optimizer.runtime.models.mla_args import MLA_ARCHITECTURES
    from model_optimizer.runtime.models.phi3 import PHI3_ROPE_TYPES, phi3_config

    config, rope_types = ctx.checkpoint.config, ROPE_TYPES
    try:
        if (config.get("architectures") or [""])[0] == "Phi3ForCausalLM":  # its own types and names ("su")
            config, rope_types = phi3_config(config), PHI3_ROPE_TYPES
        if (config.get("architectures") or [""])[0] in MLA_ARCHITECTURES:  # DeepSeek's rotary: YaRN too
            params = rope_parameters(config)
            return [Finding("rope.supported", "ok", f"rope type {params['rope_type']}, theta {params['rope_theta']:g}")]
        max_position = int(config.get("max_position_embeddings") or 4096)
        rope_cfg = RopeConfig.from_hf(config, 64, max_position, rope_types=rope_types)
    except (ValueError, TypeError) as exc:  # TypeError: rope_scaling or a rope field of the wrong JSON type
        return [
            Finding(
                "rope.unsupported",
                "error",
                str(exc) if isinstance(exc, ValueError) else f"config.json's rope settings are malformed ({exc})",
                "The rotary embedding would be computed differently from training: the engine refuses to load it.",
                {"any": ["Serve with an engine that implements this rope type (vLLM does for most)"]},
                {"rope_scaling": config.get("rope_scaling"), "rope_parameters": config.get("rope_parameters")},
            )
        ]
    return [Finding("rope.supported", "ok", f"rope type {rope_cfg.rope_type}, theta {rope_cfg.theta:g}")]


def config_keys(ctx: InspectContext) -> list[Finding]:
    """The model could not be built for a reason other than architecture or rope."""
    error = ctx.raw_check.error
    if error is None or "architecture" in error or "rope_type" in error or "architectures" in error:
        return []
    if quant_spec_error(ctx) is not None:
        return []  # the quantization rule says what is unsupported
    return [
        Finding(
            "model.config_invalid",
            "error",
            f"the engine cannot build the model from config.json: {error}",
            "config.json lacks a field the decoder needs.",
            {"any": ["Compare config.json with the model family's reference config"]},
        )
    ]


def leftovers(ctx: InspectContext) -> list[Finding]:
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    prefixes: Counter[str] = Counter()
    for info, key in ctx.checkpoint.classified():
        for p in key.prefixes:
            prefixes[p] += 1
            examples.setdefault(f"prefix {p}", info.name)
        if key.kind != "weight":
            counts[key.kind] += 1
            examples.setdefault(key.kind, info.name)
    findings = []
    why_crash = "The engine's loader stops at the first key that belongs to no parameter."
    if prefixes:
        listed = ", ".join(f"{p!r} ({n} keys)" for p, n in prefixes.items())
        findings.append(
            Finding(
                "leftovers.prefix",
                "error",
                f"wrapper prefixes in tensor names: {listed}",
                f"Saved from a wrapped model (torch.compile's _orig_mod, DDP's module, PEFT's base_model). {why_crash}",
                {"any": [ctx.fix_command()]},
                {"prefixes": dict(prefixes), "example": examples.get(f"prefix {next(iter(prefixes))}")},
            )
        )
    if counts["optimizer"]:
        findings.append(
            Finding(
                "leftovers.optimizer_state",
                "error",
                f"{counts['optimizer']} optimizer-state tensors in the checkpoint",
                f"Adam moments and step counters are for resuming training, and double or triple the size. {why_crash}",
                {"any": [ctx.fix_command()]},
                {"count": counts["optimizer"], "example": examples["optimizer"]},
            )
        )
    if counts["ema"]:
        findings.append(
            Finding(
                "leftovers.ema",
                "error",
                f"{counts['ema']} EMA-copy tensors in the checkpoint",
                f"A second copy of the weights (exponential moving average). --fix keeps the live weights and drops the copy; "
                f"to serve the EMA weights instead, save them under the model's own names. {why_crash}",
                {"any": [ctx.fix_command()]},
                {"count": counts["ema"], "example": examples["ema"]},
            )
        )
    if ctx.junk:
        findings.append(
            Finding(
                "leftovers.unconsumed",
                "error",
                f"{len(ctx.junk)} tensors no parameter of the model takes: {_some(ctx.junk)}",
                f"Extra heads, probes or buffers saved beside the weights; the model loads without them. {why_crash}",
                {"any": [ctx.fix_command()]},
                {"keys": ctx.junk},
            )
        )
    num_lora = counts["lora_A"] + counts["lora_B"]
    if num_lora:
        scale, source = lora_scale(ctx.checkpoint.adapter_config)
        findings.append(
            Finding(
                "leftovers.lora",
                "error",
                f"{num_lora} unmerged LoRA tensors (lora_A/lora_B)",
                f"The adapters must be merged into the base weights: W' = W + (alpha / r) * B @ A, here scale {scale:g} ({source}). "
                f"{why_crash}",
                {"any": [ctx.fix_command()]},
                {
                    "count": num_lora,
                    "scale": scale,
                    "scale_source": source,
                    "example": examples.get("lora_A") or examples.get("lora_B"),
                },
            )
        )
    return findings


def lora_scale(adapter_config: dict | None) -> tuple[float, str]:
    """PEFT's merge scale: lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora."""
    if not adapter_config:
        return 1.0, "no adapter_config.json: alpha = r assumed"
    r = float(adapter_config.get("r") or 8)
    alpha = float(adapter_config.get("lora_alpha") or r)
    if adapter_config.get("use_rslora"):
        return alpha / r**0.5, f"adapter_config.json: lora_alpha {alpha:g} / sqrt(r {r:g})"
    return alpha / r, f"adapter_config.json: lora_alpha {alpha:g} / r {r:g}"


def keys(ctx: InspectContext) -> list[Finding]:
    """What stays wrong after --fix: keys the model does not consume, weights it lacks, wrong shapes."""
    check = ctx.clean_check
    if check.error is not None:
        return []
    if not ctx.checkpoint.tensors:
        bins = ctx.checkpoint.other_weight_files
        fix = (
            ["Convert the weights to safetensors (transformers: model.save_pretrained(out, safe_serialization=True))"]
            if bins
            else []
        )
        return [
            Finding(
                "weights.none",
                "error",
                "no *.safetensors weights in the folder" + (f" (found {', '.join(bins)})" if bins else ""),
                "The engine loads safetensors only.",
                {"any": fix},
            )
        ]
    findings = []
    if check.unexpected:
        findings.append(
            Finding(
                "weights.unexpected",
                "error",
                f"{len(check.unexpected)} tensors the model does not consume: {_some(check.unexpected)}",
                "The loader stops at a key that belongs to no parameter: the checkpoint is for a different model, or holds extra heads.",
                {"any": ["Check config.json's architectures against the checkpoint, or remove the extra tensors"]},
                {"keys": check.unexpected},
            )
        )
    if check.missing:
        findings.append(
            Finding(
                "weights.missing",
                "error",
                f"{len(check.missing)} parameters have no tensor: {_some(check.missing)}",
                "The loader refuses a checkpoint that leaves parameters uninitialised.",
                {"any": ["Check that every shard listed in model.safetensors.index.json is present and complete"]},
                {"parameters": check.missing},
            )
        )
    if check.misshapen:
        findings.append(
            Finding(
                "weights.shape",
                "error",
                f"{len(check.misshapen)} tensors have the wrong shape: {_some(check.misshapen)}",
                "config.json and the weights disagree (hidden size, heads, vocabulary, quantization_config's group size).",
                {"any": ["Fix config.json to the sizes the weights were trained with"]},
                {"tensors": check.misshapen},
            )
        )
    if not findings:
        findings.append(
            Finding(
                "weights.consumed",
                "ok",
                f"all {check.consumed} tensors map to the engine's parameters"
                + (" once cleaned" if not ctx.raw_check.loads else ""),
            )
        )
    return findings


def linear_dtypes(ctx: InspectContext) -> Counter[str]:
    """Parameters per dtype of the weights the engine casts to one dtype at load: linear, embedding and
    lm_head tensors, leaving out those a quantized layer keeps in their own dtype (codes, scales) and those
    the loader skips."""
    from model_optimizer.model.inspect.census import tensor_kind

    left_out = set(ctx.raw_check.quantized) | set(ctx.raw_check.skipped)  # skipped: buffers such as position_ids
    linear: Counter[str] = Counter()
    for info in ctx.checkpoint.tensors:
        if info.name not in left_out and tensor_kind(info) in LINEAR_KINDS:
            linear[info.dtype_name] += info.numel
    return linear


def dtypes(ctx: InspectContext) -> list[Finding]:
    """fp32 norms in a bf16 model are normal; fp32 linear weights in it are not."""
    from model_optimizer.model.inspect.headers import CAST_DTYPES as FIX_DTYPES

    by_kind = ctx.census.dtypes_by_kind
    floats = {d: n for d, n in linear_dtypes(ctx).items() if d.upper() not in ("INT8", "UINT8", "INT32")}
    if not floats:
        return []
    main = max(floats, key=floats.get)
    findings = []
    config_dtype = str(ctx.checkpoint.config.get("torch_dtype") or ctx.checkpoint.config.get("dtype") or "").replace(
        "torch.", ""
    )
    if len(floats) > 1:
        odd = {d: n for d, n in floats.items() if d != main}
        listed = ", ".join(f"{n:,} params in {d}" for d, n in odd.items())
        # --fix casts to a float dtype it can write; anything else (fp8 weights without quantization_config)
        # needs a quantization tool, and suggesting --fix would only loop
        fix = [ctx.fix_command("--dtype", main)] if main in FIX_DTYPES else []
        findings.append(
            Finding(
                "dtype.mixed",
                "warn",
                f"mixed dtypes in linear weights: mostly {main}, but {listed}",
                "The engine casts every weight to one dtype at load, so a float32 block was either meant to be "
                "float32 (and loses precision) or is a training artefact that makes the files larger.",
                {"any": fix or ["Convert the weights to one float dtype with the tool that wrote them"]},
                {"linear_params_by_dtype": dict(floats)},
            )
        )
    norm_dtypes = set(by_kind.get("norm", {}))
    if norm_dtypes - {main} and len(floats) == 1:
        findings.append(
            Finding("dtype.norms", "ok", f"norms in {', '.join(sorted(norm_dtypes))}, linear weights in {main}: fine")
        )
    if config_dtype and config_dtype != main and main in FIX_DTYPES:
        findings.append(
            Finding(
                "dtype.config",
                "warn",
                f"config.json says torch_dtype {config_dtype}, the weights are mostly {main}",
                f"`--dtype auto` follows config.json, so the engine would run in {config_dtype}.",
                {"any": [ctx.fix_command("--dtype", main)]},
                {"config": config_dtype, "weights": main},
            )
        )
    return findings


RULES = (truncated, architecture, rope, config_keys, leftovers, keys, dtypes, quantization)
