"""Which launch a quantized linear takes inside a CUDA-graph capture, through the Triton interpreter.

The tile table may name "dequant" (the weight widened into a scratch buffer, then a dense matmul) for
large decode batches; a capture must never grow that buffer, and quant_matmul must never be handed a
backend it cannot run (the H200 run: `quant_matmul runs the Triton program only, got backend
'dequant'` while capturing Llama's batch-128 graph). Here `aot.capturing()` is forced true on CPU
tensors, the table names the interpreter's "GPU", and the launches are recorded.
"""

import json

import pytest
import torch

from model_optimizer.runtime.kernels import aot, quant_linear, quant_tiles
from model_optimizer.runtime.kernels import quant_matmul as launcher
from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.kernels.quant_tiles import DEQUANT, SCALED_MM, QuantTiles, table_key
from model_optimizer.runtime.layers.quantization.quantizers import quantize_int4, quantize_int8
from tests.runtime.kernels.paged_batches import relative_error

GPU = "interpreter"  # what quant_matmul._device_facts names the device without CUDA
SAFE = QuantTiles(32, 64, 128, 2)  # the capture alternative the table names (not a default-rule tile)


@pytest.fixture
def table(tmp_path, monkeypatch):
    """Writes a tile table for GPU and points $MOPT_QUANT_TILES at it; returns the writer."""
    path = tmp_path / "tiles.json"

    def write(entries, capture=None, gpu=GPU):
        path.write_text(json.dumps(quant_tiles.table_json(gpu, entries, capture=capture)))
        quant_tiles._table_for.cache_clear()

    monkeypatch.setenv(quant_tiles.TABLE_ENV, str(path))
    yield write
    quant_tiles._table_for.cache_clear()


@pytest.fixture
def launches(monkeypatch):
    """Records (name, tiles or None) of every kernel quant_linear launches."""
    from model_optimizer.runtime.kernels import triton_kernel

    seen = []

    def recording(module, name):
        fn = triton_kernel(module, name)
        if name == "quant_matmul":
            return lambda *a: seen.append((name, a[7])) or fn(*a)
        if name == "dequantize_weight":
            return lambda *a: seen.append((name, None)) or fn(*a)
        return fn

    monkeypatch.setattr(quant_linear, "triton_kernel", recording)
    quant_linear._scratch.clear()
    quant_linear._captured.clear()
    yield seen
    quant_linear._scratch.clear()
    quant_linear._captured.clear()


def _int8(m, n=64, k=256, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, s = quantize_int8(torch.randn(n, k, generator=gen)).astuple()
    x = torch.randn(m, k, generator=gen)
    return x, q, s, x.double() @ ref.dequantize_int8(q, s).double().T


def test_graph_safe_choice_never_names_dequant(table):
    table(
        {table_key("int8", 128, 64, 256): DEQUANT, table_key("int8", 8, 64, 256): SAFE},
        capture={table_key("int8", 128, 64, 256): SAFE},
    )
    assert launcher.choose_tiles(128, 64, 256, "int8", 0, 132, GPU) == DEQUANT  # eager: the fastest
    assert launcher.choose_tiles(128, 64, 256, "int8", 0, 132, GPU, graph_safe=True) == SAFE
    assert launcher.choose_tiles(8, 64, 256, "int8", 0, 132, GPU, graph_safe=True) == SAFE  # already safe
    # prefill rows without a measurement: dequant eagerly, the default rule's tensor-core tiles in a capture
    assert launcher.choose_tiles(512, 64, 256, "int4", 128, 132, GPU).backend == "dequant"
    prefill = launcher.choose_tiles(512, 64, 256, "int4", 128, 132, GPU, graph_safe=True)
    assert prefill.kernel == "mma" and prefill.block_m >= 64
    # fp8 that may quantize its activations takes _scaled_mm there (capturable)
    assert launcher.choose_tiles(512, 64, 256, "fp8", 0, 132, GPU, w8a8=True, graph_safe=True) == SCALED_MM


def test_a_table_without_capture_entries_falls_back_to_tensor_core_tiles(table):
    """Tables of before the "capture" entries are still read: a capture takes the default rule's
    graph-safe tiles of the row bucket there (block_m 64 at 128 rows), never a GEMV-sized tile."""
    table({table_key("int4", 128, 64, 256): DEQUANT})
    tiles = launcher.choose_tiles(128, 64, 256, "int4", 128, 132, GPU, graph_safe=True)
    assert tiles == quant_tiles.gluon_default(128, 64, 256, 132)  # int4's default at 17-256 rows
    assert tiles.graph_safe and tiles.block_m == 64
    # quant_matmul (and the dispatch where Gluon cannot run), asked no tiles, looks up our program's only
    program = launcher.choose_tiles(128, 64, 256, "int4", 128, 132, GPU, program_only=True)
    assert program == quant_tiles.program_tiles("int4", 128, 64, 256, 132)
    assert program.kernel == "mma" and program.block_m == 64


def test_a_capture_entry_that_is_dequant_is_rejected(table):
    with pytest.raises(ValueError, match="'capture' entries must be launches a CUDA graph can take"):
        table({table_key("int8", 128, 64, 256): DEQUANT}, capture={table_key("int8", 128, 64, 256): DEQUANT})
        launcher.choose_tiles(128, 64, 256, "int8", 0, 132, GPU)


def test_capture_without_the_scratch_buffer_runs_the_capture_entry(table, launches, monkeypatch):
    table({table_key("int8", 128, 64, 256): DEQUANT}, capture={table_key("int8", 128, 64, 256): SAFE})
    x, q, s, want = _int8(100)
    monkeypatch.setattr(aot, "capturing", lambda: True)
    out = quant_linear._gpu_matmul("int8", x, q, s, None, 0, None)
    assert launches == [("quant_matmul", SAFE)]
    assert not quant_linear._scratch  # never allocated inside a capture
    assert relative_error(out, want) < 1e-5


def test_quant_matmul_without_tiles_never_takes_the_tables_dequant(table):
    """The crash itself: quant_matmul asked for no tiles where the table says dequant."""
    table({table_key("int8", 128, 64, 256): DEQUANT}, capture={table_key("int8", 128, 64, 256): SAFE})
    x, q, s, want = _int8(100, seed=1)
    assert relative_error(launcher.quant_matmul(x, q, s, None, "int8"), want) < 1e-5


def test_capture_with_the_scratch_buffer_grown_runs_dequant(table, launches, monkeypatch):
    """The engine warms every decode bucket up before capturing it: the buffer then holds the
    largest weight and the capture takes the dense path, as eagerly, into that same buffer."""
    table({table_key("int8", 128, 64, 256): DEQUANT}, capture={table_key("int8", 128, 64, 256): SAFE})
    x, q, s, want = _int8(100, seed=2)
    eager = quant_linear._gpu_matmul("int8", x, q, s, None, 0, None)  # the warm-up
    buf = quant_linear._scratch[(x.device, x.dtype)]
    monkeypatch.setattr(aot, "capturing", lambda: True)
    captured = quant_linear._gpu_matmul("int8", x, q, s, None, 0, None)
    assert [name for name, _ in launches] == ["dequantize_weight", "dequantize_weight"]
    assert quant_linear._scratch[(x.device, x.dtype)] is buf
    assert quant_linear._captured == {buf.data_ptr(): buf}  # kept alive should a larger weight replace it
    assert torch.equal(eager, captured) and relative_error(captured, want) < 1e-5
    # a larger weight inside the capture: the buffer is too small, the capture entry runs instead
    table({table_key("int8", 128, 128, 256): DEQUANT})
    x2, q2, s2, want2 = _int8(100, n=128, seed=3)
    launches.clear()
    out = quant_linear._gpu_matmul("int8", x2, q2, s2, None, 0, None)
    assert [name for name, _ in launches] == ["quant_matmul"] and launches[0][1].kernel == "mma"
    assert quant_linear._scratch[(x.device, x.dtype)] is buf and relative_error(out, want2) < 1e-5


def test_int4_capture_fallback_matches_the_reference(table, launches, monkeypatch):
    """int4 at a bucket above 256 rows with no table entry: dequant eagerly, tensor-core tiles in a capture."""
    table({})
    gen = torch.Generator().manual_seed(5)
    q, s, z = quantize_int4(torch.randn(64, 256, generator=gen), 128).astuple()
    planes = ref.repack_int4(q, "sequential", "planes")
    x = torch.randn(300, 256, generator=gen)
    want = x.double() @ ref.dequantize_int4(q, s, z, 128, torch.float64).T
    monkeypatch.setattr(aot, "capturing", lambda: True)
    out = quant_linear._gpu_matmul("int4", x, planes, s, z, 128, None)
    assert [name for name, _ in launches] == ["quant_matmul"] and launches[0][1].kernel == "mma"
    assert relative_error(out, want) < 1e-5
