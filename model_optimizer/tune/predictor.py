"""Predict a candidate's speed and memory from bytes and FLOPs, and correct the prediction by measurement.

A decode step of `b` running sequences reads the weights once and each sequence's KV cache, and does
2 FLOPs per weight per token plus attention over the context:

    t_decode(b) = (W + b * ctx * K) / bandwidth  +  b * F(ctx) / peak
    t_prefill   = chunks * W / bandwidth  +  P * F(P / 2) / peak     (chunks = ceil(P / max_num_batched_tokens))
    TPOT        = t_decode(b) + (b / O) * t_prefill                  (b / O prompts join per step)
    TTFT        = t_prefill + t_decode(b)                            (wait for the step in progress)
                  + (C / b - 1) * E2E                                (a closed loop of C > b waits for slots)
    E2E         = TTFT (without the wait) + (O - 1) * TPOT
    throughput  = b * O / E2E output tokens per second (capped by the request rate's O * rate)

with W weight bytes, K KV bytes per token, F FLOPs per token, P and O the mean prompt and output
lengths, ctx = P + O / 2, b the sequences running at once (the load's concurrency, capped by
max_num_seqs and by the KV cache) and C the closed loop's concurrency. These are the ideal, roofline
figures. Every measured trial refits the correction (measured = a * ideal + b for TPOT and TTFT, a
ratio for throughput), so the prediction for the next candidate carries what this machine and
engine really achieve.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from model_optimizer.tune.hardware import Hardware

GIB = float(1 << 30)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
SKIP_MARGIN = {0: 3.0, 1: 3.0}
"""How far over an SLO a prediction must be before the candidate is skipped, by measurements so far
(an unfitted model is trusted less, and a fit to one measurement scales every candidate by that one
trial's ratio: on the H200 it pruned 50 candidates in a row); from two measurements on, SKIP_MARGIN_FITTED."""
SKIP_MARGIN_FITTED = 1.3
CPU_RUNTIME_GIB = 0.5
"""A CPU server's resident memory beyond weights and KV cache (Python, torch): the refit corrects it."""


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


def model_cost(config: dict, dtype: str | None = None) -> ModelCost:
    """Parameter, byte and FLOP counts of a decoder from its config.json (norms are ignored: under 0.1%)."""
    layers, hidden = int(config["num_hidden_layers"]), int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab, inter = int(config["vocab_size"]), int(config["intermediate_size"])
    q, kv = heads * head_dim, kv_heads * head_dim
    per_layer = hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * inter
    tied = bool(config.get("tie_word_embeddings", False))
    linear = layers * per_layer + vocab * hidden  # the lm_head is a matmul whether or not it is tied
    params = layers * per_layer + vocab * hidden * (1 if tied else 2)
    dtype = dtype or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} of the model is not one of {', '.join(DTYPE_BYTES)}")
    elem = DTYPE_BYTES[dtype]
    return ModelCost(
        params,
        linear,
        params * elem,
        {"auto": 2 * layers * kv * elem, "fp8": 2 * layers * kv},
        4 * layers * q,
        int(config.get("max_position_embeddings", 0)),
    )


@dataclass
class Workload:
    """The figures of the load the predictor needs."""

    prompt_len: float
    output_len: float
    concurrency: float | None = None
    """Requests in flight (closed loop); None with a rate."""
    request_rate: float | None = None


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


@dataclass
class Predictor:
    """The analytic model plus the efficiency factors refitted from measured trials.

    TPOT and TTFT are corrected as measured = a * ideal + b: `a` is 1 / efficiency against the roofline,
    `b` a fixed cost per step (scheduling, launches, Python) that no bandwidth figure shows. Throughput
    follows from the corrected latencies (running * O / (TTFT + (O - 1) * TPOT)), times its own factor."""

    cost: ModelCost
    hardware: Hardware
    fit: dict[str, tuple[float, float]] = field(
        default_factory=lambda: {"tpot": (1.0, 0.0), "ttft": (1.0, 0.0), "throughput": (1.0, 0.0)}
    )
    memory_offset_gib: float = 0.0
    num_fitted: int = 0
    config: dict | None = None
    """config.json: on a GPU the KV cache is sized by modelio's memory plan, the engine's own rule."""

    def ideal(self, settings: dict, load: Workload) -> Prediction:
        """The roofline figures for `settings` under `load`, before any efficiency factor."""
        kv_dtype = settings.get("kv_cache_dtype", "auto")
        k_bytes = self.cost.kv_bytes_per_token[kv_dtype]
        capacity, memory = self._kv_capacity(settings, k_bytes)
        p, o = load.prompt_len, max(load.output_len, 1.0)
        seq_tokens = p + o
        max_seqs = capacity / seq_tokens if seq_tokens else math.inf
        bw, peak = self.hardware.bandwidth_gbps * 1e9, self.hardware.tflops * 1e12
        flops = lambda ctx: 2 * self.cost.linear_params + self.cost.attn_flops_per_ctx_token * ctx  # noqa: E731
        budget = int(settings.get("max_num_batched_tokens", 8192))
        chunked = settings.get("enable_chunked_prefill", True)
        chunks = math.ceil(p / budget) if chunked else 1
        t_prefill = chunks * self.cost.weight_bytes / bw + p * flops(p / 2) / peak
        ctx = p + o / 2

        def tpot(b: float) -> float:
            t_decode = (self.cost.weight_bytes + b * ctx * k_bytes) / bw + b * flops(ctx) / peak
            return t_decode + (b / o) * t_prefill

        cap = min(float(settings.get("max_num_seqs", 256)), max_seqs)
        running = self._running(load, cap, t_prefill, tpot)
        t = tpot(running)
        service_ttft = t_prefill + t
        throughput = _throughput(running, o, service_ttft * 1e3, t * 1e3, None)
        rate_cap = load.request_rate * o if load.request_rate is not None and math.isfinite(load.request_rate) else None
        # a closed loop keeping more requests in flight than run at once: each waits for (C / running - 1) others
        queued = max(load.concurrency / running - 1.0, 0.0) if load.concurrency is not None else 0.0
        ttft = service_ttft + queued * (service_ttft + (o - 1) * t)
        pred = Prediction(
            t * 1e3,
            ttft * 1e3,
            throughput,
            memory / GIB,
            running,
            int(capacity),
            o,
            rate_cap,
            service_ttft_ms=service_ttft * 1e3,
        )
        if capacity < seq_tokens:
            pred.fits, pred.reason = (
                False,
                (
                    f"KV cache holds {int(capacity)} tokens, fewer than one request's "
                    f"{int(seq_tokens)} (prompt + output)"
                ),
            )
        elif self.cost.weight_bytes > self._budget_bytes(settings):
            pred.fits, pred.reason = False, "the weights alone exceed the memory budget"
        return pred

    def predict(self, settings: dict, load: Workload) -> Prediction:
        """The ideal figures corrected by the efficiency factors measured so far."""
        return self.correct(self.ideal(settings, load))

    def correct(self, ideal: Prediction) -> Prediction:
        pred = Prediction(**ideal.to_dict())
        (at, bt), (af, bf) = self.fit["tpot"], self.fit["ttft"]
        pred.tpot_ms, pred.ttft_ms = at * ideal.tpot_ms + bt, af * ideal.ttft_ms + bf
        service = af * (ideal.service_ttft_ms if ideal.service_ttft_ms is not None else ideal.ttft_ms) + bf
        pred.service_ttft_ms = service
        pred.output_throughput = self.fit["throughput"][0] * _throughput(
            pred.running, pred.output_len, service, pred.tpot_ms, pred.rate_cap
        )
        pred.memory_gib += self.memory_offset_gib
        return pred

    def refit(self, measured: list[tuple[Prediction, dict]]) -> None:
        """Efficiency factors from (ideal prediction, measured figures) pairs."""
        for key, ours, theirs in (("tpot", "tpot_ms", "tpot_p99_ms"), ("ttft", "ttft_ms", "ttft_p99_ms")):
            used = [(getattr(p, ours), m[theirs]) for p, m in measured if m.get(theirs) and getattr(p, ours) > 0]
            if used:
                self.fit[key] = line_fit([x for x, _ in used], [y for _, y in used])
        self.fit["throughput"] = (1.0, 0.0)
        ratios = [
            m["output_throughput"] / c.output_throughput
            for c, m in ((self.correct(p), m) for p, m in measured)
            if m.get("output_throughput") and c.output_throughput > 0
        ]
        if ratios:
            self.fit["throughput"] = (statistics.median(ratios), 0.0)
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

    def _kv_capacity(self, settings: dict, k_bytes: int) -> tuple[float, float]:
        """KV-cache tokens and the memory the server will hold (bytes), as the engine sizes them."""
        block = int(settings.get("block_size", 16))
        if settings.get("num_kv_blocks"):
            kv_bytes = settings["num_kv_blocks"] * block * k_bytes
        elif self.hardware.is_gpu:
            planned = self._planned_blocks(settings)
            if planned is not None:
                return planned * block, self._budget_bytes(settings)
            kv_bytes = max(self._budget_bytes(settings) - self.cost.weight_bytes, 0)
        else:
            kv_bytes = int(settings.get("kv_cache_memory", 1 << 30))
        tokens = kv_bytes // (block * k_bytes) * block
        if self.hardware.is_gpu:
            return tokens, self._budget_bytes(settings)  # the engine takes its whole share
        return tokens, self.cost.weight_bytes + kv_bytes + CPU_RUNTIME_GIB * GIB

    def _planned_blocks(self, settings: dict) -> int | None:
        """KV blocks by the memory plan (weights, the profile forward's activation peak, headroom), or None
        when the plan cannot be made (no config, or a model the engine's registry does not know)."""
        if self.config is None:
            return None
        from model_optimizer.config import EngineConfig

        names = (
            "gpu_memory_utilization",
            "max_num_batched_tokens",
            "max_num_seqs",
            "block_size",
            "kv_cache_dtype",
            "max_model_len",
            "dtype",
        )
        key = tuple(settings.get(n) for n in names)
        cache = self.__dict__.setdefault("_plans", {})
        if key not in cache:
            try:
                from model_optimizer.modelio.memory_plan import GpuMemory, plan_memory

                engine = EngineConfig(**{n: v for n, v in zip(names, key) if v is not None})
                gpu = GpuMemory(self.hardware.name, int(self.hardware.memory_gib * GIB))
                cache[key] = plan_memory(self.config, gpu, engine).row("bf16", engine.kv_cache_dtype).num_kv_blocks
            except Exception:  # no plan: fall back to the share minus the weights
                cache[key] = None
        return cache[key]

    def _budget_bytes(self, settings: dict) -> float:
        if not self.hardware.is_gpu:
            return self.hardware.memory_gib * GIB
        return float(settings.get("gpu_memory_utilization", 0.9)) * self.hardware.memory_gib * GIB

    def _running(self, load: Workload, cap: float, t_prefill: float, tpot) -> float:
        """Sequences running at once: the closed loop's concurrency, or rate x latency (Little's law) for a rate."""
        if load.concurrency is not None:
            return max(min(load.concurrency, cap), 1.0)
        if load.request_rate is None or not math.isfinite(load.request_rate):
            return max(cap, 1.0)
        running = 1.0
        for _ in range(20):  # fixed point of running = rate * (TTFT + O * TPOT(running))
            running = max(min(load.request_rate * (t_prefill + load.output_len * tpot(running)), cap), 1.0)
        return running


def _throughput(running: float, output_len: float, ttft_ms: float, tpot_ms: float, rate_cap: float | None) -> float:
    """Output tokens per second of `running` requests each taking TTFT + (O - 1) x TPOT, capped by the rate."""
    e2e_s = (ttft_ms + max(output_len - 1, 0.0) * tpot_ms) / 1e3
    value = running * output_len / e2e_s if e2e_s > 0 else 0.0
    return min(value, rate_cap) if rate_cap is not None else value


def mape(pairs: list[tuple[float, float]]) -> float | None:
    """Mean absolute percentage error of (predicted, measured) pairs, in percent."""
    used = [(p, m) for p, m in pairs if p is not None and m]
    if not used:
        return None
    return 100.0 * sum(abs(p - m) / abs(m) for p, m in used) / len(used)
