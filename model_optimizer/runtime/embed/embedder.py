"""Embedder: texts in, one vector each out, for BertModel-family encoders and decoder embedders.

    emb = Embedder("path/to/all-MiniLM-L6-v2")
    vectors = emb.embed(["a text", "another"])            # list[list[float]]
    out = emb.encode(texts, dimensions=256)                 # EmbedOutput: tensor + token counts

One call: tokenize (instruction, end token, length limit) on worker threads, chunk by chunk, and
pack each chunk's sequences into token-budget batches as it arrives, so the GPU runs the first
batches while later chunks are tokenized; run the backbone on each packed batch, pool, then
truncate to `dimensions` and L2-normalize. Nothing is cached between calls. One Embedder may be shared by
threads (the server runs each request's `aencode` in a worker thread): calls take turns at the model one
batch at a time, first come first served, and a call can be cancelled between its batches (calls.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from model_optimizer.runtime.device import pick_device
from model_optimizer.runtime.embed.backbone import is_encoder, load_backbone
from model_optimizer.runtime.embed.batching import Batch, Batcher
from model_optimizer.runtime.embed.calls import Calls, EmbedCall
from model_optimizer.runtime.embed.config import EmbedConfig
from model_optimizer.runtime.embed.inputs import (
    EmbedInput,
    InputError,
    InputRules,
    InputTokenizer,
    as_input_list,
    check_truncation,
)
from model_optimizer.runtime.embed.matryoshka import check_dimensions, declared_dimensions
from model_optimizer.runtime.embed.packing import pack_batch
from model_optimizer.runtime.embed.pooling import finish, pool
from model_optimizer.runtime.embed.st_folder import read_folder_spec
from model_optimizer.runtime.embed.tokenizer_pool import TokenizerPool, default_num_threads
from model_optimizer.runtime.hub import is_hub_id
from model_optimizer.runtime.models.model_config import read_config

OnBatch = Callable[[list[int], torch.Tensor, list[int]], None]
"""(positions of the batch's inputs in the call, their (n, dimensions) float32 CPU vectors, their token counts)."""


@dataclass
class EmbedOutput:
    embeddings: torch.Tensor
    """(num_inputs, dimensions) float32 on the CPU, in input order."""
    num_tokens: list[int]
    """Tokens the model read for each input (after instruction, end token and truncation): the usage count."""
    token_ids: list[list[int]] | None = None
    """The ids the model read for each input, when `encode` was asked to keep them (LLM.embed's outputs)."""

    @property
    def num_prompt_tokens(self) -> int:
        return sum(self.num_tokens)


class Embedder:
    def __init__(self, model_dir: str | Path, backbone: torch.nn.Module | None = None, **config: Any) -> None:
        """`backbone`: one already loaded (LLM.embed passes the generation engine's decoder, so its weights
        are loaded once); otherwise it is loaded from `model_dir` with the config's dtype and load_format."""
        from model_optimizer.runtime.models.tokenizer import load_tokenizer

        self.config = EmbedConfig(**config)
        self.model_dir = Path(model_dir).expanduser()
        if not self.model_dir.is_dir():
            raise FileNotFoundError(
                f"model folder {self.model_dir} does not exist (models load from local folders only)"
            )
        tokenizer_dir = Path(self.config.tokenizer).expanduser() if self.config.tokenizer else self.model_dir
        if not tokenizer_dir.is_dir() and not is_hub_id(str(self.config.tokenizer)):  # load_tokenizer resolves ids
            # checked before the weights load; load_tokenizer would call it a "model folder"
            raise FileNotFoundError(f"tokenizer folder {tokenizer_dir} does not exist (tokenizer, --tokenizer)")
        hf = read_config(self.model_dir)
        spec = read_folder_spec(self.model_dir)
        self.is_encoder = is_encoder(hf)
        self.device = pick_device(self.config.device)
        if backbone is None:
            backbone = load_backbone(self.model_dir, hf, self.config.dtype, self.device, self.config.load_format)
        self.backbone = backbone
        self.tokenizer_dir = tokenizer_dir
        self.tokenizer = load_tokenizer(self.tokenizer_dir)
        self.tokenizer.model_max_length = 1 << 30  # we check lengths ourselves, with a clearer message
        self.pooling = self._pick_pooling(spec.pooling)
        self.include_prompt = spec.include_prompt
        """False (the folder's Pooling config says include_prompt false): an instruction's tokens are left out
        of pooling, as sentence-transformers leaves out a prompt's."""
        self.matryoshka_dimensions = declared_dimensions(self.model_dir)
        """What the folder's config declares about Matryoshka training (matryoshka.py); None: nothing."""
        self.normalize = self.config.normalize if self.config.normalize is not None else spec.normalize is not False
        self.rules = InputRules(
            max_seq_length=self._pick_max_seq_length(spec.max_seq_length),
            instruction_template=self.config.instruction_template,
            do_lower_case=spec.do_lower_case,
            end_token_id=self._end_token_id(),
            vocab_size=self.backbone.vocab_size,
        )
        self.inputs = InputTokenizer(self.tokenizer, self.rules)
        threads = self.config.tokenizer_threads
        if threads is None:
            threads = default_num_threads() if self.device.type == "cuda" else 0
        self.tokenizer_pool = TokenizerPool(threads)
        self.graphs = self._graph_runner()
        self.calls = Calls()
        """The encode calls in flight and their turns at the model."""

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    @property
    def max_seq_length(self) -> int:
        return self.rules.max_seq_length

    def embed(
        self,
        inputs: EmbedInput | Sequence[EmbedInput],
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        instruction: str | None = None,
        normalize: bool | None = None,
    ) -> list[list[float]]:
        """One embedding per input (text or token ids), as lists of floats, in input order."""
        out = self.encode(inputs, dimensions, truncate_prompt_tokens, instruction, normalize=normalize)
        return out.embeddings.tolist()

    async def aencode(
        self, inputs: EmbedInput | Sequence[EmbedInput], call: EmbedCall | None = None, **kwargs: Any
    ) -> EmbedOutput:
        """`encode` in a worker thread, so an event loop keeps serving while the model runs. Cancelling the
        awaiting task cancels the call: the thread stops before its next batch (it cannot be stopped inside one)."""
        call = call if call is not None else EmbedCall()
        try:
            return await asyncio.to_thread(self.encode, inputs, call=call, **kwargs)
        except asyncio.CancelledError:
            self.calls.cancel(call)
            raise

    def encode(
        self,
        inputs: EmbedInput | Sequence[EmbedInput],
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        instruction: str | None = None,
        on_progress: Callable[[int], None] | None = None,
        on_batch: OnBatch | None = None,
        keep_token_ids: bool = False,
        *,
        normalize: bool | None = None,
        add_special_tokens: bool = True,
        call: EmbedCall | None = None,
    ) -> EmbedOutput:
        """Embeddings as one float32 tensor plus per-input token counts; `on_progress(n)` after each batch of n
        (on CUDA: once the batch is queued; the GPU may still be running it).

        `on_batch(rows, embeddings, num_tokens)` gets each batch's finished vectors (truncated, normalized,
        float32 on the CPU) as soon as the batch has run, so a caller can save them before the call ends
        (`mopt embed` does, so an interruption loses no finished row). On CUDA that is one device -> host
        copy per batch, which waits for the GPU; without `on_batch` nothing waits until the end.
        `keep_token_ids`: the output holds each input's ids too (off by default: a large job would keep
        them all). `normalize`: False returns the pooled vectors as they are (vLLM's
        PoolingParams.normalize); None: as the model folder says (`self.normalize`). `add_special_tokens`
        False: each text is read as its own tokens alone, without [CLS] / [SEP] or the end token (vLLM's
        field of that name); token-id inputs are read as given either way.
        `call`: a handle from `self.calls.open()` that bounds the call's tokens and lets another thread stop
        it before its next batch (EmbedCancelled); each batch runs in a turn (calls.py)."""
        items = as_input_list(inputs)
        self.check_dimensions(dimensions)
        truncate_to = check_truncation(truncate_prompt_tokens, self.max_seq_length)
        self.inputs.check(items, instruction)  # what needs no tokenizing fails before any batch runs
        normalize = self._pick_normalize(normalize)
        call = call if call is not None else EmbedCall()
        cfg = self.config
        # token ids count before anything is tokenized; texts as their chunks are
        num_tokens = sum(min(len(x), truncate_to or len(x)) for x in items if not isinstance(x, str))
        call.check_num_tokens(num_tokens)
        lengths = [0] * len(items)
        kept: list[list[int]] | None = [[] for _ in items] if keep_token_ids else None
        # results stay on the device until the end: one device -> host copy per call, not per batch
        pooled = torch.empty(len(items), self.hidden_size, dtype=torch.float32, device=self.device)
        batcher = Batcher(cfg.max_num_batched_tokens, cfg.max_num_seqs)
        prompt_length = self.prompt_length(instruction, add_special_tokens)
        skip = [prompt_length if isinstance(x, str) else 0 for x in items] if prompt_length else None

        def prepare(part: list[EmbedInput], numbers: list[int]) -> list[list[int]]:
            ids = self.inputs.token_ids(part, truncate_to, instruction, numbers, add_special_tokens)
            if prompt_length:
                self._check_prompt_room(part, ids, numbers, prompt_length)
            return ids

        def run(batches: list[Batch]) -> None:
            for batch in batches:
                with self.calls.turn(call):  # EmbedCancelled here once the call is cancelled
                    self._run_batch(batch, pooled, on_progress, skip)
                self._hand_out(batch, pooled, normalize, dimensions, on_batch)

        with closing(self.tokenizer_pool.chunks(items, prepare)) as chunks:  # closed: unstarted chunks dropped
            for rows, token_ids in chunks:
                for row, ids in zip(rows, token_ids):
                    lengths[row] = len(ids)
                    num_tokens += len(ids) if isinstance(items[row], str) else 0
                    if kept is not None:
                        kept[row] = list(ids)
                call.check_num_tokens(num_tokens)
                run(batcher.add(rows, token_ids))
        run(batcher.flush())
        embeddings = finish(pooled, normalize, dimensions).cpu()
        return EmbedOutput(embeddings, lengths, kept)

    def prompt_length(self, instruction: str | None, add_special_tokens: bool = True) -> int:
        """How many leading tokens of each text pooling leaves out for this instruction: 0 unless the folder's
        Pooling config says include_prompt false. Counted as sentence-transformers counts a prompt's: the
        tokens of the template's part before {text}, tokenized alone, less a closing special token ([SEP]);
        without special tokens (`add_special_tokens` False), the part's own tokens."""
        if self.include_prompt or not instruction:
            return 0
        marker = "\x00text\x00"
        filled = self.rules.instruction_template.format(task=instruction, text=marker)
        if marker not in filled:  # {text:.20}: where the text starts is not known
            raise ValueError(
                "this model leaves the instruction out of pooling (include_prompt false in its Pooling config), "
                "which needs a plain {text} in instruction_template, without a format spec"
            )
        prefix = filled.split(marker)[0]
        if self.rules.do_lower_case:
            prefix = prefix.lower()
        if not prefix:
            return 0
        ids = self.inputs.encoder.batch([prefix], add_special_tokens)[0]
        if add_special_tokens and ids and ids[-1] in set(self.tokenizer.all_special_ids):
            return len(ids) - 1
        return len(ids)

    @staticmethod
    def _check_prompt_room(
        part: Sequence[EmbedInput], ids: list[list[int]], numbers: Sequence[int], prompt_length: int
    ) -> None:
        """A text cut so short that only its instruction is left would pool nothing: say so."""
        for x, tokens, number in zip(part, ids, numbers):
            if isinstance(x, str) and len(tokens) <= prompt_length:
                raise InputError(
                    number,
                    f" keeps {len(tokens)} tokens, all of them its instruction's ({prompt_length}), which this "
                    "model leaves out of pooling (include_prompt false in its Pooling config): cut it less",
                    "truncate_prompt_tokens",
                )

    @torch.inference_mode()
    def _run_batch(
        self,
        batch: Batch,
        out: torch.Tensor,
        on_progress: Callable[[int], None] | None = None,
        skip: list[int] | None = None,
    ) -> None:
        """Pool one packed batch into out[batch.rows] (float32). On CUDA nothing here waits for the GPU.
        `skip`: per input of the call, its leading tokens that pooling leaves out (`prompt_length`)."""
        packed = pack_batch(
            batch.token_ids, batch.rows, self.device, [skip[r] for r in batch.rows] if skip is not None else None
        )
        hidden = self.graphs.run(packed) if self.graphs is not None else None
        if hidden is None:
            hidden = self.backbone(packed.token_ids, packed.positions, packed.meta)
        out.index_copy_(0, packed.rows, pool(hidden, packed.cu_seqlens, self.pooling, packed.skip, packed.pooled))
        if on_progress:
            on_progress(len(batch.rows))

    def _hand_out(
        self, batch: Batch, pooled: torch.Tensor, normalize: bool, dimensions: int | None, on_batch: OnBatch | None
    ) -> None:
        """Pass a finished batch's vectors to `on_batch`, in the batch's row order."""
        if on_batch is None:
            return
        rows = torch.tensor(batch.rows, device=pooled.device)
        vectors = finish(pooled.index_select(0, rows), normalize, dimensions).cpu()
        on_batch(batch.rows, vectors, [len(ids) for ids in batch.token_ids])

    def _graph_runner(self):
        """CUDA graphs for small batches when asked for and possible (flash varlen needs fp16 / bf16)."""
        dtype = next(self.backbone.parameters()).dtype
        if (
            not self.config.cuda_graph_max_tokens
            or self.device.type != "cuda"
            or dtype not in (torch.float16, torch.bfloat16)
        ):
            return None
        from model_optimizer.runtime.embed.cuda_graphs import GraphRunner

        return GraphRunner(self.backbone, self.device, self.config.cuda_graph_max_tokens)

    def check_dimensions(self, dimensions: int | None) -> None:
        """ValueError unless `dimensions` is None or a length this model may be cut to: 1..hidden_size, on a
        model trained for it (a decoder embedder, or a config declaring Matryoshka training) and among the
        lengths its config lists, if it lists any (matryoshka.py). Every entry point goes through here."""
        check_dimensions(dimensions, self.hidden_size, self.is_encoder, self.matryoshka_dimensions)

    def _pick_normalize(self, normalize: bool | None) -> bool:
        if normalize is None:
            return self.normalize
        if not isinstance(normalize, bool):
            raise ValueError(f"normalize must be True, False or None (as the model folder says), got {normalize!r}")
        return normalize

    def _pick_pooling(self, folder_pooling: str | None) -> str:
        if self.config.pooling != "auto":
            return self.config.pooling
        return folder_pooling or ("mean" if self.is_encoder else "last")

    def _pick_max_seq_length(self, folder_max: int | None) -> int:
        model_max = self.backbone.max_seq_len
        requested = self.config.max_seq_length or folder_max or model_max
        if requested > model_max:
            # named every way it is given: app.py and LLM.embed pass max_model_len in as max_seq_length
            raise ValueError(
                f"the longest input, {requested} tokens (--max-model-len of mopt serve, max_model_len of LLM, "
                f"max_seq_length of mopt embed and Embedder), exceeds what the model's positions hold ({model_max})"
            )
        return requested

    def _end_token_id(self) -> int | None:
        append = self.config.append_eos if self.config.append_eos is not None else not self.is_encoder
        if not append:
            return None
        vocab = self.tokenizer.get_vocab()
        token = self.config.eos_token or ("<|endoftext|>" if "<|endoftext|>" in vocab else self.tokenizer.eos_token)
        if token is None or token not in vocab:
            raise ValueError(f"append_eos needs an end token in the vocabulary; {token!r} is not (set eos_token)")
        return vocab[token]
