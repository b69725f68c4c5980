"""JSON and JSONL reading shared by `mopt generate`, `mopt bench` and `mopt embed`."""

import os
import threading

import pytest

from model_optimizer.common.fileio import input_chunks, jsonl_values, read_input, read_json, text_lines


def test_jsonl_values_skip_blank_lines_and_name_the_bad_one():
    lines = ['{"a": 1}', "", "   ", '"text"', "[1, 2]"]
    assert list(jsonl_values(lines, "in.jsonl")) == [(1, {"a": 1}), (4, "text"), (5, [1, 2])]
    with pytest.raises(ValueError, match=r"in.jsonl:3: not JSON \(Expecting property name"):
        list(jsonl_values(['{"a": 1}', "", "{oops"], "in.jsonl"))


def test_text_lines_joins_lines_that_cross_chunks(tmp_path, monkeypatch):
    import model_optimizer.common.fileio as fileio

    data = "a\r\nbé\n" + "x" * 50 + "\n\nlast"
    path = tmp_path / "in.jsonl"
    path.write_text(data, encoding="utf-8")
    assert b"".join(input_chunks(path, size=3)) == data.encode()
    real = fileio.input_chunks
    monkeypatch.setattr(fileio, "input_chunks", lambda p: real(p, size=3))  # é split between two chunks
    assert list(text_lines(path)) == ["a\r\n", "bé\n", "x" * 50 + "\n", "\n", "last"]


def test_a_pipe_is_read_to_its_end(tmp_path):
    fifo = tmp_path / "prompts.fifo"
    os.mkfifo(fifo)
    pieces = [b'{"prompt": "a"}\n', b'{"prompt": ', b'"b"}\n']

    def write():
        with open(fifo, "wb", buffering=0) as f:
            for piece in pieces:
                f.write(piece)

    writer = threading.Thread(target=write, daemon=True)  # daemon: a failing read must not hang the run
    writer.start()
    assert read_input(fifo) == b"".join(pieces)
    writer.join()


def test_read_json_names_the_file(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"x": [1]}')
    bad.write_text("{")
    assert read_json(good) == {"x": [1]}
    with pytest.raises(ValueError, match=r"bad.json is not valid JSON"):
        read_json(bad)


def test_read_json_names_a_file_that_is_not_text(tmp_path):
    binary = tmp_path / "config.json"
    binary.write_bytes(b"\x00\xff\xfe garbage \x80")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON: not UTF-8 text"):
        read_json(binary)


def _modes(folder):
    import os
    import stat

    return {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in [folder, *folder.rglob("*")]}


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_published_folders_have_the_modes_the_umask_gives(tmp_path, umask):
    import os

    from model_optimizer.common.fileio import publish_dir, staging_dir

    target = tmp_path / "model"
    saved = os.umask(umask)
    try:
        tmp = staging_dir(target)
        (tmp / "sub").mkdir(mode=0o700)
        private = tmp / "sub" / "model.safetensors"
        private.write_bytes(b"x")
        private.chmod(0o600)  # as the safetensors writer leaves its file
        publish_dir(tmp, target)
    finally:
        os.umask(saved)
    modes = _modes(target)
    assert modes == {"model": 0o777 & ~umask, "sub": 0o777 & ~umask, "model.safetensors": 0o666 & ~umask}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
