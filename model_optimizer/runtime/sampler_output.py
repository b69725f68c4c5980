"""What the sampler reports for each sequence and step, in plain Python.

The torch sampler (layers/sampler.py) makes these; the engine core (engine/) consumes them and
never imports torch, so they live below both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

NONFINITE_TOKEN = -1
"""The token id a runner reports for a request whose logits were NaN or inf: the request fails."""

TokenText = Callable[[int], "str | None"]
"""A token id's text as vLLM's `decoded_token` has it: the id decoded alone, special tokens included
(the frontend's TokenTexts, engine/detokenizer.py: the rule the server names logprobs' tokens by)."""


def texts_of(texts: TokenText, token_ids: Iterable[int]) -> TokenText:
    """`texts` narrowed to these ids, as a plain dict's look-up: what a pickle keeps of it (the tokenizer
    behind it is heavy to pickle, and these ids are all it will be asked for)."""
    return {t: texts(t) for t in token_ids}.get


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token's log-probability, rank (1: the most likely) and text, as vLLM's Logprob holds them:
    what `Logprob[token_id]` gives."""

    logprob: float
    rank: int
    decoded_token: str | None = None
    """The token decoded alone (see TokenText); None when the request does not detokenize."""


@dataclass(slots=True)
class Logprob:
    """The chosen token's log-probability and the top-k alternatives at one step (slots: the core makes
    one per token of every request that asks for logprobs).

    Also reads like vLLM's per-token dict, token id -> TokenLogprob (the chosen token, then the
    alternatives, ranked by their place in `top`): `lp[token_id].logprob`, `lp.items()`, `dict(lp)`, so
    code written for vLLM reads it unchanged. Not a Mapping subclass, and its values are leaves, so a
    walker that recurses into mappings stops here. A prompt_logprobs entry maps ids to Logprob objects
    themselves, so they answer `decoded_token` too."""

    token_id: int
    logprob: float
    rank: int
    top: dict[int, float]
    texts: TokenText | None = field(default=None, compare=False, repr=False)
    """Names the ids (decoded_token): set by the frontend when it hands logprobs to a request that
    detokenizes, so text is decoded only for the entries a caller reads; None: no text (the core's)."""

    @property
    def decoded_token(self) -> str | None:
        """The chosen token's text (vLLM's Logprob.decoded_token); None when the request does not detokenize."""
        return None if self.texts is None else self.texts(self.token_id)

    def __getitem__(self, token_id: int) -> TokenLogprob:
        if token_id == self.token_id:
            return TokenLogprob(self.logprob, self.rank, self.decoded_token)
        for rank, (top_id, value) in enumerate(self.top.items(), 1):
            if top_id == token_id:
                return TokenLogprob(value, rank, None if self.texts is None else self.texts(token_id))
        raise KeyError(token_id)

    def __reduce__(self) -> tuple:
        """Pickled with its ids' texts, never the tokenizer; and quicker than the slots default (under
        tensor parallel, rank 0 sends the core one per token)."""
        texts = None if self.texts is None else texts_of(self.texts, [self.token_id, *self.top])
        return Logprob, (self.token_id, self.logprob, self.rank, self.top, texts)

    def __iter__(self) -> Iterator[int]:
        yield self.token_id
        yield from (t for t in self.top if t != self.token_id)

    def __len__(self) -> int:
        return 1 + sum(1 for t in self.top if t != self.token_id)

    def __contains__(self, token_id: object) -> bool:
        return token_id == self.token_id or token_id in self.top

    def keys(self) -> list[int]:
        return list(self)

    def values(self) -> list[TokenLogprob]:
        return [self[t] for t in self]

    def items(self) -> list[tuple[int, TokenLogprob]]:
        return [(t, self[t]) for t in self]

    def get(self, token_id: int, default: TokenLogprob | None = None) -> TokenLogprob | None:
        return self[token_id] if token_id in self else default


@dataclass
class PromptLogprobs:
    """Log-probabilities of a run of one request's prompt tokens, computed from a prefill chunk's logits.

    Position i covers prompt token `start + i` (start >= 1: the first token has no context to be scored
    from). Column-wise and flat, as the runner gathers them on the device: cheap to pickle (tensor
    parallel) and to lay into the core's messages (engine/messages.py)."""

    start: int
    """Index in the prompt of the first token covered."""
    token_ids: list[int]
    """The prompt tokens covered, in order."""
    logprobs: list[float]
    """Each prompt token's log-probability under the model, given the tokens before it."""
    ranks: list[int]
    """Each prompt token's rank in its distribution (1: the most likely)."""
    num_top: int
    """How many alternatives each position has in top_ids / top_logprobs (the request's prompt_logprobs)."""
    top_ids: list[int]
    """num_top most likely token ids per position, most likely first, positions one after another."""
    top_logprobs: list[float]

    def __len__(self) -> int:
        return len(self.token_ids)

    def tail(self, start: int) -> PromptLogprobs:
        """The positions from prompt index `start` on (a preempted prefill recomputes ones already reported)."""
        skip = max(start - self.start, 0)
        k = self.num_top
        return PromptLogprobs(
            self.start + skip,
            self.token_ids[skip:],
            self.logprobs[skip:],
            self.ranks[skip:],
            k,
            self.top_ids[skip * k :],
            self.top_logprobs[skip * k :],
        )


class StepResults(dict):
    """What a runner's `collect` returns: request id -> (token id, logprob or None) for the requests that
    sampled (see engine/step_runner.py), and, in `prompt_logprobs`, request id -> the PromptLogprobs
    of the prompt positions the step computed for requests that asked for them. A dict, so a runner with
    nothing to add (a test's fake) may return a plain one."""

    prompt_logprobs: dict[str, PromptLogprobs]

    def __init__(self, *args: object, prompt_logprobs: dict[str, PromptLogprobs] | None = None) -> None:
        super().__init__(*args)
        self.prompt_logprobs = prompt_logprobs or {}
