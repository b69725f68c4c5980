"""Structured outputs: constraints on what a request may generate (JSON schemas, regexes, choices, grammars).

params.py holds the constraint as plain data (it rides in SamplingParams); grammar.py turns it into an
llguidance grammar; compiler.py compiles and caches grammars off the step loop; manager.py keeps each
constrained request's matcher in the engine core and fills the token masks the sampler applies
(layers/sampler.py, kernels/sampling.py). Nothing here imports torch.
"""

from model_optimizer.runtime.structured.params import StructuredOutputs

__all__ = ["StructuredOutputs"]
