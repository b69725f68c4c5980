"""LLM: the offline API, shaped like vLLM's (`LLM(model).generate(prompts, params)`).

Its arguments are checked and brought to one shape by llm_inputs.py; its pooling methods (embed, score,
encode), their arguments and the embedder are llm_embed.py's. The model loads through startup.py, as the
engine-core process of `mopt serve` loads it; each call's requests run to completion through
llm_requests.py, with progress through llm_progress.py.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_optimizer.runtime import vllm_settings
from model_optimizer.runtime.beam_search import BeamSearch, BeamSearchOutput, BeamSearchParams, beam_max_len
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.engine import LLMEngine
from model_optimizer.runtime.engine.input_processor import encode_prompt
from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.generation_defaults import config_generation_defaults
from model_optimizer.runtime.hub import resolve_model_dir
from model_optimizer.runtime.kernels.compile_cache import configure_compile, hash_triton_in_background
from model_optimizer.runtime.llm_embed import LLMPooling, warn_unused_embedding_settings
from model_optimizer.runtime.llm_inputs import (
    Prompt,
    as_conversations,
    as_params_list,
    as_priorities,
    as_prompt,
    as_prompt_list,
    check_concurrency_limit,
    check_engine_args,
    check_params,
    check_template_kwargs,
    given_text,
    prompt_items,
    refuse_lora,
)
from model_optimizer.runtime.llm_progress import offline_progress
from model_optimizer.runtime.llm_requests import run_requests
from model_optimizer.runtime.models.model_config import is_embedding_folder
from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.startup import engine_tokenizer, load_runner, log_phase

if TYPE_CHECKING:
    from model_optimizer.runtime import llm_metrics

logger = logging.getLogger(__name__)


class LLM(LLMPooling):
    """A model loaded in this process with its engine, run to completion call by call: generate, chat,
    beam_search, embed, score and encode, as vLLM's `LLM` offers them. An encoder folder (BERT family) gets no
    generation engine, only embed, score and encode."""

    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        start = time.perf_counter()
        engine_args, vllm_only = vllm_settings.split(vllm_settings.plain_values(engine_args))
        check_engine_args(engine_args)  # a misspelt keyword: said before the seconds of the torch import
        if notes := vllm_settings.ignored(vllm_only):
            logger.warning("vLLM settings ignored: %s", "; ".join(notes))
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
        self.runner: Any = None
        """The model runner behind `engine` (None for an encoder model, which has no engine)."""
        if is_embedding_folder(self.model_dir):  # an encoder or a decoder without its LM head: no engine
            from model_optimizer.runtime.embed.config import refuse_load_time_quantization

            refuse_load_time_quantization(self.config.quantization, self.model_dir)
            warn_unused_embedding_settings(self.config, logger)  # as `mopt serve` of the folder warns
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

    def get_metrics(self) -> list[llm_metrics.Metric]:
        """The engine's gauges and counters now, as vLLM's `LLM.get_metrics` lists them (Counter, Gauge, and
        a Vector for vllm:spec_decode_num_accepted_tokens_per_pos: from model_optimizer.runtime.llm_metrics),
        under the names the server's /metrics gives them. The server's per-request histograms and counters
        (latencies, vllm:prompt_tokens, vllm:request_success) are not kept offline; an encoder model, which
        has no engine, has none."""
        from model_optimizer.runtime.llm_metrics import engine_metrics  # prometheus_client: 50 ms, on demand

        self._check_open()
        return engine_metrics(self.config.model or self.model_dir.name, self.config.speculative, self.engine)

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """Forget every cached prompt prefix, as vLLM's `LLM.reset_prefix_cache`: the next prompt computes its
        prefix again (a benchmark's cold runs, new weights); the prefix-cache counters of `get_metrics` go on.
        True when nothing is left cached, as always between calls here (no request runs then); False only
        while requests added to `llm_engine` by hand still hold cached blocks. An encoder model caches
        nothing: True. `reset_running_requests=True` (vLLM: preempt the running requests first) is taken only
        when none runs: ValueError otherwise."""
        self._check_open()
        if self.engine is None:
            return True
        if reset_running_requests and self.engine.has_unfinished_requests():
            raise ValueError(
                "reset_running_requests=True is not supported while requests run (they are not preempted): "
                "finish or abort them first, or reset without it"
            )
        return self.engine.reset_prefix_cache()

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
        refuse_lora(lora_request)
        return self._generate(prompts, sampling_params, use_tqdm, on_progress, "LLM.generate", priority)

    def _generate(
        self,
        prompts: Prompt | dict | Sequence[Prompt | dict],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None,
        use_tqdm: bool | Callable[..., Any],
        on_progress: Callable[[int, RequestOutput], None] | None,
        label: str,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        """generate's work for generate, chat and beam_search (`label`: the caller, as progress and errors name
        it). A TokensPrompt dict's text is its output's prompt, as vLLM reports it."""
        self._check_open()
        if self.engine is None:
            raise ValueError(f"{self.model_dir} is an embedding model: use LLM.embed, not generate")
        items = prompt_items(prompts)
        priorities = as_priorities(priority, len(items))
        if any(priorities) and self.config.scheduling_policy != "priority":
            logger.warning(
                "priority given, but scheduling_policy is %r: it orders nothing", self.config.scheduling_policy
            )
        params = self.default_sampling_params() if sampling_params is None else sampling_params
        params_list = as_params_list(params, len(items))
        check_params(params_list, self.engine.info.vocab_size)  # before any is queued: a bad one fails no step
        ids = [str(next(self._ids)) for _ in items]
        requests = list(zip(ids, [as_prompt(p) for p in items], params_list, priorities))
        outputs = run_requests(self.engine, requests, use_tqdm, on_progress, label)
        for output, item in zip(outputs, items):
            if (text := given_text(item)) is not None:
                output.prompt = text
        return outputs

    def beam_search(
        self,
        prompts: Prompt | dict | Sequence[Prompt | dict],
        params: BeamSearchParams,
        lora_request: None = None,
        use_tqdm: bool | Callable[..., Any] = False,
        concurrency_limit: int | None = None,
    ) -> list[BeamSearchOutput]:
        """Beam search for every prompt (text, token ids, or vLLM's prompt dicts), as vLLM's `LLM.beam_search`
        (its arguments in its order): one BeamSearchOutput per prompt, in prompt order, its `sequences` (at most
        params.beam_width, best first) each with its tokens (the prompt's included), text, cum_logprob and
        finish_reason. The beams of `concurrency_limit` prompts at a time (None: all of them) advance together,
        one engine step per token (runtime/beam_search.py). `use_tqdm`: progress over the max_tokens steps of
        each such group, as `generate` shows it. `lora_request` must be None."""
        self._check_open()
        refuse_lora(lora_request)
        if self.engine is None:
            raise ValueError(f"{self.model_dir} is an embedding model: it has no beams to search")
        if not isinstance(params, BeamSearchParams):
            raise TypeError(f"params must be a BeamSearchParams, got {type(params).__name__}")
        check_concurrency_limit(concurrency_limit)
        info = self.engine.info
        prompt_ids = [encode_prompt(self.tokenizer, p, info.vocab_size) for p in as_prompt_list(prompts)]
        max_len = beam_max_len(self.config, info.max_model_len)
        searches = [BeamSearch(ids, params, info.eos_token_ids, max_len) for ids in prompt_ids]
        size = concurrency_limit or max(len(searches), 1)
        groups = [searches[start : start + size] for start in range(0, len(searches), size)]
        with offline_progress(params.max_tokens * len(groups), use_tqdm, "LLM.beam_search") as advance:
            for group in groups:
                self._search(group, params.step_params(), advance)
        return [search.result(self.tokenizer) for search in searches]

    def _search(self, searches: list[BeamSearch], step: SamplingParams, advance: Callable[[], None]) -> None:
        """Run `searches` to their end: each step, one engine call for every live beam of them all."""
        while pending := [(search, ids) for search in searches for ids in search.pending()]:
            outputs = self._generate([ids for _, ids in pending], step, False, None, "LLM.beam_search")
            for search in searches:
                steps = [o.outputs[0].logprobs[0] for (s, _), o in zip(pending, outputs) if s is search]
                if steps:
                    search.advance(steps)
            advance()

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
        refuse_lora(lora_request)
        if self.engine is None:
            raise ValueError(f"{self.model_dir} is an embedding model: use LLM.embed, not chat")
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer, so messages cannot be rendered: use generate with token ids")
        check_template_kwargs(chat_template_kwargs)
        from model_optimizer.runtime.engine.input_processor import chat_text
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
            for conversation in as_conversations(messages)
        ]
        prompts = [
            {"prompt_token_ids": list(self.tokenizer.encode(text, add_special_tokens=False)), "prompt": text}
            for text in texts
        ]  # the template writes the special tokens; each output's prompt is the rendered text
        return self._generate(prompts, sampling_params, use_tqdm, on_progress, "LLM.chat")
