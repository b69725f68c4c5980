"""Hugging Face Hub ids as models: `mopt serve acme/tiny`, `--model`, `--tokenizer`, `--revision` and
`LLM("acme/tiny")` resolve through huggingface_hub. Tested offline (HF_HUB_OFFLINE=1) against a cache the
test writes in the hub's own layout: models--ORG--NAME/refs/<branch or tag> holds a commit hash,
snapshots/<commit>/ the files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from model_optimizer.runtime.hub import is_hub_id

REPO = Path(__file__).resolve().parents[2]
MAIN, V1 = "a" * 40, "b" * 40


@pytest.fixture
def hub_home(tmp_path, tiny_model) -> Path:
    """HF_HOME with acme/tiny: branch main -> the tiny Qwen3, tag v1 -> the tiny Llama 3."""
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny"
    for commit, model in ((MAIN, "qwen3"), (V1, "llama3")):
        shutil.copytree(tiny_model(model), repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    (repo / "refs" / "v1").write_text(V1)
    return tmp_path / "hf"


def _env(hub_home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    return env | {"HF_HOME": str(hub_home), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _generate(hub_home: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "model_optimizer.cli.main", "generate", "--prompt", "def f():", "--max-tokens"]
    command += ["4", "--temperature", "0", "--ignore-eos", "--output", "-", "--max-model-len", "64"]
    return subprocess.run([*command, *flags], cwd=REPO, env=_env(hub_home), capture_output=True, text=True, timeout=600)


def _local_tokens(folder: Path) -> list[int]:
    from model_optimizer import LLM, SamplingParams

    llm = LLM(str(folder), max_model_len=64, kv_cache_memory=1 << 22)
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    return list(llm.generate(["def f():"], params)[0].outputs[0].token_ids)


def test_hub_id_and_revision_read_the_cache_offline(hub_home, tiny_model):
    main = _generate(hub_home, "--model", "acme/tiny")
    assert main.returncode == 0, main.stderr
    assert json.loads(main.stdout)["outputs"][0]["token_ids"] == _local_tokens(tiny_model("qwen3"))
    assert "loading model acme/tiny" in main.stderr
    tagged = _generate(hub_home, "--model", "acme/tiny", "--revision", "v1", "--tokenizer", "acme/tiny")
    assert tagged.returncode == 0, tagged.stderr
    assert json.loads(tagged.stdout)["outputs"][0]["token_ids"] == _local_tokens(tiny_model("llama3"))


def test_what_the_cache_lacks_offline_is_one_clear_line(hub_home):
    for flags, words in (
        (["--model", "acme/absent"], "acme/absent is not in the Hugging Face cache"),
        (["--model", "acme/tiny", "--revision", "v9"], "acme/tiny at revision v9 is not in the Hugging Face cache"),
    ):
        run = _generate(hub_home, *flags)
        assert run.returncode == 2 and "Traceback" not in run.stderr
        (line,) = run.stderr.strip().splitlines()
        assert words in line and "HF_HUB_OFFLINE is set" in line and "hf download" in line, line


def test_serve_takes_a_hub_id_and_serves_it_under_that_name(hub_home):
    from tests.runtime.server.test_process import launch

    proc, url = launch("acme/tiny", env=_env(hub_home))  # type: ignore[arg-type]
    try:
        models = httpx.get(url + "/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in models] == ["acme/tiny"]
        body = {"model": "acme/tiny", "prompt": "def f():", "max_tokens": 3, "ignore_eos": True}
        response = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_offline_api_and_tokenizer_resolve_hub_ids(hub_home, monkeypatch, tiny_model):
    from huggingface_hub import constants

    from model_optimizer import LLM
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    llm = LLM("acme/tiny", max_model_len=64, kv_cache_memory=1 << 22)
    assert llm.model_dir == hub_home / "hub" / "models--acme--tiny" / "snapshots" / MAIN
    assert load_tokenizer(Path("acme/tiny")).encode("def f():") == llm.tokenizer.encode("def f():")


@pytest.mark.parametrize(
    "text, hub", [("Qwen/Qwen3-0.6B", True), ("gpt2", True), ("./models/x", False), ("~/m", False), ("a/b/c", False)]
)
def test_what_looks_like_a_hub_id(text, hub):
    assert is_hub_id(text) is hub


def test_a_file_given_as_the_model_is_named_as_a_file(tmp_path, monkeypatch):
    from model_optimizer.runtime.hub import resolve_model

    weights = tmp_path / "acme" / "model.safetensors"  # a path with a Hub id's shape, too
    weights.parent.mkdir()
    weights.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    for given in (str(weights), "acme/model.safetensors"):
        with pytest.raises(ValueError, match=r"model .*model.safetensors is a file, not a folder: give the folder"):
            resolve_model(given)


def test_a_revision_for_a_local_folder_is_said_to_be_ignored(tmp_path, caplog):
    """--revision xyz with a folder started without a word, as if that revision were served."""
    import logging

    from model_optimizer.runtime.hub import resolve_model

    with caplog.at_level(logging.WARNING, logger="model_optimizer.runtime.hub"):
        assert resolve_model(str(tmp_path), "xyz") == tmp_path
    assert any("--revision xyz is ignored" in r.message for r in caplog.records)
