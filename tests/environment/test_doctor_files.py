"""Snapshot files given to `mopt doctor`: a wrong path or a wrong file is one clear line, exit code 2."""

from __future__ import annotations

import pytest

from model_optimizer.cli.doctor import main


@pytest.mark.parametrize("content,message", [
    (b"{", "is not valid JSON"),
    (b"\xff\xfe", "is not valid JSON: not UTF-8 text"),
    (b"[1, 2]", "not a doctor snapshot"),
    (b'{"probes": {"torch": {"ok": true, "data": "x"}}}', "probe 'torch' must be an object whose 'data' is an object"),
    (b'{"probes": {"system": "x"}}', "probe 'system' must be an object"),
])  # fmt: skip
def test_a_snapshot_that_is_not_one_is_named(tmp_path, capsys, content, message):
    path = tmp_path / "snap.json"
    path.write_bytes(content)
    assert main(["--snapshot", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err


def test_a_snapshot_path_that_is_a_folder_is_named(tmp_path, capsys):
    assert main(["--snapshot", str(tmp_path)]) == 2
    assert f"--snapshot {tmp_path} is a folder" in capsys.readouterr().err


def test_save_snapshot_to_an_impossible_path_fails_before_probing(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert main(["--save-snapshot", str(a_file / "snap.json")]) == 2
    assert f"is inside {a_file}, which is a file" in capsys.readouterr().err
    assert main(["--save-snapshot", str(tmp_path)]) == 2
    assert f"--save-snapshot {tmp_path} is a folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--snapshot", ""], "--snapshot is empty"),
        (["--save-snapshot", " "], "--save-snapshot is empty"),
        (["--bench-device", "1"], "add --bench"),
    ],
)
def test_flags_that_would_be_ignored_are_refused_before_probing(capsys, argv, message):
    """An empty --snapshot probed this machine instead; --bench-device without --bench measured nothing."""
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_save_snapshot_through_a_symlink_writes_its_target_and_keeps_the_link_and_mode(tmp_path, capsys):
    """The link was replaced by a regular file (0644 whatever the old file's mode), the target left stale."""
    import json
    import os
    import stat

    from doctor_edits import CPU_SNAPSHOT

    target = tmp_path / "kept" / "snap.json"
    target.parent.mkdir()
    target.write_text("{}")
    target.chmod(0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert main(["--snapshot", CPU_SNAPSHOT, "--save-snapshot", str(link), "--json"]) in (0, 1)
    capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["probes"] and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_save_snapshot_to_a_socket_is_refused_before_probing(tmp_path, capsys):
    import socket

    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        assert main(["--save-snapshot", str(path)]) == 2
    finally:
        server.close()
    assert f"--save-snapshot {path} is a socket" in capsys.readouterr().err
