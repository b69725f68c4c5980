"""`mopt`'s parser must not import torch or transformers: `mopt --help` and a misspelt command build
the full parser, and each command builds its own, so a heavy import there is paid by `mopt inspect`,
`mopt bench` and `mopt top` too (seconds of torch import on each call). Checked in a fresh
interpreter, where sys.modules shows exactly what parser construction pulled in."""

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


def test_a_command_builds_only_its_own_parser():
    """`mopt serve` spawns its engine right after parsing: the other commands' config modules (the bench
    client's httpx, numpy, pydantic) are not imported first."""
    loaded = _loaded_after(
        "import model_optimizer.cli.main as m\n"
        "p = m.build_parser(['--debug', 'serve', '--model', 'x'])\n"
        "assert set(p._subparsers._group_actions[0].choices) == {'serve'}\n"
        "assert p.parse_args(['--debug', 'serve', '--model', 'x']).handler.__module__ == 'model_optimizer.cli.serve'"
    )
    assert not loaded & {"httpx", "numpy", "pydantic", "rich"}, sorted(loaded & {"httpx", "numpy", "pydantic", "rich"})


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["compile-cache", "path"], "compile_cache"),
        (["--debug", "export-onnx"], "export_onnx"),
        (["--help", "serve"], None),  # top-level help lists every command
        (["--version"], None),
        (["servee"], None),  # argparse's error lists every command
        (["main"], None),
        ([], None),
    ],
)
def test_command_of_names_the_module_or_asks_for_every_parser(argv, command):
    from model_optimizer.cli.main import command_of

    assert command_of(argv) == command


def test_a_misspelt_command_is_refused_with_the_full_list(capsys):
    from model_optimizer.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["servee"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'servee'" in err and "'tune'" in err and "'bench'" in err


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
