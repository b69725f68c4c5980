"""The fused MoE kernel against a per-expert loop of dense matmuls, at real expert shapes.

    PYTHONPATH=. python3 benchmarks/moe_kernels.py [--output FILE] [--sweep --tiles-output FILE]

For the experts of one layer of each config (Qwen3-30B-A3B: 128 experts of 2048 x 768, top 8;
Mixtral-8x7B: 8 of 4096 x 14336, top 2), bf16, random routing over `--tokens` tokens: the GPU time
of `fused_moe` (sort + two grouped GEMMs + the sum over k, replayed from a CUDA graph:
gpu_time.py) and of `fused_moe_ref`, the loop transformers' eager experts run (three matmuls and
the gathers per expert with tokens; it syncs with the host, so it is timed on the stream), the
bytes of the experts the tokens touch read per second, and the ratio. The issue's target: >= 3x
at 64 tokens.

`--routing` adds, per token count, the GPU time of the routing (torch's softmax_topk against the one
Triton launch of kernels/moe_routing.py, bf16 logits) and of the sum over k of the down GEMM's rows
(torch's bf16 `.sum(1)` against `fused_moe.sum_over_k`), each from CUDA-graph replays.

`--align` adds, per token count, the GPU time of the alignment at the default block height: the
one-program kernel, the parallel count + scatter (kernels/moe_align.py) and the torch sort, each from
CUDA-graph replays, and checks that the three give the same rows.

`--sweep` first times, per shape and token bucket (moe_tiles.TOKEN_BUCKETS), each GEMM alone at
every candidate tile (moe_tiles.GEMM_CANDIDATES) for each candidate block height, keeps the
fastest pair per height and the fastest height, checks it against the loop, and writes the table
(`--tiles-output`): with MOPT_MOE_TILES pointing at it the kernel takes those tiles, here and in
the engine; committed as model_optimizer/runtime/kernels/moe_tiles.json it is the default on that GPU.
"""

from __future__ import annotations

import argparse
import json
import time

from common import CONFIGS, RESULTS, environment, write_json
from gpu_time import gpu_time_ms, stream_time_ms

SHAPES = ["qwen3-30b-a3b", "mixtral-8x7b"]
"""--models' default; deepseek-v2-lite and deepseek-v3 are read too (n_routed_experts)."""
TOKENS = [1, 8, 64, 512]


def expert_shape(model: str) -> tuple[int, int, int, int]:
    """(experts, hidden, intermediate, top_k) of the config's experts."""
    cfg = json.loads((CONFIGS / model / "config.json").read_text())
    experts = cfg.get("num_experts") or cfg.get("n_routed_experts") or cfg["num_local_experts"]
    intermediate = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    return experts, cfg["hidden_size"], intermediate, cfg["num_experts_per_tok"]


def make_case(shape: tuple[int, int, int, int], num_tokens: int, seed: int = 0):
    import torch

    from model_optimizer.runtime.layers.moe import softmax_topk

    experts, hidden, inter, top_k = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(num_tokens, hidden, device="cuda", generator=gen).bfloat16()
    w13 = (torch.randn(experts, 2 * inter, hidden, device="cuda", generator=gen) / hidden**0.5).bfloat16()
    w2 = (torch.randn(experts, hidden, inter, device="cuda", generator=gen) / inter**0.5).bfloat16()
    weights, ids = softmax_topk(torch.randn(num_tokens, experts, device="cuda", generator=gen), top_k, True)
    return x, w13, w2, weights, ids


def matches_loop(got, want) -> bool:
    """A bf16 kernel's result against the float32 loop: within 2% of the largest output (+1e-3)."""
    return bool((got - want).abs().max() <= 0.02 * want.abs().max() + 1e-3)


def touched_bytes(ids, shape) -> int:
    experts, hidden, inter, _ = shape
    return int(ids.unique().numel()) * 3 * hidden * inter * 2


def compare(model: str, num_tokens: int) -> dict:
    from model_optimizer.runtime.kernels.fused_moe import fused_moe
    from model_optimizer.runtime.kernels.moe_reference import fused_moe_ref

    shape = expert_shape(model)
    x, w13, w2, weights, ids = make_case(shape, num_tokens)
    sets = [(w13, w2), make_case(shape, num_tokens, seed=1)[1:3]]  # two layers' experts: beyond the L2
    fused = gpu_time_ms(lambda w: fused_moe(x, w[0], w[1], weights, ids), sets)
    loop = stream_time_ms(lambda w: fused_moe_ref(x, w[0], w[1], weights, ids), sets, launches=40)
    moved = touched_bytes(ids, shape)
    row = {
        "model": model,
        "tokens": num_tokens,
        "experts_touched": int(ids.unique().numel()),
        "fused_ms": fused,
        "loop_ms": loop,
        "speedup": loop / fused,
        "bytes": moved,
        "fused_gbps": moved / fused / 1e6,
        "loop_gbps": moved / loop / 1e6,
    }
    print(
        f"{model} {num_tokens:4d} tokens: fused {fused * 1e3:8.1f} us ({row['fused_gbps']:5.0f} GB/s), "
        f"loop {loop * 1e3:8.1f} us: {row['speedup']:.1f}x",
        flush=True,
    )
    return row


def routing_row(model: str, num_tokens: int) -> dict:
    """GPU us of routing and of the sum over k, torch against our kernels, at one layer's shape."""
    import torch

    from model_optimizer.runtime.kernels.fused_moe import sum_over_k
    from model_optimizer.runtime.kernels.moe_routing import softmax_topk_kernel
    from model_optimizer.runtime.layers.moe import softmax_topk

    experts, hidden, _, top_k = expert_shape(model)
    gen = torch.Generator(device="cuda").manual_seed(num_tokens)
    logits = [torch.randn(num_tokens, experts, device="cuda", generator=gen).bfloat16() for _ in range(2)]
    rows = [torch.randn(num_tokens * top_k, hidden, device="cuda", generator=gen).bfloat16() for _ in range(2)]
    row = {"model": model, "tokens": num_tokens, "experts": experts, "top_k": top_k}
    row["routing_torch_us"] = gpu_time_ms(lambda t: softmax_topk(t, top_k, True), logits) * 1e3
    row["routing_kernel_us"] = gpu_time_ms(lambda t: softmax_topk_kernel(t, top_k, True), logits) * 1e3
    row["sum_torch_us"] = gpu_time_ms(lambda r: r.view(num_tokens, top_k, hidden).sum(1), rows) * 1e3
    row["sum_kernel_us"] = gpu_time_ms(lambda r: sum_over_k(r, num_tokens, top_k), rows) * 1e3
    print(
        f"{model} {num_tokens:4d} tokens: routing torch {row['routing_torch_us']:6.1f} us, kernel "
        f"{row['routing_kernel_us']:6.1f} us; sum over k torch {row['sum_torch_us']:6.1f} us, kernel "
        f"{row['sum_kernel_us']:6.1f} us",
        flush=True,
    )
    return row


def gemm_call(gated: bool, case: dict, sorted_ids, block_expert, tiles, block_m: int):
    """One grouped GEMM alone (gate_up or down) at `tiles`, as a call of a weight set (w13, w2)."""
    from model_optimizer.runtime.kernels.fused_moe import _gemm

    if gated:
        return lambda ws: _gemm(
            case["x"], ws[0], case["h"], sorted_ids, block_expert, case["w"], case["top_k"], True, tiles, block_m
        )
    return lambda ws: _gemm(
        case["h"], ws[1], case["out"], sorted_ids, block_expert, case["w"], 1, False, tiles, block_m
    )


def fastest(gated: bool, case: dict, sets: list, sorted_ids, block_expert, block_m: int, timings: dict):
    """(ms, tiles) of the fastest GEMM candidate; candidates the GPU cannot launch are skipped."""
    from model_optimizer.runtime.kernels.moe_tiles import GEMM_CANDIDATES

    results = []
    for tiles in GEMM_CANDIDATES:
        name = f"{block_m}:{'gate_up' if gated else 'down'}:{tiles.block_n}x{tiles.block_k}:{tiles.num_warps}:{tiles.num_stages}"
        try:
            ms = gpu_time_ms(gemm_call(gated, case, sorted_ids, block_expert, tiles, block_m), sets)
        except Exception as exc:  # more shared memory than the GPU has, say
            print(f"  skip {name}: {type(exc).__name__}", flush=True)
            continue
        timings[name] = ms
        results.append((ms, tiles))
    return min(results, key=lambda r: r[0])


def align_row(model: str, num_tokens: int) -> dict:
    """GPU us of the three alignments of one layer's ids (the one-program kernel only up to its limit)."""
    import torch

    from model_optimizer.runtime.kernels import fused_moe as fm
    from model_optimizer.runtime.kernels.moe_align import align_pairs_parallel
    from model_optimizer.runtime.kernels.moe_tiles import default_tiles

    experts, _, _, top_k = expert_shape(model)
    block_m = default_tiles(num_tokens, experts, top_k).block_m
    ids = [make_case((experts, 8, 8, top_k), num_tokens, seed=s)[4] for s in (0, 1)]
    ways = {"sort": fm.align_pairs_sorted, "parallel": align_pairs_parallel}
    if ids[0].numel() <= fm.ALIGN_KERNEL_MAX_PAIRS:
        ways["one_program"] = fm.align_pairs_kernel
    want = fm.align_pairs_sorted(ids[0], experts, block_m)
    row = {"model": model, "tokens": num_tokens, "pairs": ids[0].numel(), "block_m": block_m}
    for name, align in ways.items():
        got = align(ids[0], experts, block_m)
        if not (torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])):
            raise RuntimeError(f"{model} {num_tokens} tokens: {name} alignment differs from the sort")
        row[f"{name}_us"] = gpu_time_ms(lambda t, align=align: align(t, experts, block_m), ids) * 1e3
    print(
        f"{model} {num_tokens:4d} tokens: align "
        + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k.endswith("_us")),
        flush=True,
    )
    return row


def sweep_case(model: str, num_tokens: int) -> tuple[str, object, dict]:
    """(table key, fastest MoeTiles, timings) for one shape and token bucket."""
    import torch

    from model_optimizer.runtime.kernels import moe_tiles as mt
    from model_optimizer.runtime.kernels.fused_moe import fused_moe, pair_blocks
    from model_optimizer.runtime.kernels.moe_reference import fused_moe_ref

    shape = expert_shape(model)
    experts, hidden, inter, top_k = shape
    x, w13, w2, weights, ids = make_case(shape, num_tokens)
    sets = [(w13, w2)] + [make_case(shape, num_tokens, seed=s)[1:3] for s in (1, 2)]  # rotated past the L2
    case = dict(x=x, w=weights.reshape(-1).contiguous(), top_k=top_k)
    case["h"] = torch.empty(num_tokens * top_k, inter, dtype=x.dtype, device="cuda")
    case["out"] = torch.zeros(num_tokens * top_k, hidden, dtype=x.dtype, device="cuda")
    timings, best = {}, None
    for block_m in mt.candidate_rows(num_tokens, experts, top_k):
        sorted_ids, block_expert = pair_blocks(ids, experts, block_m, all_ids_local=True)  # as the engine runs
        up = fastest(True, case, sets, sorted_ids, block_expert, block_m, timings)
        down = fastest(False, case, sets, sorted_ids, block_expert, block_m, timings)
        if best is None or up[0] + down[0] < best[0]:
            best = (up[0] + down[0], mt.MoeTiles(block_m, up[1], down[1]))
    tiles = best[1]
    got = fused_moe(x, w13, w2, weights, ids, tiles).float()
    want = fused_moe_ref(x.float(), w13.float(), w2.float(), weights, ids)
    if not matches_loop(got, want):
        raise RuntimeError(f"{model} {num_tokens} tokens: tiles {tiles} give a wrong result")
    print(f"{model} {num_tokens} tokens: {tiles} ({best[0] * 1e3:.1f} us for both GEMMs)", flush=True)
    return mt.table_key(experts, hidden, inter, top_k, num_tokens), tiles, timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=SHAPES)
    parser.add_argument("--tokens", nargs="+", type=int, default=TOKENS)
    parser.add_argument("--routing", action="store_true", help="also time routing and the sum over k")
    parser.add_argument("--align", action="store_true", help="also time the alignment: one program, parallel, sort")
    parser.add_argument("--sweep", action="store_true", help="time the tile candidates first, write a table")
    parser.add_argument("--sweep-tokens", nargs="+", type=int, default=None, help="default: moe_tiles.TOKEN_BUCKETS")
    parser.add_argument("--tiles-output", default=None, help="the sweep's table (default: beside --output)")
    parser.add_argument("--output", default=str(RESULTS / "moe_kernels_h200.json"))
    args = parser.parse_args()
    import os

    import torch

    from model_optimizer.runtime.kernels import moe_tiles as mt

    result = {"benchmark": "moe_kernels", "environment": environment(), "config": vars(args), "rows": []}
    if args.sweep:
        started, entries, timings = time.time(), {}, {}
        path = args.tiles_output or os.path.join(os.path.dirname(args.output), "moe_tiles.json")
        for model in args.models:
            for num_tokens in args.sweep_tokens or mt.TOKEN_BUCKETS:
                key, tiles, times = sweep_case(model, num_tokens)
                entries[key], timings[key] = tiles, times
                write_json(path, mt.table_json(torch.cuda.get_device_name(0), entries))  # a cut run keeps these
        os.environ[mt.TABLE_ENV] = path  # the comparison below runs with the swept tiles
        mt._table_for.cache_clear()
        result.update(sweep_seconds=time.time() - started, sweep_timings_ms=timings, tiles_table=path)
    result["moe_tiles"] = os.environ.get(mt.TABLE_ENV)
    for model in args.models:
        for num_tokens in args.tokens:
            result["rows"].append(compare(model, num_tokens))
            if args.routing:
                result.setdefault("routing", []).append(routing_row(model, num_tokens))
            if args.align:
                result.setdefault("align", []).append(align_row(model, num_tokens))
            write_json(args.output, result)
    write_json(args.output, result)


if __name__ == "__main__":
    main()
