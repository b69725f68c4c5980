"""`mopt deploy --driver` takes a driver version; anything else is one error line and exit code 2, not a
version compared digit by digit (`x.y` was "older than 560.28.03", `570.abc` and `` were accepted)."""

from __future__ import annotations

import pytest

from model_optimizer.cli.main import main


@pytest.mark.parametrize("driver", ["x.y", "", "570.abc", "570.133.20.1"])
def test_a_driver_that_is_no_version_is_refused(tmp_path, capsys, driver):
    out = tmp_path / "deploy"
    assert main(["deploy", "--target", "docker", "--driver", driver, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"mopt deploy: error: driver must be a version such as 570.133.20, got {driver!r}"
    assert not out.exists()


@pytest.mark.parametrize("driver", ["570.133.20", "580"])
def test_driver_versions_still_render(tmp_path, capsys, driver):
    out = tmp_path / "deploy"
    assert (
        main(["deploy", "--target", "docker", "--kernels-for", "none", "--driver", driver, "--output", str(out)]) == 0
    )
    assert (out / "Dockerfile").is_file()


def test_output_folders_the_files_must_not_go_to_are_refused(tmp_path, capsys, tiny_model):
    model = tiny_model("qwen3")
    card = (model / "README.md").read_text() if (model / "README.md").exists() else None
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    capsys.readouterr()  # building the tiny model writes progress bars
    for output, message in [
        ("", "--output is empty; give a folder"),  # wrote 11 files into the current folder
        (str(a_file), f"--output {a_file} is a file; give a folder"),  # was "[Errno 17] File exists"
        (str(model), f"--output {model} is the model folder"),  # README.md would replace the model card
        (str(model / "deploy"), f"--output {model / 'deploy'} is inside the model folder {model}"),
    ]:
        assert main(["deploy", "--model", str(model), "--kernels-for", "none", "--output", output]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"mopt deploy: error: {message}") and len(err.strip().splitlines()) == 1, err
    assert not (model / "Dockerfile").exists() and not (model / "deploy").exists()
    assert ((model / "README.md").read_text() if (model / "README.md").exists() else None) == card


def test_port_0_is_refused_not_rendered_as_8000(tmp_path, capsys):
    out = tmp_path / "deploy"
    assert main(["deploy", "--target", "docker", "--kernels-for", "none", "--port", "0", "--output", str(out)]) == 2
    assert "--port 0 lets the OS pick a new port at each start" in capsys.readouterr().err
    assert not out.exists()


def test_a_render_replaces_the_previous_render_of_the_folder(tmp_path, capsys):
    """A docker render over a compose one left docker-compose.yml (running the old settings), grafana/ and
    prometheus/ behind. The files it did not write (a Compose .env) stay."""
    out = tmp_path / "deploy"
    assert main(["deploy", "--target", "compose", "--kernels-for", "none", "--output", str(out)]) == 0
    assert (out / "docker-compose.yml").is_file() and (out / "grafana").is_dir()
    (out / ".env").write_text("MOPT_API_KEY=sk-mine\n")
    assert main(["deploy", "--target", "docker", "--engine", "vllm", "--output", str(out)]) == 0
    left = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    assert left == {".dockerignore", "Dockerfile", "README.md", "settings.yaml", ".env", ".mopt-deploy-files.json"}
    assert (out / ".env").read_text() == "MOPT_API_KEY=sk-mine\n"
