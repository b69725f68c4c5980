"""Signals held back over a step that must not stop halfway (common/processes.interrupts_deferred)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from model_optimizer.common.processes import interrupts_deferred, sigterm_raises


class Stopped(Exception):
    pass


def test_a_sigterm_inside_is_raised_at_the_end_by_the_handler_it_had():
    steps = []
    with pytest.raises(Stopped), sigterm_raises(Stopped):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after the signal")  # the block goes on
            os.kill(os.getpid(), signal.SIGINT)  # a second one: the first decides
            steps.append("finished")
        steps.append("not reached")
    assert steps == ["after the signal", "finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers are back


def test_a_sigint_from_another_thread_waits_for_the_block():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
            sender.start()
            sender.join()
            for _ in range(1000):  # bytecodes enough for Python to run a handler, were one to run
                done.append(1)
    assert len(done) == 1000


def test_nothing_pending_leaves_nothing_to_do_and_the_default_action_still_applies():
    with interrupts_deferred():
        pass
    code = (
        "import os, signal\n"
        "from model_optimizer.common.processes import interrupts_deferred\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "with interrupts_deferred():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('inside', flush=True)\n"
        "print('after', flush=True)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == -signal.SIGTERM and run.stdout == "inside\n"
