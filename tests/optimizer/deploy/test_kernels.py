"""A mopt image compiles its Triton kernels while it is built (`--kernels-for`): the Dockerfile's build
step runs `mopt compile-cache build` with exactly the serve command's engine settings on the model's
config.json (the one file of the model in the image), or says why it has none."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from model_optimizer.cli.args import dataclass_from_args
from model_optimizer.cli.main import build_parser, main
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.kernels import (
    MODEL_CONFIG_DIR,
    KernelTarget,
    local_target,
    parse_kernels_for,
    plan_kernels,
)
from model_optimizer.optimizer.deploy.output import write
from model_optimizer.optimizer.deploy.render import render
from model_optimizer.optimizer.deploy.settings import ServeSettings, mopt_command
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.optimizer.deploy.test_validate import _hadolint

REPO = Path(__file__).resolve().parents[3]
H200 = "9.0:132:NVIDIA H200"
ENGINE = dict(
    dtype="bfloat16",
    quantization="int8",
    kv_cache_dtype="fp8",
    block_size=32,
    max_num_seqs=96,
    max_num_batched_tokens=4096,
    max_model_len=512,  # the tiny model's max_position_embeddings: more is refused
    enforce_eager=True,
    enable_prefix_caching=False,
)
SERVER = dict(port=9000, api_key="sk-never-in-a-file", max_n=4)
"""Engine settings that change which kernels compile, and server settings the build must not see."""


def _settings(model: Path | str | None, **engine) -> ServeSettings:
    return ServeSettings(EngineConfig(model=str(model) if model else None, **engine), ServerConfig(**SERVER))


def _deploy(settings: ServeSettings, out: Path, kernels_for: str = H200, engine: str = "mopt") -> Path:
    deploy = DeployConfig(target="docker", engine=engine, output=str(out), driver="570.133.20", kernels_for=kernels_for)
    write(render(settings, deploy), out, with_source=False)
    return out


def _build_line(dockerfile: str) -> str | None:
    lines = [line for line in dockerfile.splitlines() if line.startswith("RUN mopt compile-cache build ")]
    assert len(lines) <= 1, lines
    return lines[0] if lines else None


def _index(lines: list[str], prefix: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(prefix))


def _build_argv(out: Path) -> list[str]:
    line = _build_line((out / "Dockerfile").read_text())
    assert line is not None
    return shlex.split(line.removeprefix("RUN "))


def test_explicit_target_builds_with_the_serve_commands_engine_settings(tiny_model, tmp_path):
    model = tiny_model("qwen3")
    settings = _settings(model, **ENGINE)
    out = _deploy(settings, tmp_path / "out")
    dockerfile = (out / "Dockerfile").read_text()
    assert _hadolint(out / "Dockerfile").returncode == 0
    assert json.loads((out / "model-config/config.json").read_text()) == json.loads((model / "config.json").read_text())
    assert sorted(p.name for p in (out / "model-config").iterdir()) == ["config.json"]  # never the weights
    assert "!model-config/" in (out / ".dockerignore").read_text()

    argv = _build_argv(out)
    assert argv[:3] == ["mopt", "compile-cache", "build"]
    args = build_parser().parse_args(argv[1:])
    assert (args.arch, args.num_sms, args.gpu_name) == ("9.0", 132, "NVIDIA H200")
    serve = dataclass_from_args(EngineConfig, build_parser().parse_args(mopt_command(settings)[1:]))
    assert dataclass_from_args(EngineConfig, args) == dataclasses.replace(serve, model=MODEL_CONFIG_DIR)
    assert not {"--port", "--host", "--api-key", "--max-n", "--served-model-name"} & set(argv)
    assert "sk-never-in-a-file" not in dockerfile

    lines = dockerfile.splitlines()
    env = lines.index("ENV MOPT_COMPILE_CACHE_DIR=/opt/mopt-compile-cache")  # ENV persists: the server reads it too
    install, user, build = (_index(lines, p) for p in ("RUN pip install --no-cache-dir /opt", "USER", "RUN mopt"))
    assert install < env < user < build < _index(lines, "WORKDIR")  # built as the server's user
    assert lines[user] == "USER 10001" and lines.count("USER 10001") == 1
    assert "chown 10001 /opt/mopt-compile-cache" in dockerfile
    assert dockerfile.rstrip().endswith(json.dumps(mopt_command(settings)))  # the serve command is untouched
    assert (
        "compiled for NVIDIA H200 (compute capability 9.0, 132 SMs) when the image is built"
        in (out / "README.md").read_text()
    )


@pytest.mark.parametrize(
    "kernels_for, engine, why",
    [
        ("none", {}, "--kernels-for none"),
        (H200, {"tensor_parallel_size": 2}, "tensor_parallel_size 2: the build covers one GPU"),
    ],
)
def test_no_build_step_says_why(tiny_model, tmp_path, kernels_for, engine, why):
    out = _deploy(_settings(tiny_model("qwen3"), **engine), tmp_path / "out", kernels_for)
    dockerfile = (out / "Dockerfile").read_text()
    assert _build_line(dockerfile) is None and "MOPT_COMPILE_CACHE_DIR" not in dockerfile
    assert not (out / "model-config").exists()
    assert f"# Kernels are not compiled at build time ({why}" in dockerfile
    assert f"- Triton kernels: not compiled at build time ({why}" in (out / "README.md").read_text()
    assert _hadolint(out / "Dockerfile").returncode == 0


def test_embedding_models_and_absent_folders_have_no_build_step(tiny_model, tmp_path):
    """The build walks the decoder engine's start; an embedding model is served by the embedder."""
    folder = tmp_path / "embedder"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_model("qwen3") / "config.json").read_text())
    (folder / "modules.json").write_text("[]")  # a sentence-transformers folder: the server embeds
    assert "embedding model" in plan_kernels(_settings(folder), H200).why_not
    plan = plan_kernels(_settings(tmp_path / "elsewhere"), H200)
    assert plan.target is None and "config.json is not on this machine" in plan.why_not


def test_auto_follows_this_machines_gpu(tmp_path):
    import torch

    plan = plan_kernels(_settings(None), "auto")
    if torch.cuda.is_available():
        assert plan.target == local_target() and plan.target is not None
    else:
        assert plan.target is None and "--kernels-for '9.0:132:NVIDIA H200'" in plan.why_not


def test_vllm_images_have_no_kernel_step(tmp_path):
    out = _deploy(_settings(None), tmp_path / "vllm", kernels_for="auto", engine="vllm")  # a target is refused
    text = (out / "Dockerfile").read_text()
    assert "compile-cache" not in text and "Kernels" not in text and not (out / "model-config").exists()


def test_omitted_sms_and_name_take_an_h200s():
    assert parse_kernels_for("9.0") == KernelTarget("9.0", 132, "NVIDIA H200")
    assert parse_kernels_for("8.0:108") == KernelTarget("8.0", 108, "NVIDIA H200")
    assert parse_kernels_for("8.0:108:NVIDIA A100-SXM4-80GB").name == "NVIDIA A100-SXM4-80GB"
    assert parse_kernels_for("auto") is None and parse_kernels_for("none") is None


@pytest.mark.parametrize(
    "value, message",
    [
        ("hopper", "'hopper' is not a compute capability"),
        ("", "'' is not a compute capability"),
        ("9.0:0", "the SM count '0' is not a positive integer"),
        ("9.0:many:NVIDIA H200", "the SM count 'many' is not a positive integer"),
        ("9.0:132:", "the GPU name '' is empty"),
        ("9.0:132:H200\nRUN rm -rf /", "not printable"),
    ],
)
def test_bad_kernels_for_is_a_clear_error(tmp_path, capsys, value, message):
    with pytest.raises(ValueError, match="kernels_for must be auto, none or CAPABILITY"):
        DeployConfig(kernels_for=value)
    assert main(["deploy", "--kernels-for", value, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "mopt deploy: error: kernels_for must be auto, none or CAPABILITY[:SMS[:NAME]]" in err and message in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_rendered_build_step_fills_the_cache_the_engine_reads(tiny_model, tmp_path):
    """The Dockerfile's RUN line, as written (only the image's config folder mapped to the build
    context's), run through our CLI: Triton's JIT, so in a process without TRITON_INTERPRET."""
    pytest.importorskip("triton.backends.compiler")
    small = dict(dtype="bfloat16", max_num_seqs=2, max_model_len=256, max_num_batched_tokens=64, block_size=32)
    out = _deploy(_settings(tiny_model("qwen3"), **small), tmp_path / "out")
    argv = _build_argv(out)
    argv[argv.index("--model") + 1] = str(out / "model-config")
    root = tmp_path / "compile-cache"
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    env |= {"PYTHONPATH": str(REPO), "MOPT_COMPILE_CACHE_DIR": str(root)}
    result = subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", *argv[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    from model_optimizer.runtime.kernels.compile_cache import cache_key

    folder = root / cache_key("sm90") / "triton"  # where an engine on an H200 with this root looks
    assert result.stdout.strip().endswith(str(folder))
    manifest = json.loads((folder / "aot_manifest.json").read_text())
    assert manifest["entries"] > 0 and list(folder.glob("*/*.cubin"))
    assert {k: manifest["engine"][k] for k in small} == small
    assert manifest["target"] == {"capability": [9, 0], "num_sms": 132, "name": "NVIDIA H200"}
