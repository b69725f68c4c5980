"""The optuna study in `output_dir/study.db`: opened new or resumed, and checked before anything is written
to it (a file that is no SQLite database or a damaged one, a study.db of another space, a study whose
set-up was cut short). Every trial is committed to the file as it ends (tuner.py), so a crash loses at most
the trial in progress, which `--resume` measures again (resume.py).
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

from model_optimizer.common.fileio import atomic_write
from model_optimizer.optimizer.tune.folder import check_identity, json_text
from model_optimizer.optimizer.tune.objectives import OBJECTIVES
from model_optimizer.optimizer.tune.samplers import make_sampler
from model_optimizer.optimizer.tune.space import SearchSpace

STUDY_NAME = "mopt-tune"
SQLITE_HEADER = b"SQLite format 3\x00"


def open_study(
    output_dir: Path,
    seed: int,
    resume: bool,
    sampler: str = "nsga2",
    space: SearchSpace | None = None,
    identity: dict | None = None,
):
    """The study in `output_dir/study.db`: new, or (with `resume`) the one already there, which must have
    been measured with `identity` (folder.py) when it recorded one."""
    import optuna

    chosen = make_sampler(sampler, seed, space)  # a bad choice is refused before the file is touched
    db = output_dir / "study.db"
    storage = f"sqlite:///{db}"
    check_existing(output_dir, storage, resume)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constraints reach the sampler through trial.set_constraint (see Tuner._record)
    study = optuna.create_study(
        storage=storage,
        study_name=STUDY_NAME,
        sampler=chosen,
        directions=[d for _, d in OBJECTIVES],
        load_if_exists=resume,
    )
    if resume and space is not None:
        check_trials_fit(study, space, db)  # before anything is written to the file
    if identity is not None:
        check_identity(study, identity, db)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([n for n, _ in OBJECTIVES])
    fail_running(study, "interrupted: the tuner stopped during this trial")
    return study


def check_existing(output_dir: Path, storage: str, resume: bool) -> None:
    """A ValueError unless the folder holds a study exactly when `resume` asks for one. A study whose
    set-up was cut short (setup_cut_short) is deleted first when a new run starts."""
    import optuna

    db = output_dir / "study.db"
    check_sqlite(db)
    exists = db.is_file() and STUDY_NAME in {s.study_name for s in optuna.get_all_study_summaries(storage)}
    if exists and not resume and setup_cut_short(output_dir, storage):
        optuna.delete_study(study_name=STUDY_NAME, storage=storage)  # nothing measured, nothing to continue
        exists = False
    if resume and not exists:
        raise ValueError(f"--resume: no study in {db}; run without --resume to start one")
    if exists and not resume:
        raise ValueError(f"{db} already holds a study: continue it with --resume, or give another --output-dir")


def setup_cut_short(output_dir: Path, storage: str) -> bool:
    """Whether the study in `storage` is one a run created but never finished setting up (killed before it
    wrote tune.json): no tune.json beside it, and no trial but queued ones. Neither --resume (no tune.json)
    nor a new run (a study is there) could use the folder; a new run starts the study over."""
    import optuna
    from optuna.trial import TrialState

    if (output_dir / "tune.json").exists():
        return False
    study = optuna.load_study(study_name=STUDY_NAME, storage=storage)
    return all(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))


def check_sqlite(db: Path) -> None:
    """A ValueError when `db` exists but is no SQLite file (an empty file is one): sqlalchemy's
    "file is not a database" came out as a traceback."""
    if not db.is_file() or db.stat().st_size == 0:
        return
    with db.open("rb") as file:
        if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise ValueError(f"{db} is not a SQLite file: move it away, or give another --output-dir")
    import sqlite3

    # as_uri() escapes a '#', '?' or '%' in the path, which a bare "file:" URI takes for its own syntax
    uri = f"{db.absolute().as_uri()}?mode=ro"
    try:  # a damaged file (cut short, overwritten) came out as sqlalchemy's traceback too
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as connection:
            verdict = connection.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    if verdict != "ok":
        raise ValueError(f"{db} is damaged ({verdict}): restore it from a copy, or give another --output-dir")


def check_trials_fit(study, space: SearchSpace, db: Path) -> None:
    """A ValueError when a stored trial has a knob the space does not search, or a value outside it: a
    study.db of another study (another space beside this tune.json) was resumed without a word, its
    trials ranked with these and the best of them written to best.yaml."""
    knobs = {k.name: k for k in space.knobs}
    for trial in study.get_trials(deepcopy=False):
        for name, value in trial.params.items():
            knob = knobs.get(name)
            if knob is None:
                problem = f"searches {name}, which the space in tune.json does not"
            elif knob.choices is not None and value not in knob.choices:
                problem = f"has {name}={value!r}, not among the space's choices {knob.choices}"
            elif knob.choices is None and not knob.low <= value <= knob.high:
                problem = f"has {name}={value!r}, outside the space's range [{knob.low}, {knob.high}]"
            else:
                continue
            raise ValueError(
                f"--resume: trial {trial.number} in {db} {problem}: the file holds another study than "
                f"{db.parent / 'tune.json'} describes; give another --output-dir"
            )


def fail_running(study, reason: str) -> None:
    """Trials left RUNNING (a crash, or Ctrl-C inside optuna's own ask) become FAIL with `reason`, so the
    file never holds a trial that will not end; only one tuner runs a study at a time."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "error", reason)
        study._storage.set_trial_user_attr(t._trial_id, "state", "FAIL")
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)


def save_setup(output_dir: Path, data: dict) -> None:
    """Write tune.json, what --resume reads the study's setup from, beside study.db."""
    atomic_write(output_dir / "tune.json", json_text(data))
