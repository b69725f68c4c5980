"""The serve settings as they run inside the container, and the exact `mopt serve` command for them.

The model is never baked into the image: it is mounted read-only at /model, so the command always says
`--model /model` (the tokenizer and a draft model likewise, at their own mount points). Each is a folder on
this host: a Hugging Face Hub id is refused, as there is no folder to mount. The API key never appears in
a file: it reaches the server as MOPT_API_KEY.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.hub import is_hub_id
from model_optimizer.runtime.server.config import SPACE_SEPARATED, ServerConfig

MODEL_DIR = "/model"
TOKENIZER_DIR = "/tokenizer"
DRAFT_MODEL_DIR = "/draft_model"
"""Where a speculative-decoding draft model is mounted (read-only, as the model)."""
CHAT_TEMPLATE = "/etc/mopt/chat_template.jinja"
TLS_FILES = ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs")
"""Server settings that name files on this host a deployment cannot carry (a private key among them)."""


@dataclass(frozen=True)
class Mount:
    """A host folder the container reads (read-only) and where it sees it."""

    name: str
    """model, tokenizer or draft-model: the volume's name, and its Kubernetes claim's and loader's."""
    host: Path
    """The folder on this host, absolute."""
    target: str
    """The mount point in the container."""


@dataclass
class ServeSettings:
    engine: EngineConfig
    server: ServerConfig

    def __post_init__(self) -> None:
        if self.server.port == 0:  # serve's "any free port" cannot be written into a health check or Service
            raise ValueError(
                "--port 0 lets the OS pick a new port at each start; a deployment's health check, Service and "
                "scrape config need a fixed one: give --port 1-65535"
            )
        if self.engine.device == "cpu":  # the files reserve GPUs and build on a CUDA image
            raise ValueError(
                "--device cpu: a deployment runs on NVIDIA GPUs (a CUDA image, one GPU reserved per tensor-parallel "
                "rank); leave --device out, or run `mopt serve --device cpu` without a container"
            )
        if self.engine.generation_config not in ("auto", "vllm"):  # a host folder the container would not have
            raise ValueError(
                f"--generation-config {self.engine.generation_config}: a folder on this host is not in the container; "
                "put generation_config.json in the model folder (auto), or give --override-generation-config"
            )
        tls = [f"--{name.replace('_', '-')}" for name in TLS_FILES if getattr(self.server, name)]
        if tls:  # keys are secrets: never copied into an image
            raise ValueError(
                f"{' '.join(tls)}: files on this host are not in the container, and a private key does not belong "
                "in an image; terminate TLS in front of the service (an ingress or load balancer), or mount "
                "the files into your own build and pass the flags there"
            )
        from model_optimizer.runtime.generation_defaults import config_generation_defaults

        config_generation_defaults(self.engine, self.host_model_dir)  # what the server would refuse at start-up

    def check_host_folders(self) -> None:
        """ValueError unless each folder the settings name (model, tokenizer, draft model) is a folder on
        this host; not in __post_init__, as in_container() names the container's."""
        named = [
            ("--model", self.engine.model),
            ("--tokenizer", self.engine.tokenizer),
            ("--speculative-config model", self._draft_model),
        ]
        for flag, value in named:
            if value:
                _check_host_folder(flag, value)

    def check_model_fits(self) -> None:
        """ValueError for what `mopt serve` refuses from the model's config.json, only once the container
        runs (the length after loading the weights), so that it would restart forever: max_model_len above
        max_position_embeddings, or a tensor-parallel size the checkpoint does not split into. Our engine's
        rules: vLLM derives a longer limit from rope scaling, so its deployments are left to it."""
        folder = self.host_model_dir
        if not (folder / "config.json").is_file():
            return
        from model_optimizer.runtime.models.loader import check_tensor_parallel
        from model_optimizer.runtime.models.model_config import DecoderArgs, read_config
        from model_optimizer.runtime.server.app import is_embedding_model

        if is_embedding_model(folder):
            return
        positions = DecoderArgs.from_dict(read_config(folder)).max_position_embeddings
        if self.engine.max_model_len is not None and self.engine.max_model_len > positions:
            raise ValueError(
                f"--max-model-len {self.engine.max_model_len} exceeds the model's max_position_embeddings "
                f"({positions}), which the server refuses at start; give at most that, or leave it out to take it"
            )
        engine = self.engine
        check_tensor_parallel(folder, engine.tensor_parallel_size, engine.quantization, engine.load_format)

    @property
    def _draft_model(self) -> str | None:
        """The speculative-decoding draft model's folder as given, if the settings use one."""
        spec = self.engine.speculative
        return spec.model if spec is not None and spec.is_draft_model else None

    @property
    def host_model_dir(self) -> Path:
        """The model folder on the host (the built-in model's when none is set)."""
        if self.engine.model:
            return _host_path(self.engine.model)
        from model_optimizer.assets import REFERENCE_MODEL_DIR

        return REFERENCE_MODEL_DIR

    @property
    def mounts(self) -> list[Mount]:
        """The folders the container mounts: the model, then the tokenizer and draft model when set."""
        mounts = [Mount("model", self.host_model_dir, MODEL_DIR)]
        if self.engine.tokenizer:
            mounts.append(Mount("tokenizer", _host_path(self.engine.tokenizer), TOKENIZER_DIR))
        if self._draft_model:
            mounts.append(Mount("draft-model", _host_path(self._draft_model), DRAFT_MODEL_DIR))
        return mounts

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def model_name(self) -> str:
        """The name clients use: as `mopt serve` would call the host folder, not the mount point."""
        return (self.server.model_names or (self.host_model_dir.name,))[0]

    @property
    def num_gpus(self) -> int:
        """GPUs one server needs: one per tensor-parallel rank, all on one host (one pod, one container)."""
        return self.engine.tensor_parallel_size

    def shares_memory(self, engine: str) -> bool:
        """Whether the server's processes talk through /dev/shm, which containers keep small (64 MB by
        default): vLLM's workers always, ours when tensor-parallel ranks run NCCL between processes."""
        return engine == "vllm" or self.num_gpus > 1

    @property
    def needs_api_key(self) -> bool:
        return self.server.api_key is not None or self.server.metrics_auth

    def in_container(self) -> ServeSettings:
        """These settings with the container's paths, every interface, and no API key in the command."""
        engine = dataclasses.replace(
            self.engine,
            model=MODEL_DIR,
            tokenizer=TOKENIZER_DIR if self.engine.tokenizer else None,
            speculative_config=self._container_speculative_config(),
        )
        server = dataclasses.replace(
            self.server,
            host="0.0.0.0",
            port=self.port,
            api_key=None,  # noqa: S104
            served_model_name=self.server.served_model_name or self.model_name,
            chat_template=CHAT_TEMPLATE if self.server.chat_template else None,
        )
        return ServeSettings(engine, server)

    def _container_speculative_config(self) -> str | None:
        """`speculative_config` as JSON, the draft model (if any) at its mount point."""
        spec = self.engine.speculative
        if spec is None:
            return None
        from model_optimizer.runtime.spec_decode.config import to_json

        return to_json(spec, model=DRAFT_MODEL_DIR if spec.is_draft_model else None)


def _host_path(value: str) -> Path:
    return Path(value).expanduser().resolve()


def _check_host_folder(flag: str, value: str) -> None:
    """ValueError unless `value` is a folder on this host: the container can mount nothing else."""
    path = Path(value).expanduser()
    if path.is_dir():
        _check_no_outside_links(flag, value, path)
        return
    if path.exists():
        raise ValueError(f"{flag} {value} is a file; give the folder that holds it (it is mounted into the container)")
    if is_hub_id(value):  # serve downloads one; a Hub cache snapshot is links into blobs/, no folder to mount
        raise ValueError(
            f"{flag} {value} is not a folder on this host: a deployment mounts folders, and a Hugging Face Hub id "
            f"is not one; download it (hf download {value} --local-dir DIR) and give DIR"
        )
    raise ValueError(f"{flag} {value} does not exist; give the folder (it is mounted into the container)")


def _check_no_outside_links(flag: str, value: str, path: Path) -> None:
    """ValueError when a file or folder in `path` is a symlink that leads outside it (or nowhere): the
    container mounts the folder alone, so such a link is broken there. A Hugging Face cache snapshot is
    such a folder, its files relative links into ../../blobs."""
    root = path.resolve()
    for folder, dirnames, filenames in os.walk(path):  # links to folders are listed, not followed
        for name in [*dirnames, *filenames]:
            entry = Path(folder) / name
            if not entry.is_symlink():
                continue
            target = Path(os.path.realpath(entry))
            if target == root or root in target.parents:
                continue
            shown = f"{entry.relative_to(path)} -> {os.readlink(entry)}"
            raise ValueError(
                f"{flag} {value} holds links that lead outside it ({shown}), which the container, mounting the "
                "folder alone, would see broken (a Hugging Face cache snapshot links its files into ../../blobs); "
                "download the model into a folder of its own (hf download ID --local-dir DIR) and give DIR, or "
                "copy the folder with the links followed (cp -rL)"
            )


def non_defaults(config: object) -> dict:
    """The fields of a config dataclass that differ from their defaults, in declaration order."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if getattr(config, f.name) != f.default}


def flags(values: dict) -> list[str]:
    """`--name value` pairs for `mopt serve` (booleans as --name / --no-name, lists comma-separated, None
    left out): the one builder of our flags, for deployments and tuning trials alike."""
    argv: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value)]  # a nested setting (speculative_config) as its flag's JSON
        elif name in SPACE_SEPARATED and isinstance(value, list):
            argv += [flag, *map(str, value)]  # --served-model-name a b
        elif isinstance(value, list):
            argv += [flag, ",".join(map(str, value))]  # the flags' comma-separated form
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def mopt_command(settings: ServeSettings) -> list[str]:
    """The exact `mopt serve` argv that runs `settings` in the container."""
    inside = settings.in_container()
    return ["mopt", "serve", *flags(non_defaults(inside.engine)), *flags(non_defaults(inside.server))]
