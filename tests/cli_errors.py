"""The one line a `mopt` command prints for bad input, checked the same way by every bad-input test."""

from __future__ import annotations

from model_optimizer.cli.main import main


def error_line(argv: list[str], capsys) -> str:  # noqa: ANN001 - pytest's capsys fixture
    """Run `mopt ARGV` in process: exit code 2, no traceback, and the last line of stderr (before it,
    only what building a session fixture printed) is `mopt CMD: error: ...`; that line."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err, err
    line = err.splitlines()[-1]
    assert line.startswith(f"mopt {argv[0]}: error: "), err
    return line
