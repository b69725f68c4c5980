"""How many KV blocks ModelRunner allocates: a budget over one block's bytes. The budget is kv_cache_memory
on a CPU; on CUDA, what a profiling forward at the full token budget leaves of the engine's share of the
GPU (gpu_memory_utilization), less the activation peak and the decode graphs' outputs. And the host KV
tier's blocks (kv_offloading_size)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import torch

from model_optimizer.runtime.layers.attention import AttentionMetadata, kv_cache_shape
from model_optimizer.runtime.runner import graph_sampling
from model_optimizer.runtime.runner.decode_runner import bucket_sizes
from model_optimizer.runtime.runner.host_kv_cache import HostKVCache

if TYPE_CHECKING:
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.distributed import TensorParallel
    from model_optimizer.runtime.layers.sampler import Sampler
    from model_optimizer.runtime.spec_decode.drafter import Drafter

log = logging.getLogger(__name__)


class KVSizing:
    """Mixed into ModelRunner, which sizes its KV cache with these while it starts (the host tier's once
    the device cache exists)."""

    config: EngineConfig
    device: torch.device
    model: torch.nn.Module
    args: Any
    kv_dtype: torch.dtype
    kv_caches: list[torch.Tensor]
    drafter: Drafter | None
    sampler: Sampler
    tp: TensorParallel
    memory_before_load: int
    max_model_len: int

    def bytes_per_block(self) -> int:
        """KV-cache bytes of one block over all layers (the latent rows of a DeepSeek model: kv_cache_shape)."""
        element = torch.tensor([], dtype=self.kv_dtype).element_size()
        target = self.args.num_layers * math.prod(kv_cache_shape(self.model, 1, self.config.block_size)) * element
        return target + (self.drafter.bytes_per_block() if self.drafter is not None else 0)

    def _num_blocks_for_budget(self) -> int:
        if self.device.type == "cuda":
            budget = self._profile_free_gpu_memory()
        else:
            budget = self.config.kv_cache_memory
        num_blocks = budget // self.bytes_per_block()
        if num_blocks < 1:
            raise ValueError(f"KV-cache budget of {budget} bytes holds no block of {self.bytes_per_block()} bytes")
        return int(num_blocks)

    def _profile_free_gpu_memory(self) -> int:
        """Run a forward at the full token budget, then give the KV cache what utilization leaves.

        `gpu_memory_utilization` is this engine's share of the whole GPU: its weights, its activation
        peak and its KV cache. Memory of other engines in this process or other processes is left out
        of that share, and the cache never takes more than what is actually free less what comes after
        it: the activation peak, which the profiling forward has just given back and every later forward
        needs again, and the decode graphs' outputs (`_graph_outputs_bytes`). Where others hold memory,
        `free` bounds the cache, and without that reserve the graph capture ran out of memory.
        """
        torch.cuda.synchronize(self.device)
        others_here = self.memory_before_load
        torch.cuda.reset_peak_memory_stats(self.device)
        num_tokens = min(self.config.max_num_batched_tokens, self.max_model_len)
        with torch.inference_mode():
            token_ids = torch.zeros(num_tokens, dtype=torch.int64, device=self.device)
            positions = torch.arange(num_tokens, device=self.device)
            self.model.compute_logits(self._profile_forward(token_ids, positions)[-self.config.max_num_seqs :])
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        own_peak = peak - others_here
        activations = peak - torch.cuda.memory_allocated(self.device)  # what the forward held and gave back
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(self.device)
        share = int(total * self.config.gpu_memory_utilization) - own_peak
        headroom = 256 << 20  # CUDA graphs, sampler temporaries
        graphs = self._graph_outputs_bytes()
        budget = min(share, free - activations - graphs - headroom)
        log.info(
            "GPU memory: total %.1f GiB, this engine's peak %.2f GiB (activations %.2f), decode graphs' "
            "outputs %.2f GiB, free %.1f GiB, KV budget %.2f GiB",
            total / 2**30,
            own_peak / 2**30,
            activations / 2**30,
            graphs / 2**30,
            free / 2**30,
            budget / 2**30,
        )
        return budget

    def _graph_outputs_bytes(self) -> int:
        """What the decode graphs keep once captured, for the KV budget where free memory bounds it: each
        bucket's hidden states and, where the graphs sample (graph_sampling.available), its logits stay
        as static outputs in the graphs' pool. Counted at 4 bytes a value where the outputs are bf16 or
        fp16: the other half is a margin for the pool's scratch and for what the smaller buckets'
        captures cannot reuse (on the H200, 0.36 GiB left after the cache was too little for Qwen3-0.6B's
        0.37 GiB of bf16 logits; this reserve passed). Not counted: a speculative setup's verify and
        draft graphs (their outputs, in the 256 MiB headroom, are not measured). 0 without graphs."""
        if self.config.enforce_eager:
            return 0
        per_row = self.args.hidden_size
        if graph_sampling.available(self.sampler, self.tp.size):
            per_row += self.args.vocab_size
        return sum(bucket_sizes(self.config.max_num_seqs)) * per_row * 4

    def _profile_forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, caches: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """One prefill of `token_ids` into `caches` (default: a scratch cache just big enough)."""
        a, bs = self.args, self.config.block_size
        if caches is None:
            shape = kv_cache_shape(self.model, -(-len(token_ids) // bs), bs)
            caches = [torch.zeros(shape, dtype=self.kv_dtype, device=self.device)] * a.num_layers
        meta = AttentionMetadata.for_prefill([len(token_ids)], bs, caches, self.device)
        return self.model(token_ids, positions, meta)

    def _host_kv_cache(self) -> HostKVCache | None:
        """The host KV tier's tensors (kv_offloading_size GiB of whole blocks), or None when it is off."""
        if not self.config.kv_offloading_size:
            return None
        if self.drafter is not None:
            raise ValueError("kv_offloading_size does not work with a draft model yet (its KV is not saved)")
        num_blocks = int(self.config.kv_offloading_size * 2**30) // self.bytes_per_block()
        if num_blocks < 1:
            raise ValueError(
                f"kv_offloading_size {self.config.kv_offloading_size} GiB holds no KV block of "
                f"{self.bytes_per_block()} bytes"
            )
        return HostKVCache(self.kv_caches, num_blocks, self.device)
