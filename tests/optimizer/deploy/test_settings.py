"""Settings files, the rendered serve commands, and what `mopt deploy` writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from model_optimizer.cli.args import dataclass_from_args
from model_optimizer.cli.main import build_parser, main
from model_optimizer.optimizer.deploy.cuda import choose_cuda
from model_optimizer.optimizer.deploy.settings import ServeSettings, mopt_command
from model_optimizer.optimizer.deploy.vllm_flags import ENV_ONLY, TRANSLATED, UNTRANSLATED, vllm_command
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.optimizer.deploy.conftest import TUNED, settings_for


def _configs(argv: list[str]) -> tuple[EngineConfig, ServerConfig]:
    args = build_parser().parse_args(argv)
    return dataclass_from_args(EngineConfig, args), dataclass_from_args(ServerConfig, args)


def _write(tmp_path: Path, data: dict, name: str = "best.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_serve_reads_a_config_file_and_flags_override_it(tmp_path):
    path = _write(
        tmp_path,
        {
            "max_num_seqs": 96,
            "enable-prefix-caching": False,
            "gpu_memory_utilization": 1,
            "max_n": 4,
            "metrics_auth": True,
        },
    )
    engine, server = _configs(["serve", "--config", str(path), "--max-num-seqs", "32"])
    assert engine.max_num_seqs == 32  # the flag wins
    assert engine.enable_prefix_caching is False and engine.gpu_memory_utilization == 1.0
    assert server.max_n == 4 and server.metrics_auth is True


def test_json_config_files_work_too(tmp_path):
    path = tmp_path / "best.json"
    path.write_text('{"max_num_seqs": 7, "port": 9000}')
    engine, server = _configs(["serve", "--config", str(path)])
    assert engine.max_num_seqs == 7 and server.port == 9000


@pytest.mark.parametrize(
    "data, message",
    [
        ({"max_num_sequences": 4}, "unknown setting 'max_num_sequences'"),
        ({"max_num_seqs": "many"}, "max_num_seqs must be a int"),
        ({"enforce_eager": "yes"}, "enforce_eager must be a bool"),
        ({"max_num_seqs": True}, "max_num_seqs must be a int"),
        ({"block_size": None}, "block_size may not be empty"),
        ([1, 2], "must hold a mapping"),
    ],
)
def test_bad_config_files_are_clear_errors(tmp_path, capsys, data, message):
    path = _write(tmp_path, data)
    assert main(["deploy", "--config", str(path), "--output", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_config_file_is_a_clear_error(tmp_path, capsys):
    assert main(["deploy", "--config", str(tmp_path / "nope.yaml"), "--output", str(tmp_path / "out")]) == 2
    assert "nope.yaml does not exist" in capsys.readouterr().err


def test_rendered_mopt_command_runs_exactly_the_settings_serve_reads(tmp_path):
    """What `mopt serve --config best.yaml` would run is what the container's command runs, but for the
    container's own paths, address and the key (which comes from the environment)."""
    path = _write(tmp_path, TUNED)
    engine, server = _configs(["serve", "--config", str(path)])
    settings = settings_for(tuned=True)
    command = mopt_command(settings)
    assert command[:2] == ["mopt", "serve"]
    in_engine, in_server = _configs(command[1:])
    assert in_engine == dataclasses.replace(engine, model="/model")
    assert in_server == dataclasses.replace(server, host="0.0.0.0", api_key=None, served_model_name="pydoc-qwen3")


def test_deploy_accepts_plain_serve_flags_like_a_file(tmp_path):
    path = _write(tmp_path, {"max_num_seqs": 12, "kv_cache_dtype": "fp8"})
    main(["deploy", "--target", "docker", "--config", str(path), "--output", str(tmp_path / "a")])
    main(
        [
            "deploy",
            "--target",
            "docker",
            "--max-num-seqs",
            "12",
            "--kv-cache-dtype",
            "fp8",
            "--output",
            str(tmp_path / "b"),
        ]
    )
    assert (tmp_path / "a/Dockerfile").read_text() == (tmp_path / "b/Dockerfile").read_text()
    assert '"--max-num-seqs", "12"' in (tmp_path / "a/Dockerfile").read_text()


def test_every_setting_has_a_vllm_translation_or_a_reason():
    names = {f.name for cls in (EngineConfig, ServerConfig) for f in dataclasses.fields(cls)} - {"model"}
    assert names == set(TRANSLATED) | set(UNTRANSLATED) | set(ENV_ONLY)
    assert not set(TRANSLATED) & set(UNTRANSLATED)


def test_vllm_command_translates_and_lists_the_rest():
    result = vllm_command(settings_for(tuned=True))
    argv = result.argv
    assert argv[:3] == ["vllm", "serve", "/model"]
    assert argv[argv.index("--max-num-seqs") + 1] == "96"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
    assert "--no-enable-prefix-caching" in argv
    assert "--async-scheduling" not in argv and "--enforce-eager" not in argv  # our defaults: vLLM keeps its own
    assert argv[argv.index("--block-size") + 1] == "32" and "--seed" not in argv  # our default: vLLM keeps its own
    assert set(result.untranslated) == {"max_n", "max_queued_requests", "metrics_auth", "shutdown_timeout"}
    assert "sk-never-in-a-file" not in " ".join(argv)


def test_vllm_translation_of_quantization():
    argv = vllm_command(ServeSettings(EngineConfig(quantization="fp8"), ServerConfig())).argv
    assert argv[argv.index("--quantization") + 1] == "fp8"
    cmd = vllm_command(ServeSettings(EngineConfig(quantization="rtn-int4"), ServerConfig()))
    assert "--quantization" not in cmd.argv and "quantization" in cmd.untranslated


def test_untranslated_settings_are_listed_in_the_readme(deployments):
    readme = (deployments[("compose", "vllm", True)] / "README.md").read_text()
    assert "| max_queued_requests | 64 |" in readme
    assert "None: every setting" in (deployments[("compose", "vllm", False)] / "README.md").read_text()
    assert "/ready" not in readme and "/ready" in (deployments[("compose", "mopt", True)] / "README.md").read_text()


def test_the_api_key_is_never_written(deployments):
    for folder in deployments.values():
        for path in folder.rglob("*"):
            if path.is_file():
                assert "sk-never-in-a-file" not in path.read_text(), path


def test_dockerfile_says_which_driver_it_needs_and_mounts_the_model(deployments):
    text = (deployments[("docker", "mopt", False)] / "Dockerfile").read_text()
    cuda = choose_cuda(driver="570.133.20")
    assert f"FROM {cuda.base_image}" in text and f"driver >= {cuda.min_driver}" in text
    assert "USER 10001" in text and "HEALTHCHECK" in text and "/health" in text and "EXPOSE 8000" in text
    assert "safetensors" not in text and "COPY src/" in text
    install = next(line for line in text.splitlines() if "apt-get install" in line).split()
    assert {"gcc", "libc6-dev", "python3-dev"} <= set(install)  # Triton compiles its launcher at the first launch
    vllm = (deployments[("docker", "vllm", False)] / "Dockerfile").read_text()
    assert "FROM vllm/vllm-openai:" in vllm and '"vllm", "serve", "/model"' in vllm


def test_cuda_build_follows_the_host_driver():
    assert choose_cuda(driver="565.57.01").cuda == "12.6"
    assert choose_cuda(driver="580.95.05").cuda == "13.0"
    assert choose_cuda().min_driver == "580.65.06"  # torch 2.13's default build: CUDA 13.0
    assert choose_cuda(driver="570.133.20").cuda == "12.6"  # from 2.12 on torch publishes no CUDA 12.8 build
    compat = choose_cuda(driver="535.104.05")  # below every build's minimum, above 12.x's compat driver
    assert compat.cuda == "12.6" and "minor-version compatibility" in compat.note
    with pytest.raises(ValueError, match="install driver branch"):
        choose_cuda(driver="470.129.06")
    with pytest.raises(ValueError, match="cuda must be one of"):
        choose_cuda(cuda="11.8")


def test_the_image_installs_the_newest_torch_the_package_is_tested_on():
    """doctor's matrix knows torch 2.14; an image pins the newest release the test suite runs (2.13)."""
    from model_optimizer.optimizer.deploy.cuda import version_matrix

    assert "2.14" in version_matrix()["torch_cuda_builds"]
    assert choose_cuda().torch == choose_cuda(driver="595.45.04").torch == "2.13"


def test_cli_writes_every_target_with_the_package_source_but_no_weights(tmp_path, capsys):
    out = tmp_path / "deploy"
    own = {  # each render replaces the folder's previous one: another target's files do not stay
        "docker": {"docker-compose.yml": False, "k8s/deployment.yaml": False},
        "compose": {"docker-compose.yml": True, "grafana/dashboards/mopt-serving.json": True, "k8s": False},
        "k8s": {"k8s/deployment.yaml": True, "docker-compose.yml": False, "grafana": False},
    }
    for target, expected in own.items():
        assert main(["deploy", "--target", target, "--output", str(out), "--driver", "570.133.20"]) == 0
        assert (out / "Dockerfile").is_file()
        assert {rel: (out / rel).exists() for rel in expected} == expected, target
    assert "wrote" in capsys.readouterr().out
    assert (out / "src/pyproject.toml").is_file() and (out / "src/model_optimizer/cli/serve.py").is_file()
    assert not list((out / "src").rglob("*.safetensors")) and not list((out / "src").rglob("__pycache__"))
    hidden = {p.name for p in out.rglob("*") if p.name.startswith(".")}
    assert hidden == {".dockerignore", ".mopt-deploy-files.json"}  # no temp files


def test_bad_deploy_options_are_clear_errors(tmp_path, capsys):
    assert main(["deploy", "--min-replicas", "3", "--max-replicas", "2", "--output", str(tmp_path)]) == 2
    assert "max_replicas (2) must be >= min_replicas (3)" in capsys.readouterr().err
    assert main(["deploy", "--driver", "470.1", "--output", str(tmp_path)]) == 2
    assert "driver 470.1 is older" in capsys.readouterr().err


def test_list_settings_round_trip_through_file_and_command(tmp_path):
    path = _write(tmp_path, {"allowed_origins": ["https://a.example", "https://b.example"]})
    engine, server = _configs(["serve", "--config", str(path)])
    assert server.allowed_origins == ["https://a.example", "https://b.example"]
    settings = settings_for(tuned=False)
    settings.server = server
    _, in_server = _configs(mopt_command(settings)[1:])
    assert in_server.allowed_origins == server.allowed_origins
    argv = vllm_command(settings).argv
    assert argv[argv.index("--allowed-origins") + 1] == '["https://a.example", "https://b.example"]'
    bad = _write(tmp_path, {"allowed_origins": [1, 2]}, "bad.yaml")
    with pytest.raises(ValueError, match="allowed_origins must be a list of strings"):
        _configs(["serve", "--config", str(bad)])


def test_default_chat_template_kwargs_round_trip_as_json(tmp_path):
    path = _write(tmp_path, {"default_chat_template_kwargs": {"enable_thinking": False}})
    _, server = _configs(["serve", "--config", str(path)])
    assert server.default_chat_template_kwargs == {"enable_thinking": False}
    settings = settings_for(tuned=False)
    settings.server = server
    _, in_server = _configs(mopt_command(settings)[1:])
    assert in_server.default_chat_template_kwargs == {"enable_thinking": False}
    argv = vllm_command(settings).argv
    assert json.loads(argv[argv.index("--default-chat-template-kwargs") + 1]) == {"enable_thinking": False}


def test_the_content_format_reaches_both_engines(tmp_path):
    path = _write(tmp_path, {"chat_template_content_format": "openai"})
    _, server = _configs(["serve", "--config", str(path)])
    settings = settings_for(tuned=False)
    settings.server = server
    _, in_server = _configs(mopt_command(settings)[1:])
    assert in_server.chat_template_content_format == "openai"
    argv = vllm_command(settings).argv
    assert argv[argv.index("--chat-template-content-format") + 1] == "openai"


@pytest.mark.parametrize("engine", ["mopt", "vllm"])
def test_the_api_key_reaches_the_compose_server_from_the_host(deployments, engine):
    """Without --api-key the README still says "set MOPT_API_KEY": the server must then get it."""
    env_name = {"mopt": "MOPT_API_KEY", "vllm": "VLLM_API_KEY"}[engine]
    optional = yaml.safe_load((deployments[("compose", engine, False)] / "docker-compose.yml").read_text())
    # ours refuses an empty key: no value, so Compose passes the host's when set and none otherwise
    expected = None if engine == "mopt" else "${MOPT_API_KEY:-}"
    assert optional["services"]["server"]["environment"] == {env_name: expected}
    required = yaml.safe_load((deployments[("compose", engine, True)] / "docker-compose.yml").read_text())
    assert required["services"]["server"]["environment"][env_name].startswith("${MOPT_API_KEY:?")
    docker = (deployments[("docker", engine, False)] / "README.md").read_text()
    assert ("-e MOPT_API_KEY" if engine == "mopt" else '-e VLLM_API_KEY="$MOPT_API_KEY"') in docker
    assert "optional" in docker and "unset, the server answers without a key" in docker


def test_the_model_claim_can_be_written_once_and_read_by_every_replica(deployments, tmp_path):
    """The README says to copy the model into the claim: a ReadOnlyMany claim cannot be written to."""
    folder = deployments[("k8s", "mopt", False)]
    claim = yaml.safe_load((folder / "k8s" / "model-pvc.yaml").read_text())
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # up to 4 replicas, perhaps on 4 nodes
    loader = yaml.safe_load((folder / "k8s" / "setup" / "model-loader.yaml").read_text())
    mount = loader["spec"]["containers"][0]["volumeMounts"][0]
    assert mount["mountPath"] == "/model" and not mount.get("readOnly")
    assert loader["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert loader["spec"]["securityContext"]["runAsUser"] == 10001  # files owned by the server's uid
    readme = (folder / "README.md").read_text()
    assert "kubectl apply -f k8s/model-pvc.yaml -f k8s/setup/model-loader.yaml" in readme
    assert "kubectl exec -i mopt-serve-model-loader -- tar -xf - -C /model" in readme
    out = tmp_path / "one"
    argv = ["deploy", "--target", "k8s", "--output", str(out), "--driver", "570.133.20"]
    assert main([*argv, "--max-replicas", "1", "--min-replicas", "1", "--storage-class", "nfs-client"]) == 0
    claim = yaml.safe_load((out / "k8s" / "model-pvc.yaml").read_text())
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and claim["spec"]["storageClassName"] == "nfs-client"
    assert "`nfs-client`, must offer that mode" in (out / "README.md").read_text()


def test_images_are_named_for_what_they_run(deployments):
    from model_optimizer.common.version import __version__

    for (target, engine, _), folder in deployments.items():
        readme = (folder / "README.md").read_text()
        expected = f"mopt-serve:{__version__}" if engine == "mopt" else "vllm-serve:v0.14.1"
        assert f"docker build -t {expected} ." in readme and ":latest" not in readme, (target, engine)
        if target == "compose":
            compose = yaml.safe_load((folder / "docker-compose.yml").read_text())
            assert compose["services"]["server"]["image"] == expected


def test_vllm_translation_of_weight_offload():
    argv = vllm_command(ServeSettings(EngineConfig(cpu_offload_gb=12.5, kv_offloading_size=64), ServerConfig())).argv
    assert argv[argv.index("--cpu-offload-gb") + 1] == "12.5"
    assert argv[argv.index("--kv-offloading-size") + 1] == "64"
    assert "--cpu-offload-gb" not in vllm_command(ServeSettings(EngineConfig(), ServerConfig())).argv  # 0: off


def test_preemption_mode_is_not_translated_for_vllm():
    """vLLM's V1 engine dropped --preemption-mode: passing it would fail, so it is listed with why."""
    cmd = vllm_command(ServeSettings(EngineConfig(preemption_mode="swap", kv_offloading_size=8), ServerConfig()))
    assert "--preemption-mode" not in cmd.argv and "removed" in cmd.untranslated["preemption_mode"]
    assert cmd.argv[cmd.argv.index("--kv-offloading-size") + 1] == "8"


def test_the_newest_tested_torch_is_the_one_ci_installs():
    """version_matrix's newest_tested_torch is what the Makefile pins: images and doctor's fix stay on it."""
    from pathlib import Path

    from model_optimizer.optimizer.deploy.cuda import version_matrix

    release = version_matrix()["newest_tested_torch"]["release"]
    makefile = (Path(__file__).parents[3] / "Makefile").read_text()
    assert f"torch=={release}." in makefile
