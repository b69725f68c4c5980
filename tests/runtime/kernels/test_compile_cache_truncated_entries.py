"""A truncated file in a compile-cache entry (an interrupted copy of a shipped cache) is a miss, compiled
anew with a warning, not a kernel that fails its first launch (kernels/compile_cache.py: the index our
manager writes records each file's size, and a lookup compares them).

The end-to-end check (a build that finds a cut-short .cubin compiles it again) is in
test_compile_cache_review_fixes.py, beside the other damaged entries."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from model_optimizer.runtime.kernels import compile_cache
from tests.runtime.kernels.test_compile_cache_review_fixes import _group, _put_entry

KEY = "K" * 52
CUBIN = b"\x7fELF" + bytes(range(256)) * 4


def _put_ours(folder: Path, name: str = "kern") -> Path:
    """One entry as Triton's compile writes it through our manager (the files, then the group index)."""
    manager = _group(folder, KEY)
    group = {
        f"{name}.json": manager.put(json.dumps({"name": name}), f"{name}.json", binary=False),
        f"{name}.cubin": manager.put(CUBIN, f"{name}.cubin"),
        f"{name}.ptx": manager.put(".version 8.0\n" * 40, f"{name}.ptx", binary=False),
    }
    manager.put_group(f"{name}.json", group)
    return folder / KEY


@pytest.fixture(autouse=True)
def _no_read_dirs(monkeypatch):
    pytest.importorskip("triton.runtime.cache")
    monkeypatch.delenv(compile_cache.READ_DIRS_ENV, raising=False)


def test_our_index_records_sizes_and_an_intact_entry_is_a_hit(tmp_path):
    entry = _put_ours(tmp_path / "A")
    index = json.loads((entry / "__grp__kern.json").read_text())
    assert index["sizes"]["kern.cubin"] == len(CUBIN)
    assert set(index["sizes"]) == set(index["child_paths"])
    assert _group(tmp_path / "A").get_group("kern.json")["kern.cubin"] == str(entry / "kern.cubin")
    stock = _group(tmp_path / "A", manager=None).get_group("kern.json")  # Triton's own manager still reads it
    assert stock["kern.cubin"] == str(entry / "kern.cubin")


@pytest.mark.parametrize("damaged", ["kern.cubin", "kern.ptx"])
@pytest.mark.parametrize("cut", [0, 1, 100])
def test_a_truncated_file_is_a_miss_with_a_warning(tmp_path, caplog, damaged, cut):
    entry = _put_ours(tmp_path / "A")
    path = entry / damaged
    path.write_bytes(path.read_bytes()[:cut])
    with caplog.at_level(logging.WARNING, logger=compile_cache.__name__):
        assert _group(tmp_path / "A").get_group("kern.json") is None
    assert f"{damaged} has {cut} bytes" in caplog.text and "compiling it anew" in caplog.text


def test_a_longer_file_is_a_miss_too(tmp_path):
    """Two copies interleaved, or a file appended to: the size recorded is the size written."""
    entry = _put_ours(tmp_path / "A")
    with open(entry / "kern.cubin", "ab") as file:
        file.write(b"\0")
    assert _group(tmp_path / "A").get_group("kern.json") is None


def test_a_truncated_shipped_entry_falls_through_to_a_compile(tmp_path, monkeypatch):
    """Read-only shipped folder (MOPT_TRITON_READ_DIRS) with a cut-short .cubin, nothing in the writable
    folder: the lookup is a miss (Triton compiles into the writable folder), not the shipped file."""
    _put_ours(tmp_path / "shipped")
    (tmp_path / "shipped" / KEY / "kern.cubin").write_bytes(CUBIN[:10])
    monkeypatch.setenv(compile_cache.READ_DIRS_ENV, str(tmp_path / "shipped"))
    assert _group(tmp_path / "own").get_group("kern.json") is None
    _put_ours(tmp_path / "own")  # what the compile then writes
    assert _group(tmp_path / "own").get_group("kern.json")["kern.cubin"] == str(tmp_path / "own" / KEY / "kern.cubin")


def test_an_entry_indexed_without_sizes_is_checked_for_empty_files(tmp_path):
    """Entries written by Triton's own manager (an older build) record no sizes: an empty file is still a miss."""
    _put_entry(tmp_path / "A")
    assert _group(tmp_path / "A").get_group("kern.json") is not None
    (tmp_path / "A" / KEY / "kern.cubin").write_bytes(b"")
    assert _group(tmp_path / "A").get_group("kern.json") is None


def test_a_lookup_opens_only_the_index_and_the_metadata(tmp_path, monkeypatch):
    """Cheap: sizes come from stat; the binaries are not read by the check."""
    _put_ours(tmp_path / "A")
    manager = _group(tmp_path / "A")
    opened = []
    real_open = open

    def recording_open(path, *args, **kwargs):
        opened.append(os.path.basename(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", recording_open)
    assert manager.get_group("kern.json") is not None
    assert sorted(opened) == ["__grp__kern.json", "kern.json"]
