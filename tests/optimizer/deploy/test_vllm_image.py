"""The pinned vLLM image has every flag the translation emits, and the command leaves vLLM's own async
scheduling choice alone (v0.14 refuses an explicit --async-scheduling with ngram or draft-model speculation)."""

from __future__ import annotations

import json
import re

from model_optimizer.cli.main import main
from model_optimizer.optimizer.deploy.settings import ServeSettings
from model_optimizer.optimizer.deploy.vllm_flags import vllm_command
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig

FIRST_RELEASE = {
    "--stream-interval": (0, 11, 1),
    "--kv-offloading-size": (0, 11, 1),
    "--default-chat-template-kwargs": (0, 14, 0),
}
"""The first vLLM release that has each of our newer flags, read from the wheels' engine/arg_utils.py and
entrypoints/openai/cli_args.py (absent from 0.11.0, and 0.13.0 for the last)."""


def test_the_pinned_image_has_the_flags_the_command_uses(tmp_path, capsys):
    """The image was vllm/vllm-openai:v0.10.2, which has none of these three flags."""
    out = tmp_path / "out"
    argv = ["deploy", "--target", "docker", "--engine", "vllm", "--driver", "570.133.20", "--output", str(out)]
    argv += ["--stream-interval", "4", "--kv-offloading-size", "8"]
    argv += ["--default-chat-template-kwargs", '{"enable_thinking": false}']
    assert main(argv) == 0
    lines = (out / "Dockerfile").read_text().splitlines()
    tag = re.fullmatch(r"FROM vllm/vllm-openai:v(\d+)\.(\d+)\.(\d+)", next(x for x in lines if x.startswith("FROM ")))
    assert tag, "the vLLM image is pinned to a release"
    command = json.loads(next(x for x in lines if x.startswith("CMD "))[4:])
    for flag, release in FIRST_RELEASE.items():
        assert flag in command
        assert tuple(map(int, tag.groups())) >= release, f"{flag} needs vLLM {release}"


def test_async_scheduling_is_left_to_vllm_unless_turned_off():
    spec = '{"method": "ngram", "num_speculative_tokens": 3}'
    assert (
        "--async-scheduling"
        not in vllm_command(ServeSettings(EngineConfig(speculative_config=spec), ServerConfig())).argv
    )
    argv = vllm_command(ServeSettings(EngineConfig(async_scheduling=False), ServerConfig())).argv
    assert "--no-async-scheduling" in argv  # vLLM's default is on where it can, so off needs saying
