"""One trial: start a server with the candidate's settings, time it to ready, load it as `mopt bench` does.

The load is `bench.runner.run_benchmark` itself (same workload, load plan, warm-up, SLO goodput and
/metrics scrape as the command; the figures kept leave out the closed loop's first wave, see steady.py), run in a worker thread so a trial that overruns its time limit can be ended:
the server is killed, its requests fail at once, and the thread returns. Whatever happens (a crash,
a timeout, Ctrl-C) the server's process group is reaped on the way out.
"""

from __future__ import annotations

import dataclasses
import io
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.load import LoadConfig
from model_optimizer.optimizer.bench.workloads import WorkloadConfig
from model_optimizer.optimizer.tune.commands import mopt_serve_argv, template_argv
from model_optimizer.optimizer.tune.server_process import ServerFailed, ServerProcess, free_port
from model_optimizer.optimizer.tune.steady import steady_summary

GIB = float(1 << 30)
PORT_ATTEMPTS = 2


@dataclass
class TrialSetup:
    """What every trial of a study shares."""

    model: str | None
    client: ClientConfig
    workload: WorkloadConfig
    load: LoadConfig
    slo: str | None = None
    server_cmd: str | None = None
    """A command template for an external server (see commands.template_argv); None: `mopt serve`."""
    ready_path: str = "/ready"
    ready_timeout: float = 600.0
    """Seconds from process start to ready before the trial fails."""
    trial_timeout: float = 1800.0
    """Seconds the load may run before the trial fails."""
    skip_first_wave: bool = False
    """Count only the closed loop's requests sent after the first `concurrency` (steady.py says why)."""


@dataclass
class TrialResult:
    """A trial's measurements, or why it failed."""

    settings: dict
    ok: bool = False
    error: str | None = None
    cold_start_s: float | None = None
    goodput: float | None = None
    """Requests per second meeting every SLO (all successful requests when there is no SLO)."""
    request_rate: float | None = None
    output_throughput: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    mean_prompt_len: float | None = None
    mean_output_len: float | None = None
    slo_met: bool | None = None
    slo_checks: dict = field(default_factory=dict)
    memory_gib: float | None = None
    memory_source: str | None = None
    server_metrics: dict = field(default_factory=dict)
    bench_dir: str | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    """Requests sent before the measured load and not counted."""
    counted_requests: int | None = None
    """Requests the figures above are computed over."""
    first_wave_skipped: int = 0
    """Requests of the closed loop's start-up burst left out of the figures."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def run_trial(setup: TrialSetup, settings: dict, trial_dir: Path) -> TrialResult:
    """Measure one candidate; never raises for a failing candidate (KeyboardInterrupt still propagates).

    The port is free when chosen but bound only when the server starts (`mopt serve`: then held through
    the load) or once the model is loaded (vLLM); if another process took it meanwhile, the trial starts
    once more on a new port."""
    started = time.monotonic()
    for _ in range(PORT_ATTEMPTS):
        result = _attempt(setup, settings, trial_dir)
        if result.ok or "address already in use" not in (result.error or "").lower():
            break
    result.duration_s = time.monotonic() - started
    return result


def _attempt(setup: TrialSetup, settings: dict, trial_dir: Path) -> TrialResult:
    result = TrialResult(settings=dict(settings), bench_dir=str(trial_dir / "bench"))
    port = free_port()
    try:
        argv = _server_argv(setup, settings, port)
    except ValueError as exc:
        result.error = str(exc)
        return result
    base_url = f"http://127.0.0.1:{port}"
    try:
        with ServerProcess(argv, trial_dir / "server.log") as server:
            result.cold_start_s = server.wait_ready(base_url + setup.ready_path, setup.ready_timeout)
            bench = _bench(setup, base_url, trial_dir / "bench", server)
            rss = server.peak_rss_bytes()
            if not server.alive():
                raise ServerFailed(f"server exited during the load: {server.log_tail()}")
        _fill(result, bench, rss)
    except ServerFailed as exc:
        result.error = str(exc)
    except Exception as exc:  # noqa: BLE001  # whatever broke, this candidate failed; the study goes on
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _server_argv(setup: TrialSetup, settings: dict, port: int) -> list[str]:
    if setup.server_cmd:
        return template_argv(setup.server_cmd, setup.model, settings, port)
    return mopt_serve_argv(setup.model, settings, port, python=True)


def _bench(setup: TrialSetup, base_url: str, out_dir: Path, server: ServerProcess) -> dict:
    """The first run of `mopt bench` against `base_url` (a sweep's runs are all kept; the best is used)."""
    from rich.console import Console

    from model_optimizer.optimizer.bench.runner import BenchSetup, OutputConfig, run_benchmark
    from model_optimizer.optimizer.bench.stopping import RunAborted

    client = dataclasses.replace(setup.client, base_url=base_url)
    bench = BenchSetup(
        client=client,
        workload=setup.workload,
        load=dataclasses.replace(setup.load),
        output=OutputConfig(output_dir=str(out_dir), slo=setup.slo, progress=False),
    )
    box: dict = {}

    def work() -> None:
        try:
            box["results"] = run_benchmark(bench, Console(file=io.StringIO()))
        except BaseException as exc:  # handed to the trial's thread below
            box["error"] = exc

    thread = threading.Thread(target=work, name="mopt-tune-bench", daemon=True)
    thread.start()
    thread.join(setup.trial_timeout)
    if thread.is_alive():
        server.stop()  # the requests in flight fail at once and the bench returns
        thread.join()
        raise ServerFailed(f"trial timed out: the load ran past {setup.trial_timeout:g} s")
    if isinstance(box.get("error"), RunAborted):  # every request refused alike (a 401/403/404): a failed trial
        raise ServerFailed(f"the server refused every request: {box['error']}")
    if "error" in box:
        raise box["error"]
    results = box["results"]
    if not results:
        raise ServerFailed("the bench produced no run")
    for run in results:
        run["steady_summary"], run["first_wave_skipped"] = steady_summary(run, setup.slo, setup.skip_first_wave)
    return max(results, key=lambda r: _goodput(r["steady_summary"]))


def _goodput(summary: dict) -> float:
    return summary.get("goodput", summary.get("request_rate", 0.0)) or 0.0


def _fill(result: TrialResult, bench: dict, rss_bytes: int | None) -> None:
    s = bench.get("steady_summary") or bench["summary"]  # the figures without the first wave (see _bench)
    result.warmup_requests = (bench.get("warmup") or {}).get("num_requests", 0)
    result.counted_requests = s.get("num_requests")
    result.first_wave_skipped = bench.get("first_wave_skipped", 0)
    if not s["num_ok"]:
        example = next(iter(s.get("error_examples", {}).values()), "")
        result.error = f"no request succeeded ({s['errors']}) {example}".strip()
        return
    result.ok = True
    result.goodput = _goodput(s)
    result.request_rate = s["request_rate"]
    result.output_throughput = s["output_throughput"]
    result.ttft_p99_ms = s["ttft_ms"]["p99"]
    result.tpot_p99_ms = s["tpot_ms"]["p99"]
    result.mean_prompt_len = s["prompt_tokens"] / s["num_ok"]
    result.mean_output_len = s["output_tokens"] / s["num_ok"]
    result.slo_checks = s.get("slo_checks", {})
    result.slo_met = s.get("slo_met")
    result.server_metrics = {k: v for k, v in (bench.get("server_metrics") or {}).items() if not isinstance(v, list)}
    gpu = bench.get("gpu") or {}
    mine = visible_gpu_indices()
    peaks = [
        g["mem_used_gib"]["max"]
        for g in gpu.get("gpus", [])
        if "mem_used_gib" in g and (mine is None or g.get("index") in mine)
    ]
    if gpu.get("available") and peaks:
        result.memory_gib, result.memory_source = max(peaks), "nvml"
    elif rss_bytes:
        result.memory_gib, result.memory_source = rss_bytes / GIB, "rss"


def visible_gpu_indices() -> set[int] | None:
    """The GPUs CUDA_VISIBLE_DEVICES gives this tuner (NVML numbers every GPU of the host, so a study
    sharing the machine with another must count only its own); None when unset or not plain indices."""
    import os

    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not raw:
        return None
    try:
        return {int(part) for part in raw.split(",")}
    except ValueError:
        return None
