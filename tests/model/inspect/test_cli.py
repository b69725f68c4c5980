"""`mopt inspect` as users run it: JSON on stdout, tables on the terminal, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from model_optimizer.cli.main import main
from tests.model.inspect import broken as b


def test_json_document_and_exit_code_1_on_error(fresh, capsys):
    folder = fresh("qwen3")
    b.edit_tensors(folder, b.add_prefix("_orig_mod."))
    code = main(["inspect", str(folder), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["exit_code"] == 1 and doc["status"] == "error"
    assert doc["load_check"]["as_is"]["loads"] is False and doc["load_check"]["after_fix"]["loads"] is True
    ids = {f["id"]: f for f in doc["findings"]}
    assert ids["leftovers.prefix"]["details"]["prefixes"] == {"_orig_mod.": doc["census"]["total"]["tensors"]}
    assert doc["model"]["architecture"] == "Qwen3ForCausalLM"


def test_clean_checkpoint_exits_0_with_a_table(fresh, capsys):
    code = main(["inspect", str(fresh("qwen3"))])
    out = capsys.readouterr().out
    assert code == 0
    assert "parameters by module kind and dtype" in out and "All checks passed" in out


def test_warnings_alone_exit_0(fresh, capsys):
    folder = fresh("qwen3")
    (folder / "chat_template.jinja").unlink()
    assert main(["inspect", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "warn"


@pytest.mark.slow
def test_bad_input_is_a_message_not_a_traceback(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "inspect", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "config.json is not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_corrupt_safetensors_header_is_named(fresh, capsys):
    folder = fresh("qwen3")
    (folder / "model.safetensors").write_bytes(b"\xff" * 16)
    assert main(["inspect", str(folder)]) == 2
    assert "model.safetensors is not a safetensors file" in capsys.readouterr().err


def _cut_short(folder) -> int:
    """Cut the weights file to a third, its header intact (an interrupted download); returns its new size."""
    weights = folder / "model.safetensors"
    size = weights.stat().st_size // 3
    with weights.open("r+b") as f:
        f.truncate(size)
    return size


def test_a_weights_file_cut_short_is_an_error_as_the_engine_says(fresh, capsys):
    """generate, quantize and serve refuse it at load; inspect must not call it loadable."""
    folder = fresh("qwen3")
    size = _cut_short(folder)
    assert main(["inspect", str(folder), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    truncated = [f for f in doc["findings"] if f["id"] == "weights.truncated"]
    assert doc["status"] == "error" and len(truncated) == 1
    assert f"the file has {size}" in truncated[0]["title"] and "is truncated" in truncated[0]["title"]


def test_fix_refuses_a_weights_file_cut_short_in_one_line(fresh, tmp_path, capsys):
    folder = fresh("qwen3")
    _cut_short(folder)
    out = tmp_path / "clean"
    assert main(["inspect", str(folder), "--fix", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--fix cannot clean" in err and "is truncated" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".clean.*"))  # nothing half-written


def _widen_first_span(folder) -> str:
    """Move the end of the header's first byte range 4 bytes on, the header's length kept; returns the name."""
    import re

    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    length = int.from_bytes(data[:8], "little")
    head = data[8 : 8 + length].decode()
    found = re.search(r'"([^"]+)":\{[^{}]*"data_offsets":\[(\d+),(\d+)\]', head)
    old = f"[{found.group(2)},{found.group(3)}]"
    new = f"[{found.group(2)},{int(found.group(3)) + 4}]"
    if len(new) != len(old):
        new = f"[{found.group(2)},{int(found.group(3)) - 4}]"
    data[8 : 8 + length] = head.replace(old, new, 1).encode()
    weights.write_bytes(bytes(data))
    return found.group(1)


def test_a_byte_range_that_disagrees_with_its_tensor_is_an_error_as_the_engine_says(fresh, tmp_path, capsys):
    """inspect passed it (exit 0) and --fix failed with safetensors' traceback, while generate refused the
    folder with "invalid shape, data type, or offset": all three now name the file and the tensor."""
    folder = fresh("qwen3")
    name = _widen_first_span(folder)
    assert main(["inspect", str(folder), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    [finding] = [f for f in doc["findings"] if f["id"] == "weights.truncated"]
    assert f"tensor {name!r} spans" in finding["title"]
    assert main(["inspect", str(folder), "--fix", str(tmp_path / "clean")]) == 2
    err = capsys.readouterr().err
    assert "--fix cannot clean" in err and f"tensor {name!r} spans" in err and "Traceback" not in err
    assert main(["generate", "--model", str(folder), "--prompt", "hi", "--max-tokens", "1"]) == 2
    assert f"tensor {name!r} spans" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [(["--seq-len", "0"], "seq_len must be in 1..max_model_len"), (["--gpu", ""], "--gpu is empty")],
)
def test_zero_or_empty_plan_flags_are_refused_not_read_as_unset(fresh, capsys, flags, message):
    """--seq-len 0 planned for the default length and --gpu '' planned for no GPU, each without a word."""
    assert main(["inspect", str(fresh("qwen3")), *flags]) == 2
    assert message in capsys.readouterr().err
