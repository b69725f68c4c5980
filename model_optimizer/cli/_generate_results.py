"""`mopt generate`'s results: each finished prompt as a JSONL row or a line of text, on stdout as the
prompts finish or in the --output file at the end, and the engine statistics table on stderr.

(The leading underscore keeps this module out of `mopt`'s subcommands: cli/main.py registers every other
module of this package as one.)
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from model_optimizer.cli._generate_prompts import clip
from model_optimizer.common.fileio import atomic_write
from model_optimizer.runtime.sampling_params import SamplingParams


class Results:
    """The finished prompts' results, in prompt order, where --output says: on stdout each as soon as every
    prompt before it has finished (a reader at the other end of a pipe gets them while the batch runs, not
    all at its end), in a file all at once, atomically, at `close`."""

    def __init__(self, output: str | None, llm: Any, prompt_texts: tuple, params: list[SamplingParams]) -> None:
        self.output, self.llm, self.prompt_texts, self.params = output, llm, prompt_texts, params
        self.to_file = bool(output) and output != "-"
        self.finished: dict[int, Any] = {}
        """Prompt index -> its RequestOutput."""
        self.num_printed = 0
        """Prompts 0 .. num_printed - 1 are on stdout."""

    def add(self, index: int, output: Any) -> None:
        self.finished[index] = output
        if self.to_file:
            return
        while self.num_printed in self.finished:
            self._print(self.num_printed)
            self.num_printed += 1
        sys.stdout.flush()

    def close(self) -> str:
        """Hand out what has not gone out yet (after an interrupt, the finished prompts past one that had
        not); returns where the results went."""
        if self.to_file:
            if not self.finished:
                return f"{self.output} was not written"
            rows = (self._result(i) for i in sorted(self.finished))
            atomic_write(self.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
            return f"their results are in {self.output}"
        for index in sorted(i for i in self.finished if i >= self.num_printed):
            self._print(index)
        self.num_printed = len(self.prompt_texts)
        sys.stdout.flush()
        return "their results were printed"

    def _result(self, index: int) -> dict:
        tokenizer = self.llm.tokenizer
        return _result(index, self.prompt_texts[index], self.finished[index], self.params[index], tokenizer)

    def _print(self, index: int) -> None:
        result = self._result(index)
        if self.output == "-":
            print(json.dumps(result, ensure_ascii=False))
        else:
            _print_text(result)


def _result(index: int, prompt: str | None, output: Any, params: SamplingParams, tokenizer: Any) -> dict:
    """One prompt's JSONL row: its prompt, each completion (with logprobs when asked), and its timings."""
    return {
        "prompt_index": index,
        "prompt": prompt,
        "prompt_token_ids": output.prompt_token_ids,
        "num_cached_tokens": output.num_cached_tokens,
        "outputs": [_completion(c, params, tokenizer) for c in output.outputs],
        **({"error": output.error} if output.error else {}),
        **(
            {"prompt_logprobs": _prompt_logprobs(output, params.prompt_logprobs, tokenizer)}
            if output.prompt_logprobs is not None
            else {}
        ),
        "ttft_s": output.metrics.ttft,
        "latency_s": (output.metrics.finished_time or 0) - output.metrics.arrival_time,
    }


def _completion(completion: Any, params: SamplingParams, tokenizer: Any) -> dict:
    """One completion of a prompt in its JSONL row."""
    row = {
        "index": completion.index,
        "text": completion.text,
        "token_ids": completion.token_ids,
        "finish_reason": completion.finish_reason,
        "stop_reason": completion.stop_reason,
    }
    if completion.logprobs is not None:
        row["cumulative_logprob"] = _finite(completion.cumulative_logprob)
        row["logprobs"] = _logprobs(completion.logprobs, params.logprobs, tokenizer)
    return row


def _logprobs(logprobs: list, num_top: int | None, tokenizer: Any) -> list[dict]:
    """Each generated token with its logprob and rank, and the num_top most likely tokens at that step."""
    from model_optimizer.runtime.engine.detokenizer import TokenTexts

    text = TokenTexts(tokenizer)
    return [
        _logprob_row(
            text, lp.token_id, lp.logprob, lp.rank, sorted(lp.top.items(), key=lambda kv: -kv[1])[: num_top or 0]
        )
        for lp in logprobs
    ]


def _prompt_logprobs(output: Any, num_top: int | None, tokenizer: Any) -> list[dict | None]:
    """Each prompt token after the first with its logprob and rank given the tokens before it, and the
    num_top most likely tokens there (rows as _logprobs'); None for the first token."""
    from model_optimizer.runtime.engine.detokenizer import TokenTexts

    text = TokenTexts(tokenizer)
    rows: list[dict | None] = []
    for token, entry in zip(output.prompt_token_ids, output.prompt_logprobs):
        if entry is None:
            rows.append(None)
            continue
        top = sorted(((t, lp) for t, lp in entry.items() if lp.rank <= (num_top or 0)), key=lambda kv: kv[1].rank)
        chosen = entry[token]
        rows.append(_logprob_row(text, token, chosen.logprob, chosen.rank, [(t, lp.logprob) for t, lp in top]))
    return rows


def _logprob_row(text: Any, token: int, logprob: float, rank: int, top: list[tuple[int, float]]) -> dict:
    """One token's row in a JSONL result: its text, logprob and rank, and the most likely tokens there."""
    return {
        "token_id": token,
        "token": text(token),
        "logprob": _finite(logprob),
        "rank": rank,
        "top": [{"token_id": t, "token": text(t), "logprob": _finite(v)} for t, v in top],
    }


def _print_text(result: dict) -> None:
    prompt = result["prompt"] if result["prompt"] is not None else result["prompt_token_ids"]
    shown = clip(prompt, 80)
    for c in result["outputs"]:
        tag = f"[{c['index']}] " if len(result["outputs"]) > 1 else ""
        print(f"{shown} -> {tag}{c['text']!r} ({c['finish_reason']})")
        for lp in c.get("logprobs", []):
            top = "  ".join(f"{t['token']!r} {_fmt(t['logprob'])}" for t in lp["top"])
            print(f"    {lp['token']!r:>14} {_fmt(lp['logprob'])}  rank {lp['rank']}  top: {top}")


def print_stats(console: Any, llm: Any, outputs: list, elapsed: float) -> None:
    """The engine statistics table of the run (on `console`, stderr): tokens, throughput, cache and steps."""
    from rich.table import Table

    stats = llm.engine.stats()
    generated = sum(o.num_output_tokens for o in outputs)
    table = Table(title="engine statistics", show_header=False)
    table.add_row("requests", str(len(outputs)))
    table.add_row("prompt tokens computed", str(stats.num_prompt_tokens))
    table.add_row("generated tokens", str(generated))
    table.add_row("wall time", f"{elapsed:.2f} s")
    table.add_row("output tokens/s", f"{generated / elapsed:.1f}" if elapsed else "-")
    table.add_row("prefix-cache hit rate", f"{stats.prefix_cache_hit_rate:.1%}")
    table.add_row("preemptions", str(stats.num_preemptions))
    table.add_row("engine steps", str(stats.num_steps))
    table.add_row("KV-cache blocks", f"{stats.num_blocks} x {llm.config.block_size} tokens")
    if llm.config.speculative is not None:
        proposed, accepted = stats.spec_num_draft_tokens, stats.spec_num_accepted_tokens
        table.add_row("spec decode: mean acceptance length", f"{stats.spec_mean_acceptance_length:.2f}")
        table.add_row(
            "spec decode: proposals accepted",
            f"{accepted} of {proposed}" + (f" ({accepted / proposed:.1%})" if proposed else ""),
        )
    console.print(table)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no -Infinity


def _fmt(value: float | None) -> str:
    return "-inf" if value is None else f"{value:.3f}"
