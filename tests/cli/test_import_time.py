"""`mopt`'s parser must not import torch or transformers: every command, `mopt --help` included,
builds the full parser first, so a heavy import there is paid by `mopt inspect`, `mopt bench` and
`mopt top` too (seconds of torch import on each call). Checked in a fresh interpreter, where
sys.modules shows exactly what parser construction pulled in."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "fastapi", "uvicorn", "sklearn", "optuna")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_building_the_full_parser_imports_no_heavy_library():
    loaded = _loaded_after(
        "import model_optimizer.cli.main as m\n"
        "p = m.build_parser()\n"
        "assert len(p._subparsers._group_actions[0].choices) >= 10, 'every command registered'"
    )
    assert "model_optimizer" in loaded
    assert not loaded & set(HEAVY), f"parser construction imported {sorted(loaded & set(HEAVY))}"


@pytest.mark.slow
def test_mopt_help_of_each_command_stays_torch_free():
    loaded = _loaded_after(
        "import contextlib, io\n"
        "import model_optimizer.cli.main as m\n"
        "for cmd in ('serve', 'generate', 'bench', 'top', 'inspect', 'embed', 'tune', 'deploy'):\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        m.main([cmd, '--help'])"
    )
    assert not loaded & {"torch", "transformers"}, sorted(loaded & {"torch", "transformers"})


@pytest.mark.slow
def test_embed_package_keeps_its_public_names_without_importing_torch_up_front():
    loaded = _loaded_after("from model_optimizer.runtime.embed import EmbedConfig")
    assert "torch" not in loaded
    loaded = _loaded_after(
        "from model_optimizer.runtime.embed import Embedder, EmbedOutput\nassert Embedder.__name__ == 'Embedder'"
    )
    assert "torch" in loaded  # the lazy names still resolve to the real classes


@pytest.mark.slow
def test_the_model_runner_does_not_import_the_doctor():
    """The engine core imports the model runner at every start; `mopt doctor`'s package (its rules,
    probes and knowledge base, ~0.1 s) is for the CPU path and the doctor, imported where they run."""
    probe = (
        "import sys\nimport model_optimizer.runtime.runner.model_runner\n"
        "print(sorted(m for m in sys.modules if m.startswith('model_optimizer.environment')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
