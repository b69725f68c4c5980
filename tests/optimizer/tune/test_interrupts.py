"""Ctrl-C during a study never cuts a write to study.db in half (interrupts.py).

The signal is sent from inside a real storage call (a SQLAlchemy event on the study's own engine), so
it lands there on every machine: no bet on when a signal arrives."""

from __future__ import annotations

import os
import signal

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import event

from model_optimizer.optimizer.tune.interrupts import interrupts_outside


def signal_inside_the_next_query(study, sig: int) -> None:
    sent = []

    def send(*_) -> None:  # after the query ran, before its rows are read: where CI's Ctrl-C landed
        if not sent:
            sent.append(sig)
            os.kill(os.getpid(), sig)

    event.listen(study._storage._backend.engine, "after_cursor_execute", send)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_storage_write_is_raised_once_the_write_is_done(tmp_path, sig):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    signal_inside_the_next_query(study, sig)
    with pytest.raises(KeyboardInterrupt), interrupts_outside(study._storage):
        trial.set_user_attr("settings", {"max_num_seqs": 2})
        pytest.fail("the interrupt must end the block right after the write")  # pragma: no cover
    # what the tuner does next: the trial closed in the file, which no half-done query holds locked
    trial.set_user_attr("error", "interrupted (Ctrl-C)")
    study.tell(trial, state=TrialState.FAIL)
    stored = optuna.load_study(study_name="s", storage=storage).trials[0]
    assert stored.state == TrialState.FAIL
    assert stored.user_attrs == {"settings": {"max_num_seqs": 2}, "error": "interrupted (Ctrl-C)"}


def test_outside_storage_calls_a_signal_interrupts_at_once_and_the_handlers_come_back(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="s")
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    reached = []
    with pytest.raises(KeyboardInterrupt), interrupts_outside(study._storage):
        os.kill(os.getpid(), signal.SIGTERM)
        reached.append(True)  # pragma: no cover - the handler raised before this line
    assert not reached
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert "set_trial_user_attr" not in vars(study._storage)  # the storage's own methods again
