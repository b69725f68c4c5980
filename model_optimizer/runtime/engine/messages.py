"""The engine core's message contract: what crosses between a frontend and the core, one type each way.

Frontend -> core: `CoreRequest` (a request to run, prompt already token ids, n completions),
`CoreAbort` (request ids to drop now) and `CoreControl` (pause, resume, abort everything, stop,
stats, reset the prefix cache). Core -> frontend: `CoreOutputs`, once per engine step (and after
commands while idle), with every row that has news: new token ids and their logprobs, a finish
(reason, stop token, error, preemptions), the first schedule (prompt tokens served from the prefix
cache), and the core's stats; besides the rows, the prompt logprobs a prefill chunk computed (rare:
only requests that ask), and which control commands were applied (acks) with their answers.

The core never sees text: tokenizing happens before it, detokenizing and stop strings after it
(engine/output_processor.py), in whichever process serves HTTP. The same objects travel in-process
(the offline `LLM`, tests) and between processes (`mopt serve`): there they are msgpack through
msgspec (`encode` / `decode_*`), which checks every field's type on the way in.

`CoreOutputs` is column-wise: one list of row ids and flat `array('i')` / `array('d')` buffers for
tokens and logprobs, because a step of 256 rows costs the frontend per row otherwise (one msgspec
object per row and per logprob dict). Rows are completions: request id plus completion index (n > 1).
"""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass, field

import msgspec

from model_optimizer.runtime.engine.logprob_list import LogprobList
from model_optimizer.runtime.sampler_output import Logprob, PromptLogprobs
from model_optimizer.runtime.sampling_params import SamplingParams


class CoreRequest(msgspec.Struct, tag="add", array_like=True, gc=False):
    """A request the frontend has validated: prompt ids in the vocabulary, it fits the context and the cache."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    """Its `n` completions are run as n sequences sharing the prompt's blocks; seeds n..n+k per completion."""
    max_tokens: int
    """Output limit per completion, already capped by what the context leaves."""
    priority: int = 0
    arrival_time: float = 0.0
    client: int = 0
    """Which frontend sent it: its outputs go back there (one core serves `--api-server-count` frontends)."""


class CoreAbort(msgspec.Struct, tag="abort", array_like=True, gc=False):
    """Drop these requests (all their completions) now; their blocks are free before the next step."""

    request_ids: list[str]
    """Request ids, or `index:request_id` for one completion of an n > 1 request (a stop string found in it)."""


class ControlOp(enum.Enum):
    PAUSE = "pause"
    """Run no step until RESUME; commands still apply. Answered once no step runs."""
    RESUME = "resume"
    ABORT_ALL = "abort_all"
    """Finish every request with finish_reason 'abort' (a drain that timed out)."""
    STATS = "stats"
    """Answer with the current stats (a frontend that has just connected)."""
    SHUTDOWN = "shutdown"
    """Abort everything, answer, and end the core."""
    FAIL = "fail"
    """Tests and the TP watchdog: fail the core as a failed step would (`arg` is the message)."""
    RESET_PREFIX_CACHE = "reset_prefix_cache"
    """Forget the cached prefixes no running request holds (EngineCore.reset_prefix_cache); answered with the
    token in `declined` too when running requests still hold cached blocks."""


class CoreControl(msgspec.Struct, tag="control", array_like=True, gc=False):
    op: ControlOp
    token: int = 0
    """Echoed in the answering CoreOutputs.acks, so the sender knows which command was applied."""
    arg: str = ""
    client: int = 0


CoreCommand = CoreRequest | CoreAbort | CoreControl


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_blocks: int
    kv_cache_usage: float
    num_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_prompt_tokens: int
    num_generation_tokens: int
    num_steps: int
    spec_num_drafts: int = 0
    """Speculative decoding (counters since start; all 0 without it): request-steps that verified proposals,"""
    spec_num_draft_tokens: int = 0
    """... proposed tokens verified,"""
    spec_num_accepted_tokens: int = 0
    """... of those, the ones accepted,"""
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    """... and accepted ones by position in the proposal."""
    grammar_steps: int = 0
    """Steps that sampled with grammar masks (structured outputs)."""
    host_kv_hits: int = 0
    """Of prefix_cache_hits, tokens loaded from the host KV tier (kv_offloading_size)."""
    num_swapped_out_blocks: int = 0
    """KV blocks copied to host memory by swap preemptions (preemption_mode swap),"""
    num_swapped_in_blocks: int = 0
    """... and copied back when those requests resumed."""
    grammar_seconds: float = 0.0
    """Host time advancing grammars and filling their masks, all those steps together."""
    grammar_max_seconds: float = 0.0
    """The longest one step spent on them."""
    grammar_wait_seconds: float = 0.0
    """Of that, the time the step loop waited for masks (what the forward and its own work did not hide)."""

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    @property
    def spec_mean_acceptance_length(self) -> float:
        """Tokens per request-step that verified proposals (1 + accepted proposals on average); 0 before any."""
        return 1.0 + self.spec_num_accepted_tokens / self.spec_num_drafts if self.spec_num_drafts else 0.0


class Finish(msgspec.Struct, array_like=True, gc=False):
    """A row's completion has ended in the core."""

    row: int
    reason: str
    """'stop' (EOS or a stop token id), 'length', 'abort' or 'error'."""
    stop_reason: int | None = None
    """The stop token id that ended it, if one did."""
    error: str | None = None
    """Why it failed (reason 'error'): NaN/inf logits, say."""
    num_preemptions: int = 0
    on_token: bool = False
    """The row's last token ended it (EOS or a stop token id; not a finished grammar, which ends after a
    token of the answer): as in vLLM, that token is in the ids but not in the text, unless
    include_stop_str_in_output."""


class Started(msgspec.Struct, array_like=True, gc=False):
    """A row's completion was scheduled for the first time."""

    row: int
    num_cached_tokens: int
    """Prompt tokens served from the prefix cache (or a sibling) instead of computed."""
    time: float


class LogprobColumns(msgspec.Struct, array_like=True, gc=False):
    """Logprobs of every new token of a CoreOutputs, in token order (rows without logprobs have none).

    Per token: the chosen token's logprob and rank, and how many alternatives follow in the flat
    `top_ids` / `top_logprobs`."""

    logprobs: bytes
    """array('d') per token."""
    ranks: bytes
    """array('i') per token."""
    num_top: bytes
    """array('i') per token: how many (id, logprob) pairs of top_ids / top_logprobs are its."""
    top_ids: bytes
    top_logprobs: bytes


class PromptLogprobsPart(msgspec.Struct, array_like=True, gc=False):
    """A run of one request's prompt logprobs (sampler_output.PromptLogprobs), its lists as flat arrays."""

    request_id: str
    start: int
    """Index in the prompt of the first token covered."""
    num_top: int
    """Alternatives per position in top_ids / top_logprobs."""
    token_ids: bytes
    """array('i') per position: the prompt token."""
    logprobs: bytes
    """array('d') per position."""
    ranks: bytes
    """array('i') per position."""
    top_ids: bytes
    """array('i'), num_top per position."""
    top_logprobs: bytes
    """array('d'), num_top per position."""

    @classmethod
    def of(cls, request_id: str, part: PromptLogprobs) -> PromptLogprobsPart:
        return cls(
            request_id,
            part.start,
            part.num_top,
            array("i", part.token_ids).tobytes(),
            array("d", part.logprobs).tobytes(),
            array("i", part.ranks).tobytes(),
            array("i", part.top_ids).tobytes(),
            array("d", part.top_logprobs).tobytes(),
        )

    def positions(self) -> list[dict[int, Logprob]]:
        """Per position, token id -> Logprob (rank, no alternatives of its own): the prompt token first,
        then the num_top most likely, as vLLM's prompt_logprobs are."""
        token_ids, values, ranks = _ints(self.token_ids), array("d", self.logprobs), _ints(self.ranks)
        top_ids, top_values, k = _ints(self.top_ids), array("d", self.top_logprobs), self.num_top
        out = []
        for i, token_id in enumerate(token_ids):
            entry = {token_id: Logprob(token_id, values[i], ranks[i], {})}
            for j in range(k):
                top_id = top_ids[i * k + j]
                if top_id not in entry:
                    entry[top_id] = Logprob(top_id, top_values[i * k + j], j + 1, {})
            out.append(entry)
        return out


class CoreOutputs(msgspec.Struct, array_like=True, gc=False):
    """One engine step's news (or, with no rows, the core's state after commands while idle)."""

    request_ids: list[str]
    """Per row: the request id (as sent in CoreRequest)."""
    indexes: bytes
    """array('i') per row: which of the request's n completions."""
    num_tokens: bytes
    """array('i') per row: how many of `token_ids` are its (0 for a row that only finished)."""
    token_ids: bytes
    """array('i'): every row's new tokens, row after row."""
    has_logprobs: bytes
    """array('b') per row: 1 when its tokens' logprobs are in `logprobs`, in token order."""
    logprobs: LogprobColumns | None = None
    finished: list[Finish] = msgspec.field(default_factory=list)
    started: list[Started] = msgspec.field(default_factory=list)
    stats: EngineStats | None = None
    acks: list[int] = msgspec.field(default_factory=list)
    """Tokens of the CoreControl commands applied before this output was made."""
    declined: list[int] = msgspec.field(default_factory=list)
    """Of `acks`, the commands that could do only part of what they were asked (their answer is False): a
    RESET_PREFIX_CACHE while running requests hold cached blocks."""
    error: str | None = None
    """Set when the core has failed: every request is lost, and the core ends after sending this."""
    paused: bool = False
    """Whether the core is paused (PAUSE, from any frontend): every frontend's /is_paused reads the core's state."""
    prompt_logprobs: list[PromptLogprobsPart] = msgspec.field(default_factory=list)
    """Prompt logprobs computed this step, in prompt order per request; read before the rows (a request's
    last chunk and its first token arrive in the same outputs)."""


class OutputsBuilder:
    """Builds a CoreOutputs row by row (the core's side): append, then `build()` once."""

    __slots__ = (
        "request_ids",
        "indexes",
        "num_tokens",
        "token_ids",
        "has_logprobs",
        "lp",
        "finished",
        "started",
        "prompt_logprobs",
    )

    def __init__(self) -> None:
        self.request_ids: list[str] = []
        self.indexes = array("i")
        self.num_tokens = array("i")
        self.token_ids = array("i")
        self.has_logprobs = array("b")
        self.lp: tuple[array, array, array, array, array] | None = None
        self.finished: list[Finish] = []
        self.started: list[Started] = []
        self.prompt_logprobs: list[PromptLogprobsPart] = []

    def row(self, request_id: str, index: int, token_ids: list[int], logprobs: list[Logprob] | None) -> int:
        """Add a row with its new tokens (and their logprobs, one per token, or None); returns its number."""
        self.request_ids.append(request_id)
        self.indexes.append(index)
        self.num_tokens.append(len(token_ids))
        self.token_ids.extend(token_ids)
        self.has_logprobs.append(logprobs is not None)
        if logprobs is not None:
            if self.lp is None:
                self.lp = (array("d"), array("i"), array("i"), array("i"), array("d"))
            values, ranks, num_top, top_ids, top_values = self.lp
            for lp in logprobs:
                top = lp.top
                values.append(lp.logprob)
                ranks.append(lp.rank)
                num_top.append(len(top))
                top_ids.extend(top)
                top_values.extend(top.values())
        return len(self.request_ids) - 1

    @property
    def num_rows(self) -> int:
        return len(self.request_ids)

    def build(self, stats: EngineStats | None = None, acks: list[int] | None = None) -> CoreOutputs:
        lp = None
        if self.lp is not None:
            lp = LogprobColumns(*(a.tobytes() for a in self.lp))
        return CoreOutputs(
            self.request_ids,
            self.indexes.tobytes(),
            self.num_tokens.tobytes(),
            self.token_ids.tobytes(),
            self.has_logprobs.tobytes(),
            lp,
            self.finished,
            self.started,
            stats,
            acks or [],
            prompt_logprobs=self.prompt_logprobs,
        )


Row = tuple[str, int, list[int], "LogprobList | None"]
"""One row of a CoreOutputs as the frontend reads it: (request id, completion index, new token ids,
their logprobs or None). A tuple: a step of 256 rows makes 256 of them on the frontend's event loop."""


def read_rows(out: CoreOutputs) -> list[Row]:
    """The rows of a CoreOutputs with their tokens and logprobs (the frontend's side of OutputsBuilder).
    Logprobs stay columns (LogprobList, slices of the step's arrays): no object per token."""
    indexes, num_tokens, token_ids = _ints(out.indexes), _ints(out.num_tokens), _ints(out.token_ids)
    columns = _LogprobReader(out.logprobs) if out.logprobs is not None else None
    has_logprobs = out.has_logprobs if columns is not None else None
    rows, at = [], 0
    for i, request_id in enumerate(out.request_ids):
        n = num_tokens[i]
        ids = [token_ids[at]] if n == 1 else token_ids[at : at + n].tolist()
        logprobs = columns.take(token_ids, at, n) if has_logprobs and has_logprobs[i] else None  # type: ignore[union-attr]
        at += n
        rows.append((request_id, indexes[i], ids, logprobs))
    return rows


def _ints(data: bytes) -> array:
    return array("i", data)


class _LogprobReader:
    """Hands out the logprob columns of a CoreOutputs row by row, in token order."""

    def __init__(self, cols: LogprobColumns) -> None:
        self.values, self.ranks = array("d", cols.logprobs), _ints(cols.ranks)
        self.num_top, self.top_ids, self.top_values = (
            _ints(cols.num_top),
            _ints(cols.top_ids),
            array("d", cols.top_logprobs),
        )
        self.token, self.top = 0, 0

    def take(self, token_ids: array, at: int, n: int) -> LogprobList:
        """The next n tokens' logprobs; `token_ids[at : at + n]` are those tokens."""
        t, a = self.token, self.top
        num_top = self.num_top[t : t + n]
        b = a + (num_top[0] if n == 1 else sum(num_top))
        self.token, self.top = t + n, b
        return LogprobList(
            token_ids[at : at + n],
            self.values[t : t + n],
            self.ranks[t : t + n],
            num_top,
            self.top_ids[a:b],
            self.top_values[a:b],
        )


_encoder = msgspec.msgpack.Encoder()
_command_decoder = msgspec.msgpack.Decoder(CoreCommand)
_outputs_decoder = msgspec.msgpack.Decoder(CoreOutputs)


def encode(message: CoreCommand | CoreOutputs) -> bytes:
    return _encoder.encode(message)


def decode_command(data: bytes) -> CoreCommand:
    return _command_decoder.decode(data)


def decode_outputs(data: bytes) -> CoreOutputs:
    return _outputs_decoder.decode(data)
