"""The output folder of a study: one run at a time, no earlier report overwritten, a study.db that is this study's.

Two runs on one folder wrote one study.db at once: the second marked the first's trial in progress
interrupted and the first crashed telling optuna its result. So a run holds `.tune.lock` (flock, common
fileio.run_lock) from before it opens the study until its reports are written, and a second run is
refused at once. A new study does not start over the results.json, best.yaml and report.html of an
earlier one whose study.db is gone. And a study.db records what it measured (model, workload, load,
SLO, server command: `identity`), so `--resume` refuses one that sits beside another study's tune.json.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path

from model_optimizer.common.fileio import run_lock

LOCK_NAME = ".tune.lock"
OUTPUTS = ("tune.json", "results.json", "best.yaml", "commands.txt", "report.html", "trials")
"""What a study writes beside study.db (report.write_outputs, study.save_setup, each trial's folder)."""
IDENTITY_KEYS = ("model", "server_cmd", "slo", "workload", "load")
"""The settings that decide what a trial measures: a study.db measured under others is another study."""


@contextlib.contextmanager
def study_lock(output_dir: Path) -> Iterator[None]:
    """Hold `output_dir/.tune.lock` for the block; ValueError at once when another run holds it."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(run_lock(output_dir / LOCK_NAME, output_dir, "mopt tune"))
        except ValueError:
            raise ValueError(
                f"--output-dir {output_dir} is in use by another mopt tune run (it holds {LOCK_NAME}): "
                "wait for it to end, or give another --output-dir"
            ) from None
        yield


def check_no_earlier_outputs(output_dir: Path) -> None:
    """ValueError when `output_dir` holds a study's outputs but no study.db: a new study would replace them."""
    if (output_dir / "study.db").exists():
        return  # open_study refuses a study.db without --resume
    found = [name for name in OUTPUTS if (output_dir / name).exists()]
    if found:
        raise ValueError(
            f"--output-dir {output_dir} holds the outputs of an earlier study ({', '.join(found)}) but no "
            "study.db to continue: give another --output-dir, or remove them"
        )


def identity(stored: dict) -> dict:
    """The settings of `stored` (tune.json's contents) that decide what a trial measures, as tune.json holds them."""
    return json.loads(json_text({key: stored.get(key) for key in IDENTITY_KEYS}))


def check_identity(study, expected: dict, db: Path) -> None:
    """Record `expected` in a study that has no identity yet (a new one, or one made before it was
    recorded); otherwise a ValueError naming the first setting where the study and `expected` differ."""
    recorded = study.user_attrs.get("identity")
    if recorded is None:
        study.set_user_attr("identity", expected)
        return
    difference = first_difference(recorded, expected)
    if difference is not None:
        name, was, now = difference
        raise ValueError(
            f"--resume: {db} holds a study measured with {name} {was}, but {db.parent / 'tune.json'} says "
            f"{now}: the file is another study's; give another --output-dir"
        )


def first_difference(recorded: dict, expected: dict) -> tuple[str, str, str] | None:
    """(flag, recorded value, expected value) of the first setting that differs; None when none does."""
    for key in IDENTITY_KEYS:
        was, now = recorded.get(key), expected.get(key)
        if isinstance(was, dict) and isinstance(now, dict):
            for field in sorted(set(was) | set(now)):
                if was.get(field) != now.get(field):
                    return _flag(field), json.dumps(was.get(field)), json.dumps(now.get(field))
        elif was != now:
            return _flag(key), json.dumps(was), json.dumps(now)
    return None


def json_text(data) -> str:
    """`data` as indented JSON, a float that is not finite written as Python spells it ("inf", "-inf",
    "nan"): json.dumps would write Infinity, which JSON does not have and other readers refuse. A string
    rather than null because null already means something (no --request-rate: a closed loop), and
    float() reads the string back (runner.trial_setup does, for --request-rate inf)."""
    return json.dumps(_finite(data), indent=2, default=str, allow_nan=False) + "\n"


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
