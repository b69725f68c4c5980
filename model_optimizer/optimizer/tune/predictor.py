"""Predict a candidate's speed and memory from bytes and FLOPs, and correct the prediction by measurement.

One engine step runs `b` decoding sequences plus the prefill tokens the budget lets in. Its ideal
(roofline) time reads the weights once and each sequence's KV cache, and does 2 FLOPs per weight per
token plus attention over the context (W, L, K and the attention FLOPs per model: model_cost.py):

    roof(b, n) = (W + b * ctx * K) / bandwidth + ((b + n) * 2 * L + attention) / peak

Its real time adds a fixed cost per step that no bandwidth figure shows (Python, scheduling, launches):
small when a decode-only step replays a CUDA graph, large when a step runs eagerly (every step under
enforce_eager; with graphs, the steps that carry a prefill chunk). So the fitted step time is

    t_step = o_step + o_eager * g + e * roof_mean + sum_k c_k * [setting k departs from the default]

with o_step the cost of any step (a graph replay's), o_eager what an eager step costs beyond it, g the
share of eager steps and e = 1 / efficiency. Under a closed loop of C clients (b = min(C,
max_num_seqs, KV room) run at once) b / O requests finish per step and each brings a prompt of P tokens,
split into ceil(P / (budget - b)) chunks: that sets how many steps carry a prefill (prefill interference
on TPOT). Then

    throughput = b / t_step                         (tokens per second; capped by a request rate)
    TPOT p99   = t_step fitted on p99 TPOT          (the same features, their own coefficients)
    TTFT p99   = the start-up burst: C prompts at once take ceil(C * P / budget) eager steps, or in steady
                 state the step in progress and the prompt's own chunks; plus, when C > b, the wait for a
                 free slot (Little's law: C / b - 1 requests ahead, each an end-to-end time)

The coefficients (o_step, o_eager, e, c_k) are refitted from every measured trial by least squares on
relative error, with a weak pull towards the prior so a direction no trial has explored keeps its prior
(step_fit.py). TTFT is then corrected by the median of measured / modelled (robust to one odd trial).

With tensor_parallel_size N (tune/collectives.py) the roofline is one GPU's: W / N, its share of the
KV heads (one replicated head when fewer than N) and 1/N of the FLOPs; the step adds its collectives
(2 all-reduces per layer, each costed by collectives.py's measured lines) under a coefficient `ar` of
prior 1. Memory figures are per GPU (server_memory.py). A size needing more GPUs than are
visible, or one the model's heads do not divide by, does not fit (the candidate is skipped with why).

Weight offload (`cpu_offload_gb` G) adds the copy of the layers the engine offloads for G (server_memory.py:
at least G GiB, whole layers; a G the engine refuses does not fit) to every step's roofline, at
the host-to-device bandwidth of model/inspect/offload_plan.py or as `mopt doctor --bench` measured it
(added, not overlapped: the bound the benchmarks compare with); server_memory.py gives the KV cache the
room it frees. Less memory, more latency: the Pareto front shows the trade.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from model_optimizer.model.inspect.offload_plan import host_to_device_gbps
from model_optimizer.optimizer.tune.collectives import (
    step_collectives_ms,
    tensor_parallel_problem,
    visible_gpu_count,
)
from model_optimizer.optimizer.tune.hardware import Hardware
from model_optimizer.optimizer.tune.model_cost import ModelCost
from model_optimizer.optimizer.tune.server_memory import GIB, ServerMemory
from model_optimizer.optimizer.tune.step_fit import fit_steps, prior_coefficients, step_ms

SKIP_MARGIN = {0: 3.0, 1: 3.0}
"""How far over an SLO a prediction must be before the candidate is skipped, by measurements so far
(an unfitted model is trusted less); from two measurements on, SKIP_MARGIN_FITTED."""
SKIP_MARGIN_FITTED = 1.5
FLAG_DEFAULTS = {
    "block_size": 16,
    "kv_cache_dtype": "auto",
    "enable_prefix_caching": True,
    "async_scheduling": True,
    "enable_chunked_prefill": True,
    "scheduling_policy": "fcfs",
    "quantization": None,
}
"""Categorical settings whose cost the roofline cannot know: each value other than the default adds a
fitted cost per step (0 until a trial with that value is measured)."""


@dataclass
class Workload:
    """The figures of the load the predictor needs."""

    prompt_len: float
    output_len: float
    concurrency: float | None = None
    """Requests in flight (closed loop); None with a rate."""
    request_rate: float | None = None
    num_requests: int | None = None
    """Requests in the run: decides whether the start-up burst reaches the p99 (None: assume it does)."""
    burst_measured: bool = True
    """False when the trials leave the closed loop's first wave out of their figures (tune/steady.py):
    the burst then never reaches the measured p99 TTFT."""


@dataclass
class Prediction:
    tpot_ms: float
    ttft_ms: float
    output_throughput: float
    memory_gib: float
    running: float
    """Sequences running at once."""
    kv_capacity_tokens: int
    output_len: float = 1.0
    rate_cap: float | None = None
    """Output tokens per second the load's request rate allows (None: closed loop)."""
    service_ttft_ms: float | None = None
    """TTFT without waiting for a free slot (ttft_ms adds the wait of a closed loop over max_num_seqs)."""
    fits: bool = True
    reason: str | None = None
    features: dict[str, float] = field(default_factory=dict)
    """The step model's inputs: eager share `g`, roofline ms of the mean step `roof_ms`, flags (1.0 when a
    setting departs from its default), and the TTFT structure (burst_steps, burst_roof_ms, chunks,
    queued, burst_counts)."""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Predictor:
    """The analytic model plus the coefficients refitted from measured trials (see the module docstring)."""

    cost: ModelCost
    hardware: Hardware
    fit: dict = field(default_factory=dict)
    """"tpot" and "throughput": step coefficients (name -> value); "ttft": (a, b) of measured = a * x + b."""
    memory_offset_gib: float = 0.0
    num_fitted: int = 0
    config: dict | None = None
    """config.json: on a GPU the KV cache is sized by modelio's memory plan, the engine's own rule."""
    num_gpus: int | None = None
    """GPUs the trials may use (tensor_parallel_size above it is skipped); None: those visible here, if known."""
    memory: ServerMemory = field(init=False, repr=False, compare=False)
    """The KV cache and memory a server of given settings holds (built from cost, hardware and config)."""

    def __post_init__(self) -> None:
        if self.num_gpus is None and self.hardware.is_gpu:
            self.num_gpus = visible_gpu_count()
        self.memory = ServerMemory(self.cost, self.hardware, self.config)
        prior = prior_coefficients(self.hardware, self.cost.num_layers)
        self.fit = {"tpot": dict(prior), "throughput": dict(prior), "ttft": (1.0, 0.0)} | self.fit

    def ideal(self, settings: dict, load: Workload) -> Prediction:
        """The step model's features for `settings` under `load`, with the prior coefficients applied."""
        tp = int(settings.get("tensor_parallel_size", 1))
        problem = self._tensor_parallel_problem(tp)
        k_bytes = self.cost.kv_bytes_per_gpu(settings.get("kv_cache_dtype", "auto"), 1 if problem else tp)
        capacity, memory = self.memory.kv_capacity(settings, k_bytes)
        o = max(load.output_len, 1.0)
        seq_tokens = load.prompt_len + o
        max_seqs = capacity / seq_tokens if seq_tokens else math.inf
        cap = min(float(settings.get("max_num_seqs", 256)), max_seqs)
        running = self._running(load, cap)
        features = self._features(settings, load, running, k_bytes)
        if load.concurrency is None and self._rate_cap(load) is not None:
            for _ in range(20):  # Little's law: running = rate x (O steps of the step time at that running)
                step_s = step_ms(self.fit["throughput"], features) / 1e3
                running = min(max(load.request_rate * o * step_s, 1.0), max(cap, 1.0))
                features = self._features(settings, load, running, k_bytes)
        pred = Prediction(
            0.0, 0.0, 0.0, memory / GIB, running, int(capacity), o, self._rate_cap(load), features=features
        )
        pred = self._apply(pred, self.fit_prior())
        reason = problem or self.memory.offload_problem(settings) or self._misfit(settings, capacity, seq_tokens, tp)
        if reason:
            pred.fits, pred.reason = False, reason
        return pred

    def fit_prior(self) -> dict:
        """The coefficients before any measurement (step_fit.py's prior; TTFT as modelled)."""
        prior = prior_coefficients(self.hardware, self.cost.num_layers)
        return {"tpot": prior, "throughput": prior, "ttft": (1.0, 0.0)}

    def predict(self, settings: dict, load: Workload) -> Prediction:
        """The figures with the coefficients measured so far."""
        return self.correct(self.ideal(settings, load))

    def correct(self, ideal: Prediction) -> Prediction:
        """An ideal prediction with the fitted coefficients and the measured memory offset applied."""
        pred = Prediction(**ideal.to_dict())
        if not pred.features:  # stored by an earlier predictor (a resumed study): nothing to apply the fit to
            return pred
        pred = self._apply(pred, self.fit)
        pred.memory_gib += self.memory_offset_gib
        return pred

    def refit(self, measured: list[tuple[Prediction, dict]]) -> None:
        """Coefficients from (ideal prediction, measured figures) pairs: least squares on TPOT p99 and on
        the step time the throughput implies (running / throughput), then TTFT's line."""
        prior = prior_coefficients(self.hardware, self.cost.num_layers)
        usable = [(p, m) for p, m in measured if p.features]
        tpot = [(p.features, m["tpot_p99_ms"]) for p, m in usable if m.get("tpot_p99_ms")]
        thr = [(p.features, 1e3 * p.running / m["output_throughput"]) for p, m in usable if m.get("output_throughput")]
        self.fit = {"tpot": fit_steps(tpot, prior), "throughput": fit_steps(thr, prior), "ttft": (1.0, 0.0)}
        pairs = [(self._ttft_model(p, self.fit), m["ttft_p99_ms"]) for p, m in usable if m.get("ttft_p99_ms")]
        pairs = [(x, y) for x, y in pairs if x > 0]
        if pairs:
            self.fit["ttft"] = (statistics.median(y / x for x, y in pairs), 0.0)
        offsets = [m["memory_gib"] - p.memory_gib for p, m in measured if m.get("memory_gib") is not None]
        if offsets:
            self.memory_offset_gib = statistics.median(offsets)
        self.num_fitted = len(measured)

    def skip_reason(self, pred: Prediction, slos: dict[str, float]) -> str | None:
        """Why a candidate need not be measured (it cannot fit, or misses an SLO by a wide margin), or None.

        `slos` maps ttft / tpot to a limit in ms."""
        if not pred.fits:
            return pred.reason
        margin = SKIP_MARGIN.get(self.num_fitted, SKIP_MARGIN_FITTED)
        for metric, value in (("tpot", pred.tpot_ms), ("ttft", pred.ttft_ms)):
            limit = slos.get(metric)
            if limit is not None and value > margin * limit:
                return f"predicted {metric} {value:.1f} ms is over {margin:g} x the SLO's {limit:g} ms"
        return None

    def _tensor_parallel_problem(self, tp: int) -> str | None:
        """Why `tp` GPUs cannot run this model here (collectives.py), or None."""
        shape = {
            "num_heads": self.cost.num_heads,
            "num_kv_heads": self.cost.num_kv_heads,
            "intermediate_size": self.cost.intermediate_size,
        }
        return tensor_parallel_problem(tp, shape, self.num_gpus if self.hardware.is_gpu else None)

    def _misfit(self, settings: dict, capacity: float, seq_tokens: float, tp: int) -> str | None:
        """Why the settings cannot hold one request, or the weights at all; None when they can."""
        if capacity < seq_tokens:
            return (
                f"KV cache holds {int(capacity)} tokens, fewer than one request's {int(seq_tokens)} (prompt + output)"
            )
        if self.memory.weight_bytes(settings) / tp - self.memory.offload_freed(settings) > self.memory.budget_bytes(
            settings
        ):
            return "the weights alone exceed the memory budget"
        return None

    def _features(self, settings: dict, load: Workload, b: float, k_bytes: int) -> dict:
        """The step model's inputs (Prediction.features) for `b` sequences running at once."""
        p, o = load.prompt_len, max(load.output_len, 1.0)
        budget = int(settings.get("max_num_batched_tokens", 8192))
        chunked = settings.get("enable_chunked_prefill", True)
        room = max(budget - b, 1.0)  # prefill tokens a step can take beside the decodes
        chunks = math.ceil(p / room) if chunked else 1
        arrivals = b / o  # closed loop or steady rate: requests finishing (and starting) per step
        mixed = 1.0 - math.exp(-arrivals * chunks)  # steps that carry a prefill chunk (Poisson arrivals)
        prefill_per_mixed = min(arrivals * p / mixed, budget) if mixed > 0 else 0.0
        tp = int(settings.get("tensor_parallel_size", 1))
        copy_s = self._offload_copy_s(settings)
        scale = self.memory.weight_bytes(settings) / max(self.cost.weight_bytes, 1)  # a load-time quantization's
        roof_mixed = self._roof(b, prefill_per_mixed, p + o / 2, k_bytes, p, tp, scale) + copy_s
        roof_decode = self._roof(b, 0.0, p + o / 2, k_bytes, p, tp, scale) + copy_s
        eager = bool(settings.get("enforce_eager", False)) or not self.hardware.is_gpu
        first = min(load.concurrency, b) if load.concurrency is not None else 0.0  # prompts sent at once
        burst_tokens = first * p
        burst_steps = (math.ceil(burst_tokens / budget) if chunked else math.ceil(first / max(budget // p, 1))) or 0
        counts = load.burst_measured and (
            load.num_requests is None or (first > 0 and first / load.num_requests >= 0.01)
        )
        features = {
            "g": 1.0 if eager else mixed,
            "roof_ms": 1e3 * (mixed * roof_mixed + (1 - mixed) * roof_decode),
            "burst_steps": float(burst_steps),
            "burst_roof_ms": 1e3 * (self._roof(0.0, min(budget, burst_tokens), p / 2, k_bytes, p, tp, scale) + copy_s),
            "burst_counts": 1.0 if counts else 0.0,
            "chunks": float(chunks),
            "chunk_roof_ms": 1e3 * roof_mixed,
            "queued": max(load.concurrency / b - 1.0, 0.0) if load.concurrency is not None else 0.0,
            "running": b,
        }
        if tp > 1:
            features["allreduce_ms"] = self._allreduce_ms(settings, b, prefill_per_mixed, mixed)
        return features | flag_features(settings)

    def _offload_copy_s(self, settings: dict) -> float:
        """Seconds a step spends copying the offloaded weights in from host memory."""
        h2d = self.hardware.h2d_gbps or host_to_device_gbps(self.hardware.name)[0]
        return self.memory.offload_bytes(settings) / (h2d * 1e9)

    def _allreduce_ms(self, settings: dict, b: float, prefill_per_mixed: float, mixed: float) -> float:
        """The mean step's collectives: a share `mixed` of steps carries the prefill tokens too."""
        ar = (self.cost.hidden_size, self.cost.num_layers, self.hardware.is_gpu)
        with_prefill = step_collectives_ms(settings, b + prefill_per_mixed, *ar)
        return mixed * with_prefill + (1 - mixed) * step_collectives_ms(settings, b, *ar)

    def _roof(
        self, decodes: float, prefill: float, ctx: float, k_bytes: int, prompt: float, tp: int = 1, scale: float = 1.0
    ) -> float:
        """Roofline seconds of one step on one GPU of `tp`: its share of the weights and the decodes' KV
        (`k_bytes` is per GPU) read once, its share of all tokens' FLOPs (a decode attends to `ctx` tokens,
        a prompt's token to half its prompt on average). `scale`: the weights' bytes as loaded over the
        checkpoint's (a load-time quantization; a mixture of experts' unrounded experts count at that
        mean too)."""
        bw, peak = self.hardware.bandwidth_gbps * 1e9, self.hardware.tflops * 1e12
        linear = 2 * self.cost.active_linear_params * (decodes + prefill)
        attention = self.cost.attn_flops_per_ctx_token * (decodes * ctx + prefill * prompt / 2)
        weights = scale * self.cost.weight_bytes_read(decodes + prefill)  # a mixture of experts: those routed to
        return (weights / tp + decodes * ctx * k_bytes) / bw + (linear + attention) / (peak * tp)

    def _ttft_model(self, pred: Prediction, fit: dict) -> float:
        """TTFT p99 (ms) before its own correction: the burst or the steady path, then the slot wait."""
        f = pred.features
        eager_step = {**f, "g": 1.0}
        step = step_ms(fit["tpot"], f)
        burst = f["burst_steps"] * step_ms(fit["tpot"], eager_step | {"roof_ms": f["burst_roof_ms"]})
        steady = step + f["chunks"] * step_ms(fit["tpot"], eager_step | {"roof_ms": f["chunk_roof_ms"]})
        service = max(burst if f["burst_counts"] else 0.0, steady)
        return service + f["queued"] * (service + (pred.output_len - 1) * step)

    def _apply(self, pred: Prediction, fit: dict) -> Prediction:
        """Fill in the figures of `pred` from its features under the coefficients `fit`."""
        f = pred.features
        pred.tpot_ms = step_ms(fit["tpot"], f)
        a, b = fit["ttft"]
        pred.ttft_ms = a * self._ttft_model(pred, fit) + b
        pred.service_ttft_ms = pred.ttft_ms / (1.0 + f["queued"]) if f["queued"] else pred.ttft_ms
        throughput = 1e3 * pred.running / step_ms(fit["throughput"], f)
        pred.output_throughput = min(throughput, pred.rate_cap) if pred.rate_cap is not None else throughput
        return pred

    def _rate_cap(self, load: Workload) -> float | None:
        if load.request_rate is not None and math.isfinite(load.request_rate):
            return load.request_rate * max(load.output_len, 1.0)
        return None

    def _running(self, load: Workload, cap: float) -> float:
        """Sequences running at once: the closed loop's concurrency, or for a rate every slot the engine
        allows (ideal() then lowers it by Little's law; an unbounded rate keeps them all busy)."""
        if load.concurrency is not None:
            return max(min(load.concurrency, cap), 1.0)
        return max(cap, 1.0)


def flag_features(settings: dict) -> dict[str, float]:
    """A feature of 1.0 for each FLAG_DEFAULTS setting that departs from its default."""
    features = {}
    for name, default in FLAG_DEFAULTS.items():
        value = settings.get(name, default)
        if value != default:
            features[f"flag:{name}={value}"] = 1.0
    return features


def mape(pairs: list[tuple[float, float]]) -> float | None:
    """Mean absolute percentage error of (predicted, measured) pairs, in percent."""
    used = [(p, m) for p, m in pairs if p is not None and m]
    if not used:
        return None
    return 100.0 * sum(abs(p - m) / abs(m) for p, m in used) / len(used)
