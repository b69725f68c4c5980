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
