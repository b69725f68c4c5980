"""Predict a candidate's speed and memory from bytes and FLOPs, and correct the prediction by measurement.

One engine step runs `b` decoding sequences plus the prefill tokens the budget lets in. Its ideal
(roofline) time reads the weights once and each sequence's KV cache, and does 2 FLOPs per weight per
token plus attention over the context:

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
relative error, with a weak pull towards the prior so a direction no trial has explored keeps its prior.
TTFT is then corrected by the median of measured / modelled (robust to one odd trial).

A mixture of experts (runtime/models/moe_args.py) counts its experts in W and L by use: a step reads
the experts its tokens are routed to (each expert is missed by a token with probability 1 - k/E, so a
decode step of b sequences reads a share 1 - (1 - k/E)^b of them) and a token's FLOPs are those of
its k experts: Qwen3-30B-A3B's 30.5 B parameters decode at batch 1 like a 3.3 B model. DeepSeek's
shared experts run for every token. Multi-head latent attention (runtime/models/mla_args.py) caches one
latent row per token and layer (K = layers x (kv_lora_rank + qk_rope_head_dim) values, the same on every
GPU under tensor parallelism) and attends in the absorbed form: 2 x heads x (2 kv_lora_rank +
qk_rope_head_dim) FLOPs per token of context and layer.

With tensor_parallel_size N (tune/collectives.py) the roofline is one GPU's: W / N, its share of the
KV heads (one replicated head when fewer than N) and 1/N of the FLOPs; the step adds its collectives
(2 all-reduces per layer, each costed by collectives.py's measured lines) under a coefficient `ar` of
prior 1. Memory figures are per GPU. A size needing more GPUs than are
visible, or one the model's heads do not divide by, does not fit (the candidate is skipped with why).

Weight offload (`cpu_offload_gb` G, a knob for space files: `cpu_offload_gb: [0, 8, 16]`) adds the copy of
G GiB from host memory to every step's roofline, at the host-to-device bandwidth of model/inspect/
offload_plan.py or as `mopt doctor --bench` measured it (added, not overlapped: the bound the benchmarks compare with), and gives the KV cache
G GiB less two layers (the device slots): less memory, more latency, which the Pareto front shows.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from model_optimizer.model.inspect.offload_plan import host_to_device_gbps
from model_optimizer.optimizer.tune.collectives import (
    local_kv_heads,
    step_collectives_ms,
    tensor_parallel_problem,
    visible_gpu_count,
)
from model_optimizer.optimizer.tune.hardware import Hardware
from model_optimizer.runtime.models.mla_args import MlaArgs, mla_args_for
from model_optimizer.runtime.models.moe_args import moe_args_for, sparse_layers

GIB = float(1 << 30)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
SKIP_MARGIN = {0: 3.0, 1: 3.0}
"""How far over an SLO a prediction must be before the candidate is skipped, by measurements so far
(an unfitted model is trusted less); from two measurements on, SKIP_MARGIN_FITTED."""
SKIP_MARGIN_FITTED = 1.5
CPU_RUNTIME_GIB = 0.5
"""A CPU server's resident memory beyond weights and KV cache (Python, torch): the refit corrects it."""
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
BASE_TERMS = ("o_step", "o_eager", "e", "ar")


@dataclass
class ModelCost:
    """What a model costs per token, from config.json."""

    num_params: int
    linear_params: int
    """Parameters in matmuls (layers and lm_head): 2 FLOPs each per token."""
    weight_bytes: int
    kv_bytes_per_token: dict[str, int]
    """kv_cache_dtype -> bytes over all layers, K and V."""
    attn_flops_per_ctx_token: int
    """Attention FLOPs per new token per token of context (QK^T and PV)."""
    max_position_embeddings: int
    num_layers: int = 0
    hidden_size: int = 0
    num_heads: int = 0
    num_kv_heads: int = 0
    intermediate_size: int = 0
    """The shape tensor parallelism splits (0: unknown, no check)."""
    expert_params: int = 0
    """Parameters of the experts of a mixture of experts (all layers); 0 for a dense model."""
    expert_fraction: float = 1.0
    """Experts each token runs, over the experts a layer has (top_k / num_experts)."""

    @property
    def active_linear_params(self) -> float:
        """Matmul parameters one token runs through: the experts it is routed to, not all of them."""
        return self.linear_params - self.expert_params * (1.0 - self.expert_fraction)

    def weight_bytes_read(self, tokens: float) -> float:
        """Weight bytes a step of `tokens` tokens reads: every dense weight, and of the experts those that
        at least one token is routed to (uniform routing: each expert misses a token with 1 - top_k / E)."""
        if not self.expert_params:
            return float(self.weight_bytes)
        expert_bytes = self.weight_bytes * self.expert_params / self.num_params
        untouched = (1.0 - self.expert_fraction) ** max(tokens, 1.0)
        return self.weight_bytes - expert_bytes * untouched

    def kv_bytes_per_gpu(self, kv_cache_dtype: str, tensor_parallel_size: int) -> int:
        """KV bytes per token one GPU stores: its KV heads' share of the whole."""
        whole = self.kv_bytes_per_token[kv_cache_dtype]
        if tensor_parallel_size <= 1 or not self.num_kv_heads:
            return whole
        return whole // self.num_kv_heads * local_kv_heads(self.num_kv_heads, tensor_parallel_size)


def model_cost(config: dict, dtype: str | None = None) -> ModelCost:
    """Parameter, byte and FLOP counts of a decoder from its config.json (norms are ignored: under 0.1%)."""
    layers, hidden = int(config["num_hidden_layers"]), int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab, inter = int(config["vocab_size"]), int(config["intermediate_size"])
    q, kv = heads * head_dim, kv_heads * head_dim
    moe, sparse = moe_args_for(config), len(sparse_layers(config))
    experts = moe.num_experts * 3 * hidden * moe.intermediate_size if moe else 0
    router = moe.num_experts * hidden if moe else 0
    shared = moe.num_shared_experts * 3 * hidden * moe.intermediate_size if moe else 0
    mla = mla_args_for(config)
    attention = hidden * q + 2 * hidden * kv + q * hidden
    kv_values, attn_flops = 2 * kv, 4 * layers * q
    if mla is not None:  # the latent row is cached, whatever the heads; a step attends in the absorbed form
        attention = mla_attention_params(mla, hidden)
        kv_values, attn_flops, kv_heads = mla.latent_dim, 2 * layers * heads * (mla.latent_dim + mla.kv_lora_rank), 1
    blocks = layers * attention
    blocks += (layers - sparse) * 3 * hidden * inter + sparse * (experts + router + shared)
    tied = bool(config.get("tie_word_embeddings", False))
    linear = blocks + vocab * hidden  # the lm_head is a matmul whether or not it is tied
    params = blocks + vocab * hidden * (1 if tied else 2)
    dtype = dtype or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} of the model is not one of {', '.join(DTYPE_BYTES)}")
    elem = DTYPE_BYTES[dtype]
    return ModelCost(
        params,
        linear,
        prequantized_weight_bytes(config) or params * elem,
        {"auto": layers * kv_values * elem, "fp8": layers * kv_values},
        attn_flops,
        int(config.get("max_position_embeddings", 0)),
        layers,
        hidden,
        heads,
        kv_heads,
        inter,
        expert_params=sparse * experts,
        expert_fraction=moe.top_k / moe.num_experts if moe else 1.0,
    )


def prequantized_weight_bytes(config: dict) -> int | None:
    """A pre-quantized checkpoint's weight bytes as the engine loads them (its memory plan's one row:
    codes, scales, zero points, the layers its `ignore` keeps in the model dtype); None for float weights
    or a quantization_config the engine cannot read."""
    if not config.get("quantization_config"):  # float weights: no need to import the engine (torch)
        return None
    from model_optimizer.model.inspect.memory_plan import plan_memory
    from model_optimizer.model.inspect.plan_formats import checkpoint_spec

    try:
        if checkpoint_spec(config) is None:
            return None
        plan = plan_memory(config)  # no GPU: the weights' bytes alone, nothing fitted
    except ValueError:
        return None
    return next(iter(plan.weight_bytes_by_format.values()))


def mla_attention_params(mla: MlaArgs, hidden: int) -> int:
    """Parameters of one multi-head latent attention layer: queries (full or low-rank), the compressing
    projection, kv_b_proj up to every head's k_nope and value, o_proj."""
    heads = mla.num_heads
    q = hidden * heads * mla.qk_head_dim
    if mla.q_lora_rank:
        q = hidden * mla.q_lora_rank + mla.q_lora_rank * heads * mla.qk_head_dim
    kv = hidden * mla.latent_dim + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + heads * mla.v_head_dim * hidden


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


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """y = a * x + b by least squares, with b >= 0 (a fixed cost per step) and a > 0; one point or no
    spread in x: the ratio through the origin (median)."""
    if len(xs) >= 2 and max(xs) > min(xs) * 1.05:
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        b = my - a * mx
        if a > 0 and b >= 0:
            return a, b
    return statistics.median(y / x for x, y in zip(xs, ys)), 0.0


CPU_STEP_MS_PER_LAYER = 1.5
CPU_SEQ_MS_PER_LAYER = 0.2
"""Our engine's CPU step beyond the roofline: op dispatch per decoder layer, and per running sequence and
layer (attention on the torch path, sampling, bookkeeping). From benchmarks/results/cpu_engine_steps.json:
the built-in 8-layer model took 15 ms of CPU time per step at batch 1 and 1.9 ms more per sequence up to
64 (one thread), where twice the measured roofline explains 3 ms and 0.1 ms per sequence."""


def prior_coefficients(hardware: Hardware, num_layers: int = 0) -> dict[str, float]:
    """Before any measurement: a graph replay costs little per step, an eager step a few ms of Python and
    launches, and the kernels reach half the roofline. On a CPU every step is eager and its fixed cost
    grows with the layers and the sequences (o_seq, a CPU-only term)."""
    if hardware.is_gpu:
        return {"o_step": 1.0, "o_eager": 4.0, "e": 2.0, "ar": 1.0}
    return {
        "o_step": max(1.0, CPU_STEP_MS_PER_LAYER * num_layers),
        "o_eager": 0.0,
        "e": 2.0,
        "ar": 1.0,
        "o_seq": CPU_SEQ_MS_PER_LAYER * num_layers,
    }


PRIOR_SCALE = {"o_step": 1000.0, "o_eager": 1000.0, "e": 100.0, "ar": 10.0, "o_seq": 100.0}
"""How far (ms, or times the roofline) a coefficient may move from its prior before the pull matters:
far, so measurements decide; the pull only settles what no trial distinguishes. Flags: FLAG_SCALE ms."""
FLAG_SCALE = 100.0
PULL = 1e-4


def fit_steps(rows: list[tuple[dict[str, float], float]], prior: dict[str, float]) -> dict[str, float]:
    """Coefficients of t_step = sum(coef * feature) minimising the relative squared error over
    (features, measured ms) rows plus a weak pull to `prior` (flags pulled to 0)."""
    base = [*BASE_TERMS, *(["o_seq"] if "o_seq" in prior else [])]  # o_seq: CPU priors only
    names = base + sorted({k for f, _ in rows for k in f if k.startswith("flag:")})
    if not rows:
        return dict(prior)
    x = np.array([[_term(f, n) for n in names] for f, _ in rows], dtype=float)
    y = np.array([t for _, t in rows], dtype=float)
    x, y = x / y[:, None], np.ones_like(y)  # relative error: every trial counts alike whatever its size
    scale = np.array([PRIOR_SCALE.get(n, FLAG_SCALE) for n in names])
    theta0 = np.array([prior.get(n, 0.0) for n in names])
    # solve for d = (theta - theta0) / scale, pulled towards 0 with weight PULL
    a = np.vstack([x * scale, math.sqrt(PULL) * np.eye(len(names))])
    b = np.concatenate([y - x @ theta0, np.zeros(len(names))])
    d, *_ = np.linalg.lstsq(a, b, rcond=None)
    return dict(zip(names, (theta0 + d * scale).tolist()))


def _term(features: dict[str, float], name: str) -> float:
    g = features.get("g", 1.0)
    if name == "o_step":
        return 1.0
    if name == "o_eager":
        return g
    if name == "e":
        return features.get("roof_ms", 0.0)
    if name == "ar":
        return features.get("allreduce_ms", 0.0)
    if name == "o_seq":
        return features.get("running", 0.0)
    return features.get(name, 0.0)


def step_ms(coef: dict[str, float], features: dict[str, float]) -> float:
    """The fitted step time (ms), never below a tenth of the roofline (a fit can extrapolate badly)."""
    value = sum(c * _term(features, n) for n, c in coef.items())
    return max(value, 0.1 * features.get("roof_ms", 0.0), 1e-3)


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

    def __post_init__(self) -> None:
        if self.num_gpus is None and self.hardware.is_gpu:
            self.num_gpus = visible_gpu_count()
        prior = prior_coefficients(self.hardware, self.cost.num_layers)
        self.fit = {"tpot": dict(prior), "throughput": dict(prior), "ttft": (1.0, 0.0)} | self.fit

    def ideal(self, settings: dict, load: Workload) -> Prediction:
        """The step model's features for `settings` under `load`, with the prior coefficients applied."""
        kv_dtype = settings.get("kv_cache_dtype", "auto")
        tp = int(settings.get("tensor_parallel_size", 1))
        shape = {
            "num_heads": self.cost.num_heads,
            "num_kv_heads": self.cost.num_kv_heads,
            "intermediate_size": self.cost.intermediate_size,
        }
        problem = tensor_parallel_problem(tp, shape, self.num_gpus if self.hardware.is_gpu else None)
        k_bytes = self.cost.kv_bytes_per_gpu(kv_dtype, 1 if problem else tp)
        capacity, memory = self._kv_capacity(settings, k_bytes)
        p, o = load.prompt_len, max(load.output_len, 1.0)
        seq_tokens = p + o
        max_seqs = capacity / seq_tokens if seq_tokens else math.inf
        budget = int(settings.get("max_num_batched_tokens", 8192))
        chunked = settings.get("enable_chunked_prefill", True)
        cap = min(float(settings.get("max_num_seqs", 256)), max_seqs)
        running = self._running(load, cap)
        features = self._features(settings, load, running, budget, chunked, k_bytes)
        if load.concurrency is None and self._rate_cap(load) is not None:
            for _ in range(20):  # Little's law: running = rate x (O steps of the step time at that running)
                step_s = step_ms(self.fit["throughput"], features) / 1e3
                running = min(max(load.request_rate * o * step_s, 1.0), max(cap, 1.0))
                features = self._features(settings, load, running, budget, chunked, k_bytes)
        pred = Prediction(
            0.0, 0.0, 0.0, memory / GIB, running, int(capacity), o, self._rate_cap(load), features=features
        )
        pred = self._apply(pred, self.fit_prior())
        if problem:
            pred.fits, pred.reason = False, problem
        elif capacity < seq_tokens:
            pred.fits, pred.reason = (
                False,
                (
                    f"KV cache holds {int(capacity)} tokens, fewer than one request's "
                    f"{int(seq_tokens)} (prompt + output)"
                ),
            )
        elif self.cost.weight_bytes / tp - self._offload_freed(settings, tp) > self._budget_bytes(settings):
            pred.fits, pred.reason = False, "the weights alone exceed the memory budget"
        return pred

    def fit_prior(self) -> dict:
        prior = prior_coefficients(self.hardware, self.cost.num_layers)
        return {"tpot": prior, "throughput": prior, "ttft": (1.0, 0.0)}

    def predict(self, settings: dict, load: Workload) -> Prediction:
        """The figures with the coefficients measured so far."""
        return self.correct(self.ideal(settings, load))

    def correct(self, ideal: Prediction) -> Prediction:
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

    def _features(self, settings: dict, load: Workload, b: float, budget: int, chunked: bool, k_bytes: int) -> dict:
        p, o = load.prompt_len, max(load.output_len, 1.0)
        room = max(budget - b, 1.0)  # prefill tokens a step can take beside the decodes
        chunks = math.ceil(p / room) if chunked else 1
        arrivals = b / o  # closed loop or steady rate: requests finishing (and starting) per step
        mixed = 1.0 - math.exp(-arrivals * chunks)  # steps that carry a prefill chunk (Poisson arrivals)
        prefill_per_mixed = min(arrivals * p / mixed, budget) if mixed > 0 else 0.0
        tp = int(settings.get("tensor_parallel_size", 1))
        h2d = self.hardware.h2d_gbps or host_to_device_gbps(self.hardware.name)[0]
        copy_s = self._offload_bytes(settings, tp) / (h2d * 1e9)
        roof_mixed = self._roof(b, prefill_per_mixed, p + o / 2, k_bytes, p, tp) + copy_s
        roof_decode = self._roof(b, 0.0, p + o / 2, k_bytes, p, tp) + copy_s
        eager = bool(settings.get("enforce_eager", False)) or not self.hardware.is_gpu
        first = min(load.concurrency, b) if load.concurrency is not None else 0.0  # prompts sent at once
        burst_tokens = first * p
        burst_steps = (math.ceil(burst_tokens / budget) if chunked else math.ceil(first / max(budget // p, 1))) or 0
        counts = load.burst_measured and (
            load.num_requests is None or (first > 0 and first / load.num_requests >= 0.01)
        )
        queued = max(load.concurrency / b - 1.0, 0.0) if load.concurrency is not None else 0.0
        features = {
            "g": 1.0 if eager else mixed,
            "roof_ms": 1e3 * (mixed * roof_mixed + (1 - mixed) * roof_decode),
            "burst_steps": float(burst_steps),
            "burst_roof_ms": 1e3 * (self._roof(0.0, min(budget, burst_tokens), p / 2, k_bytes, p, tp) + copy_s),
            "burst_counts": 1.0 if counts else 0.0,
            "chunks": float(chunks),
            "chunk_roof_ms": 1e3 * roof_mixed,
            "queued": queued,
            "running": b,
        }
        if tp > 1:
            ar = (self.cost.hidden_size, self.cost.num_layers, self.hardware.is_gpu)
            features["allreduce_ms"] = mixed * step_collectives_ms(settings, b + prefill_per_mixed, *ar) + (
                1 - mixed
            ) * step_collectives_ms(settings, b, *ar)
        for name, default in FLAG_DEFAULTS.items():
            value = settings.get(name, default)
            if value != default:
                features[f"flag:{name}={value}"] = 1.0
        return features

    def _roof(self, decodes: float, prefill: float, ctx: float, k_bytes: int, prompt: float, tp: int = 1) -> float:
        """Roofline seconds of one step on one GPU of `tp`: its share of the weights and the decodes' KV
        (`k_bytes` is per GPU) read once, its share of all tokens' FLOPs (a decode attends to `ctx` tokens,
        a prompt's token to half its prompt on average)."""
        bw, peak = self.hardware.bandwidth_gbps * 1e9, self.hardware.tflops * 1e12
        linear = 2 * self.cost.active_linear_params * (decodes + prefill)
        attention = self.cost.attn_flops_per_ctx_token * (decodes * ctx + prefill * prompt / 2)
        weights = self.cost.weight_bytes_read(decodes + prefill)  # a mixture of experts: those routed to
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
        f = pred.features
        pred.tpot_ms = step_ms(fit["tpot"], f)
        service = self._ttft_model(pred, fit | {"tpot": fit["tpot"]})
        a, b = fit["ttft"]
        pred.ttft_ms = a * service + b
        pred.service_ttft_ms = pred.ttft_ms / (1.0 + f["queued"]) if f["queued"] else pred.ttft_ms
        throughput = 1e3 * pred.running / step_ms(fit["throughput"], f)
        pred.output_throughput = min(throughput, pred.rate_cap) if pred.rate_cap is not None else throughput
        return pred

    def _rate_cap(self, load: Workload) -> float | None:
        if load.request_rate is not None and math.isfinite(load.request_rate):
            return load.request_rate * max(load.output_len, 1.0)
        return None

    def _kv_capacity(self, settings: dict, k_bytes: int) -> tuple[float, float]:
        """KV-cache tokens and the memory the server will hold (bytes), as the engine sizes them."""
        block = int(settings.get("block_size", 16))
        tp = int(settings.get("tensor_parallel_size", 1))
        freed = self._offload_freed(settings, tp)
        if settings.get("num_kv_blocks"):
            kv_bytes = settings["num_kv_blocks"] * block * k_bytes
        elif self.hardware.is_gpu:
            planned = self._planned_row(settings)
            if planned is not None and not freed:
                return planned.num_kv_blocks * block, self._budget_bytes(settings)
            if planned is not None:  # offloaded layers leave room: the plan's budget (maybe negative) grows
                return max(planned.kv_budget_bytes + freed, 0) // (block * k_bytes) * block, self._budget_bytes(
                    settings
                )
            kv_bytes = max(self._budget_bytes(settings) - self.cost.weight_bytes / tp + freed, 0)
        else:
            kv_bytes = int(settings.get("kv_cache_memory", 1 << 30))
        tokens = kv_bytes // (block * k_bytes) * block
        if self.hardware.is_gpu:
            return tokens, self._budget_bytes(settings)  # the engine takes its whole share
        return tokens, self.cost.weight_bytes + kv_bytes + CPU_RUNTIME_GIB * GIB

    def _planned_row(self, settings: dict) -> Any:
        """The memory plan's FitRow (weights, the profile forward's activation peak, headroom: its KV budget
        and blocks), or None when the plan cannot be made (no config, or a model the registry does not know)."""
        if self.config is None:
            return None
        from model_optimizer.runtime.config import EngineConfig

        names = (
            "gpu_memory_utilization",
            "max_num_batched_tokens",
            "max_num_seqs",
            "block_size",
            "kv_cache_dtype",
            "max_model_len",
            "dtype",
            "tensor_parallel_size",
        )
        key = tuple(settings.get(n) for n in names)
        cache = self.__dict__.setdefault("_plans", {})
        if key not in cache:
            try:
                from model_optimizer.model.inspect.memory_plan import GpuMemory, plan_memory

                engine = EngineConfig(**{n: v for n, v in zip(names, key) if v is not None})
                gpu = GpuMemory(self.hardware.name, int(self.hardware.memory_gib * GIB))
                plan = plan_memory(self.config, gpu, engine)
                own = next(iter(plan.weight_bytes_by_format))  # the model dtype's row, or a pre-quantized format's
                cache[key] = plan.row(own, engine.kv_cache_dtype)
            except Exception:  # no plan: fall back to the share minus the weights
                cache[key] = None
        return cache[key]

    def _offload_bytes(self, settings: dict, tp: int) -> float:
        """Weight bytes per GPU that cpu_offload_gb keeps in host memory: every step copies them back."""
        return min(float(settings.get("cpu_offload_gb") or 0) * GIB, self.cost.weight_bytes / tp)

    def _offload_freed(self, settings: dict, tp: int) -> float:
        """GPU bytes offload frees: the offloaded layers less the two layer slots that take their place."""
        moved = self._offload_bytes(settings, tp)
        one_layer = self.cost.weight_bytes / tp / max(self.cost.num_layers, 1)
        return max(moved - 2 * one_layer, 0.0) if self.hardware.is_gpu else 0.0

    def _budget_bytes(self, settings: dict) -> float:
        if not self.hardware.is_gpu:
            return self.hardware.memory_gib * GIB
        return float(settings.get("gpu_memory_utilization", 0.9)) * self.hardware.memory_gib * GIB

    def _running(self, load: Workload, cap: float) -> float:
        """Sequences running at once: the closed loop's concurrency, or for a rate every slot the engine
        allows (ideal() then lowers it by Little's law; an unbounded rate keeps them all busy)."""
        if load.concurrency is not None:
            return max(min(load.concurrency, cap), 1.0)
        return max(cap, 1.0)


def mape(pairs: list[tuple[float, float]]) -> float | None:
    """Mean absolute percentage error of (predicted, measured) pairs, in percent."""
    used = [(p, m) for p, m in pairs if p is not None and m]
    if not used:
        return None
    return 100.0 * sum(abs(p - m) / abs(m) for p, m in used) / len(used)
