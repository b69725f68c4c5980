"""`mopt compile-cache` with a target or model it cannot build for: one line `mopt compile-cache: error:
...` and exit code 2, found before any build worker starts (not each worker's traceback under a
RuntimeError, exit code 1) and before the output folder is made."""

from __future__ import annotations

import json

import pytest

from model_optimizer.assets import reference_model_path
from tests.cli_errors import error_line


@pytest.mark.parametrize("arch", ["-1.0", "0.5", "abc", "9"])
def test_an_arch_that_is_no_compute_capability_is_refused(capsys, arch):
    line = error_line(["compile-cache", "path", "--arch", arch], capsys)
    assert "--arch must be a compute capability such as 9.0" in line


def test_build_without_a_model_is_one_error_and_makes_no_folder(tmp_path, capsys):
    out = tmp_path / "cache"
    line = error_line(["compile-cache", "build", "--output", str(out)], capsys)
    assert "compile-cache build needs --model" in line
    assert not out.exists()


def test_build_of_a_missing_model_folder_is_one_error(tmp_path, capsys):
    line = error_line(
        ["compile-cache", "build", "--model", str(tmp_path / "nope"), "--output", str(tmp_path / "c")], capsys
    )
    assert "does not exist" in line


def test_build_of_a_folder_without_config_json_is_one_error(tmp_path, capsys):
    line = error_line(["compile-cache", "build", "--model", str(tmp_path), "--output", str(tmp_path / "c")], capsys)
    assert "config.json not found" in line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-sms", "0"], "--num-sms must be a positive integer"),
        (["--tensor-parallel-size", "2"], "tensor_parallel_size 1"),
    ],
)
def test_build_flags_no_worker_could_use_are_one_error(tmp_path, capsys, flags, message):
    argv = ["compile-cache", "build", "--model", str(reference_model_path()), "--output", str(tmp_path / "c"), *flags]
    assert message in error_line(argv, capsys)


def test_an_output_that_is_a_file_is_one_error(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    argv = ["compile-cache", "build", "--model", str(reference_model_path()), "--output", str(tmp_path / "file")]
    assert "is a file; give a folder" in error_line(argv, capsys)


@pytest.mark.parametrize("action", ["build", "path"])
def test_an_empty_output_is_refused_not_read_as_the_default_cache(tmp_path, capsys, action):
    """`--output ''` was taken as unset: the build filled the engine's own cache."""
    argv = ["compile-cache", action, "--model", str(reference_model_path()), "--output", ""]
    assert "--output is empty" in error_line(argv, capsys)


def test_an_output_under_a_file_is_named_not_a_raw_errno(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    argv = ["compile-cache", "build", "--model", str(reference_model_path()), "--output", str(tmp_path / "file" / "x")]
    line = error_line(argv, capsys)
    assert f"--output {tmp_path / 'file' / 'x'} is inside {tmp_path / 'file'}, which is a file" in line


def test_jobs_below_one_names_the_flag(tmp_path, capsys):
    argv = ["compile-cache", "build", "--model", str(reference_model_path()), "--output", str(tmp_path / "c")]
    assert "--jobs must be at least 1, got 0" in error_line([*argv, "--jobs", "0"], capsys)
    assert not (tmp_path / "c").exists()


def test_a_model_the_build_refuses_leaves_no_folder_it_made(tmp_path, capsys):
    """An architecture that config.json names but the engine does not build passes the checks above and is
    refused by the build itself: the output folder it had made by then (and that folder's parents) stayed
    behind, empty. A folder that was there before is kept."""
    model = tmp_path / "model"
    model.mkdir()
    config = json.loads((reference_model_path() / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["FooForCausalLM"]}))
    kept = tmp_path / "kept"
    kept.mkdir()
    for output in (tmp_path / "new" / "cache", kept):
        line = error_line(["compile-cache", "build", "--model", str(model), "--output", str(output)], capsys)
        assert "'FooForCausalLM' is not supported" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "model"] and not any(kept.iterdir())
