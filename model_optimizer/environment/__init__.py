"""`mopt doctor`: diagnose the GPU stack and say exactly what to fix.

Probes (probes/) record the machine into a snapshot (plain JSON); rules (rules/) turn a snapshot
into findings with fixes; bench.py measures against the datasheet; recommend.py tells the rest of
mopt what the hardware can do; explain.py maps error messages to causes and fixes.

Heavy imports (torch, pynvml) happen inside the functions that need them."""

from model_optimizer.environment.explain import explain
from model_optimizer.environment.findings import Finding, exit_code
from model_optimizer.environment.probes import capture_snapshot
from model_optimizer.environment.recommend import recommended_settings
from model_optimizer.environment.rules import evaluate

__all__ = ["Finding", "capture_snapshot", "evaluate", "exit_code", "explain", "recommended_settings"]
