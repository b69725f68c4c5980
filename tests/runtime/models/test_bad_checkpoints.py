"""Broken model folders give one clear error naming the file and what is wrong, the same in every
command (generate, export-onnx, serve, the loader itself), never a traceback or a wrong diagnosis."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from model_optimizer.cli.main import main
from model_optimizer.runtime.models.loader import load_model

REDOWNLOAD = "download or save it again"


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage_header(path):
    data = bytearray(path.read_bytes())
    data[8:40] = b"\x00\xffnot json at all, just bytes...."
    path.write_bytes(bytes(data))


def _huge_header_length(path):
    data = bytearray(path.read_bytes())
    data[:8] = (1 << 40).to_bytes(8, "little")
    path.write_bytes(bytes(data))


def _empty(path):
    path.write_bytes(b"")


CORRUPTIONS = {
    "truncated": (_truncate, "is truncated"),
    "garbage_header": (_garbage_header, "header is not JSON"),
    "header_length_past_the_end": (_huge_header_length, "header claims"),
    "empty": (_empty, "too short for a header"),
}


@pytest.fixture
def model_copy(tiny_model, tmp_path):
    def make(name: str = "qwen3"):
        return shutil.copytree(tiny_model(name), tmp_path / name)

    return make


def _edit_config(folder, edit) -> None:
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_a_corrupt_safetensors_file_is_a_value_error_naming_it(model_copy, kind):
    corrupt, what = CORRUPTIONS[kind]
    folder = model_copy()
    corrupt(folder / "model.safetensors")
    with pytest.raises(ValueError) as info:
        load_model(folder, "auto", torch.device("cpu"))
    assert str(folder / "model.safetensors") in str(info.value)
    assert what in str(info.value) and REDOWNLOAD in str(info.value)


def test_generate_and_export_onnx_report_a_truncated_checkpoint_in_one_line(model_copy, tmp_path, capsys):
    folder = model_copy()
    _truncate(folder / "model.safetensors")
    assert main(["generate", "--model", str(folder), "--prompt", "hi", "--max-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'model.safetensors'} is truncated" in err and "Traceback" not in err
    assert main(["export-onnx", "--model", str(folder), "--output", str(tmp_path / "onnx")]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'model.safetensors'} is truncated" in err and "Traceback" not in err


@pytest.mark.slow
def test_serve_reports_a_corrupt_checkpoint_without_a_traceback(model_copy):
    folder = model_copy()
    _garbage_header(folder / "model.safetensors")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "serve", "--model", str(folder), "--port", "0"],
        env=env, capture_output=True, text=True, timeout=500,
    )  # fmt: skip
    assert done.returncode != 0
    assert f"{folder / 'model.safetensors'} is not a valid safetensors file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_broken_shard_index_is_named(model_copy):
    folder = model_copy()
    (folder / "model.safetensors.index.json").write_text('{"weight_map": ["model.safetensors"]}')
    with pytest.raises(ValueError, match=r"model.safetensors.index.json has no 'weight_map' object"):
        load_model(folder, "auto", torch.device("cpu"))


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_a_shard_index_naming_files_outside_the_folder_is_refused(model_copy, shard):
    """An index may not send the loader to read files elsewhere (inspect refuses the same)."""
    folder = model_copy()
    weight_map = {"lm_head.weight": shard, "model.norm.weight": "model.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ValueError, match=r"names shards outside"):
        load_model(folder, "auto", torch.device("cpu"))


def test_a_folder_named_like_a_shard_is_not_a_shard(model_copy):
    folder = model_copy()
    (folder / "model.safetensors").rename(folder / "weights.bin.tmp")
    (folder / "model.safetensors").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no \*.safetensors file"):
        load_model(folder, "auto", torch.device("cpu"))


def test_eos_ids_that_are_not_integers_are_no_stop_tokens(model_copy):
    """`true` is no token 1 and "2" no token 2 (inspect reports them as tokens.invalid_id)."""
    from model_optimizer.runtime.startup import eos_token_ids

    folder = model_copy()
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [True, "2", 7]}))
    assert eos_token_ids(folder, None) == frozenset({7})


def test_invalid_config_json_is_reported_as_such_not_as_a_tokenizer_problem(model_copy, capsys):
    folder = model_copy()
    (folder / "config.json").write_text('{"model_type": "qwen3",\n')
    assert main(["generate", "--model", str(folder), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'config.json'} is not valid JSON" in err and "tokenizer" not in err


@pytest.mark.parametrize("command", ["generate", "export-onnx"])
def test_config_without_architectures_or_model_type_names_the_file_and_the_supported(
    model_copy, tmp_path, capsys, command
):
    folder = model_copy()
    _edit_config(folder, lambda c: [c.pop("architectures"), c.pop("model_type")])
    extra = ["--prompt", "hi"] if command == "generate" else ["--output", str(tmp_path / "onnx")]
    assert main([command, "--model", str(folder), *extra]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'config.json'} has no 'architectures' list and no 'model_type' either" in err
    assert "Qwen3ForCausalLM" in err and "BertModel" in err and "tokenizer" not in err


def test_config_with_model_type_only_still_loads(model_copy):
    folder = model_copy()
    _edit_config(folder, lambda c: c.pop("architectures"))
    assert type(load_model(folder, "auto", torch.device("cpu"))).__name__ == "Qwen3ForCausalLM"


@pytest.mark.parametrize("edit,message", [
    (lambda c: c.pop("hidden_size"), "lacks 'hidden_size', which a Qwen3ForCausalLM needs"),
    (lambda c: c.update(num_hidden_layers="2"), "'num_hidden_layers' must be a positive integer, got '2'"),
    (lambda c: c.update(architectures="Qwen3ForCausalLM"), "'architectures' must be a non-empty list"),
    (lambda c: c.update(architectures=["GPT2LMHeadModel"]), "'GPT2LMHeadModel' is not supported"),
    (lambda c: c.update(max_position_embeddings=-5), "'max_position_embeddings' must be a positive integer, got -5"),
    (lambda c: c.update(head_dim="32"), "'head_dim' must be a positive integer, got '32'"),
    (lambda c: c.update(rms_norm_eps="1e-6"), "'rms_norm_eps' must be a positive number, got '1e-6'"),
    (lambda c: c.update(rope_scaling=[1]), "'rope_scaling' must be an object of rope settings (or null / false), got [1]"),
    (lambda c: c.update(rope_scaling="yarn"), "'rope_scaling' must be an object of rope settings (or null / false)"),
])  # fmt: skip
def test_config_problems_name_the_file_and_the_setting(model_copy, capsys, edit, message):
    folder = model_copy()
    _edit_config(folder, edit)
    assert main(["generate", "--model", str(folder), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    if "GPT2" in message:
        assert "Qwen3ForCausalLM" in err  # the supported ones are listed
    else:
        assert str(folder / "config.json") in err


def test_export_onnx_output_that_is_a_file_is_refused_before_loading(model_copy, tmp_path, capsys):
    folder = model_copy()
    existing = tmp_path / "model.onnx"
    existing.write_text("keep me")
    assert main(["export-onnx", "--model", str(folder), "--output", str(existing)]) == 2
    assert f"--output {existing} is a file" in capsys.readouterr().err
    assert existing.read_text() == "keep me"
    assert main(["export-onnx", "--model", str(folder), "--output", str(existing / "inner")]) == 2
    assert f"is inside {existing}, which is a file" in capsys.readouterr().err


@pytest.mark.parametrize("file,edit", [
    ("tokenizer_config.json", lambda c: [1]),
    ("tokenizer_config.json", lambda c: {**c, "eos_token": 5}),
    ("tokenizer.json", lambda c: {**c, "model": [1]}),
])  # fmt: skip
def test_malformed_tokenizer_files_are_one_line_naming_the_folder(model_copy, capsys, file, edit):
    folder = model_copy()
    path = folder / file
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    assert main(["generate", "--model", str(folder), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert f"the tokenizer files in {folder} are malformed" in err and "Traceback" not in err


def test_rope_scaling_false_means_none(model_copy):
    """Some configs carry "rope_scaling": false; the rope code reads it as absent, and so does the check."""
    folder = model_copy()
    _edit_config(folder, lambda c: c.update(rope_scaling=False))
    assert type(load_model(folder, "auto", torch.device("cpu"))).__name__ == "Qwen3ForCausalLM"


def test_a_null_max_position_embeddings_means_absent(model_copy, capsys):
    """ "max_position_embeddings": null used to reach torch.arange (generate, serve) and a comparison
    (quantize) as None: it now means what leaving it out means, as a null num_key_value_heads does."""
    folder = model_copy()
    _edit_config(folder, lambda c: c.update(max_position_embeddings=None))
    assert main(["generate", "--model", str(folder), "--prompt", "hi", "--max-tokens", "2"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_tokenizer_that_needs_a_missing_package_says_so(model_copy, capsys):
    import importlib.util

    if importlib.util.find_spec("fugashi") is not None:
        pytest.skip("fugashi is installed: the tokenizer would load")
    folder = model_copy()
    for name in ("tokenizer.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhi\n")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertJapaneseTokenizer", "word_tokenizer_type": "mecab"})
    )
    assert main(["generate", "--model", str(folder), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert f"the tokenizer of {folder} needs a package that is not installed" in err and "Traceback" not in err
