"""ModelRunner: owns the model, the KV-cache tensors (sized by runner/kv_sizing.py) and the sampler; executes one
SchedulerOutput."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.device import pick_device, to_device
from model_optimizer.runtime.distributed import broadcast, enable_one_shot_all_reduce, get_tp, min_over_ranks
from model_optimizer.runtime.engine.kv_cache import check_kv_capacity
from model_optimizer.runtime.engine.request import Logprob
from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput
from model_optimizer.runtime.kernels.compile_cache import wait_for_triton_key
from model_optimizer.runtime.layers.attention import bind_kv_caches, kv_cache_shape
from model_optimizer.runtime.layers.sampler import SampledTokens, Sampler
from model_optimizer.runtime.layers.token_mask import TokenMask
from model_optimizer.runtime.models.loader import load_model
from model_optimizer.runtime.runner import compile_ahead, graph_sampling
from model_optimizer.runtime.runner.decode_runner import DecodeRunner
from model_optimizer.runtime.runner.input_batch import InputBatch, StepInputs
from model_optimizer.runtime.runner.kv_sizing import KVSizing
from model_optimizer.runtime.runner.mask_staging import MaskStaging
from model_optimizer.runtime.runner.prompt_logprobs import compute as compute_prompt_logprobs
from model_optimizer.runtime.runner.step_handle import StepHandle
from model_optimizer.runtime.sampler_output import StepResults
from model_optimizer.runtime.spec_decode.drafter import Drafter, Proposal
from model_optimizer.runtime.spec_decode.verify import Verifier, verify_rows
from model_optimizer.runtime.structured.manager import HostTokenMask

log = logging.getLogger(__name__)
startup_log = logging.getLogger("model_optimizer.startup")  # the phase lines llm.py starts and ends


def _log_phase(name: str, since: float) -> float:
    now = time.perf_counter()
    startup_log.info("start-up: %s %.2f s", name, now - since)
    return now


def _log_cpu_choice() -> None:
    """Say what pick_device chose for this CPU (environment/cpu_speed.py) and what it rests on."""
    from model_optimizer.environment.cpu_speed import cpu_speed

    speed = cpu_speed()
    startup_log.info(
        "start-up: cpu: %d intra-op thread%s; bfloat16 checkpoints run in %s (%s: %s)",
        torch.get_num_threads(),
        "" if torch.get_num_threads() == 1 else "s",
        speed.dtype,
        "measured now" if speed.source == "measured" else "measured earlier",
        ", ".join(f"{k} {v:.1f} ms" for k, v in speed.timings_ms.items()),
    )


def _load_drafter(config: EngineConfig, device: torch.device, vocab_size: int, max_model_len: int) -> Drafter | None:
    """The draft model, when speculative_config names one; `max_model_len`: the length this engine serves."""
    spec = config.speculative
    if spec is None or not spec.is_draft_model:
        return None
    return Drafter(spec, config, device, vocab_size, max_model_len)


def _verify_runner(
    config: EngineConfig, model: torch.nn.Module, batch: InputBatch, num_kv_heads: int, device: torch.device
) -> DecodeRunner | None:
    """Speculative decoding on CUDA: graphs for steps in which every sequence verifies k proposals."""
    spec = config.speculative
    if spec is None or device.type != "cuda":
        return None
    k = spec.num_speculative_tokens
    runner = DecodeRunner(model, batch, config.max_num_seqs, num_kv_heads, not config.enforce_eager, query_len=k + 1)
    if not config.enforce_eager:
        runner.capture()
    return runner


@dataclass(frozen=True)
class PreparedStep:
    """A step whose inputs are written but whose forward is not queued yet (ModelRunner.prepare)."""

    out: SchedulerOutput
    inputs: StepInputs
    proposal: Proposal | None


class ModelRunner(KVSizing):
    def __init__(self, config: EngineConfig, model_dir: str | Path) -> None:
        """Start-up in its logged phases: weights (and the draft model's), KV sizing and allocation, then on
        CUDA the kernels' warm-up and the decode graphs."""
        self.config = config
        phase = time.perf_counter()
        self.device = pick_device(config.device)
        if self.device.type == "cpu":
            _log_cpu_choice()
        self.memory_before_load = torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else 0
        ahead = compile_ahead.for_engine_start(config, Path(model_dir), self.device)  # while the weights load
        with compile_ahead.stopped_on_error(ahead):  # no worker outlives a start that fails before its join
            phase = self._load(Path(model_dir), phase)
            if ahead is not None:  # before the first forward: it finds the workers' kernels in the cache
                ahead.join()
                phase = _log_phase("compile ahead", phase)
        wait_for_triton_key()  # hashed in a thread since the imports (kernels/compile_cache.py)
        self.sampler = Sampler(self.device, config.seed)  # before sizing: whether graphs hold logits
        phase = self._allocate_kv(phase)
        self.batch = InputBatch(
            config.max_num_seqs, self.max_model_len, config.block_size, self.device, config.max_num_batched_tokens
        )
        self.verifier = Verifier()
        self.masks = MaskStaging(self.device, config.max_num_seqs)
        """Host buffers the engine core fills with grammar masks, and their copy to the device."""
        self.decode_runner = None
        if self.device.type == "cuda":
            phase = self._prepare_cuda(phase)
            if ahead is not None:  # every kernel of such a start is in the cache now
                ahead.done()
        self.verify_runner = _verify_runner(config, self.model, self.batch, self.kv_caches[0].shape[3], self.device)
        if self.verify_runner is None and config.speculative is not None:  # no padding here, but the step
            # buffer's views of verifying steps (1 + k tokens each) are kept, as the verify runner's are
            self.batch.pad_query_lens = (*self.batch.pad_query_lens, config.speculative.num_speculative_tokens + 1)
        if self.drafter is not None:  # its KV cache (as many blocks), and its graphs on the same input batch
            self.drafter.start(self.batch, self.num_kv_blocks, self.max_model_len)
            _log_phase("draft model", phase)

    def _load(self, model_dir: Path, phase: float) -> float:
        """The model's weights and the draft model's (before sizing: its weights and KV count), the context
        length, the KV dtype and this rank's share of tensor parallelism."""
        config = self.config
        self.model = load_model(
            model_dir,
            config.dtype,
            self.device,
            config.load_format,
            config.quantization,
            config.cpu_offload_gb,
            config.max_model_len,
        )
        args = self.args = self.model.args
        self.dtype = next(self.model.parameters()).dtype
        self.max_model_len = config.max_model_len or args.max_position_embeddings
        if self.max_model_len > args.max_position_embeddings:
            raise ValueError(
                f"max_model_len {self.max_model_len} exceeds the model's max_position_embeddings ({args.max_position_embeddings})"
            )
        self.drafter = _load_drafter(config, self.device, args.vocab_size, self.max_model_len)
        phase = _log_phase("weights", phase)
        self.kv_dtype = torch.float8_e4m3fn if config.kv_cache_dtype == "fp8" else self.dtype
        self.tp = get_tp()
        if self.tp.size > 1 and config.one_shot_all_reduce:  # decode-sized messages; prefill keeps NCCL
            enable_one_shot_all_reduce(config.max_num_seqs * args.hidden_size, self.dtype, self.device)
        self.num_kv_heads = self.model.local_num_kv_heads  # this rank's share under tensor parallelism
        return phase

    def _allocate_kv(self, phase: float) -> float:
        """Size the KV cache (on CUDA a profiling forward at the full token budget), allocate it and the host
        tier, and bind it to the layers."""
        config = self.config
        # every rank must hold every block the driver's one block pool hands out
        self.num_kv_blocks = min_over_ranks(config.num_kv_blocks or self._num_blocks_for_budget())
        check_kv_capacity(self.num_kv_blocks, config.block_size, self.max_model_len)  # before allocating it
        phase = _log_phase("kv sizing", phase)
        shape = kv_cache_shape(self.model, self.num_kv_blocks, config.block_size)
        self.kv_caches = [
            torch.zeros(shape, dtype=self.kv_dtype, device=self.device) for _ in range(self.args.num_layers)
        ]
        log.info(
            "KV cache: %d blocks of %d tokens (%d tokens) on %s",
            self.num_kv_blocks,
            config.block_size,
            self.num_kv_blocks * config.block_size,
            self.device,
        )
        phase = _log_phase("kv allocation", phase)
        bind_kv_caches(self.model, self.kv_caches)  # once: the caches are no part of any step's metadata
        self.host_kv = self._host_kv_cache()
        self.num_host_kv_blocks = self.host_kv.num_blocks if self.host_kv is not None else 0
        return phase

    def _prepare_cuda(self, phase: float) -> float:
        """Triton kernels compiled for each prefill tile, then the decode runner and its graphs."""
        config = self.config
        self._warm_up_kernels()
        phase = _log_phase("warm-up", phase)
        in_graph = graph_sampling.available(self.sampler, self.tp.size)
        self.decode_runner = DecodeRunner(
            self.model,
            self.batch,
            config.max_num_seqs,
            self.kv_caches[0].shape[3],
            use_graphs=not config.enforce_eager,
            sampling=graph_sampling.GraphSampling(self.model, self.sampler, config.max_num_seqs, self.device)
            if in_graph
            else None,
        )
        if not config.enforce_eager:
            self.decode_runner.capture()
            phase = _log_phase("graph capture", phase)
        return phase

    @property
    def device_type(self) -> str:
        """Where the model runs: "cpu" or "cuda"."""
        return self.device.type

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    @torch.inference_mode()
    def _warm_up_kernels(self) -> None:
        """Compile the Triton and fused kernels for every prefill tile size before serving,
        so the first long prompt does not pay seconds of JIT compilation.

        The prefills write into the first blocks of the real caches (zeroed again after): Triton
        specialises a kernel on its integer arguments' type, and a real fp8 cache's plane stride
        passes 2**31 where a small scratch cache's does not, so warming on a scratch cache left two
        compilations inside the first requests (README "Quantize", the fp8 cache paragraph)."""
        length, bs = 2, self.config.block_size
        while length <= min(128, self.max_model_len):
            num_blocks = -(-length // bs)
            caches = [cache[:, :num_blocks] for cache in self.kv_caches]  # the real strides
            tokens = torch.ones(length, dtype=torch.int64, device=self.device)
            self._profile_forward(tokens, torch.arange(length, device=self.device), caches)
            length *= 2
        for cache in self.kv_caches:
            cache[:, : -(-min(128, self.max_model_len) // bs)].zero_()
        torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def launch(self, out: SchedulerOutput, pending: StepHandle | None = None, sample: bool = True) -> StepHandle:
        """Queue one step on the device: forward, logits, sampling, and the copy of the ids back.

        `pending` is the step still in flight (not collected): inputs whose token it sampled read that
        token from its ids on the device, so nothing here waits for the device. The engine collects it
        first when a sampling request needs its full history on the host (penalties); see engine.py.

        With `sample` False only the forward and the logits are queued: the engine core fills the grammar
        masks meanwhile, from the tokens of the step it collects now, and calls `sample` with them.

        Prompt logprobs, for the requests that asked, are queued after the sampling (the sampled ids' copy
        does not wait for them), on every rank (the LM head may be split over them); the handle carries them.

        The same as `submit(prepare(out, pending), pending, sample)`.
        """
        return self.submit(self.prepare(out, pending), pending, sample)

    @torch.inference_mode()
    def prepare(self, out: SchedulerOutput, pending: StepHandle | None = None) -> PreparedStep:
        """The host half of `launch`: the batch updated and the step's inputs written, their copies queued.
        It reads only which requests `pending` sampled for, not its ids, so the engine core prepares a step
        while the masks of `pending`'s sampling still fill, and then `submit`s it right after queuing that
        sampling: the device, which runs out of work at that point, waits for the forward's launch only."""
        if out.kv_saves or out.kv_loads:  # the host KV tier's copies, before this step's forward
            self.host_kv.apply(out.kv_saves, out.kv_loads)  # type: ignore[union-attr]
        self.batch.update(out)
        proposal = None
        if self.drafter is not None:  # drafts first: its forwards use the step buffer the target's inputs go to
            self.drafter.forget(out)
            proposal = self.drafter.propose(out) if out.spec_token_ids else None
        inputs = self.batch.prepare(out, pending.pending_for_next() if pending is not None else {})
        return PreparedStep(out, inputs, proposal)

    @torch.inference_mode()
    def submit(self, step: PreparedStep, pending: StepHandle | None, sample: bool = True) -> StepHandle:
        """The device half of `launch`: the pending tokens copied in, the forward, logits and sampling queued.
        `pending` is the handle `step` was prepared with, or the one its `sample` returned."""
        out, inputs, proposal = step.out, step.inputs, step.proposal
        num_pending = len(inputs.pending_dst)
        if num_pending and inputs.pending_in_order:  # one copy, not a gather and an indexed write (host time)
            inputs.token_ids[:num_pending].copy_(pending.sampled.token_ids[:num_pending])  # type: ignore[union-attr]
        elif num_pending:
            inputs.token_ids[inputs.pending_dst] = pending.sampled.token_ids[inputs.pending_src]  # type: ignore[union-attr]
        if proposal is not None:
            proposal.write_into(out, inputs.token_ids)
        padded = next(
            (r for r in (self.decode_runner, self.verify_runner) if r is not None and r.can_run(inputs)), None
        )
        # a speculative step's rows are verify_rows' own: no per-row inputs for it here
        states = () if out.spec_token_ids else zip(inputs.sample_states, inputs.sample_positions)
        batch = [s.sampling_input(p) for s, p in states]
        logits = None
        if padded is not None:
            in_graph = padded.sampling is not None and inputs.sample_rows_leading and not out.spec_token_ids
            takes = in_graph and bool(batch) and not inputs.prompt_jobs and padded.sampling.takes(batch)
            if takes and sample:
                padded.sampling.prepare(batch)  # before the replay that reads them
            hidden = padded.run(inputs)  # padded to a bucket, already where its graph reads
            if in_graph:
                logits, drawn = padded.sampled(len(batch))
                if takes and sample:
                    return StepHandle.start(inputs.sample_states, batch, drawn)
                if takes:  # its masks are still to come: the bucket's masked draw takes it (`sample`)
                    masked_draw = padded, inputs.num_padded_seqs
                    return StepHandle(inputs.sample_states, batch, None, logits=logits, masked_draw=masked_draw)
        else:
            hidden = self.model(inputs.token_ids, inputs.positions, inputs.attn)
        handle = self._launch_sampling(out, inputs, hidden, proposal, sample, batch, logits)
        if inputs.prompt_jobs:
            return replace(handle, prompt=compute_prompt_logprobs(self.model, hidden, inputs.prompt_jobs))
        return handle

    def _launch_sampling(
        self,
        out: SchedulerOutput,
        inputs: StepInputs,
        hidden: torch.Tensor,
        proposal: Proposal | None,
        sample: bool,
        batch: list,
        logits: torch.Tensor | None,
    ) -> StepHandle:
        """The sampling of a step after its forward; `logits` when its decode graph computed them."""
        if not inputs.sample_states:
            return StepHandle(inputs.sample_states, [], None)
        if out.spec_token_ids:
            return self._launch_verify(out, hidden, proposal)
        if logits is None:
            rows = len(inputs.sample_states)  # a decode batch's leading rows are a slice: no gather to launch
            logits = self.model.compute_logits(
                hidden[:rows] if inputs.sample_rows_leading else hidden[inputs.sample_rows]
            )
        if not sample:
            return StepHandle(inputs.sample_states, batch, None, logits=logits)
        return self._sample(inputs.sample_states, batch, logits, None)

    def token_mask_buffers(self, num_rows: int, num_masked: int, words: int) -> HostTokenMask:
        """Host arrays for the next `sample` call's grammar masks (pinned on CUDA): the core fills them."""
        return self.masks.buffers(num_rows, num_masked, words)

    @torch.inference_mode()
    def sample(self, handle: StepHandle, mask: HostTokenMask | None) -> StepHandle:
        """Queue the sampling of a step launched with `sample=False`, its rows restricted by `mask` (rank 0's
        alone: it samples for every rank); returns the handle to collect it with."""
        if handle.logits is None:
            return handle  # nothing samples this step
        device_mask = self.masks.upload(mask) if mask is not None and self.tp.rank == 0 else None
        if handle.masked_draw is not None and device_mask is not None:
            padded, size = handle.masked_draw
            fixed = self.masks.fixed(size) if padded.use_graphs else device_mask
            if fixed is not None:
                padded.sampling.prepare(handle.batch)  # before the replay that reads them
                drawn = padded.masked_sampled(size, handle.logits, fixed)
                return StepHandle.start(handle.states, handle.batch, drawn)
        sampled = self._sample(handle.states, handle.batch, handle.logits, device_mask)
        return replace(sampled, prompt=handle.prompt) if handle.prompt is not None else sampled

    def _sample(self, states: list, batch: list, logits: torch.Tensor, mask: TokenMask | None) -> StepHandle:
        sampled = self.sampler.sample(logits, batch, mask) if self.tp.rank == 0 else None
        if self.tp.size > 1:  # the other ranks' next step reads these ids as its pending tokens
            sampled = self._share_sampled(sampled, len(batch))
        return StepHandle.start(states, batch, sampled)

    def _launch_verify(self, out: SchedulerOutput, hidden: torch.Tensor, proposal: Proposal | None) -> StepHandle:
        """Sample every row that verifies a proposal, and the last row of the other requests
        (spec_decode/verify.py); the kept tokens are picked in `collect`."""
        rows = verify_rows(out, self.batch.requests)
        logits = self.model.compute_logits(hidden[to_device(rows.rows, self.device, torch.int64)])
        sampled = self.sampler.sample(logits, rows.batch) if self.tp.rank == 0 else None
        if proposal is not None and sampled is not None:
            sampled = self.drafter.verify(sampled, logits, rows, proposal)  # type: ignore[union-attr]
        if self.tp.size > 1:
            sampled = self._share_sampled(sampled, len(rows.batch))
        return StepHandle.start(rows.states, rows.batch, sampled, spec=rows)

    def _share_sampled(self, sampled: SampledTokens | None, num_rows: int) -> SampledTokens:
        """Rank 0's sampled ids on every rank (a broadcast on the device, no host sync); rank 0 alone samples,
        so seeded and greedy sampling are those of one device, and its sampler state is the only one."""
        if sampled is not None:
            broadcast(sampled.token_ids.contiguous(), src=0)  # the source is only read: a copy is fine
            return sampled
        token_ids = broadcast(torch.empty(num_rows, dtype=torch.int64, device=self.device), src=0)
        return SampledTokens(token_ids, torch.ones(num_rows, dtype=torch.bool, device=self.device))

    def collect(self, handle: StepHandle) -> dict[str, tuple[int, Logprob | None]]:
        """Wait for a launched step's sampled ids; record them in the runner's request states. Once per handle.

        A request whose logits were NaN/inf gets NONFINITE_TOKEN; its state keeps a valid placeholder
        id (the engine finishes it, and a step already launched may still read its history)."""
        results = self._collect(handle)
        if handle.prompt is not None and self.tp.rank == 0:
            return StepResults(results, prompt_logprobs=handle.prompt.to_host())
        return results

    def _collect(self, handle: StepHandle) -> dict[str, tuple[int, Logprob | None]]:
        token_ids = handle.wait()
        if handle.spec is not None:
            logprobs = handle.sampled.logprobs if handle.sampled is not None else None
            return self.verifier.collect(handle.spec, token_ids, logprobs, report=self.tp.rank == 0)
        if self.tp.rank != 0:  # only rank 0 reports; the others keep their request states in step
            for state, token_id in zip(handle.states, token_ids):
                state.output_token_ids.append(token_id)
            return {}
        results = Sampler.results(token_ids, handle.sampled.logprobs if handle.sampled else None, handle.batch)
        for state, token_id in zip(handle.states, token_ids):
            state.output_token_ids.append(max(token_id, 0))
        if handle.sampled is not None:
            handle.sampled.logprobs = None  # read once: free it
        return {s.request_id: r for s, r in zip(handle.states, results)}
