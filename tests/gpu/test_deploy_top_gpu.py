"""On a real GPU: `mopt top` reads the GPUs through NVML, and `mopt deploy` picks the CUDA build from
this machine's driver."""

from __future__ import annotations

from model_optimizer.optimizer.deploy.cuda import _key, choose_cuda, local_driver
from model_optimizer.optimizer.top.gpu import read_gpus


def test_nvml_readings_of_every_gpu():
    gpus = read_gpus()
    assert gpus, "NVML found no GPU on a machine where torch sees one"
    for gpu in gpus:
        assert 0 <= gpu["utilization"] <= 100
        assert 0 < gpu["memory_used"] <= gpu["memory_total"]
        assert gpu["power_w"] > 0 and 0 < gpu["temperature_c"] < 120


def test_cuda_build_for_this_driver():
    driver = local_driver()
    assert driver is not None
    choice = choose_cuda(driver)
    assert _key(choice.min_driver) <= _key(driver)
