"""vLLM engine settings with no use here: LLM(...) and `mopt serve` take them with one warning naming each
and why; a value asking for what this engine does not do is refused with the reason."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from model_optimizer import LLM, SamplingParams
from tests.runtime.server.test_startup import LINE, Server, assert_config_error, run_serve

SMALL = dict(max_model_len=64, num_kv_blocks=32)
VLLM_ARGS = dict(trust_remote_code=True, disable_log_stats=True, swap_space=4, tokenizer_mode="auto", max_logprobs=20)


def test_llm_takes_vllm_only_settings_and_names_them_in_one_warning(tiny_model, caplog):
    with caplog.at_level(logging.WARNING, logger="model_optimizer"):
        llm = LLM(str(tiny_model("qwen3")), **SMALL, **VLLM_ARGS)
    [warning] = [r.getMessage() for r in caplog.records if "vLLM settings ignored" in r.getMessage()]
    assert "trust_remote_code (checkpoints run on this engine's own model code" in warning
    assert "swap_space (" in warning and "disable_log_stats (" in warning and "max_logprobs (" in warning
    out = llm.generate(["hi"], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"pipeline_parallel_size": 2}, "pipeline_parallel_size > 1 is not supported"),
        ({"data_parallel_size": 4}, "data_parallel_size > 1 is not supported"),
        ({"data_parallel_size": 0}, "data_parallel_size must be 1 here, got 0"),
        ({"enable_lora": True}, "LoRA adapters are not supported"),
        ({"tokenizer_mode": "mistral"}, "tokenizer_mode 'mistral' is not supported"),
        ({"max_logprobs": -1}, r"max_logprobs must be in \[0, 20\] here"),
        ({"max_logprobs": 64}, r"max_logprobs must be in \[0, 20\] here"),
    ],
)
def test_llm_refuses_what_this_engine_does_not_do(tiny_model, setting, message):
    with pytest.raises(ValueError, match=message):
        LLM(str(tiny_model("qwen3")), **SMALL, **setting)


def test_an_unknown_setting_is_still_a_type_error(tiny_model):
    with pytest.raises(TypeError, match="not_a_setting"):
        LLM(str(tiny_model("qwen3")), not_a_setting=1)
    with pytest.raises(TypeError, match="middleware"):  # vLLM's server flags are no LLM keywords, there either
        LLM(str(tiny_model("qwen3")), middleware="x")


VLLM_SERVE_FLAGS = [  # what vLLM launch scripts commonly pass; each taken with a warning
    "--tokenizer-revision", "main", "--code-revision", "main", "--hf-token", "hf_x", "--max-parallel-loading-workers",
    "2", "--model-impl", "auto", "--config-format", "hf", "--hf-overrides", "{}", "--prefix-caching-hash-algo",
    "sha256", "--disable-cascade-attn", "--calculate-kv-scales", "--kv-transfer-config", "{}", "--additional-config",
    "{}", "--limit-mm-per-prompt", "{}", "--guided-decoding-backend", "xgrammar", "--enable-reasoning",
    "--enable-sleep-mode", "--otlp-traces-endpoint", "http://otel:4317", "--disable-frontend-multiprocessing",
    "--enable-server-load-tracking", "--enable-log-outputs", "--h11-max-header-count", "256",
    "--chat-template-content-format", "string", "--allow-credentials", "--allowed-origins", '["*"]',
]  # fmt: skip


def test_vllms_other_serve_flags_parse_and_are_named_in_the_warning():
    from model_optimizer.cli.main import build_parser
    from model_optimizer.runtime import vllm_settings

    args = build_parser().parse_args(["serve", "--model", "m", *VLLM_SERVE_FLAGS])
    notes = vllm_settings.ignored(vllm_settings.from_args(args))
    for flag in VLLM_SERVE_FLAGS:
        name = flag[2:].replace("-", "_")
        if flag.startswith("--") and name in vllm_settings.BY_NAME:
            assert any(note.startswith(name + " (") for note in notes), name
    assert args.allow_credentials is True  # a setting of ours: it changes the CORS answer
    assert args.chat_template_content_format == "string"  # ours too: how content reaches the template


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--middleware", "my.module.Auth"], "custom ASGI middleware is not loaded"),
        (["--lora-modules", "a=/x", "b=/y"], "LoRA adapters are not supported"),  # several, as vLLM's nargs
        (["--tool-parser-plugin", "p.py"], "parser plugins are not loaded"),
        (["--enable-force-include-usage"], "stream_options.include_usage"),
        (["--hf-overrides", '{"rope_theta": 1}'], "edit the model folder's config.json"),
        (["--hf-overrides", "{oops"], "hf_overrides must be JSON"),
        (["--model-impl", "transformers"], "model_impl 'transformers' is not supported"),
        (["--disable-sliding-window"], "sliding windows apply as the model's config says"),
        (["--kv-transfer-config", '{"kv_connector": "x"}'], "no disaggregated prefill"),
    ],
)
def test_vllm_flags_asking_for_what_is_not_here_are_refused(flags, message):
    from model_optimizer.cli.main import build_parser
    from model_optimizer.runtime import vllm_settings

    args = build_parser().parse_args(["serve", "--model", "m", *flags])
    with pytest.raises(ValueError, match=message):
        vllm_settings.ignored(vllm_settings.from_args(args))


@pytest.mark.slow
def test_a_vllm_serve_command_line_runs_and_warns_once(tiny_model):
    server = Server(
        str(tiny_model("qwen3")),
        *("--max-model-len", "64", "--num-kv-blocks", "32"),
        *("--trust-remote-code", "--disable-log-requests", "--swap-space", "4", "--distributed-executor-backend", "mp"),
    )
    try:
        index = server.wait_for_line("vLLM flags ignored: ")
        line = server.lines[index]
        assert LINE.match(line) and " WARNING " in line, line
        for name in ("trust_remote_code", "disable_log_requests", "swap_space", "distributed_executor_backend"):
            assert f"{name} (" in line
        assert httpx.get(server.url + "/ready", timeout=30).json() == {"status": "ready"}
    finally:
        server.stop()


@pytest.mark.slow
def test_serve_refuses_pipeline_parallelism_before_it_starts(tiny_model):
    run = run_serve(str(tiny_model("qwen3")), "--pipeline-parallel-size", "2")
    assert_config_error(run, "pipeline_parallel_size > 1 is not supported")


@pytest.mark.parametrize(
    ("field", "given", "taken"),
    [("dtype", "half", "float16"), ("dtype", "float", "float32"), ("kv_cache_dtype", "fp8_e4m3", "fp8")],
)
def test_vllm_spellings_of_choices_are_ours(field, given, taken):
    from model_optimizer.runtime.config import EngineConfig

    assert getattr(EngineConfig(**{field: given}), field) == taken


def test_kv_cache_fp8_e5m2_is_refused():
    from model_optimizer.runtime.config import EngineConfig

    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, fp8"):
        EngineConfig(kv_cache_dtype="fp8_e5m2")


def test_a_vllm_command_line_with_underscores_and_short_flags_parses():
    from model_optimizer.cli.args import dataclass_from_args
    from model_optimizer.cli.main import build_parser, dashed_flags, long_options
    from model_optimizer.runtime.config import EngineConfig

    options = long_options(build_parser(["serve"]))
    argv = dashed_flags(
        [
            "serve",
            "m",
            "--max_model_len",
            "64",
            "-tp",
            "1",
            "-q",
            "fp8",
            "--dtype=half",
            "-pp",
            "1",
            "--kv_cache_dtype=fp8_e4m3",
        ],
        options,
    )
    args = build_parser(argv).parse_args(argv)
    config = dataclass_from_args(EngineConfig, args)
    assert (config.max_model_len, config.tensor_parallel_size, config.quantization) == (64, 1, "fp8")
    assert (config.dtype, config.kv_cache_dtype, args.pipeline_parallel_size) == ("float16", "fp8", 1)
    values = ["--prompt", "--user_name=bob says", "--stop=x_y", "--", "--max_model_len"]  # values and after --
    assert dashed_flags(values, long_options(build_parser(["generate"]))) == values


def test_a_prompt_that_looks_like_a_flag_keeps_its_underscores(capsys):
    from model_optimizer.cli.main import main

    assert main(["generate", "--prompt", "--user_name=bob says", "--max-tokens", "1", "--output", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["prompt"] == "--user_name=bob says"


@pytest.mark.slow
def test_serve_reads_vllms_api_key_variable(tiny_model):
    from tests.runtime.server.test_process import launch

    proc, url = launch(tiny_model("qwen3"), env={"VLLM_API_KEY": "sk-from-vllm-env", "MOPT_API_KEY": None})
    try:
        assert httpx.get(url + "/v1/models", timeout=30).status_code == 401
        ok = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer sk-from-vllm-env"}, timeout=30)
        assert ok.status_code == 200
    finally:
        proc.terminate()
        proc.wait(60)


def _with_generation_config(tiny_model, tmp_path, values: dict):
    import json
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_model("qwen3"), folder)
    (folder / "generation_config.json").write_text(json.dumps(values))
    return folder


def test_generation_config_sources_and_overrides(tiny_model, tmp_path):
    from model_optimizer.runtime.generation_defaults import generation_defaults

    folder = _with_generation_config(tiny_model, tmp_path, {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 7})
    assert generation_defaults(folder) == {"temperature": 0.6, "top_p": 0.95, "max_tokens": 7}
    assert generation_defaults(folder, "vllm") == {}
    assert generation_defaults(folder, "vllm", {"temperature": 0.2}) == {"temperature": 0.2}
    assert generation_defaults(folder, "auto", {"top_p": 0.5}) == {"temperature": 0.6, "top_p": 0.5, "max_tokens": 7}
    other = tmp_path / "other"
    other.mkdir()
    (other / "generation_config.json").write_text('{"top_k": 5}')
    assert generation_defaults(folder, str(other)) == {"top_k": 5}
    with pytest.raises(ValueError, match="holds no generation_config.json"):
        generation_defaults(folder, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="override_generation_config: temperature must be a finite number >= 0"):
        generation_defaults(folder, "auto", {"temperature": -1})
    llm = LLM(str(folder), **SMALL, generation_config="vllm", override_generation_config='{"top_k": 3}')
    assert (llm.default_sampling_params().temperature, llm.default_sampling_params().top_k) == (1.0, 3)


@pytest.mark.parametrize(
    ("value", "message"),
    [('{"temperature": ', "is not JSON"), ("[1]", "must be a JSON object"), ('{"seed": 1}', "unknown keys 'seed'")],
)
def test_override_generation_config_is_checked_up_front(value, message):
    from model_optimizer.runtime.config import EngineConfig

    with pytest.raises(ValueError, match=message):
        EngineConfig(override_generation_config=value)


@pytest.mark.slow
def test_serve_generation_config_vllm_drops_the_folders_defaults(tiny_model, tmp_path):
    from tests.runtime.server.test_process import launch

    folder = _with_generation_config(tiny_model, tmp_path, {"max_new_tokens": 2})
    body = {"model": "model", "prompt": "hi", "temperature": 0, "ignore_eos": True}
    for flags, expected in (
        ((), 2),
        (("--generation-config", "vllm", "--override-generation-config", '{"max_new_tokens": 5}'), 5),
    ):
        proc, url = launch(folder, *flags)
        try:
            r = httpx.post(url + "/v1/completions", json=body, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] == expected
        finally:
            proc.terminate()
            proc.wait(60)


def test_an_unknown_quantization_is_refused_when_the_config_is_made(capsys):
    from model_optimizer.cli.main import main
    from model_optimizer.runtime.config import EngineConfig

    with pytest.raises(ValueError, match="quantization must be one of none, fp8, int8, int8-w8a8, awq, rtn-int4"):
        EngineConfig(quantization="gptq")
    with pytest.raises(SystemExit):
        main(["serve", "--quantization", "gptq"])  # argparse: before anything starts
    assert "invalid choice: 'gptq'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "tokens"), [("4096", 4096), ("32k", 32000), ("32K", 32768), ("1.5k", 1500), ("1M", 2**20)]
)
def test_token_counts_take_vllms_suffixes(text, tokens):
    from model_optimizer.cli.args import token_count
    from model_optimizer.cli.main import build_parser

    assert token_count(text) == tokens
    argv = ["serve", "--max-model-len", text, "--max-num-batched-tokens", text]
    args = build_parser(argv).parse_args(argv)
    assert (args.max_model_len, args.max_num_batched_tokens) == (tokens, tokens)


@pytest.mark.parametrize("text", ["32x", "k", "1.0001k", "", "1e3", "64.0", "1.5K", "1_000"])
def test_a_token_count_that_is_not_one_is_refused(text, capsys):
    from model_optimizer.cli.main import build_parser

    argv = ["serve", "--max-model-len", text]
    with pytest.raises(SystemExit):
        build_parser(argv).parse_args(argv)
    assert "--max-model-len" in capsys.readouterr().err


def test_a_config_file_takes_token_count_suffixes(tmp_path):
    from model_optimizer.cli.args import read_config_file
    from model_optimizer.runtime.config import EngineConfig

    path = tmp_path / "c.yaml"
    path.write_text("max-model-len: 8k\nmax_num_batched_tokens: 2K\n")
    assert read_config_file(path, (EngineConfig,)) == {"max_model_len": 8000, "max_num_batched_tokens": 2048}
    path.write_text("max_model_len: lots\n")
    with pytest.raises(ValueError, match="max_model_len: 'lots' is not a token count"):
        read_config_file(path, (EngineConfig,))


@pytest.mark.slow
def test_a_vllm_config_file_with_vllm_only_keys_runs_and_warns(tiny_model, tmp_path):
    config = tmp_path / "vllm.yaml"
    config.write_text("max-model-len: 64\nnum-kv-blocks: 32\ntrust-remote-code: true\nswap-space: 4\n")
    server = Server(str(tiny_model("qwen3")), "--config", str(config), "--disable-log-requests")
    try:
        line = server.lines[server.wait_for_line("vLLM flags ignored: ")]
        assert "trust_remote_code (" in line and "swap_space (" in line and "disable_log_requests (" in line
        assert httpx.get(server.url + "/ready", timeout=30).json() == {"status": "ready"}
    finally:
        server.stop()
    config.write_text("pipeline-parallel-size: 2\n")
    assert_config_error(run_serve(str(tiny_model("qwen3")), "--config", str(config)), "pipeline_parallel_size > 1")


def test_other_commands_still_refuse_vllm_only_keys_in_a_config_file(tmp_path, capsys):
    from model_optimizer.cli.main import main

    config = tmp_path / "c.yaml"
    config.write_text("trust_remote_code: true\n")
    assert main(["deploy", "--target", "docker", "--config", str(config), "--output", str(tmp_path / "out")]) == 2
    assert "unknown setting 'trust_remote_code'" in capsys.readouterr().err


def test_generation_settings_are_checked_before_the_load_and_blame_the_right_place(tiny_model, tmp_path):
    folder = _with_generation_config(tiny_model, tmp_path, {"temperature": -1})
    with pytest.raises(ValueError, match="generation_config.json: temperature must be a finite number >= 0"):
        LLM(str(folder), **SMALL, override_generation_config='{"top_p": 0.5}')  # the file's fault, named
    with pytest.raises(ValueError, match=r"override_generation_config: max_tokens .* \(max_new_tokens is max_tokens\)"):
        LLM(str(tiny_model("qwen3")), **SMALL, override_generation_config='{"max_new_tokens": 0}')
    with pytest.raises(ValueError, match="holds no generation_config.json"):
        LLM(str(tiny_model("qwen3")), **SMALL, generation_config=str(tmp_path / "missing"))
    llm = LLM(str(tiny_model("qwen3")), **SMALL, override_generation_config='{"top_k": 4}')
    assert llm.get_default_sampling_params().top_k == 4


def test_deploy_refuses_generation_settings_the_container_cannot_use(tiny_model, tmp_path, capsys):
    from model_optimizer.cli.main import main

    base = ["deploy", "--target", "docker", "--engine", "vllm", "--model", str(tiny_model("qwen3"))]
    out = ["--output", str(tmp_path / "out")]
    assert main([*base, "--generation-config", str(tmp_path), *out]) == 2
    assert "a folder on this host is not in the container" in capsys.readouterr().err
    assert main([*base, "--override-generation-config", '{"max_new_tokens": 0}', *out]) == 2
    assert "override_generation_config: max_tokens" in capsys.readouterr().err
    assert main([*base, "--generation-config", "vllm", *out]) == 0


def test_several_served_names_any_is_accepted_the_first_is_reported(qwen3_llm):
    from openai import OpenAI

    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    live = start_server(qwen3_llm, ServerConfig(served_model_name=["main", "alias/b"]))
    try:
        client = OpenAI(base_url=live.url + "/v1", api_key="none")
        assert [m.id for m in client.models.list().data] == ["main", "alias/b"]
        assert client.models.retrieve("alias/b").id == "alias/b"
        done = client.completions.create(model="alias/b", prompt="hi", max_tokens=2, temperature=0)
        assert done.model == "main" and done.usage.completion_tokens == 2
        r = httpx.post(live.url + "/v1/completions", json={"model": "other", "prompt": "hi"}, timeout=30)
        assert r.status_code == 404 and "this server serves `main`" in r.json()["error"]["message"]
    finally:
        live.stop()


def test_served_model_name_takes_several_values_on_the_command_line(tmp_path):
    from model_optimizer.cli.args import dataclass_from_args
    from model_optimizer.cli.main import build_parser
    from model_optimizer.optimizer.deploy.settings import ServeSettings, flags
    from model_optimizer.optimizer.deploy.vllm_flags import vllm_serve
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.config import ServerConfig

    argv = ["serve", "--served-model-name", "a", "b", "a", "--port", "8000"]
    server = dataclass_from_args(ServerConfig, build_parser(argv).parse_args(argv))
    assert server.served_model_name == ["a", "b"] and server.model_names == ("a", "b")
    one = ["serve", "--served-model-name", "only"]
    assert dataclass_from_args(ServerConfig, build_parser(one).parse_args(one)).served_model_name == "only"
    settings = ServeSettings(EngineConfig(), server)
    assert settings.model_name == "a"
    assert flags({"served_model_name": ["a", "b"]}) == ["--served-model-name", "a", "b"]
    assert vllm_serve("/m", {"served_model_name": ["a", "b"]}).argv[-3:] == ["--served-model-name", "a", "b"]
    assert settings.in_container().server.served_model_name == ["a", "b"]
    with pytest.raises(ValueError, match="served_model_name is empty"):
        ServerConfig(served_model_name=["a", " "])


def test_several_api_keys_any_is_accepted(qwen3_llm):
    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    live = start_server(qwen3_llm, ServerConfig(api_key=["sk-one-key", "sk-two-key"]))
    try:
        for key, status in (("sk-one-key", 200), ("sk-two-key", 200), ("sk-three", 401), (None, 401)):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            assert httpx.get(live.url + "/v1/models", headers=headers, timeout=30).status_code == status
    finally:
        live.stop()
    argv = ["serve", "--api-key", "sk-a", "sk-b"]
    from model_optimizer.cli.args import dataclass_from_args
    from model_optimizer.cli.main import build_parser

    assert dataclass_from_args(ServerConfig, build_parser(argv).parse_args(argv)).api_keys == ("sk-a", "sk-b")
    with pytest.raises(ValueError, match="api_key starts or ends with whitespace"):
        ServerConfig(api_key=["sk-a", " sk-b"])


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ("dtype=half", ("dtype", "float16")),
        ("kv-cache-dtype=fp8_e4m3", ("kv_cache_dtype", "fp8")),
        ("max_model_len=4k", ("max_model_len", 4000)),
        ("max_num_batched_tokens=8K", ("max_num_batched_tokens", 8192)),
    ],
)
def test_tune_set_takes_the_same_spellings_as_serve(text, setting):
    from model_optimizer.optimizer.tune.space import parse_fix

    assert parse_fix(text) == setting


def test_vllms_defaults_and_bare_flags_are_taken():
    """What a launcher passes when a variable is empty, or a config dumped with vLLM's defaults (empty lists
    and strings), is no request for anything; `--hf-token` alone means the cached login, as in vLLM."""
    from model_optimizer.cli.main import build_parser
    from model_optimizer.runtime import vllm_settings

    flags = ["--tool-parser-plugin", "", "--middleware", "", "--hf-token", "--enable-force-include-usage"]
    args = build_parser().parse_args(["serve", "--model", "m", *flags[:-1]])
    assert [n.split(" (")[0] for n in vllm_settings.ignored(vllm_settings.from_args(args))] == ["hf_token"]
    assert vllm_settings.ignored({"middleware": [], "lora_modules": [], "kv_transfer_config": {}}) == []
    assert vllm_settings.ignored({"max_log_len": 0}) == ["max_log_len (requests are not logged one by one)"]


def test_allow_credentials_without_origins_says_it_does_nothing(caplog):
    from model_optimizer.runtime.server.config import ServerConfig

    with caplog.at_level(logging.WARNING, logger="model_optimizer.runtime.server.config"):
        ServerConfig(allow_credentials=True)
        ServerConfig(allow_credentials=True, allowed_origins=["*"])
    assert [r.getMessage() for r in caplog.records] == [
        "allow_credentials does nothing without allowed_origins: CORS is off unless origins are given"
    ]
