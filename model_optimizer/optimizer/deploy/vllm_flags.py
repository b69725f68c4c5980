"""Our serve settings as `vllm serve` flags, and the ones vLLM has no equivalent for.

One table, setting name -> vLLM flag (or the reason it does not translate), so a tuned configuration
can run on vLLM unchanged where vLLM can express it. Every setting with a vLLM flag is passed, defaults
included, because vLLM's defaults differ from ours (asynchronous scheduling, for one); settings without
one are listed when they differ from our defaults.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from model_optimizer.optimizer.deploy.settings import ServeSettings, non_defaults

TRANSLATED = {
    "tokenizer": "--tokenizer",
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
    "quantization": "--quantization",
    "tensor_parallel_size": "--tensor-parallel-size",
}
"""Settings with the same meaning in vLLM. Booleans become --flag / --no-flag."""

JSON_LIST_FLAGS = {"allowed_origins", "allowed_headers", "allowed_methods"}
"""vLLM parses these flags as JSON lists."""

VLLM_QUANTIZATION = {"fp8"}
"""Our --quantization values vLLM applies on the fly; quantized folders need no flag (vLLM reads
config.json), and our int8 / rtn-int4 on-the-fly rounding has no vLLM equivalent."""

ENV_ONLY = {"api_key": "VLLM_API_KEY"}
"""Settings vLLM reads from the environment: the container gets them from the same secret as ours."""

ONLY_TRUE = {"enforce_eager", "async_scheduling"}
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
    "log_interval": "vLLM logs its stats line at a fixed interval",
    "enable_pause": "vLLM serves /pause and /resume only in dev mode (VLLM_SERVER_DEV_MODE=1, with other dev routes)",
    "max_num_partial_prefills": "vLLM's flag bounds all partial prefills and its V1 engine does not support it",
    "long_prefill_token_threshold": "vLLM V1 caps every chunk at it; ours only serves shorter requests first",
    "one_shot_all_reduce": "vLLM picks its custom all-reduce itself (--disable-custom-all-reduce turns it off)",
}
"""Settings vLLM cannot express, with why; listed in the README written beside the files."""


@dataclass
class VllmCommand:
    argv: list[str]
    untranslated: dict[str, tuple[object, str]]
    """Setting -> (our value, why vLLM has no equivalent), for settings that differ from our defaults."""


def vllm_command(settings: ServeSettings) -> VllmCommand:
    """`vllm serve /model ...` for `settings` as they run in the container."""
    inside = settings.in_container()
    changed = {**non_defaults(inside.engine), **non_defaults(inside.server)}
    values = {f.name: getattr(c, f.name) for c in (inside.engine, inside.server) for f in dataclasses.fields(c)}
    argv = ["vllm", "serve", values.pop("model")]
    untranslated: dict[str, tuple[object, str]] = {}
    for name, value in values.items():
        if name not in TRANSLATED:
            if name in changed:
                untranslated[name] = (value, UNTRANSLATED.get(name, "no vLLM equivalent known"))
            continue
        flag = TRANSLATED[name]
        if value is None:
            continue
        if name == "quantization" and value not in VLLM_QUANTIZATION:
            if value != "none":
                untranslated[name] = (value, "vLLM quantizes only fp8 on the fly; write a folder with mopt quantize")
            continue
        if name in JSON_LIST_FLAGS:
            argv += [flag, json.dumps(value)]
        elif isinstance(value, bool):
            if value or name not in ONLY_TRUE:
                argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return VllmCommand(argv, untranslated)
