"""Fused MoE kernel against the per-expert torch loop, through the Triton interpreter on the CPU."""

import pytest
import torch

from model_optimizer.runtime.kernels.fused_moe import (
    align_pairs_kernel,
    align_pairs_sorted,
    fused_moe,
    max_padded_pairs,
)
from model_optimizer.runtime.kernels.moe_align import align_pairs_parallel
from model_optimizer.runtime.kernels.moe_reference import fused_moe_ref
from model_optimizer.runtime.kernels.moe_tiles import GemmTiles, MoeTiles, default_tiles
from model_optimizer.runtime.layers.moe import softmax_topk


def _inputs(num_tokens, hidden, intermediate, num_experts, top_k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(num_tokens, hidden, generator=gen).to(dtype)
    w13 = (torch.randn(num_experts, 2 * intermediate, hidden, generator=gen) / hidden**0.5).to(dtype)
    w2 = (torch.randn(num_experts, hidden, intermediate, generator=gen) / intermediate**0.5).to(dtype)
    weights, ids = softmax_topk(torch.randn(num_tokens, num_experts, generator=gen), top_k, renormalize=True)
    return x, w13, w2, weights, ids


@pytest.mark.parametrize("align_pairs", [align_pairs_sorted, align_pairs_kernel, align_pairs_parallel])
@pytest.mark.parametrize(
    ("num_tokens", "num_experts", "top_k", "block_m"),
    [(1, 8, 2, 16), (13, 4, 2, 16), (40, 6, 3, 32), (5, 64, 8, 16), (0, 4, 2, 16), (70, 5, 2, 16)],
)
def test_align_pairs_gives_each_block_one_expert_and_every_pair_once(
    align_pairs, num_tokens, num_experts, top_k, block_m
):
    gen = torch.Generator().manual_seed(num_tokens)
    rows = [torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(num_tokens)]
    ids = torch.stack(rows) if rows else torch.zeros(0, top_k, dtype=torch.int64)
    sorted_ids, block_expert = align_pairs(ids, num_experts, block_m)
    num_pairs = num_tokens * top_k
    assert len(sorted_ids) == max_padded_pairs(num_pairs, num_experts, block_m) == len(block_expert) * block_m
    real = sorted_ids[sorted_ids < num_pairs]
    assert sorted(real.tolist()) == list(range(num_pairs))  # every pair exactly once
    flat = ids.reshape(-1)
    for block, expert in enumerate(block_expert.tolist()):
        pairs = sorted_ids[block * block_m : (block + 1) * block_m]
        pairs = pairs[pairs < num_pairs]
        if expert < 0:
            assert len(pairs) == 0  # past the last run
        else:
            assert len(pairs) > 0 and bool((flat[pairs.long()] == expert).all())
    live = block_expert[block_expert >= 0].tolist()
    assert live == sorted(live)  # runs in expert order, as the ids were sorted
    assert len(live) == sum(-(-int((flat == e).sum()) // block_m) for e in range(num_experts))


@pytest.mark.parametrize("align_pairs", [align_pairs_sorted, align_pairs_kernel, align_pairs_parallel])
def test_align_pairs_drops_experts_of_other_ranks(align_pairs):
    ids = torch.tensor([[0, -1], [-1, 2], [2, 0]])  # -1: held by another rank
    sorted_ids, block_expert = align_pairs(ids, 3, 16)
    assert sorted(sorted_ids[sorted_ids < 6].tolist()) == [0, 3, 4, 5]
    assert block_expert.tolist()[:2] == [0, 2] and all(e == -1 for e in block_expert.tolist()[2:])


@pytest.mark.parametrize(("num_tokens", "num_experts", "top_k"), [(1, 128, 8), (64, 128, 8), (37, 6, 2), (200, 8, 2)])
def test_align_kernel_equals_the_sort(num_tokens, num_experts, top_k):
    """Both keep each expert's pairs in pair order: the same rows, not just an equivalent layout."""
    gen = torch.Generator().manual_seed(num_tokens)
    ids = torch.stack([torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(num_tokens)])
    ids[0, 0] = -1  # another rank's expert
    for block_m in (16, 64):
        kernel, sort = align_pairs_kernel(ids, num_experts, block_m), align_pairs_sorted(ids, num_experts, block_m)
        assert torch.equal(kernel[0], sort[0]) and torch.equal(kernel[1], sort[1])


@pytest.mark.parametrize(
    ("num_pairs", "num_experts", "block_m"),
    [
        (1, 8, 16),
        (32, 8, 128),  # one full chunk
        (33, 64, 32),  # a chunk and one pair
        (512, 128, 16),  # decode batch 64 at top-8 (Qwen3-30B-A3B)
        (512, 128, 32),
        (777, 8, 64),  # few experts: long runs across many chunks
        (1000, 256, 128),
        (4096, 256, 64),  # the most pairs the Triton path takes
    ],
)
def test_parallel_align_equals_the_sort_and_the_one_program_kernel(num_pairs, num_experts, block_m):
    """Random ids (duplicates within a token too) with some outside [0, num_experts): the same rows,
    each expert's pairs in pair order, whatever chunk they fall in."""
    gen = torch.Generator().manual_seed(num_pairs + num_experts)
    ids = torch.randint(-3, num_experts + 3, (num_pairs,), generator=gen)  # a few of another rank
    parallel = align_pairs_parallel(ids, num_experts, block_m)
    sort = align_pairs_sorted(ids, num_experts, block_m)
    assert torch.equal(parallel[0], sort[0]) and torch.equal(parallel[1], sort[1])
    if num_pairs <= 512:  # the one-program kernel is slow under the interpreter
        kernel = align_pairs_kernel(ids.view(-1, 1).to(torch.int32), num_experts, block_m)
        assert torch.equal(parallel[0], kernel[0]) and torch.equal(parallel[1], kernel[1])


def test_parallel_align_with_every_id_dropped_writes_only_padding():
    ids = torch.full((64, 8), 300)  # all on another rank
    sorted_ids, block_expert = align_pairs_parallel(ids, 128, 16)
    assert bool((sorted_ids == 512).all()) and bool((block_expert == -1).all())


SMALL = MoeTiles(16, GemmTiles(16, 16), GemmTiles(32, 16))


@pytest.mark.parametrize(
    ("num_tokens", "hidden", "intermediate", "num_experts", "top_k", "dtype", "tiles"),
    [
        (1, 32, 48, 8, 2, torch.float32, SMALL),  # decode: one token, blocks of padding
        (7, 40, 24, 4, 2, torch.float32, SMALL),  # K and N not multiples of the tile (masked)
        (33, 32, 32, 6, 3, torch.float32, MoeTiles(32, GemmTiles(32, 32), GemmTiles(16, 32))),
        (9, 64, 32, 5, 1, torch.float16, SMALL),  # top-1
        (6, 32, 16, 4, 2, torch.bfloat16, None),  # the default tiles (wider than the shape)
    ],
)
def test_fused_moe_matches_reference(num_tokens, hidden, intermediate, num_experts, top_k, dtype, tiles):
    x, w13, w2, weights, ids = _inputs(num_tokens, hidden, intermediate, num_experts, top_k, dtype)
    got = fused_moe(x, w13, w2, weights, ids, tiles)
    want = fused_moe_ref(x, w13, w2, weights, ids)
    assert got.shape == x.shape and got.dtype == dtype
    # the reference rounds after each matmul in half precision, the kernel once at the end of each GEMM
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(got, want, **tol)


def test_fused_moe_keeps_no_tensor_of_a_call_alive():
    """Nothing of a call outlives it: a prefill's activations and scratch rows are freed when the layer is
    done with them (they were once kept, the last few calls' worth, by a cache on the GEMM launch)."""
    import gc
    import weakref

    x, w13, w2, weights, ids = _inputs(7, 32, 48, 4, 2, torch.float32)
    got = fused_moe(x, w13, w2, weights, ids, SMALL)
    torch.testing.assert_close(got, fused_moe_ref(x, w13, w2, weights, ids), atol=1e-5, rtol=1e-5)
    alive = weakref.ref(x)
    del x, got
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize(("num_experts", "top_k", "block_m"), [(8, 2, 16), (16, 8, 16), (6, 3, 32)])
def test_one_token_skips_the_alignment_and_matches_the_reference(num_experts, top_k, block_m):
    """Batch-1 decode with local experts: each pair its own block, no alignment launch."""
    from model_optimizer.runtime.kernels import fused_moe as fm

    x, w13, w2, weights, ids = _inputs(1, 32, 48, num_experts, top_k, torch.float32, seed=top_k)
    tiles = MoeTiles(block_m, GemmTiles(16, 32), GemmTiles(16, 32))
    rows, block_expert = fm._one_token_blocks(ids, block_m)
    assert rows.tolist()[::block_m] == list(range(top_k)) and set(rows.tolist()[1:block_m]) == {top_k}
    assert block_expert.tolist() == ids[0].tolist()
    got = fused_moe(x, w13, w2, weights, ids, tiles, all_ids_local=True)
    torch.testing.assert_close(got, fused_moe_ref(x, w13, w2, weights, ids), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, fused_moe(x, w13, w2, weights, ids, tiles), atol=0, rtol=0)  # = aligned


def test_fused_moe_leaves_out_experts_of_other_ranks():
    """Expert parallelism: ids of -1 contribute nothing, in the kernel as in the reference."""
    x, w13, w2, weights, ids = _inputs(5, 32, 16, 4, 2, torch.float32, seed=3)
    ids[1, 0] = ids[3, 1] = -1
    got = fused_moe(x, w13, w2, weights, ids, SMALL)
    torch.testing.assert_close(got, fused_moe_ref(x, w13, w2, weights, ids), atol=1e-5, rtol=1e-5)
    alone = fused_moe_ref(x[1:2], w13, w2, weights[1:2, 1:], ids[1:2, 1:])  # token 1 keeps one expert
    torch.testing.assert_close(got[1:2], alone, atol=1e-5, rtol=1e-5)


def test_default_tiles_grow_with_rows_per_expert():
    assert default_tiles(1, 128, 8).block_m == 16  # decode
    assert default_tiles(4096, 128, 8).block_m == 64  # prefill: 256 rows per expert


def test_one_token_blocks_skip_an_expert_id_past_the_last():
    """The GPU router gives a NaN row ids past the last expert, and batch-1 decode reads the ids as the
    blocks' experts without alignment: such a block reads no weight (here a NaN sentinel stands right
    after the last expert's weights) and writes nothing; the token's other pairs compute as usual."""
    from model_optimizer.runtime.kernels.fused_moe import _gemm, _one_token_blocks

    num_experts, hidden, intermediate, top_k = 4, 32, 16, 2
    x, w13, _, _, _ = _inputs(1, hidden, intermediate, num_experts, top_k, torch.float32)
    padded = torch.cat([w13, torch.full_like(w13[:1], float("nan"))])  # expert 4 would be the sentinel
    w13 = padded[:num_experts]
    ids = torch.tensor([[num_experts, 1]], dtype=torch.int64)  # pair 0: a NaN row's id
    tiles = default_tiles(1, num_experts, top_k)
    sorted_ids, block_expert = _one_token_blocks(ids, tiles.block_m)
    h = torch.zeros(top_k, intermediate)
    weights = torch.ones(top_k)
    _gemm(x, w13, h, sorted_ids, block_expert, weights, top_k, True, tiles.gate_up, tiles.block_m)
    assert torch.equal(h[0], torch.zeros(intermediate))  # not computed: no read past the last expert
    gate, up = (x @ w13[1].T).split(intermediate, dim=-1)
    torch.testing.assert_close(h[1:], torch.nn.functional.silu(gate) * up, rtol=1e-4, atol=1e-4)
