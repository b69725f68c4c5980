"""Run a whole benchmark: prepare requests, run each planned load, watch the server, save results.

`run_benchmark` is what `mopt bench` calls; every run is written to disk as soon as it ends,
so an interrupted sweep keeps the runs it finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass

import numpy as np
from rich.console import Console

from model_optimizer.optimizer.bench import report, sweep
from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.discover import ServerModel, discover_model, local_tokenizer
from model_optimizer.optimizer.bench.load import (
    DEFAULT_NUM_REQUESTS,
    LoadConfig,
    RunPlan,
    closed_concurrency,
    plan_from_config,
    schedule_check,
)
from model_optimizer.optimizer.bench.metrics import SloThreshold, parse_slo, summarize
from model_optimizer.optimizer.bench.overhead import overhead_report
from model_optimizer.optimizer.bench.progress import RunProgress
from model_optimizer.optimizer.bench.prompts import PromptMaker, load_tokenizer
from model_optimizer.optimizer.bench.record import RequestRecord
from model_optimizer.optimizer.bench.request_options import masked_headers, request_body, request_headers
from model_optimizer.optimizer.bench.scrape import MetricsScraper
from model_optimizer.optimizer.bench.settings import ignore_eos_words
from model_optimizer.optimizer.bench.sizing import num_cpus, resolve_num_workers
from model_optimizer.optimizer.bench.stopping import GRACE_S, Interrupted, RunAborted, RunStop, signal_handlers
from model_optimizer.optimizer.bench.telemetry import GpuSampler, is_local
from model_optimizer.optimizer.bench.token_counts import count_with_tokenizer, estimated_sentence
from model_optimizer.optimizer.bench.workers import execute_plan
from model_optimizer.optimizer.bench.workloads import (
    BenchRequest,
    WorkloadConfig,
    build_workload,
    prompt_maker,
    repeated_prompts,
    resolve_format,
    warmup_requests,
)

GRACE_WORDS = f"{GRACE_S:g} s"
WARMUP_SEED_OFFSET = 1_000_003
"""Added to the workload's seed for the warm-up's prompts (the measured runs use seed + run index)."""


@dataclass
class OutputConfig:
    """What to record and where to write it."""

    output_dir: str = "bench-results"
    """Folder for run JSON files, CSV files, plots and report.html."""

    slo: str | None = None
    """Service-level objectives for goodput, e.g. ttft_p99=200ms,tpot_p99=30ms (metrics ttft, tpot, itl, e2e)."""

    metrics_interval: float = 1.0
    """Seconds between scrapes of the server's /metrics during a run (0: only before and after)."""

    gpu_telemetry: bool = True
    """Sample GPU utilization, memory and power through NVML when the server is on this machine."""

    progress: bool = True
    """Show a live progress bar."""

    label: str | None = None
    """Name put before each run's load description in results and reports (default: the endpoint)."""

    def __post_init__(self) -> None:
        parse_slo(self.slo)
        if self.metrics_interval < 0:
            raise ValueError(f"metrics_interval must be >= 0, got {self.metrics_interval}")


@dataclass
class BenchSetup:
    """Everything one `mopt bench` invocation needs."""

    client: ClientConfig
    workload: WorkloadConfig
    load: LoadConfig
    output: OutputConfig


def run_benchmark(setup: BenchSetup, console: Console | None = None) -> list[dict]:
    """Run every planned load of `setup`, write results, and return this invocation's run results.

    Runs already in the output folder are kept: new runs take the next numbers, and summary.csv
    and report.html cover every run in the folder. The folder is made with the first run's file
    (report.reserve_run_path): a benchmark that fails before any run leaves no empty folder."""
    console = console or Console()
    try:
        return asyncio.run(_run_all(setup, console))
    finally:  # also after Ctrl-C: the report covers the runs that finished
        runs = report.load_runs(setup.output.output_dir)
        if runs:
            report.write_outputs(runs, setup.output.output_dir)


async def _run_all(setup: BenchSetup, console: Console) -> list[dict]:
    if setup.load.load_mode == "trace" and setup.workload.dataset != "trace":
        raise ValueError("load mode trace replays a trace's timestamps: give --dataset trace --dataset-path FILE")
    card = await discover_model(setup.client)
    if setup.client.model is None:
        setup.client.model = card.id  # type: ignore[union-attr]  # discover_model raised when none
    load = setup.load
    num = load.num_requests
    if num is None and load.duration is None and load.load_mode != "trace":
        num = DEFAULT_NUM_REQUESTS
    _say_concurrency_cap(load, num, console)
    workload, maker, prompts = _prompt_maker(setup, card)
    requests = build_workload(workload, setup.client.endpoint, num, maker)
    _check_context(requests, card, console)
    if maker.num_inexact:  # the tokenizer could not be matched exactly: never claim it was
        prompts["description"] = prompts["description"].replace(
            "text of exact token length", f"text of about the token length ({maker.num_inexact} not exact)"
        )
    console.print(f"prompts: {prompts['description']}")
    if setup.client.endpoint != "embeddings":
        console.print(f"ignore_eos: {ignore_eos_words(setup.client.ignore_eos)}", highlight=False)
    runner = _Runner(setup, workload, requests, num, console, prompts)
    with signal_handlers(runner.on_signal):
        return await _run_plans(runner, load, num, console)


async def _run_plans(runner: _Runner, load: LoadConfig, num: int | None, console: Console) -> list[dict]:
    await runner.warm_up(load)
    if load.load_mode != "sweep":
        await runner.run(plan_from_config(load))
        return runner.results
    if num is not None and num < report.MIN_P99_REQUESTS:
        console.print(
            f"[yellow]warning: each run of the sweep measures {num} requests: a p99 over fewer than "
            f"{report.MIN_P99_REQUESTS} is its slowest request or close to it; give --num-requests "
            f"{report.MIN_P99_REQUESTS} or more to compare tails across rates[/]"
        )
    low = await runner.run(sweep.baseline_plan(load))
    high = await runner.run(sweep.saturation_plan(load))
    rates = sweep.plan_sweep_rates(
        low["summary"]["request_rate"], high["summary"]["request_rate"], load.sweep_num_rates
    )
    if not rates:
        console.print("[yellow]saturation is no faster than one at a time: no rates to sweep between[/]")
    for plan in sweep.rate_plans(load, rates):
        await runner.run(plan)
    return runner.results


def _say_concurrency_cap(load: LoadConfig, num: int | None, console: Console) -> None:
    """Say when a closed loop gets fewer slots than asked: never more than the requests it sends."""
    asked = {
        "closed": ("--concurrency", load.concurrency),
        "sweep": ("--sweep-max-concurrency", load.sweep_max_concurrency),
    }
    if load.load_mode not in asked:
        return
    flag, value = asked[load.load_mode]
    if value and closed_concurrency(value, num) < value:
        console.print(f"{flag} {value} lowered to {num}: only {num} requests are sent", highlight=False)


def _prompt_maker(setup: BenchSetup, card: ServerModel | None) -> tuple[WorkloadConfig, PromptMaker, dict]:
    """The prompt builder, with a tokenizer found locally when none was given, and what it will send.

    Without --tokenizer the tokenizer is looked for where vLLM's bench looks (the --model folder)
    and in the folder the server names as the model's root, so token ids match the served vocabulary."""
    workload = setup.workload
    if workload.tokenizer is None:
        found = local_tokenizer(setup.client.model, card.root if card else None)
        if found:
            workload = dataclasses.replace(workload, tokenizer=found)
    maker = prompt_maker(workload)
    low, high = maker.id_range
    fmt = resolve_format(workload, setup.client.endpoint)
    info = {
        "vocab_size": maker.vocab_size,
        "vocab_source": maker.vocab_source,
        "tokenizer": workload.tokenizer,
        "token_id_range": [low, high],
    }
    if fmt == "token_ids":
        made = f"random token ids in [{low}, {high}) ({maker.vocab_source})"
    elif maker.tokenizer is not None:
        made = f"text of exact token length (the tokenizer at {workload.tokenizer})"
    else:
        made = "text of common English words, about one token each"
    if workload.dataset != "synthetic":
        made = f"{workload.dataset} file {workload.dataset_path}; prompts given only as a length: {made}"
    info["description"] = made
    return workload, maker, info


def _check_context(requests: list[BenchRequest], card: ServerModel | None, console: Console) -> None:
    """Warn before the run when some requests cannot fit the server's context (they would fail with 400)."""
    if card is None or card.max_model_len is None or not requests:
        return
    too_long = sum(r.prompt_len + r.output_len > card.max_model_len for r in requests)
    if too_long:
        longest = max(r.prompt_len + r.output_len for r in requests)
        console.print(
            f"[yellow]warning: {too_long} of {len(requests)} requests need up to {longest} tokens "
            f"(prompt + output), more than the server's max_model_len {card.max_model_len}: "
            "they will fail[/]"
        )


class _Runner:
    """Runs plans one after another, numbering and saving each result."""

    def __init__(
        self,
        setup: BenchSetup,
        workload: WorkloadConfig,
        requests: list[BenchRequest],
        num: int | None,
        console: Console,
        prompts: dict,
    ) -> None:
        self.setup, self.workload, self.num, self.console = setup, workload, num, console
        self.requests, self.bodies = requests, [request_body(setup.client, r) for r in requests]
        self.prompts = {k: v for k, v in prompts.items() if k != "description"}
        self.slos: list[SloThreshold] = parse_slo(setup.output.slo)
        self.results: list[dict] = []
        self.warmup: dict | None = None
        self.signal_name: str | None = None
        """The first SIGINT or SIGTERM received: no run starts after it."""
        self.stop: RunStop | None = None
        """The stop of the run (or warm-up) in progress."""
        self.said_estimated = False

    def on_signal(self, name: str) -> None:
        """Stop the run in progress (a second signal cancels its requests in flight at once)."""
        first = self.signal_name is None
        self.signal_name = self.signal_name or name
        if first:
            self.console.print(
                f"[yellow]{name}: stopping; requests in flight get {GRACE_WORDS} to finish, then the run so far "
                "is saved (again to cancel them now)[/]"
            )
        if self.stop is not None:
            self.stop.stop(name)

    def _new_stop(self) -> RunStop:
        if self.signal_name is not None:
            raise Interrupted(self.signal_name)
        self.stop = RunStop()
        return self.stop

    async def warm_up(self, load: LoadConfig) -> None:
        """Send `load.num_warmups` requests with the measured requests' lengths, in a closed loop at the
        load's concurrency, before the first measured run; only their count and errors are kept. Their
        prompts are random ones from another seed (for a trace or ShareGPT file too, whose own prompts do
        not change with the seed), so the measured prompts find nothing of theirs in the prefix cache."""
        count = load.num_warmups
        if count <= 0:
            return
        slots = min(count, load.concurrency or load.max_concurrency or load.sweep_max_concurrency)
        seed = self.workload.seed + WARMUP_SEED_OFFSET
        maker = prompt_maker(dataclasses.replace(self.workload, seed=seed))
        requests = warmup_requests(self.workload, self.setup.client.endpoint, self.requests, count, maker)
        bodies = [request_body(self.setup.client, r) for r in requests]
        plan = RunPlan("closed", concurrency=slots, num_requests=count)
        num_workers = self._num_workers(plan, requests)
        stop = self._new_stop()
        records, loops = await execute_plan(
            self.setup.client, plan, requests, bodies, np.random.default_rng(seed), num_workers, stop=stop
        )
        errors = [r.error for r in records if r.error]
        self.warmup = {"num_requests": len(records), "num_ok": len(records) - len(errors), "concurrency": slots}
        self.warmup["errors"] = {e: errors.count(e) for e in set(errors)}
        self.console.print(f"warm-up: {len(records)} requests at concurrency {slots}, {len(errors)} failed")
        self._end_early(_stop_reason(stop, loops), records)

    def _fresh_prompts(self) -> None:
        """New synthetic prompts for each later run of a sweep (seed + run index): the same prompts
        again would be found in the server's prefix cache and make later runs look faster."""
        if not self.results or self.workload.dataset != "synthetic":
            return
        self.workload = dataclasses.replace(self.workload, seed=self.setup.workload.seed + len(self.results))
        self.requests = build_workload(self.workload, self.setup.client.endpoint, self.num)
        self.bodies = [request_body(self.setup.client, r) for r in self.requests]

    async def run(self, plan: RunPlan) -> dict:
        self._fresh_prompts()
        out = self.setup.output
        client_cfg = self.setup.client
        scraper = MetricsScraper(client_cfg.base_url, out.metrics_interval, request_headers(client_cfg))
        gpu = GpuSampler()
        if out.gpu_telemetry and is_local(client_cfg.base_url):
            gpu.start()
        else:
            gpu.reason = "disabled" if not out.gpu_telemetry else "server is not on this machine"
        num_workers = self._num_workers(plan, self.requests)
        await scraper.start()
        started_at = time.time()
        total = len(self.requests) if plan.mode == "trace" else plan.num_requests
        progress = RunProgress(plan.label, total, plan.duration, enabled=out.progress, console=self.console)
        rng = np.random.default_rng(self.setup.workload.seed + len(self.results))
        stop = self._new_stop()
        with progress:
            records, loops = await execute_plan(
                client_cfg, plan, self.requests, self.bodies, rng, num_workers, progress.count, stop
            )
        tokenizer = load_tokenizer(self.workload.tokenizer) if self.workload.tokenizer else None
        count_with_tokenizer(records, tokenizer)
        reason = _stop_reason(stop, loops)
        result = self._result(plan, records, started_at, loops, await scraper.stop(), gpu.stop())
        result |= {"interrupted": reason is not None, "stop_reason": reason}
        self.results.append(result)
        path = report.reserve_run_path(out.output_dir, plan.label)
        report.write_json(path, result)
        result["path"] = str(path)
        self._say_repeats(result["repeated_prompts"], len(records))
        self._say_estimated(result["summary"]["output_tokens_from"])
        report.print_summary(self.console, result)
        self._end_early(reason, records)
        return result

    def _end_early(self, reason: str | None, records: list[RequestRecord]) -> None:
        """After a run (saved) or warm-up that stopped early: end the benchmark with the reason."""
        if reason is None:
            return
        if self.signal_name is not None:
            raise Interrupted(self.signal_name)
        example = next((f"{r.error}: {r.error_detail}" for r in records if r.error), "")
        raise RunAborted(f"{reason} ({example[:200]})" if example else reason)

    def _say_estimated(self, sources: dict[str, int]) -> None:
        """Once per benchmark: output token counts that are not the server's own."""
        sentence = estimated_sentence(sources, self.workload.tokenizer)
        if sentence and not self.said_estimated:
            self.said_estimated = True
            self.console.print(f"[yellow]warning: {sentence}[/]")

    def _say_repeats(self, repeats: int, num_sent: int) -> None:
        """One line when the run sent some prompt twice: the server may have answered it from its cache."""
        if repeats:
            self.console.print(
                f"[yellow]warning: {repeats} of {num_sent} requests repeated a prompt sent earlier in this run "
                f"(only {num_sent - repeats} distinct; a duration-limited run cycles --pool-size prepared "
                "requests): a server with prefix caching answers repeats from its cache, faster[/]"
            )

    def _num_workers(self, plan: RunPlan, requests: list[BenchRequest]) -> int:
        """Worker processes for `plan`, said on the console when more than one or chosen by auto."""
        spec = self.setup.load.num_workers
        num, why = resolve_num_workers(spec, plan, requests, self.setup.client.base_url)
        if num > 1 or spec != "1":
            self.console.print(f"client: {num} worker process{'es' if num > 1 else ''} ({why})")
        return num

    def _result(self, plan, records: list[RequestRecord], started_at, loops: list[dict], server, gpu) -> dict:
        client = self.setup.client
        client_cfg = dataclasses.asdict(client) | {
            "api_key": "***" if client.api_key else None,
            "header": masked_headers(client.header),
        }
        return {
            "schema": report.SCHEMA,
            "label": f"{self.setup.output.label or self.setup.client.endpoint} {plan.label}",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at)),
            "plan": dataclasses.asdict(plan),
            "config": {
                "client": client_cfg,
                "workload": dataclasses.asdict(self.workload),
                "load": dataclasses.asdict(self.setup.load),
                "slo": self.setup.output.slo,
            },
            "prompts": self.prompts,
            "warmup": self.warmup,
            "environment": report.environment(),
            "num_workers": len(loops),
            "repeated_prompts": repeated_prompts(self.requests, [r.index for r in records]),
            "summary": summarize(records, self.slos) | {"schedule": schedule_check(plan, records, loops)},
            "client_overhead": overhead_report(records, loops, num_cpus()),
            "server_metrics": server,
            "gpu": gpu,
            "requests": [report.record_to_dict(r) for r in records],
        }


def _stop_reason(stop: RunStop, loops: list[dict]) -> str | None:
    """Why a run ended early: this process's stop, else the first worker process's that stopped."""
    return stop.reason or next((loop["stopped"] for loop in loops if loop.get("stopped")), None)
