"""The GPU a mopt image compiles its Triton kernels for while it is built (`--kernels-for`), and the
Dockerfile lines that do it.

A first engine start compiles every Triton kernel its forward passes meet (about 10 s on an H200).
`mopt compile-cache build` does the same without a GPU (runtime/runner/aot_build.py) from the model's
config.json alone, into the folder the engine reads at start (runtime/kernels/compile_cache.py: keyed
by versions and compute capability). Run in the image, with the serve command's engine settings, it
ships that folder, so a container on that GPU model compiles nothing at start; on any other GPU the
key or the entries miss and the kernels compile at first start, as they would without it.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass

from model_optimizer.optimizer.deploy.settings import ServeSettings, flags, non_defaults

DEFAULT_NUM_SMS = 132
DEFAULT_GPU_NAME = "NVIDIA H200"
"""SM count and name taken when `kernels_for` gives only a capability: an H100/H200 SXM's (as
`mopt compile-cache build`'s own defaults)."""
KERNELS_FOR_HELP = "auto, none or CAPABILITY[:SMS[:NAME]] such as 9.0:132:NVIDIA H200"
CONTEXT_DIR = "model-config"
"""Build-context folder holding the model's config.json (its only file the build reads)."""
MODEL_CONFIG_DIR = "/opt/mopt-model-config"
COMPILE_CACHE_DIR = "/opt/mopt-compile-cache"
"""MOPT_COMPILE_CACHE_DIR in the image: the build fills it and the engine reads it at start."""


@dataclass(frozen=True)
class KernelTarget:
    """The GPU the kernels are compiled for, as `mopt compile-cache build` takes it."""

    capability: str
    """Compute capability, "9.0"."""
    num_sms: int
    name: str
    """The device name torch reports (the quantized matmul's tile table applies by name)."""

    def describe(self) -> str:
        return f"{self.name} (compute capability {self.capability}, {self.num_sms} SMs)"


@dataclass(frozen=True)
class KernelPlan:
    """What the image does about its kernels: compile them for `target`, or not, for the reason `why_not`."""

    target: KernelTarget | None
    why_not: str = ""


def parse_kernels_for(value: str) -> KernelTarget | None:
    """`CAPABILITY[:SMS[:NAME]]` as a target; None for "auto" and "none". ValueError naming the forms allowed."""
    if value in ("auto", "none"):
        return None
    capability, _, rest = str(value).partition(":")
    sms, _, name = rest.partition(":")
    if not re.fullmatch(r"\d{1,2}\.\d", capability):
        raise ValueError(f"kernels_for must be {KERNELS_FOR_HELP}; {capability!r} is not a compute capability")
    if sms and not (sms.isdigit() and int(sms) > 0):
        raise ValueError(f"kernels_for must be {KERNELS_FOR_HELP}; the SM count {sms!r} is not a positive integer")
    if (":" in rest and not name.strip()) or not name.isprintable():
        raise ValueError(f"kernels_for must be {KERNELS_FOR_HELP}; the GPU name {name!r} is empty or not printable")
    return KernelTarget(capability, int(sms) if sms else DEFAULT_NUM_SMS, name.strip() or DEFAULT_GPU_NAME)


def local_target() -> KernelTarget | None:
    """This machine's first GPU as torch sees it, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return KernelTarget(f"{props.major}.{props.minor}", props.multi_processor_count, props.name)


def plan_kernels(settings: ServeSettings, kernels_for: str) -> KernelPlan:
    """Whether and for which GPU the image compiles its kernels (the mopt engine's image only)."""
    how = "name the GPU the image runs on, e.g. --kernels-for '9.0:132:NVIDIA H200'"
    if kernels_for == "none":
        return KernelPlan(None, "--kernels-for none")
    if settings.num_gpus > 1:
        return KernelPlan(None, f"tensor_parallel_size {settings.num_gpus}: the build covers one GPU per engine")
    config = settings.host_model_dir / "config.json"
    if not config.is_file():
        return KernelPlan(None, f"{config} is not on this machine (the build reads it)")
    from model_optimizer.runtime.server.app import is_embedding_model

    if is_embedding_model(settings.host_model_dir):
        return KernelPlan(None, "an embedding model runs the embedder, whose start the build does not cover")
    target = local_target() if kernels_for == "auto" else parse_kernels_for(kernels_for)
    if target is None:
        return KernelPlan(None, f"torch sees no GPU on this machine to compile for; {how}")
    return KernelPlan(target)


def build_command(settings: ServeSettings, target: KernelTarget) -> list[str]:
    """`mopt compile-cache build` with the engine settings of the container's serve command, the model
    being its config.json copied into the image. The tokenizer and a speculative draft model are left out:
    they are mounted only when the container runs, not while the image builds, and the build reads
    neither (runtime/runner/aot_build.py walks the model's own forward passes)."""
    engine = dataclasses.replace(
        settings.in_container().engine, model=MODEL_CONFIG_DIR, tokenizer=None, speculative_config=None
    )
    target_flags = ["--arch", target.capability, "--num-sms", str(target.num_sms), "--gpu-name", target.name]
    return ["mopt", "compile-cache", "build", *flags(non_defaults(engine)), *target_flags]


def dockerfile_lines(settings: ServeSettings, plan: KernelPlan, user: int) -> tuple[list[str], list[str]]:
    """The build step's lines to run as root, and those to run as the server's `user` (the build itself,
    so the cache stays writable to the server: Triton adds what the build missed). Without a build
    step: one comment line saying why."""
    if plan.target is None:
        return [f"# Kernels are not compiled at build time ({plan.why_not}): the first start compiles them."], []
    as_root = [
        f"# Triton kernels compiled for {plan.target.describe()} at build time, from the model's config.json",
        "# alone: a first start on that GPU model compiles nothing; another GPU model compiles at first start.",
        f"ENV MOPT_COMPILE_CACHE_DIR={COMPILE_CACHE_DIR}",
        f"COPY {CONTEXT_DIR}/ {MODEL_CONFIG_DIR}/",
        f"RUN mkdir -p {COMPILE_CACHE_DIR} && chown {user} {COMPILE_CACHE_DIR}",
    ]
    return as_root, [f"RUN {shlex.join(build_command(settings, plan.target))}"]


def readme_note(plan: KernelPlan) -> str:
    """One line for the deployment's README."""
    if plan.target is None:
        return f"not compiled at build time ({plan.why_not}): the first start compiles them."
    return (
        f"compiled for {plan.target.describe()} when the image is built, so a first start on that GPU model "
        "compiles nothing; another GPU model compiles them at its first start."
    )
