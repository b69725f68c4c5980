"""The Dockerfile: a CUDA runtime base chosen for the host driver, our package, a non-root user, the model
mounted (never copied) at /model, the Triton kernels compiled for the target GPU (kernels.py), a health
check on /health, the exact serve command, and with a required API key an entrypoint that refuses to
start the server without one."""

from __future__ import annotations

import json

from model_optimizer.common.version import __version__
from model_optimizer.optimizer.deploy.compose import API_KEY_ENV
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.cuda import VLLM_IMAGE, VLLM_IMAGE_CUDA, CudaChoice, min_driver, vllm_driver_note
from model_optimizer.optimizer.deploy.kernels import KernelPlan, dockerfile_lines
from model_optimizer.optimizer.deploy.settings import CHAT_TEMPLATE, MODEL_DIR, ServeSettings

UID = 10001
HEALTH_PROBE = (
    "import sys, urllib.request; "
    "sys.exit(urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=4).status != 200)"
)


def driver_note(deploy: DeployConfig, cuda: CudaChoice | None, driver: str | None = None) -> str:
    """The driver the image needs, and a warning when the host's `driver` (given or this machine's) runs it
    only through minor-version compatibility (ours) or is older than it needs (vLLM's). `cuda` is None for
    vLLM, whose image brings its own CUDA."""
    if deploy.engine == "vllm" or cuda is None:
        need = f"{VLLM_IMAGE} is built with CUDA {VLLM_IMAGE_CUDA}: it needs NVIDIA driver >= {min_driver(VLLM_IMAGE_CUDA)}."
        return " ".join(filter(None, [need, vllm_driver_note(driver)]))
    need = f"CUDA {cuda.cuda} (torch {cuda.torch}+{cuda.torch_variant}): needs NVIDIA driver >= {cuda.min_driver}"
    if cuda.compat_driver != cuda.min_driver:  # the first release of a major family (13.0) has no older driver
        need += f" (>= {cuda.compat_driver} runs it through CUDA minor-version compatibility, without newer PTX)"
    return " ".join(filter(None, [need + ".", cuda.note]))


def driver_warning(cuda: CudaChoice | None, driver: str | None) -> str:
    """The part of driver_note a user must act on, for the terminal (empty when the host driver runs the
    image in full): ours runs only through minor-version compatibility, or vLLM's is likely refused."""
    return cuda.note if cuda is not None else vllm_driver_note(driver)


def render_dockerfile(
    settings: ServeSettings,
    deploy: DeployConfig,
    cuda: CudaChoice | None,
    command: list[str],
    kernels: KernelPlan,
    driver: str | None = None,
) -> str:
    """The Dockerfile; `cuda` (the torch build ours installs) is None for vLLM's image."""
    lines = [
        "# syntax=docker/dockerfile:1",
        f"# Rendered by `mopt deploy` (model-optimizer {__version__}); edit the settings and render again.",
        f"# {driver_note(deploy, cuda, driver)}",
        f"# The model is mounted read-only at {MODEL_DIR}; it is never part of the image.",
    ]
    if deploy.engine == "vllm" or cuda is None:
        lines += _vllm_body(settings, deploy)
    else:
        lines += _mopt_body(settings, cuda, kernels)
    probe = json.dumps(["python3", "-c", HEALTH_PROBE.format(port=settings.port)])
    lines += [
        f"EXPOSE {settings.port}",
        f"HEALTHCHECK --interval=15s --timeout=5s --start-period={deploy.cold_start}s --retries=3 CMD {probe}",
        "STOPSIGNAL SIGTERM",
        f"ENTRYPOINT {json.dumps(entrypoint(settings, deploy))}",
        f"CMD {json.dumps(command)}",
    ]
    return "\n".join(lines) + "\n"


def entrypoint(settings: ServeSettings, deploy: DeployConfig) -> list[str]:
    """Empty (the vLLM image's own is cleared) or, when the settings need the API key, a shell that stops with
    a message when the key's variable is unset or empty and otherwise execs the command: `docker run -e
    MOPT_API_KEY` passes nothing for an unset host variable, and either server would then start open.
    Compose refuses earlier, at `up`; Kubernetes' `command` replaces this, its Secret being required."""
    if not settings.needs_api_key:
        return []
    env = API_KEY_ENV[deploy.engine]
    check = f': "${{{env}:?unset or empty: this server requires an API key (set MOPT_API_KEY on the host)}}"'
    return ["/bin/sh", "-c", f'{check}; exec "$@"', "sh"]


def _mopt_body(settings: ServeSettings, cuda: CudaChoice, kernels: KernelPlan) -> list[str]:
    lines = [
        f"FROM {cuda.base_image}",
        f'LABEL org.opencontainers.image.title="mopt-serve" org.opencontainers.image.version="{__version__}" \\',
        f'      ai.mopt.cuda="{cuda.cuda}" ai.mopt.min-driver="{cuda.min_driver}"',
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        "ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH",
        "# Ubuntu's archive drops superseded patch versions, so exact apt pins would break rebuilds;",
        "# the base image tag pins the release. gcc and the Python headers: Triton builds its small C launcher",
        "# module for the GPU at the first kernel launch (a CUDA runtime image has no compiler).",
        "# hadolint ignore=DL3008",
        "RUN apt-get update \\",
        " && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc libc6-dev \\",
        " && rm -rf /var/lib/apt/lists/* \\",
        " && python3 -m venv /opt/venv",
        f"RUN pip install --no-cache-dir 'torch=={cuda.torch}.*' --index-url {cuda.torch_index}",
        "COPY src/ /opt/mopt-src/",
        "RUN pip install --no-cache-dir /opt/mopt-src && rm -rf /opt/mopt-src \\",
        f" && useradd --system --uid {UID} --create-home mopt",
    ]
    if settings.server.chat_template:
        lines.append(f"COPY chat_template.jinja {CHAT_TEMPLATE}")
    as_root, as_user = dockerfile_lines(settings, kernels, UID)
    lines += [*as_root, f"USER {UID}", *as_user, "WORKDIR /home/mopt"]
    return lines


def _vllm_body(settings: ServeSettings, deploy: DeployConfig) -> list[str]:
    lines = [
        f"FROM {VLLM_IMAGE}",
        f'LABEL org.opencontainers.image.title="vllm-serve" ai.mopt.min-driver="{min_driver(VLLM_IMAGE_CUDA)}"',
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        f"RUN useradd --system --uid {UID} --create-home vllm",
    ]
    if settings.server.chat_template:
        lines.append(f"COPY chat_template.jinja {CHAT_TEMPLATE}")
    lines += [f"USER {UID}", "WORKDIR /home/vllm", "ENV HOME=/home/vllm"]
    return lines
