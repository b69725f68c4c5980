"""bf16 weights through the quantized matmul's program (kind "bf16"), and the table that decides when
dense_linear uses it instead of cuBLAS. Interpreter on the CPU; tests/gpu repeats the product on CUDA."""

import json

import pytest
import torch

from model_optimizer.runtime.kernels import dense_linear as dense
from model_optimizer.runtime.kernels import quant_tiles
from model_optimizer.runtime.kernels.quant_matmul import QuantTiles, quant_matmul
from tests.runtime.kernels.paged_batches import relative_error


@pytest.mark.parametrize("m", [1, 3, 16])
def test_bf16_kind_is_the_plain_product(m):
    """GEMV (one row, with and without its prefetch) and tensor-core tiles, odd N and K, split K, bias."""
    gen = torch.Generator().manual_seed(m)
    w, x, b = torch.randn(37, 300, generator=gen), torch.randn(m, 300, generator=gen), torch.randn(37, generator=gen)
    want = x.double() @ w.double().T + b.double()
    tiles = [QuantTiles(16, 16, 64, 2), QuantTiles(16, 32, 128, 3)]
    if m == 1:
        tiles += [QuantTiles(1, 16, 64, 2, num_stages=1), QuantTiles(1, 16, 64, 2, num_stages=2)]
    for t in tiles:
        assert relative_error(quant_matmul(x, w, None, None, "bf16", 0, b, t), want) < 1e-5, t


def test_the_table_decides_and_the_switch_turns_it_off(tmp_path, monkeypatch):
    """dense_linear runs ours only for a (bucket, N, K) the table measured it faster at (a "triton"
    entry); "torch" entries, other shapes and MOPT_DENSE_KERNELS=0 keep cuBLAS (None here)."""
    gemv = QuantTiles(1, 32, 256, 4)
    entries = {
        quant_tiles.table_key("bf16", 1, 1024, 2048): gemv,
        quant_tiles.table_key("bf16", 8, 1024, 2048): quant_tiles.TORCH,
    }
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps(quant_tiles.table_json("interpreter", entries)))  # this machine's GPU name
    monkeypatch.setenv(quant_tiles.TABLE_ENV, str(path))
    quant_tiles._table_for.cache_clear()
    dense._tiles.cache_clear()
    try:
        assert dense._tiles(0, 1, 1024, 2048) == gemv
        assert dense._tiles(0, 8, 1024, 2048) is None
        assert dense._tiles(0, 1, 4096, 1024) is None  # no measurement: cuBLAS
        monkeypatch.setenv(dense.DENSE_ENV, "0")
        dense._tiles.cache_clear()
        assert dense._tiles(0, 1, 1024, 2048) is None
    finally:
        quant_tiles._table_for.cache_clear()
        dense._tiles.cache_clear()


def test_candidates_for_bf16_always_include_cublas():
    found = quant_tiles.candidates("bf16", 1, 1024, 2048, 132)
    assert (
        quant_tiles.TORCH in found and any(t.kernel == "gemv" for t in found) and any(t.kernel == "mma" for t in found)
    )
    assert quant_tiles.candidates("bf16", 512, 1024, 2048, 132) == [quant_tiles.TORCH]  # prefill: cuBLAS
    assert quant_tiles.default_tiles("bf16", 1, 1024, 2048, 132) == quant_tiles.TORCH  # never ours unmeasured


def test_cpu_tensors_take_f_linear():
    x, w = torch.randn(2, 8), torch.randn(4, 8)
    assert torch.equal(dense.dense_linear(x, w), torch.nn.functional.linear(x, w))
