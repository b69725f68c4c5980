"""What happened to one request: `RequestRecord`, the unit every figure of `mopt bench` is computed from.

Its own module so that the metrics, reports and the tuner read records without the HTTP client.
Times are seconds from the start of the run (time.perf_counter based).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """What happened to one request."""

    index: int
    prompt_len: int
    output_len_requested: int
    scheduled: float = 0.0
    """When the load generator wanted it sent (arrival time, or when a concurrency slot freed)."""
    send: float = 0.0
    """When the HTTP call started."""
    end: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    """Arrival time of each chunk that carried output tokens (non-empty text or non-empty token_ids)."""
    chunk_tokens: list[int] = field(default_factory=list)
    """Output tokens in each of those chunks (a server merges what a slow reader left waiting, as vLLM
    and `mopt serve` do): from token_ids or logprobs when sent, else the server's usage spread over the
    chunks by text length (chunk_token_counts). Empty means one token per chunk."""
    output_tokens: int = 0
    prompt_tokens: int | None = None
    """From the server's `usage`, when it reports it."""
    usage_reported: bool = False
    token_count_source: str = ""
    """Where output_tokens came from: usage (the server's), token_ids (ids or logprobs of every chunk),
    tokenizer (the output text counted after the run, see token_counts.py) or chunks (one per chunk)."""
    output_text: str | None = None
    """The streamed text, kept only while output_tokens waits to be counted with a tokenizer (never saved)."""
    chunk_chars: list[int] = field(default_factory=list)
    """Text length of each token-carrying chunk, kept with output_text (never saved)."""
    queue_wait: float = 0.0
    """Seconds from `scheduled` until a --max-concurrency slot let the request go (open loop with a cap)."""
    error: str | None = None
    """None on success; else http_<status>, timeout, connection, malformed_stream, stream_error or other."""
    error_detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.send if self.chunk_times else None

    @property
    def e2e(self) -> float:
        return self.end - self.send
