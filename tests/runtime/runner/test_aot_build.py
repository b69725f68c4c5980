"""`mopt compile-cache build`: an engine start's Triton kernels compiled for sm_90 on a machine without
a GPU, through Triton's own JIT (kernels/aot.py, runtime/runner/aot_build.py).

Run in subprocesses without TRITON_INTERPRET (the interpreter replaces the JIT); one tiny decoder
config, two decode buckets. tests/gpu and scripts/device/kernels_h200.sh check on an H200 that a start
from such a folder compiles nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FLAGS = ["--max-num-seqs", "2", "--max-model-len", "256", "--max-num-batched-tokens", "64", "--dtype", "bfloat16"]


def _config(folder: Path) -> Path:
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
    ).to_dict()
    config["architectures"] = ["Qwen3ForCausalLM"]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _mopt(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "compile-cache", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_dir()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("triton.backends.compiler")
    root = tmp_path_factory.mktemp("aot")
    model, out = _config(root / "model"), root / "cache"
    first = _mopt("build", "--model", str(model), *FLAGS, "--output", str(out), "--jobs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    return model, out, json.loads((out / "aot_manifest.json").read_text())


def test_build_compiles_every_kernel_of_a_start_for_sm90(built):
    _, out, manifest = built
    launched = set(manifest["kernel_launches"])
    # Qwen3's layers rotate q and k and store K and V in one kernel (no separate rotary or store_kv launch)
    assert {"_rms_norm_kernel", "_norm_rotate_store_kernel", "_paged_attention_kernel"} <= launched
    assert not {"_norm_rotate_kernel", "_store_kv_kernel"} & launched
    assert {"_silu_and_mul_kernel", "_gumbel_argmax_kernel"} <= launched
    assert manifest["target"]["capability"] == [9, 0] and "_sm90-" in manifest["folder_key"]
    assert manifest["entries"] == len(_entries(out)) > 0
    cubins = list(out.glob("*/*.cubin"))
    assert cubins and all(p.stat().st_size > 0 for p in cubins)  # compiled for the GPU, not interpreted


def test_a_second_build_finds_every_kernel_in_the_cache(built):
    """The keys are deterministic: building again compiles nothing new (what a start on the GPU relies on)."""
    model, out, _ = built
    before = _entries(out)
    again = _mopt("build", "--model", str(model), *FLAGS, "--output", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert _entries(out) == before


def test_a_parallel_build_compiles_each_variant_once_into_the_same_entries(built, tmp_path):
    """--jobs 2: two processes walk the same start and share the compiles through claims; together they
    write exactly the serial build's entries, each variant compiled by one of them."""
    from model_optimizer.common.processes import usable_cores

    if usable_cores() < 2:
        pytest.skip("--jobs is lowered to the cores: one core builds in one process")
    model, out, manifest = built
    parallel = tmp_path / "parallel"
    result = _mopt("build", "--model", str(model), *FLAGS, "--output", str(parallel), "--jobs", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((parallel / "aot_manifest.json").read_text())
    assert _entries(parallel) == _entries(out)
    assert report["jobs"] == 2 and len(report["compiled_per_job"]) == 2
    assert report["compiled"] == manifest["compiled"] > 0  # none compiled twice, none missed
    assert report["kernel_launches"] == manifest["kernel_launches"]  # each process walked the whole start


def test_quantized_layers_compile_their_matmul_for_the_target(built, tmp_path):
    """int4 on the meta device: repacked for the kernels and its tensor-core tiles compiled (PTX widening)."""
    model, _, _ = built
    out = tmp_path / "int4"
    result = _mopt("build", "--model", str(model), *FLAGS, "--quantization", "rtn-int4", "--output", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    launched = json.loads((out / "aot_manifest.json").read_text())["kernel_launches"]
    assert launched.get("_quant_matmul_kernel", 0) > 0


MOE_AND_MLA = {
    "qwen3-moe": ("Qwen3MoeConfig", dict(moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2)),
    "deepseek-v2": (
        "DeepseekV2Config",
        dict(moe_intermediate_size=64, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, kv_lora_rank=32,
             q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, first_k_dense_replace=1),
    ),
}  # fmt: skip
EXPECTED = {
    "qwen3-moe": {"_moe_gemm_kernel", "_softmax_topk_kernel", "_norm_route_kernel", "_rms_norm_kernel"},
    "deepseek-v2": {"_latent_attention_kernel"},
}


@pytest.mark.parametrize("family", list(MOE_AND_MLA))
def test_experts_and_latent_attention_compile_ahead_too(family, tmp_path):
    """The fused MoE (routing, alignment, grouped GEMM) and MLA's latent cache walk on the meta device as
    on the GPU: a cold start of these families compiles ahead like any other."""
    import transformers

    name, extra = MOE_AND_MLA[family]
    config = getattr(transformers, name)(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=512, **extra,
    ).to_dict()  # fmt: skip
    config["architectures"] = [name.replace("Config", "ForCausalLM")]
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    result = _mopt("build", "--model", str(model), *FLAGS, "--output", str(tmp_path / "cache"), "--jobs", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    launched = json.loads((tmp_path / "cache" / "aot_manifest.json").read_text())["kernel_launches"]
    assert EXPECTED[family] <= set(launched), launched
    if family == "deepseek-v2":  # the latent cache has its own kernel
        assert "_paged_attention_kernel" not in launched


def test_path_names_the_architecture_folder_and_bad_arch_is_refused():
    shown = _mopt("path", "--arch", "9.0")
    assert shown.returncode == 0 and "_sm90-" in shown.stdout and shown.stdout.strip().endswith("triton")
    bad = _mopt("path", "--arch", "hopper")
    assert bad.returncode == 2 and "--arch must be a compute capability" in bad.stderr


def test_a_parallel_build_the_model_refuses_is_one_error_line(tmp_path):
    """An architecture config.json names but the engine does not build passes the up-front checks; each
    worker refuses it, and the build says why in one line (it was a traceback per worker)."""
    pytest.importorskip("triton.backends.compiler")
    model = _config(tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["FooForCausalLM"]}))
    result = _mopt("build", "--model", str(model), *FLAGS, "--output", str(tmp_path / "out"), "--jobs", "2")
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("mopt compile-cache: ")]
    assert "'FooForCausalLM' is not supported" in line and "Traceback" not in result.stderr


def test_jobs_beyond_the_cores_start_no_more_workers_and_sigterm_cleans_up(tmp_path):
    """--jobs 100000 started hundreds of workers (each importing torch) for a few dozen kernels; now at most
    one per core. SIGTERM (`timeout`, `kill`) stops the build as Ctrl-C does: workers reaped, exit code 130,
    and no claims folder left in the temp folder (the default action left it there)."""
    pytest.importorskip("triton.backends.compiler")
    from model_optimizer.common.processes import usable_cores

    model, temp = _config(tmp_path / "model"), tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(REPO)}
    env["TMPDIR"] = str(temp)  # the claims folder is made here, where the test can see it
    argv = ["build", "--model", str(model), *FLAGS, "--output", str(tmp_path / "cache"), "--jobs", "100000"]
    build = subprocess.Popen(
        [sys.executable, "-m", "model_optimizer.cli.main", "compile-cache", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(temp.glob("mopt-aot-claims-*/worker-*.log")) and build.poll() is None:
            assert time.monotonic() < deadline, "no build worker started"
            time.sleep(0.1)
        time.sleep(1)  # every worker the build starts is started by now: they start in one loop
        workers = subprocess.run(["pgrep", "-P", str(build.pid)], capture_output=True, text=True).stdout.split()
        assert 1 <= len(workers) <= usable_cores()
        build.send_signal(signal.SIGTERM)
        _, err = build.communicate(timeout=120)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert build.returncode == 130, err[-3000:]
    assert f"--jobs 100000 lowered to {usable_cores()}, the cores this process may run on" in err
    assert not list(temp.glob("mopt-aot-claims-*"))
