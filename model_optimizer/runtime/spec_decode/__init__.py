"""Speculative decoding: cheap proposals for the next tokens, verified by the target model in one forward.

A decoding request normally computes one token per step, and at low load each step costs one read of
every weight. With speculation the step computes its last token plus k proposed ones (a short prefill
chunk over the paged cache); rejection sampling keeps the longest prefix of proposals the target agrees
with, plus one token of the target's own, so a step yields 1 to k + 1 tokens from the target's exact
distribution.

- config.py: `--speculative-config` (vLLM's JSON), checked up front.
- ngram.py: prompt lookup over the request's own tokens (host side, no model).
- policy.py: whether speculating pays for the batch at hand, measured step by step.
- drafter.py: a smaller draft model with its own KV cache, proposing on the device inside a step.
- verify.py / rejection.py: verification rows, acceptance, and the rejection sampler.

config.py, ngram.py and policy.py import no torch: the engine core (engine/) uses them.
"""
