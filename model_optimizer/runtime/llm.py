"""LLM: the offline API, shaped like vLLM's (`LLM(model).generate(prompts, params)`)."""

from __future__ import annotations

import itertools
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from model_optimizer.runtime import vllm_settings
from model_optimizer.runtime.beam_search import BeamSearch, BeamSearchOutput, BeamSearchParams, beam_max_len
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.core import ModelInfo
from model_optimizer.runtime.engine.engine import LLMEngine
from model_optimizer.runtime.engine.input_processor import encode_prompt
from model_optimizer.runtime.engine.outputs import (
    EmbeddingOutput,
    EmbeddingRequestOutput,
    RequestOutput,
    ScoringOutput,
    ScoringRequestOutput,
)
from model_optimizer.runtime.hub import resolve_model_dir
from model_optimizer.runtime.kernels.compile_cache import configure_compile, hash_triton_in_background
from model_optimizer.runtime.models.model_config import is_encoder_folder
from model_optimizer.runtime.models.tokenizer import TOKENIZER_FILES, load_tokenizer
from model_optimizer.runtime.pooling_params import PoolingParams
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams, generation_config_defaults

Prompt = str | list[int]

__all__ = ["LLM", "TOKENIZER_FILES", "generation_defaults", "load_tokenizer", "resolve_model_dir"]

startup_log = logging.getLogger("model_optimizer.startup")
"""One INFO line per start-up phase with its time (here and in runner/model_runner.py), so a user of
`mopt serve` / `mopt generate` sees where the seconds before the first request go."""


def log_phase(name: str, since: float) -> float:
    """Log phase `name` as lasting from `since` (a perf_counter reading) to now; return now."""
    now = time.perf_counter()
    startup_log.info("start-up: %s %.2f s", name, now - since)
    return now


def eos_token_ids(model_dir: Path, tokenizer: Any) -> frozenset[int]:
    """The ids that end an output: generation_config.json's EOS ids (else config.json's, as transformers
    reads them) and the tokenizer's EOS, as vLLM stops on both (a chat fine-tune's tokenizer may end turns
    with <|im_end|> while its config still names </s>)."""
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if value is not None:
                values = value if isinstance(value, list) else [value]  # true or "2" is no token id
                ids.update(v for v in values if isinstance(v, int) and not isinstance(v, bool))
                break
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    return frozenset(ids)


def engine_tokenizer(config: EngineConfig, model_dir: Path) -> Any:
    """The tokenizer for `config`: None with skip_tokenizer_init, or for dummy weights without one."""
    if config.skip_tokenizer_init:
        return None
    folder = Path(config.tokenizer) if config.tokenizer else model_dir
    return load_tokenizer(folder, required=config.load_format != "dummy")


def load_runner(config: EngineConfig, model_dir: Path, tokenizer: Any) -> tuple[Any, ModelInfo]:
    """The model runner for `config` (this process's ModelRunner, or the driver of tensor-parallel worker
    processes) and what the engine core needs to know of the model; the one way `LLM` and the engine-core
    process of `mopt serve` load a model."""
    from model_optimizer.runtime.runner.model_runner import ModelRunner

    check_host_memory(config)
    if config.tensor_parallel_size > 1:  # worker processes hold the model; this one drives them
        from model_optimizer.runtime.executor.executor import TensorParallelExecutor

        runner: Any = TensorParallelExecutor(config, model_dir)
    else:
        runner = ModelRunner(config, model_dir)
    info = ModelInfo(
        vocab_size=runner.vocab_size,
        max_model_len=runner.max_model_len,
        eos_token_ids=eos_token_ids(model_dir, tokenizer),
        num_kv_blocks=runner.num_kv_blocks,
        device_type=getattr(runner, "device_type", "cpu"),
        num_host_kv_blocks=getattr(runner, "num_host_kv_blocks", 0),
    )
    return runner, info


def check_host_memory(config: EngineConfig) -> None:
    """ValueError naming the flags when the KV cache the engine would allocate in host memory (kv_cache_memory
    per process on the CPU, and the host KV tier's kv_offloading_size GiB) exceeds what the machine has
    available: the zero-filled tensors got the process killed by the OOM killer, or a RuntimeError out of
    the allocator, only after the weights had loaded."""
    import torch

    from model_optimizer.environment.probes.system import available_memory_bytes
    from model_optimizer.runtime.config import format_size

    on_cpu = config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available())
    kv = config.kv_cache_memory * config.tensor_parallel_size if on_cpu and config.num_kv_blocks is None else 0
    tier = int(config.kv_offloading_size * 2**30) * config.tensor_parallel_size
    available = available_memory_bytes()
    if available is None or kv + tier <= available:
        return
    parts = ([f"--kv-cache-memory {format_size(config.kv_cache_memory)}"] if kv else []) + (
        [f"--kv-offloading-size {config.kv_offloading_size:g}"] if tier else []
    )
    per_process = f" in each of {config.tensor_parallel_size} processes" if config.tensor_parallel_size > 1 else ""
    raise ValueError(
        f"{' and '.join(parts)}{per_process} would take {(kv + tier) / 2**30:.1f} GiB of host memory, but only "
        f"{available / 2**30:.1f} GiB is available on this machine; lower {' and '.join(p.split()[0] for p in parts)}"
    )


def config_generation_defaults(config: EngineConfig, model_dir: Path) -> dict[str, Any]:
    """generation_defaults as `config` sets them (its generation_config and override_generation_config)."""
    return generation_defaults(model_dir, config.generation_config, config.override_generation_config)


def generation_defaults(
    model_dir: Path, source: str = "auto", overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """SamplingParams fields set by a generation_config.json and `overrides` over it (EngineConfig's
    generation_config and override_generation_config): `source` auto reads the model folder's file (none:
    no defaults), vllm reads none, anything else is a folder that must hold one.

    Raises ValueError naming the file when it is not JSON or a value is not allowed.
    """
    folder = model_dir if source == "auto" else None if source == "vllm" else Path(source).expanduser()
    path = folder / "generation_config.json" if folder is not None else None
    if path is not None and not path.is_file() and source != "auto":
        raise ValueError(f"generation_config: {folder} holds no generation_config.json (auto, vllm or such a folder)")
    config: Any = {}
    if path is not None and path.is_file():
        from model_optimizer.common.fileio import read_json

        config = read_json(path)
        if not isinstance(config, dict):
            raise ValueError(f"{path}: expected a JSON object")
    for where, given in ((path, config), ("override_generation_config", {**config, **(overrides or {})})):
        try:
            values = generation_config_defaults(given)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return values


def check_engine_args(engine_args: Mapping[str, Any]) -> None:
    """TypeError naming `LLM()` and the closest setting for a keyword (the vLLM-only settings already split
    off) that is no EngineConfig field: EngineConfig's own error named a class the caller never saw, and
    suggested nothing for `max_model_length`."""
    import difflib
    from dataclasses import fields

    known = [f.name for f in fields(EngineConfig) if f.name != "model"]
    for name in engine_args:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see EngineConfig for the settings taken"
            raise TypeError(f"LLM() got an unexpected keyword argument {name!r} ({hint})")


class LLM:
    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        start = time.perf_counter()
        engine_args, vllm_only = vllm_settings.split(vllm_settings.plain_values(engine_args))
        check_engine_args(engine_args)  # a misspelt keyword: said before the seconds of the torch import
        if notes := vllm_settings.ignored(vllm_only):
            logging.getLogger(__name__).warning("vLLM settings ignored: %s", "; ".join(notes))
        import model_optimizer.runtime.runner.model_runner  # noqa: F401 - torch: the first import pays seconds

        phase = log_phase("imports", start)
        self.config = EngineConfig(model=model, **engine_args)
        if self.config.device != "cpu":
            hash_triton_in_background()  # beside the tokenizer and weights, not before the first kernel
        configure_compile(self.config)  # Triton's kernel cache in our folder, keyed by versions and GPU
        self.model_dir = resolve_model_dir(self.config.model, self.config.revision)
        self._embedder: Any = None
        self._closed = False
        self._generation_defaults: dict[str, Any] | None = None
        self._hf_tokenizer: Any = None
        self._ids = itertools.count()
        """Request ids of generate's and embed's outputs: "0", "1", ... as vLLM numbers them."""
        self.engine: LLMEngine | None = None
        if is_encoder_folder(self.model_dir):  # BERT-family: embeddings only, no generation engine
            from model_optimizer.runtime.embed.config import refuse_load_time_quantization

            refuse_load_time_quantization(self.config.quantization, self.model_dir)
            self.tokenizer = load_tokenizer(Path(self.config.tokenizer) if self.config.tokenizer else self.model_dir)
            return
        phase = log_phase("config", phase)
        # a bad file or override: ValueError before the load
        self._generation_defaults = config_generation_defaults(self.config, self.model_dir)
        self.tokenizer = engine_tokenizer(self.config, self.model_dir)
        log_phase("tokenizer", phase)
        runner, info = load_runner(self.config, self.model_dir, self.tokenizer)  # logs weights, KV cache, graphs
        phase = time.perf_counter()
        self.runner = runner
        self.engine = LLMEngine(self.config, runner, self.tokenizer, info)
        log_phase("engine", phase)
        log_phase("total", start)

    @property
    def llm_engine(self) -> LLMEngine | None:
        """vLLM's name for `engine`, the step-by-step engine (None for an encoder model)."""
        return self.engine

    def close(self) -> None:
        """Stop the tensor-parallel worker processes and the grammar threads now (they also stop when this
        process exits) and let go of the model, its KV cache and embedder, so that their memory can be
        freed. generate and embed raise ValueError afterwards. `with LLM(...) as llm:` closes it at the
        block's end."""
        if self.engine is not None:
            self.engine.close()
        self._closed = True
        self.engine = self.runner = self._embedder = None

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this LLM was closed: make a new one")

    def get_tokenizer(self) -> Any:
        """transformers' tokenizer of the files prompts are encoded with (vLLM's name and type: the whole
        PreTrainedTokenizer API), loaded at the first call; None for a model loaded with skip_tokenizer_init.
        The engine's own (`self.tokenizer`) may be a lighter one with the same ids and text, which spares
        start-up the transformers import."""
        if self.tokenizer is None:
            return None
        if self._hf_tokenizer is None:
            from model_optimizer.runtime.models.fast_tokenizer import FastTokenizer
            from model_optimizer.runtime.models.tokenizer import load_transformers_tokenizer

            own = self.tokenizer
            light = isinstance(own, FastTokenizer)
            self._hf_tokenizer = load_transformers_tokenizer(Path(own.name_or_path)) if light else own
        return self._hf_tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's name for default_sampling_params."""
        return self.default_sampling_params()

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's own defaults from generation_config.json (temperature,
        top_p, top_k, min_p, repetition_penalty, and max_new_tokens as max_tokens); every other
        field keeps SamplingParams' default. A fresh object each call: callers may change it."""
        if self._generation_defaults is None:  # an encoder folder's LLM reads them only when asked
            self._generation_defaults = config_generation_defaults(self.config, self.model_dir)
        return SamplingParams(**self._generation_defaults)

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool | Callable[..., Any] = True,
        lora_request: None = None,
        priority: Sequence[int] | None = None,
        *,
        on_progress: Callable[[int, RequestOutput], None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text or token ids); outputs come back in prompt order.

        `on_progress(index, output)` is called as each prompt finishes, with its position in `prompts`.
        `use_tqdm` (vLLM's name): a progress bar on stderr when it is a terminal, else a plain line at
        every tenth of the prompts; False: nothing; a callable: the bar factory (tqdm's signature), as vLLM
        takes it. `priority`: one per prompt (lower runs first under --scheduling-policy priority), as in
        vLLM. `lora_request` must be None: LoRA adapters are not supported.

        Without sampling params, the model's defaults apply (`default_sampling_params()`), as in vLLM.
        """
        _refuse_lora(lora_request)
        return self._generate(prompts, sampling_params, use_tqdm, on_progress, "LLM.generate", priority)

    def _generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None,
        use_tqdm: bool | Callable[..., Any],
        on_progress: Callable[[int, RequestOutput], None] | None,
        label: str,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        self._check_open()
        if self.engine is None:
            raise ValueError(f"{self.model_dir} is an encoder (embedding) model: use LLM.embed, not generate")
        prompts = _as_prompt_list(prompts)
        priorities = [0] * len(prompts) if priority is None else list(priority)
        if len(priorities) != len(prompts) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in priorities
        ):
            raise ValueError(f"priority must be a list of {len(prompts)} integers (one per prompt), got {priority!r}")
        params = self.default_sampling_params() if sampling_params is None else sampling_params
        params_list = _as_params_list(params, len(prompts))
        vocab_size = self.engine.info.vocab_size
        for p in {id(p): p for p in params_list}.values():  # before any is queued: a bad id fails no step
            p.check_vocab(vocab_size)
            if p.structured_outputs is not None:  # a bad regex or grammar: ValueError, not an "error" output
                from model_optimizer.runtime.structured.grammar import check_offline

                check_offline(p.structured_outputs)
        ids = [str(next(self._ids)) for _ in prompts]
        index_of = {request_id: index for index, request_id in enumerate(ids)}
        added = []
        try:
            for request_id, prompt, p, rank in zip(ids, prompts, params_list, priorities):
                self.engine.add_request(request_id, prompt, p.clone(output_kind=RequestOutputKind.FINAL_ONLY), rank)
                added.append(request_id)
            finished: dict[str, RequestOutput] = {}
            with _progress(len(prompts), use_tqdm, label) as advance:
                while self.engine.has_unfinished_requests():
                    for output in self.engine.step():
                        if output.finished:
                            finished[output.request_id] = output
                            advance()
                            if on_progress:
                                on_progress(index_of[output.request_id], output)
        except BaseException:
            for request_id in added:
                self.engine.abort(request_id)
            raise
        return [finished[i] for i in ids]

    def beam_search(
        self,
        prompts: Prompt | dict | Sequence[Prompt | dict],
        params: BeamSearchParams,
        use_tqdm: bool | Callable[..., Any] = False,
    ) -> list[BeamSearchOutput]:
        """Beam search for every prompt (text, token ids, or vLLM's prompt dicts), as vLLM's `LLM.beam_search`:
        one BeamSearchOutput per prompt, in prompt order, its `sequences` (at most params.beam_width, best
        first) each with its tokens (the prompt's included), text, cum_logprob and finish_reason. Every
        prompt's beams advance together, one engine step per token (runtime/beam_search.py).
        `use_tqdm`: progress over the max_tokens steps, as `generate` shows it."""
        self._check_open()
        if self.engine is None:
            raise ValueError(f"{self.model_dir} is an encoder (embedding) model: it has no beams to search")
        if not isinstance(params, BeamSearchParams):
            raise TypeError(f"params must be a BeamSearchParams, got {type(params).__name__}")
        info = self.engine.info
        prompt_ids = [encode_prompt(self.tokenizer, p, info.vocab_size) for p in _as_prompt_list(prompts)]
        max_len = beam_max_len(self.config, info.max_model_len)
        searches = [BeamSearch(ids, params, info.eos_token_ids, max_len) for ids in prompt_ids]
        step = params.step_params()
        with _progress(params.max_tokens, use_tqdm, "LLM.beam_search") as advance:
            while pending := [(search, ids) for search in searches for ids in search.pending()]:
                outputs = self._generate([ids for _, ids in pending], step, False, None, "LLM.beam_search")
                for search in searches:
                    steps = [o.outputs[0].logprobs[0] for (s, _), o in zip(pending, outputs) if s is search]
                    if steps:
                        search.advance(steps)
                advance()
        return [search.result(self.tokenizer) for search in searches]

    def chat(
        self,
        messages: Sequence[Mapping] | Sequence[Sequence[Mapping]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool | Callable[..., Any] = True,
        lora_request: None = None,
        *,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: list[dict] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        chat_template_content_format: str = "auto",
        on_progress: Callable[[int, RequestOutput], None] | None = None,
    ) -> list[RequestOutput]:
        """Reply to one conversation (a list of `{"role": ..., "content": ...}` messages: dicts or pydantic
        messages such as the openai package's, an assistant's tool-call arguments as JSON text or objects) or
        to a list of them, as vLLM's `LLM.chat`: each is rendered through the chat template (`chat_template`:
        a shipped name, a file or the template itself; else the tokenizer's, of named ones the one
        transformers picks), tokenized without adding special tokens (the template writes them), then
        generated as `generate` does. `tools` (OpenAI's function definitions; an empty list too) and
        `chat_template_kwargs` (e.g. `{"enable_thinking": False}`) reach the template;
        `chat_template_content_format` (auto, string, openai) shapes each message's content as the server's
        flag of that name does. Each output's `prompt` is the rendered text. ValueError when a conversation
        cannot be rendered."""
        self._check_open()
        _refuse_lora(lora_request)
        if self.engine is None:
            raise ValueError(f"{self.model_dir} is an encoder (embedding) model: use LLM.embed, not chat")
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer, so messages cannot be rendered: use generate with token ids")
        from model_optimizer.runtime.engine.input_processor import RESERVED_TEMPLATE_KWARGS, chat_text

        reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(chat_template_kwargs or {}))
        if reserved:  # an argument of this call, or of the rendering: dropped, they would change nothing
            raise ValueError(f"chat_template_kwargs may not set {', '.join(reserved)}: they are the rendering's own")
        from model_optimizer.runtime.models.chat_templates import load_template

        template = load_template(chat_template) if chat_template is not None else None
        texts = [
            chat_text(
                self.tokenizer,
                conversation,
                template,
                add_generation_prompt,
                chat_template_kwargs,
                tools,
                continue_final_message,
                chat_template_content_format,
            )
            for conversation in _as_conversations(messages)
        ]
        prompts = [list(self.tokenizer.encode(text, add_special_tokens=False)) for text in texts]
        outputs = self._generate(prompts, sampling_params, use_tqdm, on_progress, "LLM.chat")
        for output, text in zip(outputs, texts):
            output.prompt = text
        return outputs

    def embed(
        self,
        texts: str | list[int] | dict | Sequence[str | list[int] | dict],
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        instruction: str | None = None,
        *,
        use_tqdm: bool = True,
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
    ) -> list[EmbeddingRequestOutput]:
        """Embeddings of texts (or token-id lists, or vLLM's prompt dicts), pooled and normalized as the model
        folder says, as vLLM's `LLM.embed` returns them: one EmbeddingRequestOutput per input, the vector in
        `.outputs.embedding`, the ids the model read in `.prompt_token_ids`. `dimensions` and
        `truncate_prompt_tokens` may come in `pooling_params` (vLLM's way; one for every input), and so may
        `normalize` (False: the pooled vectors as they are).
        `use_tqdm`: progress as `generate` shows it.

        A decoder (Qwen3-Embedding style) embeds with the generation engine's own weights, in the
        engine's dtype: they are loaded once, and embedding reads no KV cache.
        """
        self._check_open()
        if self._embedder is None:
            if self.config.tensor_parallel_size > 1 and self.engine is not None:
                raise ValueError(
                    "embed is not supported with tensor_parallel_size > 1 (the weights live in worker processes); "
                    "embed with tensor_parallel_size 1"
                )
            from model_optimizer.runtime.embed import EmbedConfig, Embedder

            backbone, device = None, self.config.device
            if self.engine is not None:
                from model_optimizer.runtime.embed.backbone import DecoderBackbone

                backbone = DecoderBackbone(self.runner.model.model, self.runner.model.args).eval()
                device = self.runner.device.type
            # the engine's context bounds an input, as vLLM's max_model_len does its embeddings
            config = EmbedConfig.from_engine(self.config, device=device, max_seq_length=self.config.max_model_len)
            self._embedder = Embedder(self.model_dir, backbone=backbone, **vars(config))
        from model_optimizer.runtime.embed.inputs import as_input_list

        normalize = None
        if pooling_params is not None:
            dimensions, truncate_prompt_tokens, normalize = _pooling(pooling_params, dimensions, truncate_prompt_tokens)
        if isinstance(texts, dict):
            texts = [_as_prompt(texts)]
        elif isinstance(texts, (list, tuple)) and any(isinstance(t, dict) for t in texts):
            texts = [_as_prompt(t) for t in texts]
        items = as_input_list(texts)  # one text or token-id list, or several: the count the progress shows
        with _progress(len(items), use_tqdm, "LLM.embed") as advance:
            out = self._embedder.encode(
                items,
                dimensions=dimensions,
                truncate_prompt_tokens=truncate_prompt_tokens,
                instruction=instruction,
                on_progress=advance,
                keep_token_ids=True,
                normalize=normalize,
            )
        return [
            EmbeddingRequestOutput(str(next(self._ids)), EmbeddingOutput(vector), ids)
            for vector, ids in zip(out.embeddings.tolist(), out.token_ids or [])
        ]

    def score(
        self,
        data_1: str | list[int] | Sequence[str | list[int]],
        data_2: str | list[int] | Sequence[str | list[int]],
        /,
        *,
        truncate_prompt_tokens: int | None = None,
        use_tqdm: bool | Callable[..., Any] = True,
    ) -> list[ScoringRequestOutput]:
        """Scores of text pairs by an embedding model, as vLLM's `LLM.score` gives them for one: the cosine
        similarity of the two texts' embeddings (runtime/embed/scoring.py), one ScoringRequestOutput per pair
        (`.outputs.score`). `data_1` is one text (scored against every text of `data_2`) or as many texts as
        `data_2` holds (scored in pairs); texts may be token ids. Each distinct text is embedded once."""
        import torch

        from model_optimizer.runtime.embed.scoring import cosine_scores, distinct_inputs, score_pairs

        inputs, pairs, _ = distinct_inputs(score_pairs(data_1, data_2))
        embedded = self.embed(inputs, truncate_prompt_tokens=truncate_prompt_tokens, use_tqdm=use_tqdm)
        scores = cosine_scores(torch.tensor([e.outputs.embedding for e in embedded]), pairs)
        return [
            ScoringRequestOutput(
                str(next(self._ids)), ScoringOutput(score), embedded[a].prompt_token_ids + embedded[b].prompt_token_ids
            )
            for score, (a, b) in zip(scores, pairs)
        ]


@contextmanager
def _progress(total: int, shown: bool | Callable[..., Any], label: str) -> Iterator[Callable[..., None]]:
    """The offline API's progress display (common.progress.batch_progress on stderr; plain lines start
    with `label`), a bar from a factory with tqdm's signature (vLLM's use_tqdm may be one), or a no-op."""
    if not shown:
        yield lambda count=1: None
        return
    if callable(shown):
        bar = shown(total=total, desc=label)
        try:
            yield lambda count=1: bar.update(count)
        finally:
            bar.close()
        return
    from rich.console import Console

    from model_optimizer.common.progress import batch_progress

    def log(line: str) -> None:
        print(f"{label}: {line}", file=sys.stderr, flush=True)

    with batch_progress(Console(stderr=True), total, label, log) as advance:
        yield advance


def _refuse_lora(lora_request: object) -> None:
    if lora_request is not None:
        raise ValueError(
            "LoRA adapters are not supported: merge the adapter into the weights, and pass lora_request=None"
        )


PROMPTS_HINT = "a string, a list of token ids, a {'prompt': ...} or {'prompt_token_ids': ...} dict, or a list of those"


def _as_prompt_list(prompts: Prompt | dict | Sequence[Prompt | dict]) -> list[Prompt]:
    if isinstance(prompts, (str, dict)):
        return [_as_prompt(prompts)]
    # bytes would pass as a list of token ids (its byte values); None or a number is no prompt at all
    if isinstance(prompts, (bytes, bytearray)) or not isinstance(prompts, Iterable):
        raise TypeError(f"prompts must be {PROMPTS_HINT}, got {type(prompts).__name__}")
    prompts = list(prompts)
    if prompts and all(isinstance(t, int) for t in prompts):
        return [prompts]  # one prompt given as token ids
    for index, p in enumerate(prompts):
        if not isinstance(p, (str, dict, list, tuple)):
            raise TypeError(f"prompts[{index}] must be {PROMPTS_HINT}, got {type(p).__name__}")
    return [_as_prompt(p) for p in prompts]


def _as_conversations(messages: Sequence[Mapping] | Sequence[Sequence[Mapping]]) -> list[list[Any]]:
    """One conversation (a list of message dicts) or a list of them, as a list of conversations."""
    if not _is_list_of_something(messages):
        raise ValueError("messages must be a non-empty list of message dicts, or a list of such lists")
    if all(_is_message(m) for m in messages):
        return [list(messages)]
    for index, conversation in enumerate(messages):
        if not _is_list_of_something(conversation):
            raise ValueError(f"messages[{index}] must be a non-empty list of message dicts (one conversation)")
    return [list(conversation) for conversation in messages]


def _is_list_of_something(value: object) -> bool:
    """A non-empty sequence that is neither text nor a message itself."""
    return (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and not _is_message(value) and bool(value)
    )


def _is_message(value: object) -> bool:
    """A chat message: a mapping, or an object with model_dump (a pydantic message, as the openai package's)."""
    return isinstance(value, Mapping) or hasattr(value, "model_dump")


def _as_params_list(params: SamplingParams | Sequence[SamplingParams], num_prompts: int) -> list[SamplingParams]:
    """One SamplingParams per prompt; TypeError naming sampling_params for anything else (a dict of
    fields is not converted: SamplingParams(**fields) says which field is wrong)."""
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    if not isinstance(params, (list, tuple)):
        raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got {type(params).__name__}")
    for index, p in enumerate(params):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{index}] must be a SamplingParams, got {type(p).__name__}")
    if len(params) != num_prompts:
        raise ValueError(f"got {len(params)} sampling params for {num_prompts} prompts")
    return list(params)


def _pooling(
    params: PoolingParams | Sequence[PoolingParams], dimensions: int | None, truncate_prompt_tokens: int | None
) -> tuple[int | None, int | None, bool | None]:
    """(dimensions, truncate_prompt_tokens, normalize) of vLLM's pooling_params, one for all inputs (a list of
    equal ones too), the same setting given twice refused unless equal."""
    if isinstance(params, (list, tuple)):
        if not params or any(p != params[0] for p in params):
            raise ValueError("pooling_params: give one PoolingParams for all inputs (embed runs them alike)")
        params = params[0]
    if not isinstance(params, PoolingParams):
        raise TypeError(f"pooling_params must be a PoolingParams, got {type(params).__name__}")
    for name, given in (("dimensions", dimensions), ("truncate_prompt_tokens", truncate_prompt_tokens)):
        value = getattr(params, name)
        if given is not None and value is not None and given != value:
            raise ValueError(f"{name} is {given} but pooling_params.{name} is {value}: give it once")
    return (
        params.dimensions if params.dimensions is not None else dimensions,
        params.truncate_prompt_tokens if params.truncate_prompt_tokens is not None else truncate_prompt_tokens,
        params.normalize,
    )


PROMPT_KEYS = ("prompt", "prompt_token_ids")
"""vLLM's TextPrompt and TokensPrompt dicts: {"prompt": text} or {"prompt_token_ids": ids}."""


def _as_prompt(prompt: Prompt | dict) -> Prompt:
    if not isinstance(prompt, dict):
        return prompt
    given = [k for k in PROMPT_KEYS if k in prompt]
    unknown = sorted(set(prompt) - set(PROMPT_KEYS))
    if unknown or len(given) != 1:
        raise ValueError(
            f"a prompt dict has exactly one of {', '.join(PROMPT_KEYS)} (vLLM's TextPrompt / TokensPrompt), "
            f"got keys {sorted(prompt)}"
        )
    value = prompt[given[0]]
    if given[0] == "prompt" and not isinstance(value, str):
        raise ValueError(f"prompt must be text, got {type(value).__name__}")
    if given[0] == "prompt_token_ids" and not isinstance(value, (list, tuple)):
        raise ValueError(f"prompt_token_ids must be a list of integers, got {type(value).__name__}")
    return list(value) if isinstance(value, tuple) else value  # a tuple as a list, as a bare prompt is taken
