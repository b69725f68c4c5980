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
