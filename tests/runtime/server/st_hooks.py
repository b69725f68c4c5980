"""Schemathesis hooks (loaded through SCHEMATHESIS_HOOKS): string model names become the served one,
so generated requests reach the engine instead of stopping at 404 (other fields stay fuzzed)."""

import schemathesis

SERVED_MODEL = "tiny"


@schemathesis.hook
def map_body(context, body):
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        body["model"] = SERVED_MODEL
    return body
