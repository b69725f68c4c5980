"""Our serve settings as `vllm serve` flags, and the ones vLLM has no equivalent for.

One table, setting name -> vLLM flag (or the reason it does not translate), so a tuned configuration
can run on vLLM unchanged where vLLM can express it. A deployment passes only what differs from our
defaults, so vLLM's own defaults and heuristics (max_num_seqs, the token budget, block size, async
scheduling where it is compatible) apply to the rest; settings without a vLLM flag are listed with why.
`mopt tune` translates its candidates with the same function (`vllm_serve`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from model_optimizer.optimizer.deploy.settings import MODEL_DIR, ServeSettings, non_defaults

TRANSLATED = {
    "tokenizer": "--tokenizer",
    "revision": "--revision",
    "dtype": "--dtype",
    "load_format": "--load-format",
    "max_model_len": "--max-model-len",
    "block_size": "--block-size",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "enable_chunked_prefill": "--enable-chunked-prefill",
    "enable_prefix_caching": "--enable-prefix-caching",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "num_kv_blocks": "--num-gpu-blocks-override",
    "kv_cache_dtype": "--kv-cache-dtype",
    "enforce_eager": "--enforce-eager",
    "async_scheduling": "--async-scheduling",
    "scheduling_policy": "--scheduling-policy",
    "seed": "--seed",
    "host": "--host",
    "port": "--port",
    "served_model_name": "--served-model-name",
    "chat_template": "--chat-template",
    "max_logprobs": "--max-logprobs",
    "log_level": "--uvicorn-log-level",
    "allowed_origins": "--allowed-origins",
    "allowed_headers": "--allowed-headers",
    "allowed_methods": "--allowed-methods",
    "allow_credentials": "--allow-credentials",
    "quantization": "--quantization",
    "tensor_parallel_size": "--tensor-parallel-size",
    "stream_interval": "--stream-interval",
    "skip_tokenizer_init": "--skip-tokenizer-init",
    "api_server_count": "--api-server-count",
    "enable_expert_parallel": "--enable-expert-parallel",
    "speculative_config": "--speculative-config",
    "generation_config": "--generation-config",
    "override_generation_config": "--override-generation-config",
    "cpu_offload_gb": "--cpu-offload-gb",
    "kv_offloading_size": "--kv-offloading-size",
    "enable_auto_tool_choice": "--enable-auto-tool-choice",
    "tool_call_parser": "--tool-call-parser",
    "reasoning_parser": "--reasoning-parser",
    "default_chat_template_kwargs": "--default-chat-template-kwargs",
    "chat_template_content_format": "--chat-template-content-format",
    "enable_prompt_tokens_details": "--enable-prompt-tokens-details",
    "disable_fastapi_docs": "--disable-fastapi-docs",
    "response_role": "--response-role",
    "return_tokens_as_token_ids": "--return-tokens-as-token-ids",
    "enable_request_id_headers": "--enable-request-id-headers",
    "root_path": "--root-path",
    "ssl_keyfile": "--ssl-keyfile",
    "ssl_certfile": "--ssl-certfile",
    "ssl_ca_certs": "--ssl-ca-certs",
    "ssl_cert_reqs": "--ssl-cert-reqs",
}
"""Settings with the same meaning in vLLM. Booleans become --flag / --no-flag."""

JSON_FLAGS = {
    "allowed_origins",
    "allowed_headers",
    "allowed_methods",
    "default_chat_template_kwargs",
    "override_generation_config",
}
"""vLLM parses these flags as JSON (lists, an object)."""

VLLM_QUANTIZATION = {"fp8"}
"""Our --quantization values vLLM applies on the fly; quantized folders need no flag (vLLM reads
config.json), and our int8 / int8-w8a8 / rtn-int4 on-the-fly rounding has no vLLM equivalent."""

ENV_ONLY = {"api_key": "VLLM_API_KEY"}
"""Settings vLLM reads from the environment: the container gets them from the same secret as ours."""

ONLY_TRUE = {
    "enforce_eager",
    "enable_expert_parallel",
    "enable_auto_tool_choice",
    "enable_prompt_tokens_details",
    "disable_fastapi_docs",
    "return_tokens_as_token_ids",
    "enable_request_id_headers",
    "allow_credentials",
}
"""vLLM flags that can only switch a feature on: our False is vLLM's default and needs no flag."""

UNTRANSLATED = {
    "device": "vLLM picks its platform itself",
    "kv_cache_memory": "CPU-only setting of ours",
    "max_queued_requests": "vLLM queues without a limit (no 503 when full)",
    "metrics_auth": "vLLM never puts /metrics behind the API key",
    "shutdown_timeout": "vLLM has no drain timeout flag; the container's stop grace period still applies",
    "max_n": "no per-request cap on n in vLLM",
    "max_stop_strings": "no cap on stop strings in vLLM",
    "max_stop_string_length": "no cap on stop-string length in vLLM",
    "max_prompts": "no cap on prompts per request in vLLM",
    "max_embedding_inputs": "no cap on embedding inputs per request in vLLM",
    "max_tokens_limit": "no server-side max_tokens cap in vLLM",
    "max_body_bytes": "no request-body limit in vLLM",
    "max_header_bytes": "no header-size limit in vLLM",
    "header_timeout": "no request-head timeout in vLLM (uvicorn's keep-alive timeout only)",
    "max_connections_per_client": "no per-client connection limit in vLLM",
    "log_interval": "vLLM logs its stats line at a fixed interval",
    "enable_pause": "vLLM serves /pause and /resume only in dev mode (VLLM_SERVER_DEV_MODE=1, with other dev routes)",
    "max_num_partial_prefills": "vLLM's flag bounds all partial prefills and its V1 engine does not support it",
    "long_prefill_token_threshold": "vLLM V1 caps every chunk at it; ours only serves shorter requests first",
    "one_shot_all_reduce": "vLLM picks its custom all-reduce itself (--disable-custom-all-reduce turns it off)",
    "max_decode_stall": "vLLM bounds a step by its token budget alone (--max-num-batched-tokens)",
    "preemption_mode": "vLLM removed --preemption-mode with its V0 engine (v0.11); V1 always recomputes",
}
"""Settings vLLM cannot express, with why; listed in the README written beside the files."""


@dataclass
class VllmCommand:
    argv: list[str]
    translated: dict[str, str]
    """Setting -> the vLLM flag it became."""
    untranslated: dict[str, str]
    """Setting -> why vLLM cannot express it."""


def vllm_serve(model: str | None, settings: dict) -> VllmCommand:
    """`vllm serve MODEL ...` for `settings` (name -> value; None is left out), with which settings
    translate and which do not. The one translation `mopt deploy` and `mopt tune` both use."""
    argv = ["vllm", "serve", model or "MODEL"]
    translated: dict[str, str] = {}
    untranslated: dict[str, str] = {}
    for name, value in settings.items():
        if name == "model" or value is None:
            continue
        if name not in TRANSLATED:
            untranslated[name] = UNTRANSLATED.get(name, "no vLLM equivalent known")
            continue
        why = _not_for_vllm(name, value, settings)
        if why:
            untranslated[name] = why
            continue
        value = _as_vllm(name, value, settings)
        flag = TRANSLATED[name]
        if name == "quantization" and value not in VLLM_QUANTIZATION:
            if value != "none":  # "none" (never quantize) is what vLLM does without the flag
                untranslated[name] = "vLLM quantizes only fp8 on the fly; write a folder with mopt quantize"
            continue
        translated[name] = flag
        if name == "speculative_config":
            argv += [flag, _vllm_speculative_config(value)]
        elif name in JSON_FLAGS:
            argv += [flag, json.dumps(value)]
        elif isinstance(value, bool):
            if value or name not in ONLY_TRUE:
                argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):  # --served-model-name a b, as vLLM takes it
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    if _budget_raised(settings):
        translated.pop("max_num_batched_tokens", None)
        untranslated["max_num_batched_tokens"] = (
            f"raised to max_model_len ({settings['max_model_len']}): with chunked prefill off vLLM refuses "
            "a smaller token budget"
        )
    return VllmCommand(argv, translated, untranslated)


VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
"""The block sizes vLLM's --block-size takes (vllm/config/cache.py's BlockSize)."""


def _not_for_vllm(name: str, value, settings: dict) -> str | None:
    """Why this translated setting's value is left out of the vLLM command, or None to pass it."""
    if name == "async_scheduling" and value is True:
        return (
            "vLLM's default: it schedules asynchronously wherever it can, and refuses an explicit "
            "--async-scheduling with ngram or draft-model speculation"
        )
    if name == "block_size" and value not in VLLM_BLOCK_SIZES:
        return f"vLLM takes --block-size {', '.join(map(str, VLLM_BLOCK_SIZES))} only; it picks its own"
    if name == "chat_template":
        from model_optimizer.runtime.models.chat_templates import shipped_templates

        if value in shipped_templates():
            return (
                f"a template we ship by name; vLLM takes a file or the template itself (its examples/template_"
                f"{value}.jinja, or the chat_template.jinja `mopt deploy` writes)"
            )
    return None


def _as_vllm(name: str, value, settings: dict):
    """`value` as vLLM means the flag: its --kv-offloading-size is the total over the tensor-parallel ranks
    (ours is per rank), and with chunked prefill off it refuses a token budget below max_model_len (the
    budget is raised to it, so the deployment starts; a note says so)."""
    if name == "kv_offloading_size":
        return value * (settings.get("tensor_parallel_size") or 1)
    if name == "max_num_batched_tokens" and _budget_raised(settings):
        return settings["max_model_len"]
    return value


def _budget_raised(settings: dict) -> bool:
    budget, limit = settings.get("max_num_batched_tokens"), settings.get("max_model_len")
    off = settings.get("enable_chunked_prefill") is False
    return off and isinstance(budget, int) and isinstance(limit, int) and budget < limit


def _vllm_speculative_config(value: str | dict) -> str:
    """Ours as vLLM's JSON: every setting explicit (our ngram defaults need not be vLLM's), without `adaptive`
    (vLLM speculates at every batch size below disable_by_batch_size)."""
    from model_optimizer.runtime.spec_decode.config import parse_speculative_config, to_json

    return to_json(parse_speculative_config(value), for_vllm=True)  # type: ignore[arg-type]


def vllm_command(settings: ServeSettings) -> VllmCommand:
    """`vllm serve /model ...` for `settings` as they run in the container: what differs from our defaults.
    Our async_scheduling default is left out too (as `vllm_serve` leaves out async_scheduling: true). CORS stays
    off as ours without --allowed-origins (vLLM's own default allows every origin)."""
    inside = settings.in_container()
    changed = {**non_defaults(inside.engine), **non_defaults(inside.server)}
    command = vllm_serve(MODEL_DIR, changed)
    if not inside.server.allowed_origins:
        # ours has CORS off without --allowed-origins; vLLM's default allows every origin ("*"), and its
        # flag is parsed with json.loads, so an empty list keeps it off there too
        command.argv += ["--allowed-origins", "[]"]
    return command
