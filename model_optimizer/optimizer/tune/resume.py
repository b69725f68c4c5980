"""What `--resume` does with the trials a stopped run left unfinished: stop their servers, measure them again.

A run stopped by Ctrl-C, SIGTERM or SIGHUP marks its trial in progress FAIL with an error that starts
with "interrupted"; one killed outright (SIGKILL, a crash, a full disk) leaves it RUNNING, which
`open_study` marks the same way, and may leave its server running: the server has a session of its
own, so nothing else stops it. An interrupted trial measured nothing, so it does not count toward
`--trials`, its server is stopped if it still runs (server_process.stop_leftover checks that the
recorded pid is still that server), and its settings are queued to be measured again, once.
"""

from __future__ import annotations

from pathlib import Path

from model_optimizer.optimizer.tune.server_process import stop_leftover

CARRIED_ATTRS = ("baseline", "baseline_repeat", "picked_by")
"""What a trial measured again keeps of the interrupted one: the baseline is still the baseline."""


def is_interrupted(trial) -> bool:
    """A trial stopped before it measured anything (not a failure of its settings)."""
    return trial.state.name == "FAIL" and str(trial.user_attrs.get("error", "")).startswith("interrupted")


def stop_leftover_servers(study, output_dir: Path) -> list[int]:
    """Stop the servers interrupted trials left running; the numbers of those trials."""
    stopped = []
    for trial in study.get_trials(deepcopy=False):
        if is_interrupted(trial) and stop_leftover(output_dir / "trials" / f"{trial.number:04d}"):
            stopped.append(trial.number)
    return stopped


def requeue_interrupted(study) -> list[int]:
    """Queue the settings of every interrupted trial not queued again yet (the new trial's `rerun_of`
    names it); the numbers of the trials queued again. A trial interrupted before it drew its values
    takes those it was queued with (a grid point, the baseline); one that had neither is not queued."""
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs.get("rerun_of") for t in trials}
    queued = []
    for trial in trials:
        if not is_interrupted(trial) or trial.number in done:
            continue
        params = trial.params or trial.system_attrs.get("fixed_params")
        if not params:
            continue
        attrs = {k: trial.user_attrs[k] for k in CARRIED_ATTRS if k in trial.user_attrs}
        study.enqueue_trial(dict(params), user_attrs={**attrs, "rerun_of": trial.number}, skip_if_exists=False)
        queued.append(trial.number)
    return queued
