"""Decode attention of DeepSeek-V2-Lite's shape: the latent kernel against full-head paged attention.

    PYTHONPATH=. python3 benchmarks/mla_attention.py [--output FILE]

One layer's attention for decode batches of 1 and 64 sequences at contexts 512 and 4096 (bf16,
blocks of 16): the multi-head latent attention kernel (runtime/kernels/mla_attention.py) reading one
row of 512 + 64 values per cached token, and, beside it, the full-head paged attention kernel over
a cache of all 16 heads' keys and values at head_dim 192 (the query's width; DeepSeek's values are
128 wide, which the full-head kernel does not take: a lower bound of what full heads would read is
16 x (192 + 128) values). Times are the median of CUDA-graph replays (triton.testing.do_bench_cudagraph);
GB/s counts the cache bytes each kernel must read, against a device-to-device copy measured here.
"""

from __future__ import annotations

import argparse

from common import RESULTS, copy_bandwidth_gbps, environment, write_json

HEADS, KV_LORA, ROPE, QK_HEAD_DIM, V_HEAD_DIM = 16, 512, 64, 192, 128


def latent_case(num_seqs: int, context: int) -> dict:
    import torch
    from triton.testing import do_bench_cudagraph

    from model_optimizer.runtime.kernels.mla_attention import latent_attention
    from tests.runtime.kernels.latent_batches import make_batch

    batch = make_batch([(context - 1, 1)] * num_seqs, HEADS, KV_LORA, ROPE, 16, torch.bfloat16, device="cuda")
    splits = None  # the kernel's own choice, as a decode step takes it
    out = torch.empty(num_seqs, HEADS, KV_LORA, dtype=torch.bfloat16, device="cuda")
    args = (batch.query, batch.cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, QK_HEAD_DIM**-0.5)

    def run():
        latent_attention(*args, KV_LORA, max_query_len=1, max_seq_len=context, num_splits=splits, out=out)

    ms = do_bench_cudagraph(run)
    return {"ms": ms, "bytes": num_seqs * context * (KV_LORA + ROPE) * 2}


def full_head_case(num_seqs: int, context: int) -> dict:
    import torch
    from triton.testing import do_bench_cudagraph

    from model_optimizer.runtime.kernels.paged_attention import paged_attention
    from tests.runtime.kernels.paged_batches import make_paged_batch

    batch = make_paged_batch([(context - 1, 1)] * num_seqs, HEADS, HEADS, QK_HEAD_DIM, 16, torch.bfloat16, "cuda")
    out = torch.empty_like(batch.query)
    args = (batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, QK_HEAD_DIM**-0.5)

    def run():
        paged_attention(*args, max_query_len=1, max_seq_len=context, out=out)

    ms = do_bench_cudagraph(run)
    return {"ms": ms, "bytes": num_seqs * context * 2 * HEADS * QK_HEAD_DIM * 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--contexts", nargs="+", type=int, default=[512, 4096])
    parser.add_argument("--output", default=str(RESULTS / "mla_attention_h200.json"))
    args = parser.parse_args()
    bandwidth = copy_bandwidth_gbps()
    rows = []
    for num_seqs in args.batch_sizes:
        for context in args.contexts:
            latent, full = latent_case(num_seqs, context), full_head_case(num_seqs, context)
            row = {"num_seqs": num_seqs, "context": context}
            for name, case in (("latent", latent), ("full_heads_192", full)):
                gbps = case["bytes"] / case["ms"] / 1e6
                row[name] = case | {"gbps": gbps, "fraction_of_copy_bandwidth": gbps / bandwidth}
            rows.append(row)
            print(
                f"batch {num_seqs} context {context}: latent {latent['ms'] * 1e3:.1f} us "
                f"({row['latent']['gbps']:.0f} GB/s), full heads {full['ms'] * 1e3:.1f} us "
                f"({row['full_heads_192']['gbps']:.0f} GB/s)",
                flush=True,
            )
    write_json(
        args.output,
        {
            "benchmark": "mla_attention",
            "environment": environment(),
            "copy_bandwidth_gbps": bandwidth,
            "shape": {"heads": HEADS, "kv_lora_rank": KV_LORA, "qk_rope_head_dim": ROPE, "block_size": 16},
            "latent_bytes_per_token_layer": (KV_LORA + ROPE) * 2,
            "full_head_bytes_per_token_layer": HEADS * (QK_HEAD_DIM + V_HEAD_DIM) * 2,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
