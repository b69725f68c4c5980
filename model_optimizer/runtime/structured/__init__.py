"""Structured outputs: constraints on what a request may generate (JSON schemas, regexes, choices, grammars).

params.py holds the constraint as plain data (it rides in SamplingParams), vllm_params.py reads vLLM's
spelling of one (its structured_outputs fields, StructuredOutputsParams); grammar.py turns it into an
llguidance grammar; compiler.py compiles and caches grammars off the step loop; manager.py keeps each
constrained request's matcher in the engine core and fills the token masks the sampler applies
(layers/sampler.py, kernels/sampling.py). Nothing here imports torch.
"""

from model_optimizer.runtime.structured.params import StructuredOutputs
from model_optimizer.runtime.structured.vllm_params import GuidedDecodingParams, StructuredOutputsParams

__all__ = ["GuidedDecodingParams", "StructuredOutputs", "StructuredOutputsParams"]
