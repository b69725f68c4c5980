"""DeployConfig: what `mopt deploy` renders, beside the serve settings it renders them for.

Each field's docstring is also its CLI help (see model_optimizer/cli/args.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Literal

from model_optimizer.optimizer.deploy.kernels import parse_kernels_for
from model_optimizer.runtime.config import check_choice, check_positive

Target = Literal["docker", "compose", "k8s"]
Engine = Literal["mopt", "vllm"]
K8S_ONLY = ("min_replicas", "max_replicas", "queue_target", "storage_class")
"""Fields only the Kubernetes manifests read: given with another target they would shape nothing."""


@dataclass
class DeployConfig:
    """Where the files go and what they run."""

    target: Target = "compose"
    """docker: a Dockerfile; compose: plus docker-compose.yml with Prometheus, Grafana and a GPU exporter; k8s: plus Kubernetes manifests."""

    output: str = "deploy"
    """Folder to write the files into: new, empty, or one an earlier render wrote (it lists its files in
    .mopt-deploy-files.json; those are replaced, any other file stays). A folder holding files deploy did not
    write, or a file of the user's where a rendered one goes, is refused."""

    engine: Engine = "mopt"
    """Server the container runs: mopt serve, or vllm serve with the settings translated to vLLM's flags."""

    image: str | None = None
    """Name of the image the Dockerfile builds and Compose / Kubernetes run. Empty: mopt-serve:VERSION (our
    package's version) for mopt, vllm-serve:TAG (the vLLM image's tag) for vLLM, so a rebuild never
    silently replaces what runs."""

    driver: str | None = None
    """Host NVIDIA driver version to build for (e.g. 570.133.20). Empty: this machine's (NVML), else torch's default CUDA build."""

    cuda: str | None = None
    """CUDA release of the image (12.6, 12.8, 13.0 ...), overriding the choice from the driver."""

    kernels_for: str = "auto"
    """mopt engine: the GPU whose Triton kernels the image compiles while it is built, so a container's first
    start compiles none: auto (this machine's GPU as torch sees it; none seen: no build step), none, or
    CAPABILITY[:SMS[:NAME]] such as 9.0:132:NVIDIA H200 (SMS and NAME default to an H100/H200 SXM's 132 and
    "NVIDIA H200"; give them for other GPUs). Any other GPU still runs the image, compiling at first start."""

    cold_start: int = 600
    """Seconds from container start to /ready, measured or estimated; sizes the start-up health-check grace and the startupProbe."""

    min_replicas: int = 1
    """Kubernetes: fewest replicas the autoscaler keeps."""

    max_replicas: int = 4
    """Kubernetes: most replicas the autoscaler starts."""

    queue_target: int = 8
    """Kubernetes: waiting requests per replica (vllm:num_requests_waiting) the autoscaler aims for."""

    storage_class: str | None = None
    """Kubernetes: storage class of the model volume claim. With more than one replica the claim is
    ReadWriteMany (one loader pod writes the model, every replica reads it), which the class must offer
    (NFS, CephFS, EFS, Filestore, Azure Files); with one it is ReadWriteOnce. Empty: the cluster's default."""

    def __post_init__(self) -> None:
        check_choice(self, "target", "engine")
        check_positive(self, "cold_start", "min_replicas", "max_replicas", "queue_target")
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})")
        parse_kernels_for(self.kernels_for)  # a ValueError naming the forms allowed
        if self.driver is not None and not re.fullmatch(r"\d+(\.\d+){0,2}", self.driver):
            # "x.y" was reported as "older than 560.28.03", and "" or "570.abc" compared as a version
            raise ValueError(f"driver must be a version such as 570.133.20, got {self.driver!r}")
        self._check_used()
        if self.image is None:
            self.image = default_image(self.engine)
        if not self.image or any(c.isspace() for c in self.image):
            raise ValueError(f"image must be a non-empty image name without spaces, got {self.image!r}")

    def _check_used(self) -> None:
        """ValueError for a flag the rendered files would silently ignore: a Kubernetes-only one with another
        target (`--target compose --min-replicas 2` still ran one server), or one that shapes our image with
        --engine vllm (`--cuda 12.6` still got vLLM's CUDA 12.9 image, the host's old driver unchecked)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        ignored = [name for name in K8S_ONLY if getattr(self, name) != defaults[name]]
        if ignored and self.target != "k8s":
            flag = "--" + ignored[0].replace("_", "-")
            raise ValueError(
                f"{flag} shapes the Kubernetes manifests only, and --target {self.target} renders none; "
                "add --target k8s or leave it out"
            )
        if self.engine != "vllm":
            return
        from model_optimizer.optimizer.deploy.cuda import VLLM_IMAGE, VLLM_IMAGE_CUDA

        if self.cuda is not None:
            raise ValueError(
                f"--cuda picks the torch build of our image; --engine vllm runs {VLLM_IMAGE}, built with CUDA "
                f"{VLLM_IMAGE_CUDA}: leave --cuda out (--driver checks the host's driver against that image)"
            )
        if self.kernels_for not in ("auto", "none"):
            raise ValueError(
                "--kernels-for compiles our engine's Triton kernels into the image; --engine vllm runs vLLM's "
                "image, which has none of ours: leave it out"
            )


def default_image(engine: str) -> str:
    """The image name for `engine`, tagged with what it runs (never `latest`)."""
    if engine == "vllm":
        from model_optimizer.optimizer.deploy.cuda import VLLM_IMAGE

        return "vllm-serve:" + VLLM_IMAGE.rsplit(":", 1)[1]
    from model_optimizer.common.version import __version__

    return f"mopt-serve:{__version__}"
