"""`mopt deploy` with speculative decoding: our command keeps the config (the draft model at its mount
point), vLLM's gets the same config in its own terms, and the draft folder is mounted like the model."""

from __future__ import annotations

import json

from model_optimizer.optimizer.deploy.compose import compose_file
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.render import render
from model_optimizer.optimizer.deploy.settings import DRAFT_MODEL_DIR, ServeSettings, mopt_command
from model_optimizer.optimizer.deploy.vllm_flags import vllm_command
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig


def _flag(argv: list[str], name: str) -> dict:
    return json.loads(argv[argv.index(name) + 1])


def test_ngram_config_goes_to_both_engines_with_every_setting_explicit():
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "adaptive": false}'
    settings = ServeSettings(EngineConfig(speculative_config=spec), ServerConfig())
    ours = _flag(mopt_command(settings), "--speculative-config")
    assert ours == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 5,
        "prompt_lookup_max": 5,
        "adaptive": False,
    }
    result = vllm_command(settings)
    assert _flag(result.argv, "--speculative-config") == {k: v for k, v in ours.items() if k != "adaptive"}
    assert result.translated["speculative_config"] == "--speculative-config"


def test_draft_model_is_mounted_and_named_by_its_mount_point(tmp_path):
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    settings = ServeSettings(
        EngineConfig(speculative_config={"model": str(draft), "num_speculative_tokens": 4}), ServerConfig()
    )
    assert _flag(mopt_command(settings), "--speculative-config")["model"] == DRAFT_MODEL_DIR
    assert _flag(vllm_command(settings).argv, "--speculative-config")["model"] == DRAFT_MODEL_DIR
    volumes = compose_file(settings, DeployConfig(target="compose"))["services"]["server"]["volumes"]
    assert {"type": "bind", "source": str(draft), "target": DRAFT_MODEL_DIR, "read_only": True} in volumes
    files = render(settings, DeployConfig(target="k8s", driver="570.133.20"))
    assert "k8s/draft-model-pvc.yaml" in files and DRAFT_MODEL_DIR in files["k8s/deployment.yaml"]
