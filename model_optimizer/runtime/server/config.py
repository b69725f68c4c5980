"""ServerConfig: every `mopt serve` setting that is not an engine setting.

Each field's docstring is also its CLI help (see model_optimizer/cli/args.py).
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from typing import Literal

from model_optimizer.runtime.config import check_positive
from model_optimizer.runtime.engine.chat_content import check_format
from model_optimizer.runtime.sampling_checks import is_finite, is_int
from model_optimizer.runtime.server import cors_settings

logger = logging.getLogger(__name__)

API_KEY_ENV = "MOPT_API_KEY"
SPACE_SEPARATED = ("served_model_name", "api_key")
"""Flags that take several values one after another (`--served-model-name a b`), as vLLM's do."""
VLLM_API_KEY_ENV = "VLLM_API_KEY"
"""vLLM's variable for the key, read when MOPT_API_KEY is not set."""
LOG_LEVELS = {"critical": 50, "error": 40, "warning": 30, "info": 20, "debug": 10, "trace": 5}
"""`--log-level` names (uvicorn's) and their logging numbers: "trace" is uvicorn's level below debug, which
the logging module knows by name only once uvicorn is imported, so the early-spawned core gets the number."""


@dataclass
class ServerConfig:
    """How the OpenAI-compatible server listens, authenticates and protects itself."""

    host: str = "127.0.0.1"
    """Address to listen on (0.0.0.0 for every interface)."""

    port: int = 8000
    """TCP port to listen on (0 lets the OS pick a free one)."""

    api_key: str | list[str] | None = None
    """Require `Authorization: Bearer KEY` on every route but /health, /ready (and /metrics unless --metrics-auth); several (`--api-key k1 k2`, as vLLM's): any of them. Also read from MOPT_API_KEY, else VLLM_API_KEY."""

    served_model_name: str | list[str] | None = None
    """Model name clients send and /v1/models lists. Several (vLLM's `--served-model-name a b`): clients may
    send any; the first is the one responses and metrics carry. Empty: the model folder's name."""

    chat_template: str | None = None
    """Chat template overriding the tokenizer's own: a shipped one by name (chatml, llama3, mistral), a Jinja file, or the template itself (vLLM's flag)."""

    chat_template_content_format: Literal["auto", "string", "openai"] = "auto"
    """How a message's content reaches the chat template (vLLM's flag): string joins its text parts into one text; openai gives a list of {"type": "text", "text": ...} parts (a text is one part); auto picks openai when the template loops over a message's content, else string."""

    max_queued_requests: int = 1024
    """Requests that may wait beyond the max_num_seqs the engine runs at once; past that, 503 with Retry-After."""

    metrics_auth: bool = False
    """Require the API key on /metrics as well."""

    shutdown_timeout: float = 30.0
    """Seconds SIGTERM waits for in-flight requests to finish (new ones get 503) before aborting them."""

    max_n: int = 16
    """Largest n (completions per prompt) a request may ask for."""

    max_logprobs: int = 20
    """Largest logprobs / top_logprobs a request may ask for (at most 20; -1, vLLM's "no cap", is 20)."""

    max_stop_strings: int = 16
    """Most stop strings in one request."""

    max_stop_string_length: int = 256
    """Longest stop string, in characters."""

    max_prompts: int = 64
    """Most prompts in one /v1/completions request."""

    max_embedding_inputs: int = 2048
    """Most inputs in one /v1/embeddings request."""

    max_tokens_limit: int | None = None
    """Largest max_tokens a request may ask for; also caps the default (remaining context). Empty: no cap."""

    max_body_bytes: int = 8 << 20
    """Largest request body in bytes; bigger bodies get 413 before they are parsed."""

    max_header_bytes: int = 16 << 10
    """Largest request line plus headers in bytes; bigger requests are refused."""

    header_timeout: float = 10.0
    """Seconds a client has to send a request's line and headers, from connecting or from its previous response, and the longest pause while it sends a body; then 408 and the connection is closed (a client sending a byte at a time holds no descriptor for long). Also how long a kept-alive connection may stay idle at most."""

    max_connections_per_client: int = 1024
    """Most connections one client address may hold open at once; the next is refused (429). Behind a proxy every client has the proxy's address: raise it or use 0 (no limit)."""

    log_level: str = "info"
    """Log level of the server and uvicorn (one format for both): critical, error, warning, info, debug, trace."""

    log_interval: float = 10.0
    """Seconds between engine stats lines (throughput, running/waiting, KV cache, prefix cache), logged only when busy; 0 turns them off."""

    api_server_count: int = 1
    """HTTP frontend processes serving one engine core (vLLM's flag): each tokenizes, detokenizes and
    streams its share of the connections on the one port, so the host work per token spreads over cores
    when one frontend saturates. Metrics are summed over all of them."""

    stream_interval: int = 1
    """Tokens a stream gathers before it sends a chunk (vLLM's flag): 1 sends every token as it comes; more
    sends fewer, larger chunks, which costs the server less per token. The first token and the last
    chunk always go at once; a reader that falls behind gets what waited as one chunk either way."""

    enable_pause: bool = False
    """Serve POST /pause, POST /resume and GET /is_paused: hold the engine between steps (running requests stay, new ones queue) and let it go on, e.g. around a weight update; and POST /reset_prefix_cache: forget the cached prompt prefixes (a benchmark's cold runs). They need the API key when one is set; off by default (vLLM serves them only in dev mode), as whoever reaches them can stop generation or slow it."""

    disable_fastapi_docs: bool = False
    """Serve no /docs, /redoc or /openapi.json (vLLM's flag): the API's description stays private."""

    allowed_origins: list[str] | None = None
    """Browser origins allowed to call the API (CORS), e.g. https://app.example,https://b.example or '["*"]'. Empty: no CORS headers."""

    allowed_headers: list[str] | None = None
    """Request headers a browser may send cross-origin (with --allowed-origins), e.g. Authorization,Content-Type. Empty: any header, as vLLM (the OpenAI JS SDK sends x-stainless-* headers)."""

    allowed_methods: list[str] | None = None
    """HTTP methods a browser may use cross-origin (with --allowed-origins), e.g. GET,POST. Empty: any method, as vLLM."""

    allow_credentials: bool = False
    """Let browsers send cookies and Authorization headers cross-origin (with --allowed-origins: CORS's Access-Control-Allow-Credentials; vLLM's flag)."""

    enable_auto_tool_choice: bool = False
    """Let the model decide when to call tools (tool_choice "auto", the default when a request gives tools); needs --tool-call-parser. Off, such requests get a 400 (tool_choice "required", "none" and named functions work either way)."""

    tool_call_parser: (
        Literal[
            "hermes",
            "llama3_json",
            "mistral",
            "deepseek_v3",
            "deepseek_v31",
            "glm45",
            "qwen3_coder",
            "qwen3_xml",
            "pythonic",
            "kimi_k2",
            "xlam",
            "granite",
            "granite-20b-fc",
            "jamba",
            "hunyuan_a13b",
            "minimax",
            "phi4_mini_json",
            "internlm",
            "longcat",
            "ernie45",
            "seed_oss",
            "gigachat3",
            "llama4_json",
            "llama4_pythonic",
            "glm47",
            "openai",
        ]
        | None
    ) = None
    """How to read tool calls from the model's text with tool_choice "auto": hermes (Qwen2.5/3, Hermes: <tool_call> tags), llama3_json or llama4_json (Llama 3.1+ JSON calls), mistral ([TOOL_CALLS]), deepseek_v3 (DeepSeek-V3/R1-0528), deepseek_v31 (DeepSeek-V3.1), glm45 or glm47 (GLM-4.5 to 4.7), qwen3_coder or qwen3_xml (Qwen3-Coder), seed_oss (Seed-OSS), pythonic or llama4_pythonic (Llama 3.2/4: a Python list of calls), kimi_k2 (Kimi-K2: its own call ids), xlam (xLAM: a JSON list of calls, bare, fenced or tagged), granite (Granite 3.x), granite-20b-fc, jamba, hunyuan_a13b, minimax (MiniMax-M1), phi4_mini_json (Phi-4-mini), internlm (InternLM2/2.5), longcat (LongCat-Flash), ernie45 (ERNIE-4.5), gigachat3 (GigaChat3), openai (gpt-oss: harmony messages to functions.NAME)."""

    reasoning_parser: (
        Literal[
            "qwen3",
            "deepseek_r1",
            "deepseek_v3",
            "glm45",
            "mistral",
            "minimax_m2",
            "minimax_m2_append_think",
            "step3",
            "kimi_k2",
            "seed_oss",
            "ernie45",
            "openai_gptoss",
        ]
        | None
    ) = None
    """Split the model's <think>...</think> reasoning from its answer into reasoning (chat completions): qwen3, glm45 and deepseek_v3 (DeepSeek-V3.1: only when the output opens with <think> or the prompt opened the block), deepseek_r1, minimax_m2, step3, kimi_k2 and ernie45 (everything before </think>; ernie45 also unwraps <response>), seed_oss (<seed:think>...</seed:think>), mistral (Magistral: [THINK]...[/THINK]), minimax_m2_append_think (no split: <think> put back in front of the content), openai_gptoss (gpt-oss: the harmony analysis channel); an output constraint then applies after the thinking."""

    enable_prompt_tokens_details: bool = False
    """Add usage.prompt_tokens_details.cached_tokens, the prompt tokens the prefix cache served (vLLM's flag)."""

    default_chat_template_kwargs: str | dict | None = None
    """Keyword arguments every chat template render gets unless the request's chat_template_kwargs set them, as a JSON object, e.g. '{"enable_thinking": false}' (vLLM's flag)."""

    response_role: str = "assistant"
    """The role chat completions answer with when the request adds a generation prompt (vLLM's flag); with add_generation_prompt false the answer takes the last message's role, as in vLLM."""

    return_tokens_as_token_ids: bool = False
    """Name each token in logprobs as "token_id:N" instead of its text, so tokens that are not whole UTF-8 text can be told apart (vLLM's flag; a request's own return_tokens_as_token_ids overrides it)."""

    enable_request_id_headers: bool = False
    """Answer every request with an X-Request-Id header: the client's own X-Request-Id, else a new one (vLLM's flag)."""

    root_path: str | None = None
    """The path prefix a proxy serves the API under (e.g. /llm; /llm/ is taken as /llm): the links in /docs and /openapi.json name it, and requests route with or without it (vLLM's flag)."""

    ssl_keyfile: str | None = None
    """Serve HTTPS with this private key file (PEM; with --ssl-certfile)."""

    ssl_certfile: str | None = None
    """The certificate chain file (PEM) for HTTPS (with --ssl-keyfile)."""

    ssl_ca_certs: str | None = None
    """CA certificates (PEM) to check client certificates against (with --ssl-cert-reqs 1 or 2)."""

    ssl_cert_reqs: int = 0
    """Client certificates: 0 not asked, 1 checked when sent, 2 required (Python's ssl.CERT_* values, as vLLM's flag)."""

    def __post_init__(self) -> None:
        self._check_limits()
        self._check_names_and_keys()
        if str(self.log_level).lower() not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        self.log_level = str(self.log_level).lower()  # as uvicorn and vLLM's --uvicorn-log-level take it
        if not math.isfinite(self.log_interval) or self.log_interval < 0:
            raise ValueError(f"log_interval must be >= 0 seconds (0 turns the stats line off), got {self.log_interval}")
        self.allowed_origins = cors_settings.origins(self.allowed_origins)
        self.allowed_headers = cors_settings.header_names(self.allowed_headers)
        self.allowed_methods = cors_settings.methods(self.allowed_methods)
        self._check_parsers()
        self._check_http()
        check_format(self.chat_template_content_format)
        self.default_chat_template_kwargs = _json_object(
            self.default_chat_template_kwargs, "default_chat_template_kwargs"
        )

    def _check_limits(self) -> None:
        """The address, the per-request and per-connection limits, and the timeouts."""
        check_positive(
            self,
            "max_queued_requests",
            "max_n",
            "max_stop_strings",
            "max_stop_string_length",
            "max_prompts",
            "max_embedding_inputs",
            "max_body_bytes",
            "max_header_bytes",
            "stream_interval",
            "api_server_count",
        )
        if not isinstance(self.host, str) or not self.host.strip():  # uvicorn took "" as every interface
            raise ValueError(f"host must be an address such as 127.0.0.1 (0.0.0.0: every interface), got {self.host!r}")
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port!r}")
        if self.max_logprobs == -1:
            self.max_logprobs = 20
        if not is_int(self.max_logprobs) or not 0 <= self.max_logprobs <= 20:
            raise ValueError(f"max_logprobs must be an integer in [0, 20], got {self.max_logprobs!r}")
        if self.max_tokens_limit is not None and (not is_int(self.max_tokens_limit) or self.max_tokens_limit <= 0):
            raise ValueError(f"max_tokens_limit must be a positive integer, got {self.max_tokens_limit!r}")
        if not is_finite(self.shutdown_timeout) or self.shutdown_timeout < 0:
            raise ValueError(f"shutdown_timeout must be a number of seconds >= 0, got {self.shutdown_timeout!r}")
        if not is_finite(self.header_timeout) or self.header_timeout <= 0:
            raise ValueError(f"header_timeout must be a number of seconds > 0, got {self.header_timeout!r}")
        if not isinstance(self.max_connections_per_client, int) or self.max_connections_per_client < 0:
            raise ValueError(
                f"max_connections_per_client must be an integer >= 0 (0: no limit), got {self.max_connections_per_client}"
            )

    def _check_names_and_keys(self) -> None:
        """The served model names and the API keys: one value or several, none of them empty."""
        self.served_model_name = _one_or_several(self.served_model_name)
        if self.served_model_name == [] or any(  # not "unset": a name asked
            not isinstance(name, str) or not name.strip() for name in _several(self.served_model_name)
        ):
            raise ValueError("served_model_name is empty: give the name clients send as `model`, or leave it out")
        self.api_key = _one_or_several(self.api_key)
        if self.api_key == []:
            raise ValueError("api_key is empty: give a key clients must send, or leave it out to serve without one")
        for key in self.api_keys:
            check_api_key(key, "api_key")

    def _check_http(self) -> None:
        """The response role, the root path and the TLS files: refused here, before anything starts."""
        if self.allow_credentials and not self.allowed_origins:  # vLLM's origins default to "*"; ours to none
            logger.warning(
                "allow_credentials does nothing without allowed_origins: CORS is off unless origins are given"
            )
        if not isinstance(self.response_role, str) or not self.response_role.strip():
            raise ValueError(f"response_role must be a role name such as assistant, got {self.response_role!r}")
        if self.root_path is not None:  # /llm/ as /llm: with the slash no prefixed route would match
            root = self.root_path.rstrip("/") if isinstance(self.root_path, str) else ""
            if not (root and self.root_path.startswith("/")):
                raise ValueError(f"root_path must be a path such as /llm, got {self.root_path!r}")
            self.root_path = root
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise ValueError("HTTPS needs both ssl_keyfile and ssl_certfile")
        for name in ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs"):
            path = getattr(self, name)
            if path is not None:
                setattr(self, name, os.path.expanduser(path))  # "~/key.pem" as a shell would read it
                if not os.path.isfile(getattr(self, name)):
                    raise ValueError(f"{name}: no such file: {path}")
        if self.ssl_cert_reqs not in (0, 1, 2):
            raise ValueError(
                f"ssl_cert_reqs must be 0 (none), 1 (optional) or 2 (required), got {self.ssl_cert_reqs!r}"
            )
        if self.ssl_cert_reqs and (self.ssl_certfile is None or self.ssl_ca_certs is None):
            raise ValueError("ssl_cert_reqs 1 or 2 checks client certificates: it needs HTTPS and ssl_ca_certs")

    @property
    def scheme(self) -> str:
        """http, or https with TLS files."""
        return "https" if self.ssl_certfile else "http"

    def _check_parsers(self) -> None:
        from model_optimizer.runtime.server.reasoning import REASONING_PARSERS
        from model_optimizer.runtime.server.tool_parser_registry import PARSERS

        if self.tool_call_parser is not None and self.tool_call_parser not in PARSERS:
            raise ValueError(f"tool_call_parser must be one of {', '.join(PARSERS)}, got {self.tool_call_parser!r}")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError(f"enable_auto_tool_choice needs tool_call_parser (one of {', '.join(PARSERS)})")
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(
                f"reasoning_parser must be one of {', '.join(REASONING_PARSERS)}, got {self.reasoning_parser!r}"
            )

    @property
    def api_keys(self) -> tuple[str, ...]:
        """The keys a client may send, () when none is required."""
        return _several(self.api_key)

    @property
    def model_names(self) -> tuple[str, ...]:
        """The served names, first the one responses carry; () when the folder's name is to be used."""
        return _several(self.served_model_name)


def _one_or_several(value: str | list[str] | None) -> str | list[str] | None:
    """A SPACE_SEPARATED setting: a list keeps its order, each value once, and one value stays a string
    (an empty list stays empty, for the caller to refuse)."""
    if not isinstance(value, list):
        return value
    unique = list(dict.fromkeys(value))
    return unique[0] if len(unique) == 1 else unique


def _several(value: str | list[str] | None) -> tuple[str, ...]:
    """A SPACE_SEPARATED setting's values: () when unset."""
    return () if value is None else (value,) if isinstance(value, str) else tuple(value)


def check_api_key(key: str | None, source: str) -> None:
    """An empty key would turn authentication off without a word (every request allowed): refuse it."""
    if key is not None and not isinstance(key, str):
        raise ValueError(f"{source} must be text, got {type(key).__name__}")
    if key is not None and not key.strip():
        raise ValueError(f"{source} is empty: give a key clients must send, or leave it out to serve without one")
    if key is not None and key != key.strip():
        raise ValueError(f"{source} starts or ends with whitespace, which no Authorization header can carry")


def _json_object(value: str | dict | None, name: str) -> dict | None:
    """A JSON object given as text (the CLI flag) or as a mapping (a config file) -> a dict, or None when empty."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError as exc:
            raise ValueError(f"{name} must be a JSON object: {exc}") from None
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value or None
