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


@pytest.mark.parametrize(
    "line, message",
    [("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"), ("1" * 5000, "JSON that cannot be read")],
    ids=["deep nesting", "5000-digit integer"],
)
def test_jsonl_values_name_the_line_of_json_python_will_not_read(line, message):
    with pytest.raises(ValueError, match=rf"^in.jsonl:2: {message}"):
        list(jsonl_values(['"fine"', line], "in.jsonl"))


def test_atomic_write_writes_a_symlinks_target_and_keeps_the_link(tmp_path):
    from model_optimizer.common.fileio import atomic_write

    real = tmp_path / "results" / "out.jsonl"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    atomic_write(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["out.jsonl"]  # no temporary file left


def test_atomic_write_through_a_dangling_link_creates_its_target(tmp_path):
    from model_optimizer.common.fileio import atomic_write

    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "new" / "target.json")
    atomic_write(link, "{}")
    assert link.is_symlink() and (tmp_path / "new" / "target.json").read_text() == "{}"


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask 022", "umask 077"])
def test_atomic_write_keeps_an_existing_files_permission_bits(tmp_path, umask):
    import stat

    from model_optimizer.common.fileio import atomic_write

    path = tmp_path / "snapshot.json"
    path.write_text("old")
    path.chmod(0o640)
    saved = os.umask(umask)
    try:
        atomic_write(path, "new")
        atomic_write(tmp_path / "fresh.json", "new")
    finally:
        os.umask(saved)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "fresh.json").stat().st_mode) == 0o666 & ~umask
    atomic_write(path, "newer", mode=0o644)  # an explicit mode still wins
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def _read_fifo_in_background(fifo):
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    return reader, got


@pytest.mark.parametrize("through_a_link", [False, True])
def test_atomic_write_streams_into_a_fifo_and_leaves_it_one(tmp_path, through_a_link):
    """A FIFO (like /dev/null or /dev/stdout, which a rename would have replaced with a regular file) is
    written in place."""
    import stat

    from model_optimizer.common.fileio import atomic_write, check_writable_file_path

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    target = fifo
    if through_a_link:
        target = tmp_path / "out.jsonl"
        target.symlink_to(fifo)
    check_writable_file_path(target, "--output")
    reader, got = _read_fifo_in_background(fifo)
    atomic_write(target, '{"a": 1}\n')
    reader.join(timeout=10)
    assert got == [b'{"a": 1}\n']
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert target.is_symlink() == through_a_link
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"out.fifo", target.name})


def test_a_socket_output_is_refused_with_a_clear_line(tmp_path):
    import socket

    from model_optimizer.common.fileio import atomic_write, check_writable_file_path

    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(ValueError, match=r"^--output .*/s is a socket, which mopt does not write; give a file"):
            check_writable_file_path(path, "--output")
        with pytest.raises(ValueError, match="is a socket"):
            atomic_write(path, "x")
    finally:
        server.close()
    assert path.exists() and not path.is_file()  # left as it was


def _as_another_user(folder, call):
    """`call()` run in `folder` with a user's rights, not root's (root writes in any folder): as root, in a
    child that drops to uid/gid 65534 after changing into the folder (so the parents' modes do not
    matter). Returns the ValueError text, or None when the call passed."""
    if os.geteuid() != 0:
        try:
            call()
        except ValueError as exc:
            return str(exc)
        return None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's exit handlers
        message = b""
        try:
            os.chdir(folder)
            os.setgid(65534)
            os.setuid(65534)
            call()
        except ValueError as exc:
            message = str(exc).encode() or b"?"
        except BaseException as exc:  # noqa: BLE001 - any other failure is reported to the parent
            message = f"unexpected {exc!r}".encode()
        os.write(write_end, message)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        message = f.read().decode()
    os.waitpid(pid, 0)
    assert not message.startswith("unexpected"), message
    return message or None


def test_an_existing_file_in_a_folder_that_takes_no_new_file_is_refused_before_the_work(tmp_path):
    """atomic_write replaces a file through a temporary file beside it: a writable file in a read-only
    folder passed the old check (os.access on the file) and failed with EACCES after a whole run."""
    from model_optimizer.common.fileio import check_writable_file_path

    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "out.jsonl").write_text("old")
    (folder / "out.jsonl").chmod(0o666)
    folder.chmod(0o555)
    try:
        message = _as_another_user(folder, lambda: check_writable_file_path("out.jsonl", "--output"))
    finally:
        folder.chmod(0o755)
    assert message is not None and message.startswith("--output out.jsonl: nothing can be written in ."), message


def test_jsonl_values_skip_a_byte_order_mark_before_the_first_line_only():
    assert list(jsonl_values(['\ufeff{"a": 1}', '"b"'], "in.jsonl")) == [(1, {"a": 1}), (2, "b")]
    with pytest.raises(ValueError, match=r"in.jsonl:2: not JSON"):
        list(jsonl_values(['"a"', '\ufeff"b"'], "in.jsonl"))
