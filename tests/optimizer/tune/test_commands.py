"""Command lines of a candidate: mopt serve flags, --server-cmd templates, the vLLM translation."""

from __future__ import annotations

import sys

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.tune.commands import mopt_serve_argv, template_argv, vllm_serve

SETTINGS = {
    "max_num_seqs": 64,
    "enable_prefix_caching": False,
    "enforce_eager": False,
    "num_kv_blocks": 100,
    "max_queued_requests": 10,
    "kv_cache_memory": 1 << 20,
}


def test_mopt_serve_flags():
    assert mopt_serve_argv("/m", {"max_num_seqs": 64, "enable_prefix_caching": False}) == [
        "mopt",
        "serve",
        "--model",
        "/m",
        "--max-num-seqs",
        "64",
        "--no-enable-prefix-caching",
    ]


def test_vllm_translation_lists_what_translates_and_what_does_not():
    vllm = vllm_serve("/m", SETTINGS)
    assert vllm.argv == [
        "vllm",
        "serve",
        "/m",
        "--max-num-seqs",
        "64",
        "--no-enable-prefix-caching",
        "--num-gpu-blocks-override",
        "100",
    ]  # enforce_eager False is vLLM's default: no flag
    assert vllm.translated["num_kv_blocks"] == "--num-gpu-blocks-override"
    assert set(vllm.untranslated) == {"max_queued_requests", "kv_cache_memory"}


def test_vllm_quantization_only_where_vllm_rounds_on_the_fly():
    assert vllm_serve("/m", {"quantization": "fp8"}).argv == ["vllm", "serve", "/m", "--quantization", "fp8"]
    int8 = vllm_serve("/m", {"quantization": "int8"})
    assert int8.argv == ["vllm", "serve", "/m"] and "only fp8" in int8.untranslated["quantization"]
    assert vllm_serve("/m", {"quantization": "none"}).untranslated == {}


def test_template_fills_settings_and_quotes_paths():
    argv = template_argv(
        "{python} -m x --model {model} --port {port} --max-num-seqs {max_num_seqs} {flags}",
        "/my models/a",
        {"max_num_seqs": 8, "enforce_eager": True},
        1234,
    )
    assert argv == [
        sys.executable,
        "-m",
        "x",
        "--model",
        "/my models/a",
        "--port",
        "1234",
        "--max-num-seqs",
        "8",
        "--max-num-seqs",
        "8",
        "--enforce-eager",
    ]
    assert template_argv("s {enforce_eager}", None, {"enforce_eager": False}, 1) == ["s", "false"]


def test_template_unknown_placeholder_is_a_clear_error():
    with pytest.raises(ValueError, match=r"names \{block_size\}, which is not set"):
        template_argv("vllm serve {model} --block-size {block_size}", "m", {"max_num_seqs": 8}, 1)


def test_translate_command(tmp_path, capsys):
    best = tmp_path / "best.yaml"
    best.write_text(
        "# a comment\nmodel: /models/q\nmax_num_seqs: 128\nenable_chunked_prefill: false\nmax_queued_requests: 50\n"
    )
    assert main(["tune", "translate", str(best), "--to", "vllm"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "vllm serve /models/q --max-num-seqs 128 --no-enable-chunked-prefill"
    assert "not translated" in out and "max_queued_requests" in out
    assert main(["tune", "translate", str(best), "--to", "mopt"]) == 0
    assert capsys.readouterr().out.strip() == (
        "mopt serve --model /models/q --max-num-seqs 128 --no-enable-chunked-prefill --max-queued-requests 50"
    )


def test_translate_refuses_unknown_settings(tmp_path, capsys):
    best = tmp_path / "best.yaml"
    best.write_text("max_num_seqz: 128\n")
    assert main(["tune", "translate", str(best), "--to", "vllm"]) == 2
    assert "unknown setting 'max_num_seqz'" in capsys.readouterr().err
    assert main(["tune", "translat", str(best)]) == 2
    assert "translate best.yaml --to vllm" in capsys.readouterr().err


@pytest.mark.parametrize("to", ["vllm", "mopt"])
def test_translate_refuses_settings_serve_and_deploy_refuse(tmp_path, capsys, to):
    """max_num_seqs: 0 was printed as `--max-num-seqs 0`, while `mopt deploy --config` refused the file."""
    best = tmp_path / "best.yaml"
    best.write_text("max_num_seqs: 0\n")
    assert main(["tune", "translate", str(best), "--to", to]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"mopt tune: error: {best}: max_num_seqs must be a positive integer, got 0"
    assert captured.out == ""
    assert main(["deploy", "--config", str(best), "--output", str(tmp_path / "d")]) == 2
    assert "max_num_seqs must be a positive integer, got 0" in capsys.readouterr().err
