"""`mopt deploy`: Dockerfile, Compose (with Prometheus and Grafana) and Kubernetes files rendered from the
same settings `mopt serve` reads, for our server or for `vllm serve` with the flags translated."""
