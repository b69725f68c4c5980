"""HTTP routes, one module per API. Routes stay thin: validate, hand to the engine, render."""

from model_optimizer.runtime.server.protocol_outputs import ErrorResponse

ERROR_RESPONSES: dict = {code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 415, 500, 503)}
