"""`mopt deploy --output` never destroys a file it did not write: a folder of the user's is refused, a render
replaces only the files its last render listed, and a render that cannot finish leaves no temporary file
and nothing half-written."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.deploy import output
from model_optimizer.optimizer.deploy.output import MANIFEST, project_root

DOCKER = ["deploy", "--target", "docker", "--kernels-for", "none", "--driver", "570.133.20"]


def _state(folder: Path) -> dict[str, str | None]:
    """Relative path -> text (None for a folder) of everything under `folder`."""
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_text(errors="replace")
        for p in folder.rglob("*")
    }


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mopt deploy: error: "), err
    return err


def test_a_folder_of_the_users_is_refused_and_left_as_it_was(tmp_path, capsys, monkeypatch):
    """`--output .` in a project holding src/, README.md and a Dockerfile replaced src/ whole and overwrote
    both files (exit 0)."""
    project = tmp_path / "project"
    (project / "src" / "myapp").mkdir(parents=True)
    (project / "src" / "myapp" / "main.py").write_text("print('mine')\n")
    (project / "README.md").write_text("# My project\n")
    (project / "Dockerfile").write_text("FROM python:3.12\n")
    before = _state(project)
    monkeypatch.chdir(project)
    for engine in ("mopt", "vllm"):
        assert main([*DOCKER, "--engine", engine, "--output", "."]) == 2
        err = _one_error(capsys)
        assert "holds files mopt deploy did not write (Dockerfile, README.md, src)" in err
        assert _state(project) == before


def test_an_output_folder_inside_the_copied_source_is_refused(capsys):
    """`--output model_optimizer/out` copied the package into itself, hundreds of MB of nested folders."""
    inside = project_root() / "model_optimizer" / f"deploy-test-{uuid.uuid4().hex}"
    try:
        assert main([*DOCKER, "--output", str(inside)]) == 2
        assert f"is inside {project_root() / 'model_optimizer'}, which the image's copy" in _one_error(capsys)
        assert not inside.exists()
    finally:
        if inside.exists():
            shutil.rmtree(inside)


def test_a_render_over_its_own_keeps_the_users_additions(tmp_path, capsys):
    """Compose over k8s removes the k8s files deploy wrote and keeps the user's .env and own k8s/*.yaml."""
    out = tmp_path / "deploy"
    k8s = ["deploy", "--target", "k8s", "--engine", "vllm", "--driver", "570.133.20", "--output", str(out)]
    assert main(k8s) == 0
    (out / ".env").write_text("MOPT_API_KEY=sk-mine\n")
    (out / "k8s" / "ingress.yaml").write_text("kind: Ingress\n")
    assert main([*k8s[:2], "compose", *k8s[3:]]) == 0
    assert (out / ".env").read_text() == "MOPT_API_KEY=sk-mine\n"
    assert _state(out / "k8s") == {"ingress.yaml": "kind: Ingress\n"}  # deployment.yaml, setup/ ... gone
    assert (out / "docker-compose.yml").is_file()
    assert "docker-compose.yml" in json.loads((out / MANIFEST).read_text())


def test_a_file_of_the_users_where_a_render_writes_is_refused(tmp_path, capsys):
    """A docker render, then the user's own docker-compose.yml: a compose render must not replace it."""
    out = tmp_path / "deploy"
    assert main([*DOCKER, "--engine", "vllm", "--output", str(out)]) == 0
    capsys.readouterr()  # its report, and the warning that driver 570 is older than vLLM's image needs
    (out / "docker-compose.yml").write_text("services: {mine: {image: x}}\n")
    before = _state(out)
    assert main([*DOCKER[:2], "compose", *DOCKER[3:], "--engine", "vllm", "--output", str(out)]) == 2
    assert f"{out / 'docker-compose.yml'} was not written by mopt deploy" in _one_error(capsys)
    assert _state(out) == before


def test_a_manifest_that_is_no_list_of_files_is_refused(tmp_path, capsys):
    out = tmp_path / "deploy"
    out.mkdir()
    (out / MANIFEST).write_text('{"src": 1}')
    assert main([*DOCKER, "--engine", "vllm", "--output", str(out)]) == 2
    assert "is not the list of files mopt deploy writes" in _one_error(capsys)
    assert _state(out) == {MANIFEST: '{"src": 1}'}


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda out: (out / "README.md").mkdir(), "README.md is a folder where mopt deploy writes a file"),
        (lambda out: (out / "prometheus").write_text("x"), "prometheus is not a folder, and mopt deploy writes"),
    ],
    ids=["folder-named-README.md", "file-named-prometheus"],
)
def test_a_conflict_is_found_before_anything_is_written(tmp_path, capsys, make, message):
    """A folder named README.md left `.README.md.xxxx.tmp`, a new Dockerfile and no src/ behind (exit 2); a
    file named prometheus gave a bare `[Errno 17] File exists: 'prometheus'`."""
    out = tmp_path / "deploy"
    assert main([*DOCKER, "--engine", "vllm", "--output", str(out)]) == 0
    capsys.readouterr()  # its report, and the warning that driver 570 is older than vLLM's image needs
    (out / "README.md").unlink()
    make(out)
    before = _state(out)
    compose = [*DOCKER[:2], "compose", *DOCKER[3:], "--engine", "vllm", "--max-num-seqs", "7", "--output", str(out)]
    assert main(compose) == 2
    assert message in _one_error(capsys)
    assert _state(out) == before  # the old Dockerfile, no temporary file, nothing new


def test_a_render_that_fails_part_way_leaves_no_temporary_file_and_the_next_one_finishes(tmp_path, capsys, monkeypatch):
    """A write error (a full disk) on README.md, the last file: no temporary file stays, a folder the render
    made goes again, and in a folder rendered before, the files written so far are deploy's own to replace."""
    out = tmp_path / "deploy"
    real_replace = output.os.replace

    def full_disk(src, dst):
        if Path(dst).name == "README.md":
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    compose = [*DOCKER[:2], "compose", *DOCKER[3:], "--engine", "vllm", "--output", str(out)]
    monkeypatch.setattr(output.os, "replace", full_disk)
    assert main(compose) == 2
    assert f"writing {out / 'README.md'}: No space left on device" in _one_error(capsys)
    assert not out.exists()

    monkeypatch.setattr(output.os, "replace", real_replace)
    assert main([*DOCKER, "--engine", "vllm", "--output", str(out)]) == 0
    monkeypatch.setattr(output.os, "replace", full_disk)
    assert main(compose) == 2
    capsys.readouterr()
    assert (out / "docker-compose.yml").is_file()  # written before README.md failed
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    monkeypatch.setattr(output.os, "replace", real_replace)
    assert main(compose) == 0, capsys.readouterr().err
    assert "Deployment of" in (out / "README.md").read_text()
