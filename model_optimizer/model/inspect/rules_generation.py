"""Findings about generation_config.json and the token ids the config files name: values the engine
refuses at start-up, and ids that are not integers."""

from __future__ import annotations

from model_optimizer.environment.findings import Finding
from model_optimizer.model.inspect.context import InspectContext

TOKEN_ID_KEYS = ("eos_token_id", "bos_token_id", "pad_token_id", "decoder_start_token_id")


def sampling_defaults(ctx: InspectContext) -> list[Finding]:
    """generation_config.json's sampling defaults (temperature, top_p, max_new_tokens ...) checked by the
    engine's own check (sampling_params.generation_config_defaults, as generation_defaults.generation_defaults calls it): a
    value SamplingParams refuses stops `mopt serve` and `generate` before loading."""
    gen = ctx.checkpoint.generation_config
    if ctx.encoder or gen is None:
        return []
    from model_optimizer.runtime.sampling_params import generation_config_defaults

    try:
        generation_config_defaults(gen)
    except (ValueError, TypeError) as exc:  # TypeError: a value of the wrong JSON type, if SamplingParams lets one by
        return [
            Finding(
                "generation.invalid",
                "error",
                f"the engine refuses generation_config.json's sampling defaults: {exc}",
                "The engine takes them as every request's defaults and stops at start-up on a value it cannot use.",
                {
                    "any": [
                        "Correct or remove the value in generation_config.json",
                        "or serve with --generation-config vllm (SamplingParams' own defaults)",
                    ]
                },
            )
        ]
    return []


def token_ids(ctx: InspectContext) -> list[Finding]:
    """Token ids that are not integers ("2", 2.0, true, null in a list). The other rules leave such values
    out, and so does the engine (llm.eos_token_ids: such an EOS stops nothing); transformers' generate
    refuses them."""
    bad: dict[str, list] = {}
    files = {"config.json": ctx.checkpoint.config, "generation_config.json": ctx.checkpoint.generation_config or {}}
    for file, data in files.items():
        for key in TOKEN_ID_KEYS:
            value = data.get(key)
            values = value if isinstance(value, list) else [value]
            wrong = [v for v in values if not _is_token_id(v) and not (v is None and not isinstance(value, list))]
            if wrong:
                bad[f"{file}: {key}"] = wrong
    if not bad:
        return []
    listed = "; ".join(f"{where} {values!r}" for where, values in bad.items())
    fixes = ["Write each token id as an integer (or a list of them)"]
    if all(where.endswith("eos_token_id") for where in bad):  # --fix drops them (token_alignment.aligned_ids)
        fixes.append(ctx.fix_command())
    return [
        Finding(
            "tokens.invalid_id",
            "error",
            f"token ids that are not integers: {listed}",
            "The engine leaves them out, so an EOS written this way stops nothing, and transformers refuses "
            "them; the other token checks leave them out too.",
            {"any": fixes},
            {"values": {where: [repr(v) for v in values] for where, values in bad.items()}},
        )
    ]


def _is_token_id(value: object) -> bool:
    """An integer (a negative or too large one is vocab.special_id_range's to report)."""
    return isinstance(value, int) and not isinstance(value, bool)


RULES = (sampling_defaults, token_ids)
