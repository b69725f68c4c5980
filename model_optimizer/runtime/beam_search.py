"""Beam search on top of the engine, the way vLLM's `LLM.beam_search` and `use_beam_search` run it.

Each step asks the engine for one token per live beam with 2 x beam_width logprobs (the prefix cache
keeps the beams' shared prompt); every beam's chosen token and alternatives extend it into a candidate,
candidates ending in EOS are set aside as finished (unless ignore_eos), and the beam_width best of the
rest, by length-penalized score, live on. After max_tokens steps (or when the context is full) the
finished candidates and the live beams compete, and the beam_width best are the answer.

The score is vLLM's: the sum of the generated tokens' logprobs over the sequence's length (prompt
included, a final EOS not) to the power length_penalty. Transformers' `generate(num_beams=...)` picks the
same beams while no EOS intervenes (its candidates are the same top tokens); its length normalization
and early stopping differ.

`BeamSearch` holds one prompt's search and knows nothing of how steps run: `LLM.beam_search` steps it
with the offline engine, the server's `use_beam_search` with the async one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from model_optimizer.runtime.engine.detokenizer import TokenTexts, decoded_after, prompt_context
from model_optimizer.runtime.sampler_output import Logprob
from model_optimizer.runtime.sampling_checks import is_finite, is_int
from model_optimizer.runtime.sampling_params import MAX_LOGPROBS, RequestOutputKind, SamplingParams

MAX_BEAM_WIDTH = MAX_LOGPROBS // 2
"""Each step asks for 2 x beam_width logprobs, and the engine returns at most MAX_LOGPROBS."""


@dataclass
class BeamSearchParams:
    """vLLM's BeamSearchParams: how wide and how long to search."""

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    """Do not set EOS-ended candidates aside: they compete as beams, and the search runs max_tokens steps."""
    temperature: float = 0.0
    """0: each beam's candidates are its most likely tokens; above 0 each step also samples one token at this
    temperature, which joins the candidates when it is not among them."""
    length_penalty: float = 1.0
    """The exponent of the length a sequence's summed logprob is divided by: 0 ranks by the sum alone,
    higher values favour longer sequences."""
    include_stop_str_in_output: bool = False
    """Keep a final EOS token in the text."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the text, as SamplingParams.skip_special_tokens does for sampled text."""

    def __post_init__(self) -> None:
        width = self.beam_width
        if not is_int(width) or not 1 <= width <= MAX_BEAM_WIDTH:
            raise ValueError(f"beam_width must be an integer in [1, {MAX_BEAM_WIDTH}], got {width!r}")
        if not is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        temperature, penalty = self.temperature, self.length_penalty
        if not is_finite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        if not is_finite(penalty):
            raise ValueError(f"length_penalty must be a finite number, got {penalty!r}")

    def step_params(self) -> SamplingParams:
        """One step of one beam: a single token with 2 x beam_width alternatives, nothing else applied."""
        return SamplingParams(
            temperature=self.temperature,
            max_tokens=1,
            logprobs=2 * self.beam_width,
            ignore_eos=True,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )


@dataclass
class BeamSearchSequence:
    """One beam, as vLLM's: its tokens (prompt included), each generated token's logprobs (the token chosen
    at that step and its alternatives: reads as vLLM's dict of token id -> logprob), their sum, and once
    the search ends its text and why it ended."""

    tokens: list[int]
    logprobs: list[Logprob] = field(default_factory=list)
    cum_logprob: float = 0.0
    text: str | None = None
    finish_reason: str | None = None
    """'stop' (it ended with EOS) or 'length' (max_tokens, or the context was full)."""
    stop_reason: int | str | None = None
    """The EOS token id that ended it, if one did."""


@dataclass
class BeamSearchOutput:
    """One prompt's answer: its best sequences, at most beam_width, best first."""

    sequences: list[BeamSearchSequence]


def beam_max_len(config: Any, max_model_len: int) -> int:
    """The longest a beam may grow under an EngineConfig: the context, or with chunked prefill off one token
    past the step budget (each step sends a beam's tokens as a prompt, which must then fit one step)."""
    if config is not None and not config.enable_chunked_prefill:
        return min(max_model_len, config.max_num_batched_tokens + 1)
    return max_model_len


def beam_search_score(
    tokens: Sequence[int], cum_logprob: float, eos_token_ids: Collection[int], length_penalty: float
) -> float:
    """vLLM's beam score: cum_logprob over the length (prompt included, a final EOS not) ** length_penalty."""
    length = len(tokens) - (1 if tokens and tokens[-1] in eos_token_ids else 0)
    return cum_logprob / (max(length, 1) ** length_penalty)


class BeamSearch:
    """One prompt's search. Whoever runs the engine asks `pending()` for the token ids to extend by one
    token (one request each, with `params.step_params()`), and hands each one's step logprobs back, in the
    same order, to `advance`; until `done`. Then `result` ranks what was found."""

    def __init__(
        self,
        prompt_token_ids: Sequence[int],
        params: BeamSearchParams,
        eos_token_ids: Collection[int],
        max_model_len: int,
    ) -> None:
        if not prompt_token_ids:
            raise ValueError("beam search needs a prompt of at least one token")
        if len(prompt_token_ids) >= max_model_len:
            raise ValueError(
                f"the prompt has {len(prompt_token_ids)} tokens, and a beam may hold at most {max_model_len} (the "
                "context, or one past the step budget with chunked prefill off): no token could follow it"
            )
        self.params = params
        self.eos_token_ids = frozenset(() if params.ignore_eos else eos_token_ids)
        self.max_model_len = max_model_len
        self.num_prompt_tokens = len(prompt_token_ids)
        self.beams = [BeamSearchSequence(list(prompt_token_ids))]
        self.finished: list[BeamSearchSequence] = []
        """Candidates that ended with EOS, set aside as vLLM does (all of them: ranked only at the end)."""
        self.num_steps = 0

    @property
    def done(self) -> bool:
        return not self.beams or self.num_steps >= self.params.max_tokens

    def pending(self) -> list[list[int]]:
        """The token ids of each live beam, to extend by one token; empty when the search is done."""
        return [] if self.done else [beam.tokens for beam in self.beams]

    def _score(self, beam: BeamSearchSequence) -> float:
        return beam_search_score(beam.tokens, beam.cum_logprob, self.eos_token_ids, self.params.length_penalty)

    def advance(self, step_logprobs: Sequence[Logprob]) -> None:
        """One step: each live beam's logprobs for its next token (pending()'s order)."""
        if len(step_logprobs) != len(self.beams):
            raise ValueError(f"got {len(step_logprobs)} steps' logprobs for {len(self.beams)} beams")
        candidates = []
        for beam, logprobs in zip(self.beams, step_logprobs):
            for token_id, entry in logprobs.items():
                if entry.logprob == -math.inf:  # a token the step could not have chosen
                    continue
                candidate = BeamSearchSequence(
                    beam.tokens + [token_id], beam.logprobs + [logprobs], beam.cum_logprob + entry.logprob
                )
                if token_id in self.eos_token_ids:
                    candidate.finish_reason, candidate.stop_reason = "stop", token_id
                    self.finished.append(candidate)
                else:
                    candidates.append(candidate)
        candidates.sort(key=self._score, reverse=True)
        self.beams = candidates[: self.params.beam_width]
        self.num_steps += 1
        if self.beams and len(self.beams[0].tokens) >= self.max_model_len:
            self.num_steps = self.params.max_tokens  # the context is full: nothing can grow

    def result(self, tokenizer: Any) -> BeamSearchOutput:
        """The beam_width best of the finished candidates and the live beams, best first, with their text and
        their logprobs' decoded_token (none without a tokenizer)."""
        for beam in self.beams:
            beam.finish_reason = "length"
        best = sorted(self.finished + self.beams, key=self._score, reverse=True)[: self.params.beam_width]
        texts = None if tokenizer is None else TokenTexts(tokenizer)
        for beam in best:
            beam.text = None if tokenizer is None else self._text(tokenizer, beam)
            for logprob in beam.logprobs:  # decoded_token, as a sampled completion's logprobs answer it
                logprob.texts = texts
        return BeamSearchOutput(best)

    def output_ids(self, beam: BeamSearchSequence) -> list[int]:
        """A beam's generated tokens, a final EOS included (as a sampled completion's token_ids and vLLM's
        beams have it, and as usage counts it)."""
        return beam.tokens[self.num_prompt_tokens :]

    def _text(self, tokenizer: Any, beam: BeamSearchSequence) -> str:
        """The generated tokens' text as the output processor decodes a sampled completion's: after the
        prompt's last tokens, with skip_special_tokens, a final EOS left out unless
        include_stop_str_in_output."""
        spoken = self.output_ids(beam)
        if beam.finish_reason == "stop" and not self.params.include_stop_str_in_output:
            spoken = spoken[:-1]
        context = prompt_context(tokenizer, beam.tokens[: self.num_prompt_tokens], self.params.skip_special_tokens)
        return decoded_after(tokenizer, context, spoken, self.params.skip_special_tokens)
