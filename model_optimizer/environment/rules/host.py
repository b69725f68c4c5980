"""Rules about the machine as a whole: is there a GPU at all (and what works without one),
probes that hung, the container toolkit, inference packages and their bytecode, RAM and disk."""

from __future__ import annotations

import importlib.util
import os

from model_optimizer.environment.findings import Finding
from model_optimizer.environment.snapshot import Snapshot

GIB = 1 << 30
MIN_RAM_AVAILABLE = 8 * GIB
MIN_DISK_FREE = 20 * GIB
CPU_COMMANDS = ("generate", "serve", "bench", "embed", "export-onnx", "tune")
"""mopt commands that work on the CPU with small models, named in the no-GPU finding when installed."""


def rule_gpu_presence(snap: Snapshot) -> list[Finding]:
    """Say plainly whether there is a GPU, and on a CPU-only machine what still works."""
    if snap.gpu_usable:
        names = ", ".join(d.get("name", "?") for d in snap.torch.get("devices") or [])
        return [
            Finding(
                "gpu.usable",
                "ok",
                f"{snap.torch.get('device_count')} GPU(s) usable by torch {snap.torch.get('version')}: {names}",
                details={"devices": snap.torch.get("devices")},
            )
        ]
    if snap.gpu_hardware_seen:
        return []  # the driver and CUDA rules say what is broken
    cpu = snap.data("system").get("cpu") or {}
    mem = snap.data("system").get("memory") or {}
    in_container = snap.data("container_toolkit").get("in_container")
    works = (
        f"mopt runs on the CPU here with torch {snap.torch.get('version', '?')}, {cpu.get('usable_cores', '?')} cores and "
        f"{(mem.get('total_bytes') or 0) / GIB:.0f} GiB RAM: {_cpu_commands()} work with small models, "
        "Triton kernels only in interpreter mode (TRITON_INTERPRET=1), no --bench microbenchmarks."
    )
    hint = " This is a container: if the host has a GPU, start it with --gpus all." if in_container else ""
    return [
        Finding(
            "gpu.none",
            "ok",
            "No NVIDIA GPU found on this machine",
            works + hint,
            {"any": ["Use --require-gpu to make this an error (exit code 2)"]},
            {"nvml_error": snap.error("nvml")[1], "torch_cuda": snap.torch.get("cuda"), "in_container": in_container},
        )
    ]


def _cpu_commands() -> str:
    """'generate, serve, bench and embed': the commands of CPU_COMMANDS this install has (found without
    importing them), so the advice never names a command that does not exist yet."""
    names = [n for n in CPU_COMMANDS if importlib.util.find_spec(f"model_optimizer.cli.{n.replace('-', '_')}")]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def rule_probe_timeouts(snap: Snapshot) -> list[Finding]:
    """A probe that hung is itself a symptom (a driver call that never returns). nvidia-smi is killed at its
    own timeout inside a probe that then succeeds, so its `timed_out` counts too."""
    probes = snap.raw["probes"]
    hung = {name: r.get("error") for name, r in probes.items() if (r or {}).get("error_type") == "Timeout"}
    if snap.data("nvidia_smi").get("timed_out"):
        hung["nvidia_smi"] = f"nvidia-smi -q -x killed after {probes['nvidia_smi'].get('elapsed_s') or 0:.0f} s"
    if not hung:
        return []
    return [
        Finding(
            "doctor.probe_timeout",
            "warn",
            f"Probe(s) did not answer in time: {', '.join(hung)}",
            "NVML, nvidia-smi or CUDA calls that hang usually mean a GPU in a bad state (an Xid error) or a stuck "
            "driver; programs that touch that GPU can hang the same way.",
            {
                "any": [
                    "sudo dmesg -T | grep -iE 'xid|nvrm' | tail   # Xid errors name the failing GPU",
                    "ps -eo pid,stat,wchan:32,args | grep -E '[n]vidia-smi|[p]ython'   # state D: stuck in the driver",
                    "sudo nvidia-smi -r -i <index>   # reset that GPU once nothing uses it; otherwise reboot",
                ]
            },
            {"timeouts": hung},
        )
    ]


def rule_container_toolkit(snap: Snapshot) -> list[Finding]:
    """With Docker and a GPU on the host, containers need the NVIDIA runtime or CDI."""
    tk = snap.data("container_toolkit")
    docker = tk.get("docker") or {}
    if not (docker.get("daemon_reachable") and snap.nvml_ok and not tk.get("in_container")):
        return []
    has_runtime = "nvidia" in (docker.get("runtimes") or "")
    has_cdi = bool(tk.get("cdi_specs"))
    has_ctk = (tk.get("nvidia-ctk") or {}).get("found") or (tk.get("nvidia-container-cli") or {}).get("found")
    if has_runtime or (has_ctk and has_cdi):
        return [
            Finding(
                "container.toolkit_ok",
                "ok",
                "Docker can pass GPUs to containers (NVIDIA runtime or CDI configured)",
                details={"runtimes": docker.get("runtimes"), "cdi_specs": tk.get("cdi_specs")},
            )
        ]
    return [
        Finding(
            "container.toolkit_missing",
            "warn",
            "Docker is installed but cannot give containers the GPU (no NVIDIA Container Toolkit runtime)",
            "`mopt deploy` images and `docker run --gpus all` fail with 'could not select device driver \"\" with capabilities: [[gpu]]'.",
            {
                "debian": [
                    "curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | sudo gpg --dearmor -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg",
                    "curl -s -L https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list | sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' | sudo tee /etc/apt/sources.list.d/nvidia-container-toolkit.list",
                    "sudo apt-get update && sudo apt-get install -y nvidia-container-toolkit",
                    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
                ],
                "rhel": [
                    "curl -s -L https://nvidia.github.io/libnvidia-container/stable/rpm/nvidia-container-toolkit.repo | sudo tee /etc/yum.repos.d/nvidia-container-toolkit.repo",
                    "sudo dnf install -y nvidia-container-toolkit",
                    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
                ],
                "wsl": ["Docker Desktop: Settings > Resources > WSL integration; GPU support is built in"],
            },
            {"runtimes": docker.get("runtimes"), "nvidia_ctk": has_ctk, "cdi_specs": tk.get("cdi_specs")},
        )
    ]


def rule_packages(snap: Snapshot) -> list[Finding]:
    """Report the inference stack's versions; Triton is needed for mopt's GPU kernels."""
    versions = snap.data("python_packages").get("versions") or {}
    present = {
        k: v
        for k, v in versions.items()
        if v and k in ("torch", "triton", "vllm", "tensorrt", "tensorrt_llm", "transformers", "flash-attn")
    }
    findings = [
        Finding(
            "software.versions",
            "ok",
            "Inference packages: " + (", ".join(f"{k} {v}" for k, v in present.items()) or "none found"),
            details={"versions": versions},
        )
    ]
    if snap.gpu_usable and not versions.get("triton"):
        findings.append(
            Finding(
                "software.triton_missing",
                "warn",
                "Triton is not installed",
                "mopt's fast GPU kernels (paged attention, fused ops) are Triton kernels; without it mopt uses slower torch code.",
                {"any": ["pip install triton   # the version matching torch: pip install torch brings it on Linux"]},
            )
        )
    return findings


def rule_bytecode(snap: Snapshot) -> list[Finding]:
    """Large packages without cached bytecode that Python cannot write: every process compiles them again."""
    data = snap.data("bytecode")
    off = bool(data.get("dont_write_bytecode"))
    packages = data.get("packages") or {}
    stale = {n: s for n, s in packages.items() if not s.get("cached") and (off or not s.get("writable"))}
    if not stale:
        return []
    why = "bytecode writing is off (PYTHONDONTWRITEBYTECODE or python -B)" if off else "their folders are read-only"
    folders = [os.path.dirname(s["source"]) for s in stale.values()]
    keep = "export PYTHONPYCACHEPREFIX=$HOME/.cache/pycache" + ("; unset PYTHONDONTWRITEBYTECODE" if off else "")
    return [
        Finding(
            "python.bytecode",
            "warn",
            f"Python compiles {', '.join(stale)} from source at every start",
            f"They have no cached bytecode and {why}, so every process that imports them (an engine core, "
            "each tensor-parallel rank, a script with `LLM`) compiles them again before it loads a model: "
            'seconds of CPU per start (README "Start-up"). A pip install writes the bytecode; images that '
            "drop it, or run Python with -B, pay this.",
            {"any": [f"python -m compileall -q -j 0 {' '.join(folders)}   # as the folders' owner", keep]},
            {"packages": stale, "dont_write_bytecode": off, "pycache_prefix": data.get("pycache_prefix")},
        )
    ]


def rule_host_resources(snap: Snapshot) -> list[Finding]:
    """Enough RAM to stage weights and disk for the model cache."""
    findings = []
    mem = snap.data("system").get("memory") or {}
    available = mem.get("available_bytes")
    if available is not None and available < MIN_RAM_AVAILABLE:
        findings.append(
            Finding(
                "host.low_ram",
                "warn",
                f"Only {available / GIB:.1f} GiB RAM available",
                "Loading a checkpoint stages tensors in RAM; a 7-8B model in bf16 needs about 16 GiB, and swapping makes loading crawl.",
                {"any": ["free -h", "Close other programs, or add RAM/swap"]},
                mem,
            )
        )
    disk = (snap.data("system").get("disk") or {}).get("hf_cache") or {}
    if disk.get("free_bytes") is not None and disk["free_bytes"] < MIN_DISK_FREE:
        findings.append(
            Finding(
                "host.low_disk",
                "warn",
                f"Only {disk['free_bytes'] / GIB:.1f} GiB free for the model cache ({disk.get('path')})",
                "Model weights take 2 bytes per parameter in bf16: a 7B model is 15 GB.",
                {"any": ["df -h", "export HF_HOME=/path/on/a/larger/disk"]},
                disk,
            )
        )
    return findings
