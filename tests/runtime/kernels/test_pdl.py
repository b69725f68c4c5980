"""When kernels launch with programmatic dependent launch (kernels/pdl.py): Hopper or later only, never
under the interpreter or with MOPT_PDL=0, and for the ahead-of-time target as for the GPU itself (the
launch option is part of Triton's cache key: a start must ask for what the build compiled)."""

import pytest
import torch

from model_optimizer.runtime.kernels import aot, pdl


@pytest.fixture
def target(monkeypatch):
    """Compile as for `capability` without the interpreter, with a fresh answer cache."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("MOPT_PDL", raising=False)
    monkeypatch.setattr(pdl, "_capable", {})

    def building(capability):
        monkeypatch.setattr(aot, "building", lambda: aot.AotTarget(capability=capability))

    return building


@pytest.mark.skipif(not pdl.AVAILABLE, reason="this Triton has no griddepcontrol")
def test_hopper_targets_launch_with_pdl(target):
    target((9, 0))
    assert pdl.options(torch.empty(2, device="meta")) == {"PDL": True, "launch_pdl": True}


@pytest.mark.skipif(not pdl.AVAILABLE, reason="this Triton has no griddepcontrol")
def test_older_gpus_the_interpreter_and_the_switch_turn_it_off(target, monkeypatch):
    target((8, 9))
    assert pdl.options(torch.empty(2, device="meta")) == {"PDL": False, "launch_pdl": False}
    target((9, 0))
    monkeypatch.setenv("MOPT_PDL", "0")
    assert not pdl.enabled(None)
    monkeypatch.delenv("MOPT_PDL")
    monkeypatch.setattr(pdl, "_capable", {})  # the answer is kept per device and target
    assert pdl.enabled(None)
    monkeypatch.setattr(pdl, "_capable", {})
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not pdl.enabled(None)


def test_cpu_tensors_never_launch_with_pdl(target):
    target((9, 0))
    assert pdl.options(torch.empty(2)) == {"PDL": False, "launch_pdl": False}
