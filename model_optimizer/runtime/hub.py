"""Model arguments as local folders: a folder as it is, a Hugging Face Hub id (`Qwen/Qwen3-0.6B`) through
huggingface_hub, as vLLM and transformers take them.

A hub id resolves with `snapshot_download`, so everything follows huggingface_hub's own rules: its cache
layout ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), a `revision` (branch, tag or
commit; vLLM's --revision), the token from $HF_TOKEN or `hf auth login`, and $HF_HUB_OFFLINE=1. With a
network only the files the engine reads are fetched (config, safetensors weights, tokenizer, chat
template; never *.bin or *.gguf copies); without one, or offline, the local cache answers, and a model
that is not there is an error that says how to get it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
"""`name` or `org/name`: what the Hub accepts as a repository id (no leading dot, slash or tilde)."""
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer.model", "*.tiktoken"]
"""The files a model folder needs here: configs (also 1_Pooling/config.json), weights, tokenizer files
(tokenizer.json, vocab.txt, merges.txt, sentencepiece's tokenizer.model), chat templates."""


def is_hub_id(model: str) -> bool:
    """Whether `model`, which is not a local folder, has the shape of a Hub repository id."""
    return bool(HUB_ID.match(model)) and ".." not in model and not model.endswith((".", "-"))


def resolve_model(model: str, revision: str | None = None, what: str = "model") -> Path:
    """The local folder for `model`: the folder itself, or the snapshot of the Hub repository it names
    (downloaded when missing and a network is there). FileNotFoundError or ValueError say what failed,
    naming it as `what` (the model, its tokenizer)."""
    path = Path(model).expanduser()
    if path.is_dir():  # one version of a folder: a revision only picks among a Hub model's
        if revision is not None:
            logging.getLogger(__name__).warning("--revision %s is ignored: %s is a local folder", revision, path)
        return path
    if path.exists():  # a file (a .safetensors, a config.json): the folder that holds it is meant
        holds = "config.json and the weights" if what == "model" else "its files"
        raise ValueError(f"{what} {path} is a file, not a folder: give the folder that holds {holds}")
    if not is_hub_id(model):
        raise FileNotFoundError(f"{what} folder {path} does not exist (nor is it a Hub id such as Qwen/Qwen3-0.6B)")
    return _snapshot(model, revision)


def localize(config) -> str | None:
    """Resolve an EngineConfig's model and tokenizer Hub ids to their local snapshot folders, in place, so
    that everything after (the engine, a server's worker processes) sees folders: the revision applies
    to the model, and to the tokenizer when it names the same repository. Returns the model's Hub id,
    the name clients use (as vLLM serves it), or None when the model was a folder or the built-in one."""
    model_id = None
    if config.model is not None and not Path(config.model).expanduser().is_dir():
        model_id = config.model
        config.model = str(resolve_model(config.model, config.revision))
    if config.tokenizer is not None and not Path(config.tokenizer).expanduser().is_dir():
        same = config.tokenizer == model_id
        config.tokenizer = str(resolve_model(config.tokenizer, config.revision if same else None, "tokenizer"))
    return model_id


def _snapshot(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo_id}" + (f" at revision {revision}" if revision else "")
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=ALLOW_PATTERNS))
    except GatedRepoError:
        raise ValueError(
            f"{where} is gated on the Hugging Face Hub: accept its terms on huggingface.co, then log in "
            "(`hf auth login`) or set HF_TOKEN"
        ) from None
    except RevisionNotFoundError:
        raise FileNotFoundError(f"{repo_id} has no revision {revision!r} on the Hugging Face Hub") from None
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"{repo_id} is neither a local folder nor a model on the Hugging Face Hub (a private one needs "
            "`hf auth login` or HF_TOKEN)"
        ) from None
    except LocalEntryNotFoundError:
        how = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub could not be reached"
        raise FileNotFoundError(
            f"{where} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {how}: download it "
            f"where there is a network (`hf download {repo_id}`), or give a local folder"
        ) from None


def resolve_model_dir(model: str | None, revision: str | None = None) -> Path:
    """The model folder: the one given, the snapshot of a Hugging Face Hub id at `revision` (downloaded,
    or read from the local cache when offline), or the built-in default (the reference model)."""
    if model is None:
        from model_optimizer.assets import reference_model_path

        return reference_model_path()  # a clear error, with how to install it, when it is missing
    return resolve_model(model, revision)
