"""The number formats quantized weights, activations and the KV cache are stored in: one definition each.

fp8 is e4m3 ("fn": no infinities), whose largest finite value is 448; torch's cast to it does not
saturate, so every writer clamps to +-FP8_MAX first. int8 weights are symmetric codes -127..127,
int4 weights unsigned codes 0..15 around a zero point.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
INT8_MAX = 127
INT4_MAX = 15
