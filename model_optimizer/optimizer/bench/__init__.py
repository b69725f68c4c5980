"""`mopt bench`: measure an OpenAI-compatible server the way its users experience it.

workloads (what to send) -> load (when to send it) -> client (send, time every chunk)
-> metrics (percentiles, goodput) -> report (JSON, CSV, HTML); scrape and telemetry watch
the server while it runs.
"""
