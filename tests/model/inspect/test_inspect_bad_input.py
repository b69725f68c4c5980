"""`mopt inspect` on malformed files: one line `mopt inspect: error: ...` naming the file and exit code 2,
or a finding (exit code 1) where the engine could not build the model; never a traceback."""

from __future__ import annotations

import json
import struct

import pytest

from model_optimizer.cli.main import main
from tests.cli_errors import error_line
from tests.model.inspect import broken as b


def _error_line(folder, capsys) -> str:
    return error_line(["inspect", str(folder), "--json"], capsys)


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("generation_config.json", "[1, 2]", "generation_config.json must hold a JSON object"),
        ("generation_config.json", '"x"', "generation_config.json must hold a JSON object"),
        ("adapter_config.json", "[1]", "adapter_config.json must hold a JSON object"),
        ("model.safetensors.index.json", "[1]", "model.safetensors.index.json"),
        ("model.safetensors.index.json", '{"weight_map": [1]}', "weight_map"),
        ("model.safetensors.index.json", '{"weight_map": {"a": 5}}', "weight_map"),
        ("tokenizer_config.json", '{"added_tokens_decoder": [1, 2]}', "tokenizer_config.json"),
        ("tokenizer_config.json", '{"added_tokens_decoder": {"5": "a"}}', "tokenizer_config.json"),
        ("tokenizer_config.json", '{"added_tokens_decoder": {"x": {"content": "a"}}}', "tokenizer_config.json"),
        ("tokenizer_config.json", '{"extra_special_tokens": 5}', "tokenizer_config.json"),
        ("tokenizer.json", '{"model": [1]}', "tokenizer.json"),
        ("tokenizer.json", '{"model": {"vocab": 5}}', "tokenizer.json"),
        ("tokenizer.json", '{"model": {"vocab": {"a": "x"}}}', "tokenizer.json"),
        ("tokenizer.json", '{"added_tokens": ["a"]}', "tokenizer.json"),
        ("tokenizer.json", '{"added_tokens": [{"content": "a"}]}', "tokenizer.json"),
    ],
)
def test_a_json_file_of_the_wrong_shape_is_one_error_line_naming_it(fresh, capsys, name, text, says):
    folder = fresh("qwen3")
    (folder / name).write_text(text)
    assert says in _error_line(folder, capsys)


def test_vocab_json_that_is_not_an_object(fresh, capsys):
    folder = fresh("qwen3")
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.json").write_text("[1]")
    assert "vocab.json" in _error_line(folder, capsys)


def test_a_chat_template_that_is_not_utf8_names_the_file(fresh, capsys):
    folder = fresh("qwen3")
    (folder / "chat_template.jinja").write_bytes(b"\xff\xfe{{ x }}")
    assert "chat_template.jinja" in _error_line(folder, capsys)


@pytest.mark.parametrize("architectures", ["Qwen3ForCausalLM", [5], [["Qwen3ForCausalLM"]]])
def test_architectures_that_is_not_a_list_of_names(fresh, capsys, architectures):
    """A string would otherwise be read letter by letter ('architecture Q is not supported')."""
    folder = fresh("qwen3")
    b.edit_json(folder / "config.json", architectures=architectures)
    err = _error_line(folder, capsys)
    assert "config.json: 'architectures' must be a non-empty list of class names" in err


def test_a_negative_dimension_in_a_safetensors_header(fresh, capsys):
    folder = fresh("qwen3")
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [-1, header[name]["shape"][-1]]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length :])
    assert "negative" in _error_line(folder, capsys)


@pytest.mark.parametrize(
    "changes",
    [{"vocab_size": 10**12}, {"max_position_embeddings": -5}, {"rope_theta": "x"}],  # rope_theta: was exit 0
)
def test_a_config_the_engine_cannot_build_is_a_finding(fresh, capsys, changes):
    folder = fresh("qwen3")
    b.edit_json(folder / "config.json", **changes)
    code = main(["inspect", str(folder), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert "model.config_invalid" in {f["id"] for f in doc["findings"]}


def test_rope_scaling_that_is_not_an_object_is_a_finding(fresh, capsys):
    folder = fresh("qwen3")
    b.edit_json(folder / "config.json", rope_scaling=[1])
    code = main(["inspect", str(folder), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert "rope.unsupported" in {f["id"] for f in doc["findings"]}


def test_a_layer_count_far_beyond_the_weights_is_reported_without_building_it(fresh):
    """num_hidden_layers 1,000,000 had the meta model built layer by layer (still running after 300 s)."""
    from model_optimizer.model.inspect.inspector import inspect_checkpoint

    folder = fresh()
    b.edit_json(folder / "config.json", num_hidden_layers=1_000_000)
    report = inspect_checkpoint(folder)
    finding = {f.id: f for f in report.findings}["model.config_invalid"]
    assert "num_hidden_layers is 1,000,000, but the weights hold 2 layers" in finding.title
    assert report.exit_code == 1
