"""`mopt inspect` on odd and hostile checkpoints: a finding or one error line (exit 2), never a traceback,
never a file outside the folder, never a "loads" for what the engine refuses."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from tests.cli_errors import error_line
from tests.model.inspect import broken as b


def _findings(folder: Path, capsys) -> tuple[int, dict[str, dict]]:
    code = main(["inspect", str(folder), "--json"])
    doc = json.loads(capsys.readouterr().out)
    return code, {f["id"]: f for f in doc["findings"]}


def _edit_header(folder: Path, edit) -> str:
    """Rewrite model.safetensors' header with edit(header, name of its first tensor); returns that name."""
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    name = next(k for k in header if k.endswith("q_proj.weight"))
    edit(header, name)
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length :])
    return name


def _split_in_two(folder: Path) -> dict[str, str]:
    """model.safetensors as two shards and their index (as save_pretrained shards); returns the weight map."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[:4], "model-00002-of-00002.safetensors": names[4:]}
    for file, part in halves.items():
        save_file({n: tensors[n] for n in part}, str(folder / file), metadata={"format": "pt"})
    (folder / "model.safetensors").unlink()
    weight_map = {n: file for file, part in halves.items() for n in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return weight_map


def test_a_header_shape_whose_size_overflows_is_a_finding_not_a_traceback(fresh, capsys):
    """[10**12, 10**12]: torch.empty on meta raised RuntimeError out of the loader check (a traceback)."""
    folder = fresh()
    name = _edit_header(folder, lambda h, n: h[n].update(shape=[10**12, 10**12]))
    code, found = _findings(folder, capsys)
    assert code == 1
    assert name in found["weights.truncated"]["title"]  # its byte range does not cover that shape
    assert name in found["weights.shape"]["title"] or name in json.dumps(found["weights.shape"])


@pytest.mark.parametrize("shape", [[64.7, 64], [True, 64], ["64", 64]])
def test_a_header_shape_that_is_not_integers_is_one_error_line(fresh, capsys, shape):
    """int() read 64.7 as 64 and true as 1: a shape the safetensors library refuses passed as valid."""
    folder = fresh()
    _edit_header(folder, lambda h, n: h[n].update(shape=shape))
    assert "shape that is not non-negative integers" in error_line(["inspect", str(folder), "--json"], capsys)


def test_a_header_metadata_that_is_not_an_object_is_one_error_line(fresh, capsys):
    folder = fresh()
    _edit_header(folder, lambda h, n: h.update(__metadata__=[1, 2]))
    assert "__metadata__ is not a JSON object" in error_line(["inspect", str(folder), "--json"], capsys)


@pytest.mark.parametrize("shard", ["../elsewhere/model.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_an_index_naming_a_shard_outside_the_folder_is_refused(fresh, capsys, shard):
    """The index's file names were joined to the folder as given: '/etc/passwd' was opened and read."""
    folder = fresh()
    weight_map = _split_in_two(folder)
    weight_map[next(iter(weight_map))] = shard
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    err = error_line(["inspect", str(folder), "--json"], capsys)
    assert "names shards outside the checkpoint folder" in err and shard in err


def test_a_folder_named_like_a_shard_is_not_read_as_one(fresh, capsys):
    """A directory model.safetensors gave '[Errno 21] Is a directory', naming no rule."""
    folder = fresh()
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").mkdir()
    code, found = _findings(folder, capsys)
    assert code == 1 and "weights.none" in found


def test_an_index_that_disagrees_with_the_shards_is_a_warning(fresh, capsys):
    folder = fresh()
    weight_map = _split_in_two(folder)
    moved = next(n for n, f in weight_map.items() if f.startswith("model-00002"))
    weight_map[moved] = "model-00001-of-00002.safetensors"  # the engine still reads it from shard 2
    weight_map["model.extra.weight"] = "model-00001-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    code, found = _findings(folder, capsys)
    assert code == 0, found
    details = found["weights.index_mismatch"]["details"]
    assert details == {"elsewhere": [moved], "nowhere": ["model.extra.weight"], "unlisted": []}


def test_a_consistent_sharded_index_has_no_mismatch(fresh, capsys):
    folder = fresh()
    _split_in_two(folder)
    code, found = _findings(folder, capsys)
    assert code == 0 and "weights.index_mismatch" not in found


def test_a_tied_config_with_its_own_lm_head_warns_that_it_is_ignored(fresh, capsys):
    """An untied model's lm_head under a tied config: the engine drops it (other logits), inspect said nothing."""
    folder = fresh("qwen3_hd64")
    b.edit_json(folder / "config.json", tie_word_embeddings=True)
    code, found = _findings(folder, capsys)
    assert code == 0
    assert found["weights.tied_lm_head_ignored"]["details"]["tensors"] == ["lm_head.weight"]
    b.edit_tensors(folder, lambda sd: {k: v for k, v in sd.items() if k != "lm_head.weight"})
    assert "weights.tied_lm_head_ignored" not in _findings(folder, capsys)[1]


@pytest.mark.parametrize(
    ("values", "says"),
    [({"temperature": -1}, "temperature"), ({"top_p": 5}, "top_p"), ({"max_new_tokens": -3}, "max_new_tokens")],
)
def test_generation_defaults_the_engine_refuses_are_an_error(fresh, capsys, values, says):
    """The engine stops at start-up on these (generation_defaults.generation_defaults); inspect said the folder loads."""
    from model_optimizer.runtime.generation_defaults import generation_defaults

    folder = fresh()
    b.edit_json(folder / "generation_config.json", **values)
    with pytest.raises(ValueError, match=says):
        generation_defaults(folder)
    code, found = _findings(folder, capsys)
    assert code == 1 and says in found["generation.invalid"]["title"]


@pytest.mark.parametrize(("key", "value"), [("eos_token_id", "2"), ("eos_token_id", [2, True]), ("pad_token_id", 0.0)])
def test_token_ids_that_are_not_integers_are_an_error(fresh, capsys, key, value):
    """The engine adds generation_config.json's eos ids as written (true stops on token 1); the token rules
    dropped them silently, so the folder passed."""
    folder = fresh()
    b.edit_json(folder / "generation_config.json", **{key: value})
    code, found = _findings(folder, capsys)
    assert code == 1
    assert f"generation_config.json: {key}" in found["tokens.invalid_id"]["title"]


def test_a_pickle_only_checkpoint_is_reported_without_unpickling(fresh, capsys, monkeypatch):
    import pickle

    import torch

    folder = fresh()
    (folder / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(2)}, folder / "pytorch_model.bin")

    def refuse(*args, **kwargs):
        raise AssertionError("inspect unpickled a weights file")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    code, found = _findings(folder, capsys)
    assert code == 1 and "pytorch_model.bin" in found["weights.none"]["title"]


def _quantized_folder(src: Path, out: Path, group_size: int) -> Path:
    """What `mopt quantize` writes for `src` in int4 (its rounding and writer, without the accuracy gate)."""
    import torch

    from model_optimizer.model.quantize.job import Progress, QuantizeOptions, round_in_place
    from model_optimizer.model.quantize.writer import save_compressed_tensors
    from model_optimizer.runtime.models.loader import load_model

    model = load_model(src, "float32", torch.device("cpu"))
    round_in_place(model, QuantizeOptions(src, "rtn-int4", out, group_size=group_size), torch.float32, Progress())
    save_compressed_tensors(model, "rtn-int4", group_size, src, out)
    return out


def _set_group_size(node, group_size: int) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "group_size":
                node[key] = group_size
            else:
                _set_group_size(value, group_size)
    elif isinstance(node, list):
        for value in node:
            _set_group_size(value, group_size)


def test_int4_scales_of_another_group_size_than_the_config_are_an_error(quant_model, tmp_path, capsys):
    """Scales written in groups of 64, quantization_config saying 128: the weight_loader only stashes the
    tensors, so inspect said "loads" while the engine refused the layer (weight_scale: expected shape)."""
    import torch

    from model_optimizer.runtime.models.loader import load_model

    folder = _quantized_folder(quant_model("qwen3"), tmp_path / "q", 64)
    code, found = _findings(folder, capsys)
    assert code == 0 and "weights.shape" not in found
    config = json.loads((folder / "config.json").read_text())
    _set_group_size(config["quantization_config"], 128)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="weight_scale: expected shape"):
        load_model(folder, "float32", torch.device("cpu"))
    code, found = _findings(folder, capsys)
    assert code == 1
    assert "weight_scale: expected shape" in json.dumps(found["weights.shape"])


def test_a_long_context_builds_its_rotary_tables_on_meta_with_the_same_sizes(fresh, monkeypatch):
    """10 M positions had the CPU rotary tables take 12.7 GB and 42 s (24 GB, killed, with --gpu); their
    sizes, which the memory plan counts as buffers, are the same on meta."""
    from model_optimizer.model.inspect import consumption

    config = {**json.loads((fresh() / "config.json").read_text()), "max_position_embeddings": 600_000}
    on_meta = consumption.build_meta_model(config)
    monkeypatch.setattr(consumption, "MAX_CPU_ROTARY_BYTES", 1 << 62)
    on_cpu = consumption._cached_meta_model.__wrapped__(json.dumps(config, sort_keys=True), "bfloat16")
    rotary = [b for n, b in on_meta.named_buffers() if n.endswith("rotary.cos")]
    assert rotary and all(b.device.type == "meta" and b.shape[0] == 600_000 for b in rotary)
    assert [(n, b.shape, b.dtype) for n, b in on_meta.named_buffers()] == [
        (n, b.shape, b.dtype) for n, b in on_cpu.named_buffers()
    ]


def test_ten_million_positions_are_inspected_and_planned(fresh, capsys):
    folder = fresh()
    b.edit_json(folder / "config.json", max_position_embeddings=10_000_000)
    assert main(["inspect", str(folder), "--json", "--gpu", "H200", "--max-model-len", "1M"]) == 0
    plan = json.loads(capsys.readouterr().out)["memory_plan"]
    assert plan["max_model_len"] == 1 << 20 and plan["fits"][0]["num_kv_blocks"] > 0


def test_fix_drops_eos_values_that_are_not_token_ids(fresh, tmp_path, capsys):
    """int() in --fix made true token 1 and stopped on 'two' and null with a traceback."""
    folder = fresh()
    b.edit_json(folder / "generation_config.json", eos_token_id=[2, None, 3.5, True, "two"])
    code, found = _findings(folder, capsys)
    assert code == 1 and "--fix" in json.dumps(found["tokens.invalid_id"]["fix"])
    out = tmp_path / "clean"
    assert main(["inspect", str(folder), "--fix", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("dropped values that are not token ids" in note for note in doc["fix"]["notes"])
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 2


def test_a_dtype_that_is_no_safetensors_code_is_named_as_such(fresh, capsys):
    """'Q4' was reported as "integer tensors (Q4) but no quantization_config"."""
    folder = fresh()
    name = _edit_header(folder, lambda h, n: h[n].update(dtype="Q4"))
    code, found = _findings(folder, capsys)
    assert code == 1 and "quant.no_config" not in found
    assert found["weights.unknown_dtype"]["details"] == {"dtypes": ["Q4"], "tensors": [name]}


def test_autoawq_zero_points_of_another_group_size_are_an_error(quant_model, tmp_path, capsys):
    """AutoAWQ's unpacking ran on meta tensors against a CPU torch.arange: a RuntimeError that hid the shape
    check. The converter now runs with its own tensors on meta too, so the engine's refusal shows."""
    import torch
    from safetensors.torch import load_file, save_file

    from model_optimizer.runtime.layers.quantization.quantizers import quantize_int4_codes
    from model_optimizer.runtime.layers.quantization.sources import pack_awq

    src, folder = quant_model("qwen3"), tmp_path / "awq"
    folder.mkdir()
    out = {}
    for name, tensor in load_file(str(src / "model.safetensors")).items():
        if name.endswith("proj.weight"):
            q, scales, zeros = quantize_int4_codes(tensor.float(), 64, torch.float16)
            base = name.removesuffix("weight")
            out[base + "qweight"] = pack_awq(q.T.contiguous())
            out[base + "qzeros"] = pack_awq(zeros.to(torch.int32).T.contiguous())
            out[base + "scales"] = scales.T.contiguous().to(torch.float16)
        else:
            out[name] = tensor
    save_file(out, str(folder / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    awq = {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm", "zero_point": True}
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": awq}))
    assert "weights.shape" not in _findings(folder, capsys)[1]
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": {**awq, "group_size": 128}}))
    code, found = _findings(folder, capsys)
    assert code == 1 and "qzeros: expected shape" in json.dumps(found["weights.shape"])


def _drop_offsets(header: dict, name: str) -> None:
    header[name].pop("data_offsets")


def _overlap(header: dict, name: str) -> None:
    other = next(k for k in header if k.endswith("q_proj.weight") and k != name)
    header[other]["data_offsets"] = header[name]["data_offsets"]  # same size: spans stay right


@pytest.mark.parametrize(
    ("edit", "says"),
    [(_drop_offsets, "has no data_offsets"), (_overlap, "has data_offsets"), (None, "bytes follow the last tensor")],
)
def test_byte_ranges_the_safetensors_library_refuses_are_an_error(fresh, tmp_path, capsys, edit, says):
    """Missing or overlapping data_offsets and bytes past the last tensor: safetensors refuses the file
    ("invalid offset", "file not fully covered"), inspect said it loads and --fix died in a traceback."""
    from safetensors import SafetensorError, safe_open

    folder = fresh("qwen3_hd64")  # its q_proj weights are all of one shape, so _overlap keeps spans right
    if edit is None:
        with (folder / "model.safetensors").open("ab") as f:
            f.write(b"GARBAGE!")
    else:
        _edit_header(folder, edit)
    with pytest.raises(SafetensorError):
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            [f.get_tensor(k) for k in f.keys()]  # noqa: B018 - read them all, as the loader does
    code, found = _findings(folder, capsys)
    assert code == 1 and says in found["weights.bad_offsets"]["title"]
    err = error_line(["inspect", str(folder), "--fix", str(tmp_path / "clean")], capsys)
    assert "--fix cannot clean" in err and says in err and not (tmp_path / "clean").exists()
